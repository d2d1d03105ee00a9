"""The job integration for the workload kinds besides Job (``events.jobkinds``: JobSet, PyTorchJob,
RayJob, ...), pure: what the job reconciler and the actuator do to such an object.

- :func:`plan_kind`: hold a queued object running without admission (its kind's suspend flag),
  create its Workload once it is held (or runs admitted), write ``Finished`` when it ended, as
  :func:`services.actuator.job_reconciler.plan_job` does for a Job.
- :func:`kind_admit_ops` / :func:`kind_evict_ops`: the JSON Patch (RFC 6902) of an admission (release
  it; each podSet's template gets its flavors' node labels and tolerations; the templates' own
  scheduling is kept in ``kueuelog.io/original-pod-scheduling`` as ``{podSet: {nodeSelector,
  tolerations}}``) and of an eviction (hold it; each template's own scheduling back; marked
  ``kueuelog.io/evicted``). Both carry the object's resourceVersion, so a concurrent change is a
  409 and the actuator reads it again. Which decision an object records, and so whether a decision
  is stale, is read as for a Job (:func:`services.actuator.kubeplan.idempotency`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from events import jobkinds
from events import objects as o
from events.checkstatus import toleration_json
from events.cluster import (
    DECISION_CYCLE_ANNOTATION,
    DECISION_ID_ANNOTATION,
    EVICTED_ANNOTATION,
    KUEUE_GROUP,
    ORIGINAL_POD_SCHEDULING_ANNOTATION,
    QUEUE_NAME_LABEL,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)
from events.jobkinds import prebuilt, trainjob
from events.jobkinds.base import pointer
from events.jobkinds.patches import Scheduling, evict_ops, lookup, resume_ops, scheduling_ops, suspend_patch
from events.kueue_versions import STORAGE_VERSION
from events.manifests import Document, ManifestError, normalize
from events.messages import AdmitChecked, AdmitWorkload, EvictWorkload
from services.actuator.job_reconciler import (
    Finished,
    JobError,
    JobPlan,
    JobRef,
    PriorityQuery,
    WorkloadDraft,
)
from services.actuator.kubeapi import InvalidObject
from services.actuator.kubeplan import FlavorScheduling, merged_scheduling

Json = dict[str, Any]


class _Where:
    """Errors located in the object, for the framework's readers."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def error(self, field: str, message: str) -> Exception:
        return JobError(self.shown, field, message)

    def amount(self, resource: str, value: object, field: str) -> int:
        from events.quantity import QuantityError, to_amount

        try:
            return to_amount(resource, value)
        except QuantityError as e:
            raise JobError(self.shown, field, str(e)) from None


def _ref(kind: jobkinds.JobKind, obj: Mapping[str, Any]) -> JobRef:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise JobError(f"{kind.kind} ?", "metadata", "required field is missing")
    values = {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")}
    shown = f"{values['namespace'] or '?'}/{values['name'] or '?'}"
    for key, value in values.items():
        if not isinstance(value, str) or not value:
            raise JobError(f"{kind.kind} {shown}", f"metadata.{key}", "required field is missing")
    return JobRef(namespace=str(values["namespace"]), name=str(values["name"]), uid=str(values["uid"]),
                  resource_version=str(values["resourceVersion"]))


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    raw = (obj.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _draft(kind: jobkinds.JobKind, obj: Mapping[str, Any], ref: JobRef, cluster: str) -> WorkloadDraft:
    shown = f"{kind.kind} {ref}"
    try:
        wl = normalize(Document(file=f"cluster {cluster}" if cluster else "cluster", index=1,
                                body={**obj, "apiVersion": kind.api_version, "kind": kind.kind}))
    except ManifestError as e:
        raise JobError(shown, e.field, e.message) from None
    if not isinstance(wl, o.Workload):
        raise JobError(shown, "", "did not convert to a Workload")
    sources = kind.pod_sets(_Where(shown), obj)
    pod_sets = []
    for source, pod_set in zip(sources, wl.pod_sets, strict=True):
        template = copy.deepcopy(dict(source.template))
        if isinstance(template.get("metadata"), dict):
            template["metadata"] = {k: v for k, v in template["metadata"].items() if k != "creationTimestamp"}
        pod_sets.append({"name": pod_set.name, "count": pod_set.count, "template": template})
    meta = {"name": wl.name, "namespace": ref.namespace,
            "ownerReferences": [{"apiVersion": kind.api_version, "kind": kind.kind, "name": ref.name, "uid": ref.uid,
                                 "controller": True, "blockOwnerDeletion": True}]}
    if wl.priority_ref is None:
        query = PriorityQuery("PriorityClass", "")
    elif wl.priority_ref.source == WORKLOAD_PRIORITY_CLASS_SOURCE:
        query = PriorityQuery("WorkloadPriorityClass", wl.priority_ref.name)
    else:
        query = PriorityQuery("PriorityClass", wl.priority_ref.name)
    # Created at our CRDs' storage version, as the job reconciler creates a Job's (WorkloadDraft
    # respells the body for it).
    body = {"apiVersion": f"{KUEUE_GROUP}/{STORAGE_VERSION}", "kind": "Workload", "metadata": meta,
            "spec": {"queueName": wl.queue_name, "podSets": pod_sets}}
    meta_in = obj.get("metadata") or {}
    named = prebuilt.prebuilt_name(meta_in.get("labels"), meta_in.get("annotations"))
    return WorkloadDraft(namespace=ref.namespace, name=wl.name, body=body, priority=query,
                         prebuilt=wl if named else None)


def plan_kind(kind: jobkinds.JobKind, obj: Mapping[str, Any], *, cluster: str = "") -> JobPlan:
    """What to do for one object of ``kind`` (as the API returns it). Raises :class:`JobError` when it
    cannot be read at all; one that reads but cannot become a Workload is ``plan.invalid``.
    ``plan.suspend`` means: hold it with :func:`suspend_merge_patch`."""
    ref = _ref(kind, obj)
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping) or labels.get(QUEUE_NAME_LABEL) is None or not kind.managed(obj):
        return JobPlan(ref)
    ended = kind.finished(obj)
    if ended is not None:
        meta = obj.get("metadata") or {}
        name = (prebuilt.prebuilt_name(labels, meta.get("annotations"))
                or jobkinds.workload_name(kind.kind, kind.group, ref.name, ref.uid))
        return JobPlan(ref, finished=Finished(name, ended.succeeded, ended.message))
    annotations = _annotations(obj)
    admitted = DECISION_ID_ANNOTATION in annotations and EVICTED_ANNOTATION not in annotations
    try:
        draft: WorkloadDraft | None = _draft(kind, obj, ref, cluster)
        invalid: JobError | None = None
    except JobError as e:
        draft, invalid = None, e
    if not kind.suspended(obj) and not admitted:
        return JobPlan(ref, suspend=True, invalid=invalid)
    return JobPlan(ref, invalid=invalid) if invalid is not None else JobPlan(ref, workload=draft)


def suspend_merge_patch(kind: jobkinds.JobKind, ref: JobRef) -> Json:
    """Hold the object, if it is still the version planned from."""
    return {"metadata": {"resourceVersion": ref.resource_version}, **suspend_patch(kind, True)}


def _scheduling_of(flavors: Sequence[FlavorScheduling]) -> Scheduling:
    return Scheduling(*merged_scheduling(flavors))


def _originals(kind: jobkinds.JobKind, obj: Mapping[str, Any], shown: str) -> dict[str, Scheduling]:
    """Each podSet's own scheduling: the annotation's while a flavor's is injected, else the templates'."""
    text = _annotations(obj).get(ORIGINAL_POD_SCHEDULING_ANNOTATION)
    if text is not None:
        field = f"metadata.annotations.{ORIGINAL_POD_SCHEDULING_ANNOTATION}"
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise InvalidObject(shown, field, f"not JSON: {e}") from None
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            raise InvalidObject(shown, field, 'must be {"<podSet>": {"nodeSelector": {...}, "tolerations": [...]}}')
        return {str(k): Scheduling(dict(v.get("nodeSelector") or {}), list(v.get("tolerations") or []),
                                   dict(v.get("labels") or {}), dict(v.get("annotations") or {}))
                for k, v in raw.items()}
    out: dict[str, Scheduling] = {}
    for source in kind.pod_sets(_Where(shown), obj):
        template = lookup(obj, source.path)
        spec = template if source.flat else (template.get("spec") if isinstance(template, Mapping) else None)
        spec = spec if isinstance(spec, Mapping) else {}
        out[source.name] = Scheduling(dict(spec.get("nodeSelector") or {}), list(spec.get("tolerations") or []))
    return out


def _encode(originals: Mapping[str, Scheduling]) -> str:
    out: dict[str, Json] = {}
    for name, s in originals.items():
        entry: Json = {"nodeSelector": dict(s.node_selector), "tolerations": list(s.tolerations)}
        if s.labels:
            entry["labels"] = dict(s.labels)
        if s.annotations:
            entry["annotations"] = dict(s.annotations)
        out[name] = entry
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def _with_updates(name: str, base: Scheduling, updates: Sequence[o.PodSetUpdate], shown: str) -> Scheduling:
    """A podSet's flavors' scheduling with the Ready checks' podSetUpdates for it merged in (a
    nodeSelector key given two values is a conflict, as in Kueue's ``PodSetInfo.Merge``)."""
    selector, tolerations = dict(base.node_selector), list(base.tolerations)
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    for u in updates:
        if u.name != name:
            continue
        for k, v in u.node_selector:
            if selector.get(k, v) != v:
                raise InvalidObject(shown, f"podSetUpdates[{name}].nodeSelector.{k}",
                                    f"conflict for key={k}, value1={selector[k]}, value2={v}")
            selector[k] = v
        tolerations += [t for t in (toleration_json(t) for t in u.tolerations) if t not in tolerations]
        labels.update(u.labels)
        annotations.update(u.annotations)
    return Scheduling(selector, tolerations, labels, annotations)


def _remembered(kind: jobkinds.JobKind, obj: Mapping[str, Any], originals: Mapping[str, Scheduling],
                wanted: Mapping[str, Scheduling], shown: str) -> dict[str, Scheduling]:
    """The originals plus, for each label or annotation the admission sets, the template's own value
    before it (``None``: absent), kept from an earlier admission when already remembered."""
    out = dict(originals)
    for source in kind.pod_sets(_Where(shown), obj):
        want = wanted.get(source.name)
        if want is None or source.info_at is not None or not (want.labels or want.annotations):
            continue
        had = out.get(source.name, Scheduling())
        template = lookup(obj, source.path)
        meta = template if source.flat else (template.get("metadata") if isinstance(template, Mapping) else None)
        meta = meta if isinstance(meta, Mapping) else {}
        remembered: list[dict[str, str | None]] = []
        for key, values, known in (("labels", want.labels, had.labels),
                                   ("annotations", want.annotations, had.annotations)):
            found = meta.get(key)
            current: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            kept = dict(known)
            for k in values:
                kept.setdefault(k, current.get(k))
            remembered.append(kept)
        out[source.name] = Scheduling(had.node_selector, had.tolerations, remembered[0], remembered[1])
    return out


def _annotation_ops(obj: Mapping[str, Any], changes: Mapping[str, str | None]) -> list[Json]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    ops: list[Json] = []
    if not isinstance(annotations, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        annotations = {}
    for key, value in changes.items():
        path = pointer(("metadata", "annotations", key))
        if value is None:
            if key in annotations:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def _precondition(obj: Mapping[str, Any]) -> list[Json]:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return [{"op": "replace", "path": "/metadata/resourceVersion", "value": str(rv or "")}]


def kind_admit_ops(kind: jobkinds.JobKind, obj: Mapping[str, Any], d: AdmitWorkload | AdmitChecked,
                   flavors: Mapping[str, Sequence[FlavorScheduling]]) -> list[Json]:
    """Release the object with each podSet's flavors' scheduling (``flavors``: podSet -> its flavors)."""
    shown = f"{kind.kind} {d.namespace}/{(obj.get('metadata') or {}).get('name')}"
    updates = d.pod_set_updates if isinstance(d, AdmitChecked) else ()
    wanted = {name: _with_updates(name, _scheduling_of(fs), updates, shown) for name, fs in flavors.items()}
    if kind is trainjob.TRAINJOB:
        return _trainjob_admit_ops(obj, d, wanted)
    originals = _remembered(kind, obj, _originals(kind, obj, shown), wanted, shown)
    restored = scheduling_ops(_Where(shown), kind, obj, originals, merge=False)  # the templates as their own
    base = _apply(obj, restored)
    try:
        release = resume_ops(_Where(shown), kind, base, wanted)
    except ValueError as e:
        raise InvalidObject(shown, "nodeSelector", str(e)) from None
    changes: dict[str, str | None] = {DECISION_ID_ANNOTATION: d.id, DECISION_CYCLE_ANNOTATION: str(d.cycle),
                                      ORIGINAL_POD_SCHEDULING_ANNOTATION: _encode(originals),
                                      EVICTED_ANNOTATION: None}
    return [*_precondition(obj), *_annotation_ops(obj, changes), *restored, *release]


def kind_evict_ops(kind: jobkinds.JobKind, obj: Mapping[str, Any], d: EvictWorkload) -> list[Json]:
    """Hold the object again with each template's own scheduling back, marked evicted by ``d``."""
    shown = f"{kind.kind} {d.namespace}/{(obj.get('metadata') or {}).get('name')}"
    changes: dict[str, str | None] = {DECISION_ID_ANNOTATION: d.id, DECISION_CYCLE_ANNOTATION: str(d.cycle),
                                      EVICTED_ANNOTATION: d.id, ORIGINAL_POD_SCHEDULING_ANNOTATION: None}
    if kind is trainjob.TRAINJOB:  # its admission sits in Kueue's runtime patch, emptied again
        return [*_precondition(obj), *_annotation_ops(obj, changes), *trainjob.evict_ops(obj)]
    originals = _originals(kind, obj, shown)
    return [*_precondition(obj), *_annotation_ops(obj, changes), *evict_ops(_Where(shown), kind, obj, originals)]


def _trainjob_admit_ops(obj: Mapping[str, Any], d: AdmitWorkload | AdmitChecked,
                        wanted: Mapping[str, Scheduling]) -> list[Json]:
    """A TrainJob is admitted as Kueue admits it: each podSet's scheduling goes into Kueue's own
    runtime patch (``events.jobkinds.trainjob``), the runtime's templates are left as they are. The
    originals annotation (empty: nothing of the TrainJob's own is replaced) marks it as carrying an admission."""
    jobs = [trainjob.replicated_job_patch(name, s.node_selector, s.tolerations,
                                          {k: v for k, v in s.labels.items() if v is not None},
                                          {k: v for k, v in s.annotations.items() if v is not None})
            for name, s in wanted.items()]
    changes: dict[str, str | None] = {DECISION_ID_ANNOTATION: d.id, DECISION_CYCLE_ANNOTATION: str(d.cycle),
                                      ORIGINAL_POD_SCHEDULING_ANNOTATION: "{}", EVICTED_ANNOTATION: None}
    return [*_precondition(obj), *_annotation_ops(obj, changes), *trainjob.admit_ops(obj, jobs)]


def _apply(obj: Mapping[str, Any], ops: Sequence[Json]) -> dict[str, Any]:
    """``ops`` (``add`` and ``remove``) applied to a copy of ``obj``: the object the next operations see."""
    out = copy.deepcopy(dict(obj))
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at: Any = out
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at[p]
        if op["op"] == "remove":
            del at[int(last) if isinstance(at, list) else last]
        elif isinstance(at, list):
            at[int(last)] = op["value"]
        else:
            at[last] = op["value"]
    return out


def kind_released(kind: jobkinds.JobKind, obj: Mapping[str, Any], updates: Sequence[o.PodSetUpdate]) -> dict[str, Any]:
    """A copy of ``obj`` released with its own scheduling plus ``updates`` per podSet (a MultiKueue
    worker's flavors): what runs on the worker (pure; an earlier admission's scheduling on the
    manager, if any, is taken off first)."""
    shown = f"{kind.kind} {(obj.get('metadata') or {}).get('namespace')}/{(obj.get('metadata') or {}).get('name')}"
    originals = _originals(kind, obj, shown)
    base = _apply(obj, scheduling_ops(_Where(shown), kind, obj, originals, merge=False))
    wanted = {s.name: _with_updates(s.name, Scheduling(), updates, shown) for s in kind.pod_sets(_Where(shown), base)}
    try:
        return _apply(base, resume_ops(_Where(shown), kind, base, wanted))
    except ValueError as e:
        raise InvalidObject(shown, "nodeSelector", str(e)) from None
