"""What the Kubernetes actuator writes, as pure functions of the objects it read and the decision:
the Job's pod-template patches (flavor nodeSelector and tolerations in, the original back out),
the idempotency verdict, the Workload status payloads, and the ClusterQueue / LocalQueue counts
(:class:`QueueCounts`). No I/O here; :mod:`services.actuator.kube_port` is the shell that reads and
writes through the API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from events import conditions as cond
from events import objects as o
from events import t9k
from events.checkstatus import check_state_json
from events.cluster import (
    DECISION_CYCLE_ANNOTATION,
    DECISION_ID_ANNOTATION,
    EVICTED_ANNOTATION,
    KUEUE_GROUP,
    ORIGINAL_POD_SCHEDULING_ANNOTATION,
    ConditionStatus,
    ConditionType,
    JobConditionType,
)
from events.kueue_versions import STORAGE_VERSION
from events.manifests import format_time, parse_time
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    Condition,
    DeactivateWorkload,
    EvictWorkload,
    MarkPending,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from events.quantity import QuantityError, format_amount, to_amount
from services.actuator import checkplan
from services.actuator.kubeapi import InvalidObject, Ref

KUEUE_VERSION: Final = STORAGE_VERSION
"""Kueue objects are read and written at the storage version of our CRDs (conversion None: a
status written here is stored as written, whatever version the object was created at). The
Workload status we write (admission, conditions) is spelled alike in v1beta1 and v1beta2; a
LocalQueue's usage is v1beta2's ``flavorsUsage`` (v1beta1 ``flavorUsage`` is cleared)."""

Json = dict[str, Any]
Decision = AdmitWorkload | AdmitChecked | EvictWorkload | MarkPending


def workload_ref(namespace: str, name: str) -> Ref:
    return Ref("Workload", KUEUE_GROUP, KUEUE_VERSION, "workloads", name, namespace)


def job_ref(namespace: str, name: str) -> Ref:
    return Ref("Job", "batch", "v1", "jobs", name, namespace)


def flavor_ref(name: str) -> Ref:
    return Ref("ResourceFlavor", KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", name)


def cluster_queue_ref(name: str) -> Ref:
    return Ref("ClusterQueue", KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)


def local_queue_ref(namespace: str, name: str) -> Ref:
    return Ref("LocalQueue", KUEUE_GROUP, KUEUE_VERSION, "localqueues", name, namespace)


def t9k_queue_ref(name: str) -> Ref:
    return Ref("Queue", t9k.GROUP, "v1beta1", "queues", name, t9k.NAMESPACE)


# --- pure: the Job's pod template ----------------------------------------------------------------


@dataclass(frozen=True)
class FlavorScheduling:
    """What a ResourceFlavor adds to a pod: node labels to select and taints to tolerate."""

    name: str
    node_labels: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Json, ...] = ()


def flavor_scheduling(obj: Mapping[str, Any]) -> FlavorScheduling:
    """A ResourceFlavor object (as JSON) to what it injects; refuses a malformed one by field."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    what = f"ResourceFlavor {name}"
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidObject(what, "spec", "must be an object")
    labels = spec.get("nodeLabels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InvalidObject(what, "spec.nodeLabels", "must be a map of strings to strings")
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list):
        raise InvalidObject(what, "spec.tolerations", "must be a list")
    for i, t in enumerate(tolerations):
        if not isinstance(t, dict):
            raise InvalidObject(what, f"spec.tolerations[{i}]", "must be an object")
    return FlavorScheduling(name, tuple(sorted(labels.items())), tuple(tolerations))


def merged_scheduling(flavors: Iterable[FlavorScheduling]) -> tuple[dict[str, str], list[Json]]:
    """What a pod of a podSet gets from its flavors, in the order given: their node labels (a later
    flavor's value for a key wins) and their tolerations, each once."""
    labels: dict[str, str] = {}
    tolerations: list[Json] = []
    for flavor in flavors:
        labels.update(flavor.node_labels)
        tolerations.extend(dict(t) for t in flavor.tolerations if dict(t) not in tolerations)
    return labels, tolerations


def flavor_names(d: AdmitWorkload | AdmitChecked) -> tuple[str, ...]:
    """The flavors a Job's admission assigns (a Job is one pod set, ``main``), sorted."""
    psas = d.admission.pod_set_assignments
    if len(psas) != 1:
        raise InvalidObject(f"decision {d.id} for Workload {d.namespace}/{d.name}", "admission.podSetAssignments",
                            f"a Job has exactly one pod set, the admission assigns {len(psas)}")
    return tuple(sorted({flavor for _, flavor in psas[0].flavors}))


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _pod_spec(job: Mapping[str, Any]) -> Json:
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec")
    if not isinstance(spec, dict):
        meta = job.get("metadata") or {}
        raise InvalidObject(f"Job {meta.get('namespace')}/{meta.get('name')}", "spec.template.spec", "missing")
    return spec


def pod_scheduling(pod_spec: Mapping[str, Any]) -> tuple[dict[str, str], list[Json]]:
    return dict(pod_spec.get("nodeSelector") or {}), list(pod_spec.get("tolerations") or [])


def encode_original(node_selector: Mapping[str, str], tolerations: Sequence[Json],
                    metadata: Mapping[str, Any] | None = None) -> str:
    """The template's own scheduling (and, once podSetUpdates changed them, its labels and
    annotations as they were: ``checkplan.ORIGINAL_METADATA_KEY``)."""
    out: Json = {"nodeSelector": dict(node_selector), "tolerations": list(tolerations)}
    if metadata:
        out[checkplan.ORIGINAL_METADATA_KEY] = dict(metadata)
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def _recorded_metadata(job: Mapping[str, Any]) -> dict[str, Any] | None:
    text = annotations_of(job).get(ORIGINAL_POD_SCHEDULING_ANNOTATION)
    try:
        raw = json.loads(text) if text is not None else None
    except ValueError:
        return None  # original_scheduling reports it
    found = raw.get(checkplan.ORIGINAL_METADATA_KEY) if isinstance(raw, dict) else None
    return found if isinstance(found, dict) else None


def original_scheduling(job: Mapping[str, Any], what: str) -> tuple[dict[str, str], list[Json]]:
    """The template's own nodeSelector and tolerations: from the annotation while a flavor's are
    injected, else the template as it is."""
    text = annotations_of(job).get(ORIGINAL_POD_SCHEDULING_ANNOTATION)
    if text is None:
        return pod_scheduling(_pod_spec(job))
    field_ = f"metadata.annotations.{ORIGINAL_POD_SCHEDULING_ANNOTATION}"
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise InvalidObject(what, field_, f"not JSON: {e}") from None
    ok = (isinstance(raw, dict) and isinstance(raw.get("nodeSelector", {}), dict)
          and isinstance(raw.get("tolerations", []), list))
    if not ok:
        raise InvalidObject(what, field_, 'must be {"nodeSelector": {...}, "tolerations": [...]}')
    return dict(raw.get("nodeSelector") or {}), list(raw.get("tolerations") or [])


def injected(node_selector: Mapping[str, str], tolerations: Sequence[Json], flavors: Iterable[FlavorScheduling],
             what: str) -> tuple[dict[str, str], list[Json]]:
    """The template's scheduling with the flavors' added; a node label the template sets to a
    different value is a conflict (Kueue's podset info merge refuses it too)."""
    selector = dict(node_selector)
    out = list(tolerations)
    for f in flavors:
        for key, value in f.node_labels:
            if selector.get(key, value) != value:
                raise InvalidObject(what, f"spec.template.spec.nodeSelector.{key}",
                                    f"is {selector[key]!r}, but ResourceFlavor {f.name} needs {value!r}")
            selector[key] = value
        out.extend(t for t in f.tolerations if t not in out)
    return selector, out


def _scheduling_patch(pod_spec: Mapping[str, Any], selector: Mapping[str, str], tolerations: list[Json]) -> Json:
    """Merge patch of a pod spec from its scheduling now to ``selector`` / ``tolerations``."""
    current_selector, current_tolerations = pod_scheduling(pod_spec)
    out: Json = {}
    if current_selector != selector:
        if selector:
            change: Json = {k: v for k, v in selector.items() if current_selector.get(k) != v}
            change.update({k: None for k in current_selector if k not in selector})
            out["nodeSelector"] = change
        else:
            out["nodeSelector"] = None
    if current_tolerations != tolerations:
        out["tolerations"] = tolerations or None
    return out


def _deep_merge(a: Json, b: Mapping[str, Any]) -> Json:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def recorded_decision(job: Mapping[str, Any]) -> tuple[str, int]:
    """(decision id, cycle) the Job records; ("", -1) when none."""
    ann = annotations_of(job)
    try:
        cycle = int(ann.get(DECISION_CYCLE_ANNOTATION, "-1"))
    except ValueError:
        cycle = -1
    return ann.get(DECISION_ID_ANNOTATION, ""), cycle


Verdict = Literal["apply", "applied", "stale"]


def idempotency(job: Mapping[str, Any], d: AdmitWorkload | AdmitChecked | EvictWorkload) -> Verdict:
    """Whether the Job still needs ``d``: "applied" when it records ``d`` itself, "stale" when it
    records a newer cycle's decision (``d`` was superseded: never go back), else "apply"."""
    rid, rcycle = recorded_decision(job)
    if rid == d.id:
        return "applied"
    if rcycle > d.cycle:
        return "stale"
    return "apply"


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def job_admit_patch(job: Mapping[str, Any], d: AdmitWorkload | AdmitChecked,
                    flavors: Sequence[FlavorScheduling]) -> Json:
    what = f"Job {d.namespace}/{(job.get('metadata') or {}).get('name')}"
    selector0, tolerations0 = original_scheduling(job, what)
    selector, tolerations = injected(selector0, tolerations0, flavors, what)
    updates = d.pod_set_updates if isinstance(d, AdmitChecked) else ()
    selector, tolerations = checkplan.merge_updates(selector, tolerations, updates, what)
    ann = annotations_of(job)
    changes: dict[str, str | None] = {DECISION_ID_ANNOTATION: d.id, DECISION_CYCLE_ANNOTATION: str(d.cycle)}
    meta = checkplan.template_metadata(updates)
    recorded = _recorded_metadata(job)
    remembered = checkplan.original_metadata(job, recorded, meta) if meta else recorded
    if ORIGINAL_POD_SCHEDULING_ANNOTATION not in ann or remembered != recorded:
        changes[ORIGINAL_POD_SCHEDULING_ANNOTATION] = encode_original(selector0, tolerations0, remembered)
    if EVICTED_ANNOTATION in ann:
        changes[EVICTED_ANNOTATION] = None
    spec: Json = {"suspend": False}
    template = _scheduling_patch(_pod_spec(job), selector, tolerations)
    if template:
        spec["template"] = {"spec": template}
    if meta:
        spec.setdefault("template", {})["metadata"] = meta
    return {"metadata": {"resourceVersion": resource_version(job), "annotations": changes}, "spec": spec}


def may_restore(job: Mapping[str, Any]) -> bool:
    """Kubernetes accepts a change of the template's scheduling directives only for a Job that is
    suspended and not started (``status.startTime`` unset; the job controller resets it once a
    suspended Job's pods are gone)."""
    return (job.get("spec") or {}).get("suspend") is True and not (job.get("status") or {}).get("startTime")


def job_finished(job: Mapping[str, Any]) -> bool:
    """A Job with a ``Complete`` or ``Failed`` condition that is True never runs again."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(isinstance(c, Mapping) and c.get("type") in (JobConditionType.COMPLETE, JobConditionType.FAILED)
               and c.get("status") == ConditionStatus.TRUE for c in conditions if isinstance(conditions, list))


def job_restore_patch(job: Mapping[str, Any]) -> Json | None:
    """Back to the template's own nodeSelector / tolerations; None when nothing is injected."""
    if ORIGINAL_POD_SCHEDULING_ANNOTATION not in annotations_of(job):
        return None
    meta = job.get("metadata") or {}
    selector, tolerations = original_scheduling(job, f"Job {meta.get('namespace')}/{meta.get('name')}")
    body: Json = {"metadata": {"resourceVersion": resource_version(job),
                               "annotations": {ORIGINAL_POD_SCHEDULING_ANNOTATION: None}}}
    template = _scheduling_patch(_pod_spec(job), selector, tolerations)
    if template:
        body["spec"] = {"template": {"spec": template}}
    metadata = checkplan.restore_metadata(_recorded_metadata(job))
    if metadata:
        body.setdefault("spec", {}).setdefault("template", {})["metadata"] = metadata
    return body


def job_evict_patch(job: Mapping[str, Any], d: EvictWorkload) -> Json:
    """Suspend and mark; restores the template in the same write when the Job already may change."""
    body: Json = {"metadata": {"resourceVersion": resource_version(job),
                               "annotations": {DECISION_ID_ANNOTATION: d.id, DECISION_CYCLE_ANNOTATION: str(d.cycle),
                                               EVICTED_ANNOTATION: d.id}},
                  "spec": {"suspend": True}}
    restore = job_restore_patch(job) if may_restore(job) else None
    return _deep_merge(body, restore) if restore else body


# --- pure: Workload status ------------------------------------------------------------------------


def condition_json(c: Condition) -> Json:
    # metav1.Time has second precision.
    at = c.last_transition_time - c.last_transition_time % 1000
    return {"type": str(c.type), "status": str(c.status), "reason": str(c.reason), "message": c.message,
            "lastTransitionTime": format_time(at)}


def set_condition(conditions: list[Json], c: Condition) -> None:
    """Kueue's ``apimeta.SetStatusCondition``: replace the condition of that type, keeping its
    lastTransitionTime when the status did not change."""
    new = condition_json(c)
    for i, old in enumerate(conditions):
        if old.get("type") == c.type:
            if old.get("status") == c.status and old.get("lastTransitionTime"):
                new["lastTransitionTime"] = old["lastTransitionTime"]
            conditions[i] = {**old, **new}
            return
    conditions.append(new)


def admission_json(adm: o.Admission) -> Json:
    """``status.admission`` as Kueue writes it (and :mod:`services.core.render` renders it)."""
    return {
        "clusterQueue": adm.cluster_queue,
        "podSetAssignments": [
            {"name": psa.name, "flavors": dict(psa.flavors),
             "resourceUsage": {r: format_amount(r, v) for r, v in psa.resource_usage}, "count": psa.count}
            for psa in adm.pod_set_assignments
        ],
    }


def _conditions(status: Mapping[str, Any]) -> list[Json]:
    return [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]


_CONDITION_TYPES = frozenset(ConditionType)
_CONDITION_STATUSES = frozenset(ConditionStatus)


def conditions_by_type(conditions: Iterable[Mapping[str, Any]]) -> dict[str, Condition]:
    """The Workload's conditions of the types Kueue defines, read back as :class:`Condition`
    (the inverse of :func:`condition_json`; a time that does not parse reads as 0)."""
    out: dict[str, Condition] = {}
    for c in conditions:
        type_, status = str(c.get("type")), str(c.get("status"))
        if type_ not in _CONDITION_TYPES or status not in _CONDITION_STATUSES:
            continue
        at: int
        try:
            at = parse_time(str(c.get("lastTransitionTime") or ""))
        except ValueError:
            at = 0
        out[type_] = Condition(type=ConditionType(type_), status=ConditionStatus(status),
                               reason=str(c.get("reason") or ""), message=str(c.get("message") or ""),
                               last_transition_time=at)
    return out


def admitted_status(status: Mapping[str, Any], d: AdmitWorkload) -> Json:
    """The same conditions the scheduler's state takes on admission (``events.conditions.admission``):
    Admitted=True with QuotaReserved, or, while the decision names admission checks, Admitted=False
    (``UnsatisfiedAdmissionChecks``) and the checks Pending in ``status.admissionChecks``."""
    conds = _conditions(status)
    for c in cond.admission(conditions_by_type(conds), d.admission.cluster_queue, d.time,
                            checks_pending=bool(d.admission_checks)):
        set_condition(conds, c)
    out = {**status, "admission": admission_json(d.admission), "conditions": conds}
    if d.admission_checks:
        out["admissionChecks"] = checkplan.pending_checks(status, d)
    return out


def checked_status(status: Mapping[str, Any], d: AdmitChecked) -> Json:
    """Every admission check Ready: Admitted=True and the checks as the scheduler knows them."""
    conds = _conditions(status)
    for c in checkplan.checked_conditions(d):
        set_condition(conds, c)
    out = {**status, "conditions": conds}
    if d.admission_checks:
        out["admissionChecks"] = [check_state_json(c) for c in d.admission_checks]
    if d.failed_to_start:
        out.pop("admission", None)
    return out


def evicted_status(status: Mapping[str, Any], d: EvictWorkload) -> Json:
    """The eviction and, at once, its completion: the conditions the scheduler's state takes
    when the eviction is decided and when it completes (``events.conditions``)."""
    conds = _conditions(status)
    evicting = cond.eviction(d.reason, d.message, d.preemption_reason, d.time,
                             underlying_cause=d.underlying_cause if isinstance(d, DeactivateWorkload) else "")
    for c in [*evicting, *cond.eviction_completed(evicting[0], d.time)]:
        set_condition(conds, c)
    out = {k: v for k, v in status.items() if k != "admission"}
    out["conditions"] = conds
    if d.admission_checks:
        out["admissionChecks"] = [check_state_json(c) for c in d.admission_checks]
    return out


def news_status(status: Mapping[str, Any], d: UpdateWorkloadStatus) -> Json:
    """Status only: ``status.admissionChecks`` and ``status.requeueState`` as the decision says
    (``checkplan.requeue_state_json``), the rest as it is."""
    out = {**status}
    if d.admission_checks:
        out["admissionChecks"] = [check_state_json(c) for c in d.admission_checks]
    requeue = checkplan.requeue_state_json(d.requeue_count, d.requeue_at)
    if requeue:
        out["requeueState"] = requeue
    else:
        out.pop("requeueState", None)
    return out


def pending_status(status: Mapping[str, Any], d: MarkPending) -> Json:
    conds = _conditions(status)
    set_condition(conds, cond.pending_as(d.condition_reason, d.message, d.time))
    return {**status, "conditions": conds}


def is_finished(workload: Mapping[str, Any]) -> bool:
    return any(c.get("type") == ConditionType.FINISHED and c.get("status") == ConditionStatus.TRUE
               for c in _conditions(workload.get("status") or {}))


def holds_quota(workload: Mapping[str, Any]) -> bool:
    return any(c.get("type") == ConditionType.QUOTA_RESERVED and c.get("status") == ConditionStatus.TRUE
               for c in _conditions(workload.get("status") or {}))


def status_patch(workload: Mapping[str, Any], desired: Mapping[str, Any]) -> Json | None:
    """Merge patch of ``/status`` from the Workload's status to ``desired``; None when equal."""
    current = workload.get("status") or {}
    changed: Json = {k: v for k, v in desired.items() if current.get(k) != v}
    changed.update({k: None for k in current if k not in desired})
    if not changed:
        return None
    return {"metadata": {"resourceVersion": resource_version(workload)}, "status": changed}


# --- pure: ClusterQueue and LocalQueue status -----------------------------------------------------


@dataclass(frozen=True)
class _Held:
    cluster_queue: str
    admitted: bool  # holds quota (reserving)
    usage: tuple[tuple[str, str, int], ...] = ()  # (flavor, resource, amount)
    checks_pending: bool = False  # reserving, not admitted yet: waits for its admission checks


_Usage = dict[tuple[str, str], int]  # (flavor, resource) -> amount

FlavorQuotas = tuple[tuple[str, tuple[tuple[str, int | None], ...]], ...]
"""A ClusterQueue's flavors in spec order, each with its resources and nominal quota (None: unreadable)."""


def flavor_quotas(cq: Mapping[str, Any]) -> FlavorQuotas:
    out: dict[str, dict[str, int | None]] = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fq in (group or {}).get("flavors") or []:
            resources = out.setdefault(str((fq or {}).get("name") or ""), {})
            for r in (fq or {}).get("resources") or []:
                name = str((r or {}).get("name") or "")
                try:
                    resources[name] = to_amount(name, (r or {}).get("nominalQuota", 0))
                except QuantityError:
                    resources[name] = None
    return tuple((f, tuple(rs.items())) for f, rs in out.items())


class QueueCounts:
    """ClusterQueue / LocalQueue status counted from the decision stream.

    Counted, per workload, from its latest decision: ``MarkPending`` → pending in its
    ClusterQueue; ``AdmitWorkload`` → reserving, and admitted unless it names admission checks
    (then ``AdmitChecked`` admits it), with the admission's usage per flavor and resource;
    ``EvictWorkload`` → pending again (Kueue requeues it), its quota released at once (Kueue
    releases it when the pods are gone). The ClusterQueue counts are rebuilt from the whole
    decisions topic at recovery.

    Not counted (not visible in the decision stream): finishes — a finished workload stays
    counted as admitted, with its usage, until a later decision about it; deletions; workloads
    no cycle has looked at yet (no ``MarkPending`` for them). A LocalQueue counts only the
    workloads whose Workload object this process has read (it learns ``spec.queueName`` there:
    every admit and evict, and the first pending mark of a workload)."""

    def __init__(self) -> None:
        self.workloads: dict[str, _Held] = {}
        self.local_queue_of: dict[str, str] = {}  # "ns/workload" -> "ns/localqueue"
        self.dirty_cluster_queues: set[str] = set()
        self.dirty_local_queues: set[str] = set()

    def _touch(self, key: str, held: _Held | None) -> None:
        lq = self.local_queue_of.get(key)
        for h in (held, self.workloads.get(key)):
            if h is not None:
                self.dirty_cluster_queues.add(h.cluster_queue)
                if lq:
                    self.dirty_local_queues.add(lq)

    def fold(self, d: Decision | UpdateWorkloadStatus) -> None:
        if isinstance(d, UpdateWorkloadStatus):
            return  # status only: no count changes
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, AdmitChecked):
            previous = self.workloads.get(key)
            if previous is not None and previous.checks_pending:
                held = (_Held(previous.cluster_queue, False) if d.failed_to_start else
                        _Held(previous.cluster_queue, True, previous.usage))
                self._touch(key, held)
                self.workloads[key] = held
            return
        if isinstance(d, AdmitWorkload) and d.replaced_slice:
            # A scaled-up elastic Job's new slice: the slice it replaces is finished by the same decision.
            gone = self.workloads.pop(d.replaced_slice, None)
            self._touch(d.replaced_slice, gone)
            if d.replaced_slice in self.local_queue_of:
                self.local_queue_of.setdefault(key, self.local_queue_of[d.replaced_slice])
        if isinstance(d, AdmitWorkload):
            usage = {(flavor, r): 0 for psa in d.admission.pod_set_assignments for r, flavor in psa.flavors}
            for psa in d.admission.pod_set_assignments:
                flavors = dict(psa.flavors)
                for r, amount in psa.resource_usage:
                    if r in flavors:
                        usage[(flavors[r], r)] += amount
            held = _Held(d.admission.cluster_queue, True, tuple(sorted((f, r, v) for (f, r), v in usage.items())),
                         checks_pending=bool(d.admission_checks))
        else:
            previous = self.workloads.get(key)
            cq = d.cluster_queue or (previous.cluster_queue if previous else "")
            if not cq:
                return
            held = _Held(cq, False)
        if self.workloads.get(key) != held:
            self._touch(key, held)
            self.workloads[key] = held

    def learn_local_queue(self, key: str, local_queue: str) -> None:
        if local_queue and self.local_queue_of.get(key) != local_queue:
            old = self.local_queue_of.get(key)
            if old and key in self.workloads:
                self.dirty_local_queues.add(old)
            self.local_queue_of[key] = local_queue
            if key in self.workloads:
                self.dirty_local_queues.add(local_queue)

    def _tally(self, keys: Iterable[str]) -> tuple[int, int, int, _Usage, _Usage]:
        """(pending, reserving, admitted, reserved usage, admitted usage)."""
        pending, reserving, admitted = 0, 0, 0
        reserved, usage = dict[tuple[str, str], int](), dict[tuple[str, str], int]()
        for key in keys:
            h = self.workloads[key]
            if not h.admitted:
                pending += 1
                continue
            reserving += 1
            for flavor, r, amount in h.usage:
                reserved[(flavor, r)] = reserved.get((flavor, r), 0) + amount
            if h.checks_pending:
                continue
            admitted += 1
            for flavor, r, amount in h.usage:
                usage[(flavor, r)] = usage.get((flavor, r), 0) + amount
        return pending, reserving, admitted, reserved, usage

    @staticmethod
    def _flavors(usage: Mapping[tuple[str, str], int], quotas: FlavorQuotas, *, borrowed: bool) -> list[Json]:
        rows: dict[str, dict[str, tuple[int, int | None]]] = {}
        for flavor, quota in quotas:  # the ClusterQueue's flavors and resources in spec order, zeros included
            rows[flavor] = {r: (usage.get((flavor, r), 0), nominal) for r, nominal in quota}
        for (flavor, r), amount in sorted(usage.items()):
            rows.setdefault(flavor, {}).setdefault(r, (amount, None))
        out = []
        for flavor, resources in rows.items():
            entries = []
            for r, (total, nominal) in resources.items():
                entry: Json = {"name": r, "total": format_amount(r, total)}
                if borrowed and nominal is not None:
                    entry["borrowed"] = format_amount(r, max(0, total - nominal))
                entries.append(entry)
            out.append({"name": flavor, "resources": entries})
        return out

    def cluster_queue_status(self, name: str, quotas: FlavorQuotas = ()) -> Json:
        keys = sorted(k for k, h in self.workloads.items() if h.cluster_queue == name)
        pending, reserving, admitted, reserved, usage = self._tally(keys)
        return {"pendingWorkloads": pending, "reservingWorkloads": reserving, "admittedWorkloads": admitted,
                "flavorsReservation": self._flavors(reserved, quotas, borrowed=True),
                "flavorsUsage": self._flavors(usage, quotas, borrowed=True)}

    def t9k_queue_status(self, name: str) -> Json:
        """A T9k Queue's ``status.allocated``: what its admitted workloads use, per resource (over
        flavors), as Kubernetes writes quantities (``events.t9k``)."""
        keys = sorted(k for k, h in self.workloads.items() if h.cluster_queue == name)
        *_, usage = self._tally(keys)
        totals: dict[str, int] = {}
        for (_, r), amount in sorted(usage.items()):
            totals[r] = totals.get(r, 0) + amount
        return {"allocated": {r: format_amount(r, v) for r, v in sorted(totals.items())}}

    def local_queue_status(self, key: str, quotas: FlavorQuotas = ()) -> Json:
        keys = sorted(k for k, lq in self.local_queue_of.items() if lq == key and k in self.workloads)
        pending, reserving, admitted, reserved, usage = self._tally(keys)
        return {"pendingWorkloads": pending, "reservingWorkloads": reserving, "admittedWorkloads": admitted,
                "flavorsReservation": self._flavors(reserved, quotas, borrowed=False),
                "flavorsUsage": self._flavors(usage, quotas, borrowed=False), "flavorUsage": None}


def fair_sharing_status_patch(obj: Mapping[str, Any], d: UpdateLocalQueueFairSharing) -> Json | None:
    """The merge patch that makes a LocalQueue's ``status.fairSharing.admissionFairSharingStatus``
    say what ``d`` says (a resource no longer consumed is removed), or None when it already does.
    ``lastUpdate`` is whole seconds, as Kueue's ``metav1.Time`` is written."""
    fair = (obj.get("status") or {}).get("fairSharing") or {}
    current = fair.get("admissionFairSharingStatus") or {}
    consumed = dict(d.consumed_resources)
    last_update = format_time(d.last_update // 1000 * 1000)
    if current.get("consumedResources", {}) == consumed and current.get("lastUpdate") == last_update:
        return None
    before = current.get("consumedResources") or {}
    gone: dict[str, Any] = {name: None for name in sorted(before) if name not in consumed}
    return {"status": {"fairSharing": {
        "weightedShare": fair.get("weightedShare", 0),
        "admissionFairSharingStatus": {"consumedResources": {**gone, **consumed}, "lastUpdate": last_update},
    }}}


def queue_status_patch(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> Json | None:
    current = obj.get("status") or {}
    if all(current.get(k) == v for k, v in desired.items()):
        return None
    return {"status": dict(desired)}
