"""Kubeflow Trainer's TrainJob (``trainer.kubeflow.org/v1alpha1``), as Kueue's integration reads it.

A TrainJob names a runtime (``spec.runtimeRef``: a cluster-scoped ClusterTrainingRuntime, the
default kind, or a TrainingRuntime in the TrainJob's namespace; apiGroup ``trainer.kubeflow.org``)
whose ``spec.template`` is a JobSet template. Its podSets are that JobSet's, one per replicated
Job, after the TrainJob's own changes as the Trainer builds its JobSet:

- ``spec.runtimePatches`` (all but Kueue's own, ``manager: kueue.x-k8s.io/manager``, which only
  carries an admission) merged into the replicated Jobs by name (maps merged, lists of named
  items merged by name, other lists replaced, as a strategic merge patch does);
- each replicated Job runs ``parallelism`` (1 when unset) pods, the trainer's (label
  ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) ``mlPolicy.numNodes`` (1 when unset)
  when the runtime has an ``mlPolicy``; ``spec.trainer.numNodes`` replaces the trainer's count (with
  an MPI policy: the count of the Job named ``node``, one less when ``runLauncherAsNode``);
- the trainer's Job runs once (``replicas`` 1), the others ``replicas`` times (1 when unset);
- ``spec.trainer.resourcesPerNode`` is merged (requests and limits key by key) into the trainer's
  container named ``node`` when the runtime has an ``mlPolicy`` (with an MPI policy and
  ``runLauncherAsNode``, also into the Job named ``node``).

The runtime is not part of the TrainJob: whoever reads one (``simulate`` from its input, the watcher
and the job reconciler from the cluster) puts the runtime's spec into the body under
:data:`RUNTIME_KEY` (:func:`embed`); a TrainJob whose runtime is missing cannot become a Workload
(Kueue's reconciler fails the same way, ``runtime '<name>' not found``, and the job stays held).

Held by ``spec.suspend``. Admitted as Kueue admits it: each podSet's scheduling (node selector,
tolerations, labels, annotations) written as a replicated Job patch in Kueue's own runtime patch
(:func:`admit_ops`), which an eviction empties again (:func:`evict_ops`); the templates of the
runtime are never changed. Finished by a ``Complete`` or ``Failed`` condition; pods ready when the
jobs' ready and succeeded replicas (``status.jobsStatus``) add up to the replicated Jobs' replicas.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from events.cluster import TRAINJOB_RUNTIME_KEY, TRAINJOB_RUNTIME_PATCH_MANAGER
from events.jobkinds.base import (
    JobKind,
    PathPart,
    PodSetSource,
    conditions_finished,
    count,
    dotted,
    mapping,
    pod_set_name,
    pod_template,
    pods,
    pointer,
    sequence,
    text,
)
from events.podspec import Where

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CLUSTER_RUNTIME = "ClusterTrainingRuntime"
NAMESPACED_RUNTIME = "TrainingRuntime"
RUNTIME_KINDS: tuple[str, ...] = (CLUSTER_RUNTIME, NAMESPACED_RUNTIME)
RUNTIME_PLURALS: Mapping[str, str] = {CLUSTER_RUNTIME: "clustertrainingruntimes",
                                      NAMESPACED_RUNTIME: "trainingruntimes"}
RUNTIME_KEY = TRAINJOB_RUNTIME_KEY
"""Where a reader puts the resolved runtime in a TrainJob's body: ``{"kind", "name", "spec"}``.
Not a field of any Kubernetes object (an API server prunes it; :func:`embed` replaces what an
input gives)."""
KUEUE_MANAGER = TRAINJOB_RUNTIME_PATCH_MANAGER
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER = "trainer"
NODE = "node"

Json = dict[str, Any]
RuntimeLookup = Callable[[str, str, str], Mapping[str, Any] | None]
"""(runtime kind, namespace ("" for a ClusterTrainingRuntime), name) -> the runtime's spec, or None."""

_NAMED_LISTS: Mapping[str, str] = {"replicatedJobs": "name", "containers": "name", "initContainers": "name",
                                   "volumes": "name", "env": "name", "schedulingGates": "name",
                                   "imagePullSecrets": "name", "volumeMounts": "mountPath"}
"""Lists a strategic merge patch merges by a key (the others it replaces)."""


# --- the runtime reference --------------------------------------------------------------------


def runtime_ref(where: Where, body: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the runtime a TrainJob names, with the API's defaults."""
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    ref = mapping(where, spec.get("runtimeRef"), ("spec", "runtimeRef"), required=True)
    name = text(where, ref.get("name"), ("spec", "runtimeRef", "name"), required=True)
    group = text(where, ref.get("apiGroup"), ("spec", "runtimeRef", "apiGroup")) or GROUP
    kind = text(where, ref.get("kind"), ("spec", "runtimeRef", "kind")) or CLUSTER_RUNTIME
    if group != GROUP or kind not in RUNTIME_KINDS:
        field = "spec.runtimeRef.apiGroup" if group != GROUP else "spec.runtimeRef.kind"
        raise where.error(field, f"unsupported runtime: {kind}.{group} (takes {CLUSTER_RUNTIME} or "
                                 f"{NAMESPACED_RUNTIME} of {GROUP})")
    return kind, name


def runtime_key(body: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace ("" for a ClusterTrainingRuntime), name) of the runtime a TrainJob names;
    ``None`` when its reference cannot be read."""
    try:
        kind, name = runtime_ref(_Plain(), body)
    except ValueError:
        return None
    meta = body.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    scope = "" if kind == CLUSTER_RUNTIME else (namespace if isinstance(namespace, str) and namespace else "default")
    return kind, scope, name


def embed(body: Mapping[str, Any], lookup: RuntimeLookup) -> dict[str, Any]:
    """``body`` with the runtime it names (found by ``lookup``) under :data:`RUNTIME_KEY`; without
    that key when the reference cannot be read or the runtime is not there."""
    out = {k: v for k, v in body.items() if k != RUNTIME_KEY}
    key = runtime_key(body)
    spec = lookup(*key) if key is not None else None
    if key is not None and spec is not None:
        out[RUNTIME_KEY] = {"kind": key[0], "name": key[2], "spec": spec}
    return out


class _Plain:
    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")

    def amount(self, resource: str, value: object, field: str) -> int:
        raise ValueError(f"{field}: not read here")


class _InRuntime:
    """Errors in the runtime, located at the TrainJob's reference and naming the runtime's field."""

    def __init__(self, where: Where, shown: str) -> None:
        self.where, self.shown = where, shown

    def error(self, field: str, message: str) -> Exception:
        return self.where.error("spec.runtimeRef.name", f"{self.shown}: {field}: {message}")

    def amount(self, resource: str, value: object, field: str) -> int:
        try:
            return self.where.amount(resource, value, field)
        except Exception as e:  # re-located: the quantity is the runtime's
            raise self.error(field, str(e)) from None


# --- the runtime's replicated Jobs ------------------------------------------------------------


def check_runtime(where: Where, body: Mapping[str, Any]) -> None:
    """A ClusterTrainingRuntime or TrainingRuntime as far as its TrainJobs' podSets read it."""
    _replicated_jobs(where, mapping(where, body.get("spec"), ("spec",), required=True))


def _replicated_jobs(where: Where, spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    template = mapping(where, spec.get("template"), ("spec", "template"), required=True)
    js = mapping(where, template.get("spec"), ("spec", "template", "spec"), required=True)
    jobs = sequence(where, js.get("replicatedJobs"), ("spec", "template", "spec", "replicatedJobs"))
    if not jobs:
        raise where.error("spec.template.spec.replicatedJobs", "must have at least 1 item")
    seen: set[str] = set()
    for i, raw in enumerate(jobs):
        at: tuple[PathPart, ...] = ("spec", "template", "spec", "replicatedJobs", i)
        rj = mapping(where, raw, at)
        name = text(where, rj.get("name"), (*at, "name"), required=True)
        pod_set_name(where, name, (*at, "name"))
        if name in seen:
            raise where.error(dotted((*at, "name")), f"duplicate replicated Job {name!r}")
        seen.add(name)
        count(where, rj.get("replicas"), (*at, "replicas"), 1)
        job = mapping(where, rj.get("template"), (*at, "template"), required=True)
        job_spec = mapping(where, job.get("spec"), (*at, "template", "spec"), required=True)
        count(where, job_spec.get("parallelism"), (*at, "template", "spec", "parallelism"), 1)
        pod_template(where, job_spec.get("template"), (*at, "template", "spec", "template"))
        metadata = mapping(where, job.get("metadata"), (*at, "template", "metadata"))
        mapping(where, metadata.get("labels"), (*at, "template", "metadata", "labels"))
    policy = mapping(where, spec.get("mlPolicy"), ("spec", "mlPolicy"))
    count(where, policy.get("numNodes"), ("spec", "mlPolicy", "numNodes"), 1)
    return [dict(j) for j in jobs]


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` merged into ``base`` as a strategic merge patch does for the fields read here: maps
    merged key by key (``null`` deletes), lists of named items merged by name, other lists replaced."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(base.get(k), v, k)
        return out
    merge_key = _NAMED_LISTS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(x) for x in base]
        for item in patch:
            name = item.get(merge_key) if isinstance(item, Mapping) else None
            at = next((i for i, x in enumerate(out_list) if isinstance(x, Mapping) and x.get(merge_key) == name), None)
            if at is None or name is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def _patched(where: Where, body: Mapping[str, Any], jobs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The runtime's replicated Jobs with the TrainJob's runtime patches (all but Kueue's own)."""
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    names = [j.get("name") for j in jobs]
    for k, raw in enumerate(sequence(where, spec.get("runtimePatches"), ("spec", "runtimePatches"))):
        at: tuple[PathPart, ...] = ("spec", "runtimePatches", k)
        patch = mapping(where, raw, at)
        if patch.get("manager") == KUEUE_MANAGER:
            continue
        trs = mapping(where, patch.get("trainingRuntimeSpec"), (*at, "trainingRuntimeSpec"))
        template = mapping(where, trs.get("template"), (*at, "trainingRuntimeSpec", "template"))
        js = mapping(where, template.get("spec"), (*at, "trainingRuntimeSpec", "template", "spec"))
        rj_at = (*at, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        for j, rj in enumerate(sequence(where, js.get("replicatedJobs"), rj_at)):
            rj = mapping(where, rj, (*rj_at, j))
            name = rj.get("name")
            if name not in names:
                has = ", ".join(map(str, names))
                raise where.error(dotted((*rj_at, j, "name")),
                                  f"the runtime has no replicated Job {str(name)[:100]!r} (has {has})")
            i = names.index(name)
            jobs[i] = strategic_merge(jobs[i], _job_patch(where, rj, (*rj_at, j)))
    return jobs


def _job_patch(where: Where, rj: Mapping[str, Any], at: tuple[PathPart, ...]) -> Json:
    """What a replicated Job patch may change (the API's ``ReplicatedJobPatch``): the Job's metadata
    and its pod template's metadata and spec, each an object; any other field is not the API's."""
    job = mapping(where, rj.get("template"), (*at, "template"))
    out_job: Json = {}
    if job.get("metadata") is not None:
        out_job["metadata"] = dict(mapping(where, job["metadata"], (*at, "template", "metadata")))
    job_spec = mapping(where, job.get("spec"), (*at, "template", "spec"))
    pod = mapping(where, job_spec.get("template"), (*at, "template", "spec", "template"))
    out_pod: Json = {}
    for key in ("metadata", "spec"):
        if pod.get(key) is not None:
            out_pod[key] = dict(mapping(where, pod[key], (*at, "template", "spec", "template", key)))
    pod_spec = out_pod.get("spec") or {}
    for key in ("containers", "initContainers", "tolerations", "volumes", "schedulingGates"):
        items = sequence(where, pod_spec.get(key), (*at, "template", "spec", "template", "spec", key))
        for n, item in enumerate(items):
            mapping(where, item, (*at, "template", "spec", "template", "spec", key, n))
    if out_pod:
        out_job["spec"] = {"template": out_pod}
    return {"name": rj.get("name"), "template": out_job} if out_job else {"name": rj.get("name")}


def _counts(where: Where, body: Mapping[str, Any], policy: Mapping[str, Any] | None,
            jobs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Each replicated Job's pods per replica, as the Trainer's runtime info and ML policy set them."""
    out: list[int] = []
    for rj in jobs:
        n = (rj.get("template") or {}).get("spec", {}).get("parallelism") or 1
        if _ancestor(rj) == TRAINER and policy is not None:
            n = policy.get("numNodes") or 1
        out.append(max(int(n), 1))
    trainer = mapping(where, mapping(where, body.get("spec"), ("spec",)).get("trainer"), ("spec", "trainer"))
    nodes = trainer.get("numNodes")
    if nodes is None:
        return out
    nodes = count(where, nodes, ("spec", "trainer", "numNodes"), 1, minimum=1)
    mpi = policy.get("mpi") if policy is not None else None
    if isinstance(mpi, Mapping):
        at = next((i for i, rj in enumerate(jobs) if rj.get("name") == NODE), None)
        nodes = max(nodes - 1, 1) if mpi.get("runLauncherAsNode") is True else nodes
    else:
        at = next((i for i, rj in enumerate(jobs) if _ancestor(rj) == TRAINER), None)
    if at is not None:
        out[at] = nodes
    return out


def _ancestor(rj: Mapping[str, Any]) -> str:
    labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(ANCESTOR_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else ""


def _takes_resources(rj: Mapping[str, Any], policy: Mapping[str, Any] | None) -> bool:
    if policy is None:
        return False
    mpi = policy.get("mpi")
    launcher_as_node = isinstance(mpi, Mapping) and mpi.get("runLauncherAsNode") is True and rj.get("name") == NODE
    return _ancestor(rj) == TRAINER or launcher_as_node


def _resources_per_node(where: Where, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    trainer = mapping(where, mapping(where, body.get("spec"), ("spec",)).get("trainer"), ("spec", "trainer"))
    at: tuple[PathPart, ...] = ("spec", "trainer", "resourcesPerNode")
    res = mapping(where, trainer.get("resourcesPerNode"), at)
    if trainer.get("resourcesPerNode") is None:
        return None
    for key in ("requests", "limits"):
        for resource, value in mapping(where, res.get(key), (*at, key)).items():
            where.amount(str(resource), value, dotted((*at, key, str(resource))))
    return res


def _with_resources(template: Mapping[str, Any], res: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template with ``res`` merged into its container named ``node`` (requests and limits key by key)."""
    out = copy.deepcopy(dict(template))
    containers = (out.get("spec") or {}).get("containers") or []
    for c in containers:
        if isinstance(c, dict) and c.get("name") == NODE:
            merged = dict(c.get("resources") or {})
            for key in ("requests", "limits"):
                if res.get(key):
                    merged[key] = {**(merged.get(key) or {}), **res[key]}
            c["resources"] = merged
            break
    return out


def _runtime(where: Where, body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    kind, name = runtime_ref(where, body)
    found = body.get(RUNTIME_KEY)
    if not isinstance(found, Mapping) or found.get("kind") != kind or found.get("name") != name:
        meta = body.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
        shown = name if kind == CLUSTER_RUNTIME else f"{namespace or 'default'}/{name}"
        raise where.error("spec.runtimeRef.name", f"runtime '{name}' not found (no {kind} {shown})")
    spec = found.get("spec")
    return f"{kind} {name}", spec if isinstance(spec, Mapping) else {}


def _pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    shown, spec = _runtime(where, body)
    inside = _InRuntime(where, shown)
    jobs = _patched(where, body, _replicated_jobs(inside, spec))
    raw_policy = spec.get("mlPolicy")
    policy = raw_policy if isinstance(raw_policy, Mapping) else None
    counts = _counts(where, body, policy, jobs)
    res = _resources_per_node(where, body)
    out: list[PodSetSource] = []
    for i, rj in enumerate(jobs):
        at: tuple[PathPart, ...] = ("runtime", "spec", "template", "spec", "replicatedJobs", i)
        name = pod_set_name(inside, str(rj.get("name")), (*at, "name"))
        replicas = 1 if _ancestor(rj) == TRAINER else count(inside, rj.get("replicas"), (*at, "replicas"), 1)
        template = pod_template(inside, ((rj.get("template") or {}).get("spec") or {}).get("template"),
                                (*at, "template", "spec", "template"))
        if res is not None and _takes_resources(rj, policy):
            template = _with_resources(template, res)
        total = pods(where, (replicas, counts[i]), ("spec", "trainer", "numNodes"), "replicas x pods per replica")
        out.append(PodSetSource(name, total, template, (*at, "template", "spec", "template")))
    return out


def pods_ready(body: Mapping[str, Any]) -> bool:
    """The replicated Jobs' ready and succeeded replicas add up to the JobSet's replicas."""
    try:
        found = body.get(RUNTIME_KEY) or {}
        jobs = _replicated_jobs(_Plain(), found.get("spec") or {})
    except (ValueError, AttributeError):
        return False
    wanted = sum(1 if _ancestor(rj) == TRAINER else int(rj.get("replicas") or 1) for rj in jobs)
    status = body.get("status")
    statuses = status.get("jobsStatus") if isinstance(status, Mapping) else None
    ready = 0
    for s in statuses if isinstance(statuses, list) else []:
        if isinstance(s, Mapping):
            ready += sum(v for v in (s.get("ready"), s.get("succeeded"))
                         if isinstance(v, int) and not isinstance(v, bool))
    return ready == wanted


TRAINJOB = JobKind(group=GROUP, version=VERSION, kind="TrainJob", plural="trainjobs", suspend_path=("spec", "suspend"),
                   pod_sets=_pod_sets, finished=conditions_finished("Complete", "Failed"), pods_ready=pods_ready)


# --- admission: Kueue's own runtime patch -----------------------------------------------------


def _kueue_patch(body: Mapping[str, Any]) -> int | None:
    spec = body.get("spec")
    patches = spec.get("runtimePatches") if isinstance(spec, Mapping) else None
    for k, p in enumerate(patches if isinstance(patches, list) else []):
        if isinstance(p, Mapping) and p.get("manager") == KUEUE_MANAGER:
            return k
    return None


def replicated_job_patch(name: str, node_selector: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]],
                         labels: Mapping[str, str], annotations: Mapping[str, str]) -> Json:
    """One podSet's admission as Kueue writes it: a replicated Job patch of its pod template."""
    meta = {k: dict(v) for k, v in (("labels", labels), ("annotations", annotations)) if v}
    pod_spec = {k: v for k, v in (("nodeSelector", dict(node_selector)),
                                  ("tolerations", [dict(t) for t in tolerations])) if v}
    template: Json = {}
    if meta:
        template["metadata"] = meta
    if pod_spec:
        template["spec"] = pod_spec
    return {"name": name, "template": {"spec": {"template": template}}}


def admit_ops(body: Mapping[str, Any], replicated_jobs: Sequence[Json]) -> list[Json]:
    """JSON Patch: Kueue's runtime patch carrying ``replicated_jobs`` (added when the TrainJob has none,
    as Kueue's webhook would have), and the TrainJob released."""
    ops: list[Json] = []
    k = _kueue_patch(body)
    raw = body.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if k is None:
        entry = {"manager": KUEUE_MANAGER,
                 "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": list(replicated_jobs)}}}}
        if isinstance(spec.get("runtimePatches"), list):
            ops.append({"op": "add", "path": "/spec/runtimePatches/-", "value": entry})
        else:
            ops.append({"op": "add", "path": "/spec/runtimePatches", "value": [entry]})
    else:
        path: list[PathPart] = ["spec", "runtimePatches", k]
        at: Any = spec["runtimePatches"][k]
        for key in ("trainingRuntimeSpec", "template", "spec"):
            path.append(key)
            at = at.get(key) if isinstance(at, Mapping) else None
            if not isinstance(at, Mapping):
                ops.append({"op": "add", "path": pointer(path), "value": {}})
        ops.append({"op": "add", "path": pointer((*path, "replicatedJobs")), "value": list(replicated_jobs)})
    ops.append({"op": "add", "path": "/spec/suspend", "value": False})
    return ops


def evict_ops(body: Mapping[str, Any]) -> list[Json]:
    """JSON Patch: the TrainJob held again and Kueue's runtime patch emptied of its admission."""
    ops: list[Json] = [{"op": "add", "path": "/spec/suspend", "value": True}]
    k = _kueue_patch(body)
    if k is None:
        return ops
    at: Any = body["spec"]["runtimePatches"][k]
    for key in ("trainingRuntimeSpec", "template", "spec"):
        at = at.get(key) if isinstance(at, Mapping) else None
    if isinstance(at, Mapping) and "replicatedJobs" in at:
        path = ("spec", "runtimePatches", k, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
        ops.append({"op": "remove", "path": pointer(path)})
    return ops
