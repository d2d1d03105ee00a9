"""Workload conditions as Kueue writes them: the builders and the transitions.

One implementation for both writers of a Workload's conditions: the scheduler core, which
keeps them in its state (and ``simulate`` renders them), and the Kubernetes actuator, which
writes them to the Workload's status when it applies a decision. The transitions
(:func:`admission`, :func:`eviction`, :func:`eviction_completed`, :func:`pending_as`) return
the conditions to set, in order, with Kueue's ``apimeta.SetStatusCondition`` semantics left to
the caller (a condition replaces the one of its type, keeping its lastTransitionTime when the
status does not change). Pure: time is given, never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from events.cluster import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    EvictionReason,
    PendingConditionReason,
    RequeuedReason,
)
from events.messages import Condition

PENDING_AFTER_EVICTION = "The workload is pending after eviction"


def condition(type_: ConditionType, status: bool, reason: str, message: str, at: int) -> Condition:
    return Condition(type=type_, status=ConditionStatus.TRUE if status else ConditionStatus.FALSE, reason=reason,
                     message=message, last_transition_time=at)


def is_true(c: Condition | None) -> bool:
    return c is not None and c.status == ConditionStatus.TRUE


def quota_reserved(cluster_queue: str, at: int) -> Condition:
    return condition(ConditionType.QUOTA_RESERVED, True, ConditionReason.QUOTA_RESERVED,
                     f"Quota reserved in ClusterQueue {cluster_queue}", at)


def admitted(at: int) -> Condition:
    return condition(ConditionType.ADMITTED, True, ConditionReason.ADMITTED, "The workload is admitted", at)


def pending_as(reason: PendingConditionReason, message: str, at: int) -> Condition:
    """``QuotaReserved=False`` with the given reason: what a ``MarkPending`` decision writes."""
    return condition(ConditionType.QUOTA_RESERVED, False, reason, message, at)


def pending(message: str, at: int) -> Condition:
    return pending_as(PendingConditionReason.PENDING, message, at)


def inadmissible(message: str, at: int) -> Condition:
    return pending_as(PendingConditionReason.INADMISSIBLE, message, at)


def evicted(reason: str, message: str, at: int) -> Condition:
    return condition(ConditionType.EVICTED, True, reason, message, at)


def preempted(reason: str, message: str, at: int) -> Condition:
    return condition(ConditionType.PREEMPTED, True, reason, message, at)


def not_admitted(at: int) -> Condition:
    return condition(ConditionType.ADMITTED, False, ConditionReason.NO_RESERVATION, "The workload has no reservation",
                     at)


def requeued(status: bool, reason: str, message: str, at: int) -> Condition:
    """After an eviction Kueue copies the Evicted reason and message into Requeued."""
    return condition(ConditionType.REQUEUED, status, reason or ConditionReason.REQUEUED,
                     message or "The workload was requeued after eviction", at)


def restarted(kind: Literal["ClusterQueue", "LocalQueue"], at: int) -> Condition:
    """Requeued again once the stopped ClusterQueue or LocalQueue (``kind``) runs again."""
    return condition(ConditionType.REQUEUED, True, f"{kind}Restarted", f"The {kind} was restarted after being stopped",
                     at)


def reactivated(at: int) -> Condition:
    """A deactivated workload whose spec.active was set back to true is queued again."""
    return condition(ConditionType.REQUEUED, True, RequeuedReason.REACTIVATED, "The workload was reactivated", at)


def backoff_finished(at: int) -> Condition:
    """A workload evicted by a PodsReady timeout is queued again: its requeueAt has passed."""
    return condition(ConditionType.REQUEUED, True, RequeuedReason.BACKOFF_FINISHED, "The workload backoff was finished",
                     at)


def finished(succeeded: bool, message: str, at: int) -> Condition:
    if succeeded:
        return condition(ConditionType.FINISHED, True, ConditionReason.SUCCEEDED,
                         message or "Job finished successfully", at)
    return condition(ConditionType.FINISHED, True, ConditionReason.FAILED, message or "Job failed", at)


def pending_admission_checks(at: int) -> Condition:
    return condition(ConditionType.ADMITTED, False, ConditionReason.UNSATISFIED_CHECKS,
                     "The workload has not all checks ready", at)


def pods_ready(at: int) -> Condition:
    return condition(ConditionType.PODS_READY, True, ConditionReason.PODS_READY,
                     "All pods reached readiness and the workload is running", at)


# --- transitions ----------------------------------------------------------------------------------


def admission(current: Mapping[str, Condition], cluster_queue: str, at: int, *,
              checks_pending: bool = False) -> list[Condition]:
    """Quota reserved in ``cluster_queue``: QuotaReserved, then Admitted (or, while admission
    checks are pending, Admitted=False), and an earlier eviction or preemption still True in
    ``current`` (conditions by type) becomes history."""
    out = [quota_reserved(cluster_queue, at), pending_admission_checks(at) if checks_pending else admitted(at)]
    for type_ in (ConditionType.EVICTED, ConditionType.PREEMPTED):
        old = current.get(type_)
        if old is not None and is_true(old):
            out.append(condition(type_, False, ConditionReason.QUOTA_RESERVED, f"Previously: {old.message}", at))
    return out


def eviction_reason(reason: str, underlying_cause: str = "") -> str:
    """The reason an Evicted condition carries: a deactivation names its cause
    (``DeactivatedDueToRequeuingLimitExceeded``), as Kueue's ``workloadevict.Evict`` writes it."""
    if reason == EvictionReason.DEACTIVATED and underlying_cause:
        return f"{reason}DueTo{underlying_cause}"
    return reason


def eviction(reason: str, message: str, preemption_reason: str, at: int, *,
             underlying_cause: str = "") -> list[Condition]:
    """An eviction decided: Evicted, and Preempted when a preemption is the cause."""
    out = [evicted(eviction_reason(reason, underlying_cause), message, at)]
    if preemption_reason:
        out.append(preempted(preemption_reason, message, at))
    return out


def eviction_completed(evicted_: Condition | None, at: int) -> list[Condition]:
    """The evicted workload's pods are gone (``evicted_`` is its Evicted condition): pending
    again, not admitted, and Requeued, which is True only for a preempted workload: one drained
    by a stopped queue waits for the queue to run again (Kueue's Requeued=False)."""
    reason = evicted_.reason if evicted_ is not None else ""
    message = evicted_.message if evicted_ is not None else ""
    return [
        pending(message or PENDING_AFTER_EVICTION, at),
        not_admitted(at),
        requeued(reason in (EvictionReason.PREEMPTED, EvictionReason.MAX_DURATION_EXCEEDED), reason, message, at),
    ]
