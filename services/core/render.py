"""Workloads rendered as Kubernetes objects, with status as Kueue writes it.

What is rendered is plain JSON data: closed-set members (condition types, reasons) are
written as their strings, so that any serializer (JSON, YAML) takes the objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.checkstatus import check_state_json
from events.cluster import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    PENDING_REASON_ANNOTATION,
    ConditionStatus,
    ConditionType,
    PendingConditionReason,
)
from events.conditions import is_true
from events.kueue_versions import respell
from events.manifests import format_time
from events.messages import PendingReason
from events.objects import QueueingStrategy
from events.quantity import format_amount
from services.core import admissionfair
from services.core.placement import nominated_cluster_names
from services.core.reasons import quota_reserved_reason
from services.core.state import State, WorkloadRecord


def _pod_set(ps: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main"}
    if ps.requests:
        container["resources"] = {"requests": {r: format_amount(r, v) for r, v in ps.requests}}
    spec: dict[str, Any] = {"containers": [container]}
    if ps.node_selector:
        spec["nodeSelector"] = dict(ps.node_selector)
    if ps.tolerations:
        spec["tolerations"] = [
            {k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect)) if v}
            for t in ps.tolerations
        ]
    if ps.device_claims:
        spec["resourceClaims"] = [
            {"name": c.name, "resourceClaimTemplateName" if c.template else "resourceClaimName": c.template or c.claim}
            for c in ps.device_claims
        ]
    out: dict[str, Any] = {"name": ps.name, "count": ps.count, "template": {"spec": spec}}
    if ps.min_count is not None:
        out["minCount"] = ps.min_count
    return out


def workload_object(state: State, rec: WorkloadRecord, version: str = KUEUE_VERSION) -> dict[str, Any]:
    """The Workload as Kueue would show it at ``version`` (its v1beta1 body, respelled)."""
    out = _workload_v1beta1(state, rec)
    if version == KUEUE_VERSION:
        return out
    return respell({**out, "apiVersion": f"{KUEUE_GROUP}/{version}"})


def _workload_v1beta1(state: State, rec: WorkloadRecord) -> dict[str, Any]:
    wl = rec.obj
    meta: dict[str, Any] = {"name": wl.name, "namespace": wl.namespace, "uid": wl.uid}
    if wl.creation_time is not None:
        meta["creationTimestamp"] = format_time(wl.creation_time)
    if wl.labels:
        meta["labels"] = dict(wl.labels)
    annotations = dict(wl.annotations)
    waiting = _not_yet_considered(state, rec)
    if rec.pending and rec.pending_reason:
        annotations[PENDING_REASON_ANNOTATION] = str(rec.pending_reason)
    elif rec.pending and waiting is not None:
        annotations[PENDING_REASON_ANNOTATION] = str(waiting[0])
    if annotations:
        meta["annotations"] = annotations
    if wl.owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": wl.owner.api_version, "kind": wl.owner.kind, "name": wl.owner.name,
            "uid": wl.owner.uid, "controller": True, "blockOwnerDeletion": True,
        }]
    spec: dict[str, Any] = {"queueName": wl.queue_name, "podSets": [_pod_set(ps) for ps in wl.pod_sets],
                            "priority": rec.priority}
    if wl.priority_ref is not None:
        spec["priorityClassName"] = wl.priority_ref.name
        spec["priorityClassSource"] = wl.priority_ref.source
    if not rec.active:
        spec["active"] = False
    status: dict[str, Any] = {}
    if rec.admission is not None:
        status["admission"] = {
            "clusterQueue": rec.admission.cluster_queue,
            "podSetAssignments": [
                {
                    "name": psa.name,
                    "flavors": dict(psa.flavors),
                    "resourceUsage": {r: format_amount(r, v) for r, v in psa.resource_usage},
                    "count": psa.count,
                }
                for psa in rec.admission.pod_set_assignments
            ],
        }
    conds = [
        {
            "type": str(c.type), "status": str(c.status), "reason": str(c.reason), "message": c.message,
            "lastTransitionTime": format_time(c.last_transition_time),
        }
        for c in rec.conditions.values()
    ]
    if waiting:
        # Never a head yet (behind a StrictFIFO head, or a cycle limit): Kueue writes nothing, but a
        # pending workload should say why it waits.
        conds.append({"type": str(ConditionType.QUOTA_RESERVED), "status": str(ConditionStatus.FALSE),
                      "reason": str(quota_reserved_reason(state.config, waiting[0], PendingConditionReason.PENDING)),
                      "message": waiting[1],
                      "lastTransitionTime": format_time(state.now)})
    if conds:
        status["conditions"] = conds
    _timing(rec, spec, status)
    if rec.checks:
        status["admissionChecks"] = [check_state_json(rec.checks[n]) for n in sorted(rec.checks)]
    if rec.key in state.multikueue.cluster_names:  # MultiKueue (services.core.placement)
        status["clusterName"] = state.multikueue.cluster_names[rec.key]
    elif nominated := nominated_cluster_names(state, rec):
        status["nominatedClusterNames"] = nominated
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Workload", "metadata": meta, "spec": spec,
            "status": status}


def _timing(rec: WorkloadRecord, spec: dict[str, Any], status: dict[str, Any]) -> None:
    """maximumExecutionTimeSeconds, the requeue state and the past execution time, as Kueue writes
    them at v1beta1 (Kueue's own misspelling of the last one; ``workload_object`` respells)."""
    if rec.obj.maximum_execution_time_seconds is not None:
        spec["maximumExecutionTimeSeconds"] = rec.obj.maximum_execution_time_seconds
    if not rec.active:
        spec["active"] = False
    if rec.requeue_count or rec.requeue_at is not None:
        state: dict[str, Any] = {"count": rec.requeue_count}
        if rec.requeue_at is not None:
            state["requeueAt"] = format_time(rec.requeue_at)
        status["requeueState"] = state
    if rec.past_execution_ms:
        # v1beta1's spelling (Kueue's own, sic); ``respell`` writes v1beta2's.
        status["accumulatedPastExexcutionTimeSeconds"] = rec.past_execution_ms // 1000


def _not_yet_considered(state: State, rec: WorkloadRecord) -> tuple[PendingReason, str] | None:
    """(reason, message) for a pending workload that no cycle has looked at yet."""
    if not rec.pending or ConditionType.QUOTA_RESERVED in rec.conditions or not rec.queued_in:
        return None
    queue = state.index.queues.get(rec.queued_in)
    cq = state.cluster_queues.get(rec.queued_in)
    if queue is None or cq is None:
        return None
    order = (admissionfair.ordered(state, cq.name, [key for _, key in queue.active])
             if admissionfair.uses_afs(state, cq.name) else [key for _, key in queue.active])
    ahead = next((i for i, key in enumerate(order) if key == rec.key), None)
    if ahead is None:
        return None
    if cq.queueing_strategy == QueueingStrategy.STRICT_FIFO and ahead > 0:
        head = order[0]
        return (PendingReason.BLOCKED_BY_STRICT_FIFO,
                f"Waiting in StrictFIFO ClusterQueue {cq.name} behind {ahead} workload(s); "
                f"the head, {head}, cannot be admitted yet")
    return (PendingReason.QUEUED,
            f"Queued in ClusterQueue {cq.name} at position {ahead + 1}; not considered by a cycle yet")


def workload_list(state: State, versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every Workload, each at its version in ``versions`` (by ``ns/name``; v1beta1 otherwise)."""
    items = [workload_object(state, state.workloads[k], (versions or {}).get(k, KUEUE_VERSION))
             for k in sorted(state.workloads)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def summary_row(state: State, rec: WorkloadRecord) -> tuple[str, str, str, str, str, str]:
    """(workload, queue, cluster queue, state, flavors, reason) for table views."""
    wl = rec.obj
    name = f"{wl.namespace}/{wl.owner.name if wl.owner else wl.name}"
    if rec.finished:
        state_ = str(ConditionType.FINISHED)
    elif rec.evicting:
        state_ = "Evicting"
    elif rec.admission is not None:
        admitted = is_true(rec.conditions.get(ConditionType.ADMITTED))
        state_ = str(ConditionType.ADMITTED if admitted else ConditionType.QUOTA_RESERVED)
    else:
        state_ = "Pending"
    flavors = ""
    cq = rec.queued_in
    if rec.admission is not None:
        cq = rec.admission.cluster_queue
        parts = []
        for psa in rec.admission.pod_set_assignments:
            fl = ",".join(f"{r}={f}" for r, f in psa.flavors)
            parts.append(f"{psa.name}[{psa.count}]:{fl}")
        flavors = " ".join(parts)
    if rec.key in state.multikueue.cluster_names:
        flavors += f" on {state.multikueue.cluster_names[rec.key]}"
    reason = ""
    if state_ == "Pending":
        qr = rec.conditions.get(ConditionType.QUOTA_RESERVED)
        waiting = _not_yet_considered(state, rec)
        if qr is not None:
            reason = f"{rec.pending_reason}: {qr.message}"
        elif waiting is not None:
            reason = f"{waiting[0]}: {waiting[1]}"
        else:
            reason = rec.pending_reason
    elif state_ == "Evicting":
        ev = rec.conditions.get(ConditionType.EVICTED)
        reason = ev.message if ev else ""
    elif state_ == str(ConditionType.QUOTA_RESERVED) and rec.checks:
        reason = "waiting for admission checks: " + ", ".join(
            f"{c.name} {c.state}" + (f" ({c.message})" if c.message else "") for _, c in sorted(rec.checks.items()))
    return name, wl.queue_name, cq, state_, flavors, reason
