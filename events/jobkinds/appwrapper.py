"""AppWrapper (``workload.codeflare.dev/v1beta2``, as Kueue's integration reads it with the
AppWrapper project's v1.2 utilities): one podSet per pod set of its components, in component
order, named ``<appwrapper name>-<n>`` (n counting across components); held by ``spec.suspend``.

A component's pod sets are the ones it declares (``spec.components[i].podSets``: a ``path`` into
the component, ``template.spec.template``, and ``replicas``, 1 when unset) or, when it declares
none, the ones inferred from the wrapped object's kind: a ``batch/v1`` Job (min(parallelism,
completions)), a JobSet (replicas x pods per replicated Job), a PyTorchJob (Master, Worker), a
RayCluster or RayJob (head, then worker groups' ``replicas``), a Pod, a Deployment or StatefulSet
(``spec.replicas``). A component of another kind that declares none has no podSets. Declared pod
sets that contradict the inferred ones are refused (the AppWrapper's own admission webhook
refuses them). Each podSet's template is the subset of the pod template Kueue's integration
copies (labels, annotations, containers and the scheduling fields).

Kueue does not write an admission into the templates of an AppWrapper: it fills each component's
``podSetInfos`` (one per pod set: labels, annotations, nodeSelector, tolerations) and clears them
on eviction; :attr:`~events.jobkinds.base.PodSetSource.info_at` says where.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from events.cluster import ConditionType
from events.jobkinds import readiness
from events.jobkinds.base import (
    Finished,
    JobKind,
    PathPart,
    PodSetSource,
    count,
    dotted,
    mapping,
    pod_set_name,
    sequence,
    text,
)
from events.podspec import Where

GROUP, VERSION = "workload.codeflare.dev", "v1beta2"
_SPEC_FIELDS = ("initContainers", "containers", "restartPolicy", "terminationGracePeriodSeconds", "dnsPolicy",
                "nodeSelector", "nodeName", "securityContext", "affinity", "schedulerName", "tolerations",
                "priorityClassName", "preemptionPolicy", "overhead", "topologySpreadConstraints")
_CONTAINER_FIELDS = ("name", "image", "command", "args", "resources", "terminationMessagePath",
                     "terminationMessagePolicy", "imagePullPolicy", "securityContext")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def parse_path(where: Where, raw: str, at: tuple[PathPart, ...]) -> tuple[PathPart, ...]:
    """An AppWrapper pod set ``path`` (``template.spec.replicatedJobs[0].template``) as steps."""
    if not raw.startswith("template"):
        raise where.error(dotted(at), f"invalid value {raw[:100]!r}: the first element of the path must be 'template'")
    out: list[PathPart] = ["template"]
    rest = raw[len("template"):]
    while rest:
        step = _STEP.match(rest)
        if step is None:
            raise where.error(dotted(at), f"invalid value {raw[:100]!r}: invalid path element {rest[:60]!r}")
        out.append(step.group(1) if step.group(1) is not None else int(step.group(2)))
        rest = rest[step.end():]
    return tuple(out)


def _at(value: Any, steps: tuple[PathPart, ...]) -> Any:
    for step in steps:
        if isinstance(step, int):
            value = value[step] if isinstance(value, list) and 0 <= step < len(value) else None
        else:
            value = value.get(step) if isinstance(value, Mapping) else None
    return value


def _int_at(value: Any, steps: tuple[PathPart, ...], default: int) -> int:
    found = _at(value, steps)
    return found if isinstance(found, int) and not isinstance(found, bool) else default


def _inferred(component: Mapping[str, Any]) -> list[tuple[tuple[PathPart, ...], int]]:
    """The pod sets the AppWrapper infers for the wrapped object's kind: (path, replicas)."""
    template = component.get("template")
    obj = {"template": template}
    if not isinstance(template, Mapping):
        return []
    gvk = (str(template.get("apiVersion", "")), str(template.get("kind", "")))
    spec: tuple[PathPart, ...] = ("template", "spec")
    out: list[tuple[tuple[PathPart, ...], int]] = []
    if gvk == ("batch/v1", "Job"):
        out.append(((*spec, "template"), _job_pods(obj, spec)))
    elif gvk == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        for i, _ in enumerate(_at(obj, (*spec, "replicatedJobs")) or []):
            job: tuple[PathPart, ...] = (*spec, "replicatedJobs", i)
            if _at(obj, (*job, "template")) is not None:
                pods = _job_pods(obj, (*job, "template", "spec"))
                out.append(((*job, "template", "spec", "template"), _int_at(obj, (*job, "replicas"), 1) * pods))
    elif gvk == ("kubeflow.org/v1", "PyTorchJob"):
        for replica_type in ("Master", "Worker"):
            rs: tuple[PathPart, ...] = (*spec, "pytorchReplicaSpecs", replica_type)
            if _at(obj, (*rs, "template")) is not None:
                out.append(((*rs, "template"), _int_at(obj, (*rs, "replicas"), 1)))
    elif gvk in (("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob")):
        cluster = spec if gvk[1] == "RayCluster" else (*spec, "rayClusterSpec")
        out.append(((*cluster, "headGroupSpec", "template"), 1))
        for i, _ in enumerate(_at(obj, (*cluster, "workerGroupSpecs")) or []):
            group: tuple[PathPart, ...] = (*cluster, "workerGroupSpecs", i)
            if _at(obj, (*group, "template")) is not None:
                out.append(((*group, "template"), _int_at(obj, (*group, "replicas"), 1)))
    elif gvk == ("v1", "Pod"):
        out.append((("template",), 1))
    elif gvk in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")):
        out.append(((*spec, "template"), _int_at(obj, (*spec, "replicas"), 1)))
    return out


def _job_pods(obj: Mapping[str, Any], job_spec: tuple[PathPart, ...]) -> int:
    pods = _int_at(obj, (*job_spec, "parallelism"), 1)
    completions = _at(obj, (*job_spec, "completions"))
    if isinstance(completions, int) and not isinstance(completions, bool) and completions < pods:
        pods = completions
    return pods


def _declared(where: Where, component: Mapping[str, Any],
              at: tuple[PathPart, ...]) -> list[tuple[tuple[PathPart, ...], int]]:
    out: list[tuple[tuple[PathPart, ...], int]] = []
    seen: set[tuple[PathPart, ...]] = set()
    for j, raw in enumerate(sequence(where, component.get("podSets"), (*at, "podSets"))):
        p_at: tuple[PathPart, ...] = (*at, "podSets", j)
        entry = mapping(where, raw, p_at)
        path = parse_path(where, text(where, entry.get("path"), (*p_at, "path"), required=True), (*p_at, "path"))
        if path in seen:
            raise where.error(dotted((*p_at, "path")), f"multiple podSets with path {dotted(path)!r}")
        seen.add(path)
        out.append((path, count(where, entry.get("replicas"), (*p_at, "replicas"), 1)))
    return out


def _check_declared(where: Where, declared: list[tuple[tuple[PathPart, ...], int]],
                    inferred: list[tuple[tuple[PathPart, ...], int]], at: tuple[PathPart, ...]) -> None:
    """The AppWrapper's webhook: declared pod sets must be the inferred ones, replicas and all."""
    if not declared or not inferred:
        return
    if len(declared) != len(inferred):
        raise where.error(dotted((*at, "podSets")), f"{len(declared)} podSets declared, "
                                                    f"but the wrapped {len(inferred)} are inferred")
    by_path = dict(declared)
    for path, replicas in inferred:
        if path not in by_path:
            raise where.error(dotted((*at, "podSets")), f"the podSet with path {dotted(path)!r} is missing")
        if by_path[path] != replicas:
            raise where.error(dotted((*at, "podSets")), f"replicas {by_path[path]} of the podSet with path "
                                                        f"{dotted(path)!r} differs from the inferred {replicas}")


def _strings(value: object) -> dict[str, str]:
    return {str(k): v for k, v in value.items() if isinstance(v, str)} if isinstance(value, Mapping) else {}


def _kueue_template(where: Where, raw: object, at: tuple[PathPart, ...]) -> dict[str, Any]:
    """The part of the pod template (or Pod) at ``at`` that Kueue's integration copies."""
    found = mapping(where, raw, at, required=True)
    spec = mapping(where, found.get("spec"), (*at, "spec"), required=True)
    containers = sequence(where, spec.get("containers"), (*at, "spec", "containers"))
    if not containers:
        raise where.error(dotted((*at, "spec", "containers")), "must have at least 1 item")
    out_spec: dict[str, Any] = {k: spec[k] for k in _SPEC_FIELDS if k in spec}
    for key in ("initContainers", "containers"):
        if key in out_spec:
            out_spec[key] = [{f: c[f] for f in _CONTAINER_FIELDS if f in c} if isinstance(c, Mapping) else c
                             for c in sequence(where, out_spec[key], (*at, "spec", key))]
    raw_meta = found.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    out_meta = {k: _strings(meta.get(k)) for k in ("labels", "annotations") if isinstance(meta.get(k), Mapping)}
    return {"metadata": out_meta, "spec": out_spec} if out_meta else {"spec": out_spec}


def _pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    meta = body.get("metadata")
    name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    out: list[PodSetSource] = []
    for i, raw in enumerate(sequence(where, spec.get("components"), ("spec", "components"))):
        at: tuple[PathPart, ...] = ("spec", "components", i)
        component = mapping(where, raw, at)
        mapping(where, component.get("template"), (*at, "template"), required=True)
        declared = _declared(where, component, at)
        inferred = _inferred(component)
        _check_declared(where, declared, inferred, at)
        for j, (path, replicas) in enumerate(declared or inferred):
            full = (*at, *path)
            template = _kueue_template(where, _at(body, full), full)
            ps_name = pod_set_name(where, f"{name}-{len(out)}", ("metadata", "name"))
            out.append(PodSetSource(ps_name, replicas, template, full, info_at=(*at, "podSetInfos", j)))
    return out


def _finished(body: Mapping[str, Any]) -> Finished | None:
    """Kueue's AppWrapper: ended at phase Succeeded, or Failed once its resources are gone."""
    status = body.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if phase == "Succeeded":
        return Finished(True, "AppWrapper finished successfully")
    if phase == "Failed" and not condition_true(body, "ResourcesDeployed"):
        return Finished(False, "AppWrapper failed")
    return None


def condition_true(body: Mapping[str, Any], kind: str) -> bool:
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
               for c in (conditions if isinstance(conditions, list) else []))


APPWRAPPER = JobKind(group=GROUP, version=VERSION, kind="AppWrapper", plural="appwrappers",
                     suspend_path=("spec", "suspend"), pod_sets=_pod_sets, finished=_finished,
                     pods_ready=readiness.condition(ConditionType.PODS_READY))  # the AppWrapper's own, same name
