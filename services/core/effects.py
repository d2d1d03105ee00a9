"""The state changes a scheduling cycle makes, as functions of their recorded outcome.

A cycle decides; these functions carry out what it decided. They are shared by
the cycle itself and by :mod:`services.core.apply`, which replays a
recorded cycle from its decisions and head outcomes without deciding again —
so a replayed state is the live state by construction, not by coincidence.
"""

from __future__ import annotations

from events import conditions as cond
from events import objects as o
from events.cluster import ConditionType, EvictionReason, PendingConditionReason
from events.messages import HeadOutcome
from services.core import admissionfair, checks, deactivation, podsready, scaleup
from services.core.state import (
    ClusterQueueQueue,
    State,
    WorkloadRecord,
    generation,
    release_usage,
    requeue_inadmissible,
    reserve_quota,
    touch_tree,
)


def commit_admission(state: State, rec: WorkloadRecord, adm: o.Admission, replaced_slice: str = "") -> tuple[str, ...]:
    """Quota reserved; returns the admission checks that must be Ready before it is admitted.
    ``replaced_slice``: the workload slice this one replaces, finished at once (services/core/scaleup.py)."""
    now = state.now
    reserve_quota(state, rec, adm, now)
    old = state.workloads.get(replaced_slice) if replaced_slice else None
    if old is not None:
        scaleup.finish_replaced(state, old, rec.key)
    rec.sticky = False
    rec.last_tried = None  # an admitted workload's scan is over; if evicted, it starts afresh
    names = checks.start_checks(state, rec, adm)
    for c in cond.admission(rec.conditions, adm.cluster_queue, now, checks_pending=bool(names)):
        rec.set_condition(c)
    podsready.on_admitted(state, rec)
    rec.pending_reason = ""
    admissionfair.on_reserved(state, rec, adm)
    if not names:
        admissionfair.on_admitted(state, rec)
    return names


def admit_checked(state: State, rec: WorkloadRecord, failed_to_start: str) -> None:
    """Every check Ready: admitted. A podSetUpdate that conflicts with the flavors makes the Job
    fail to start, which finishes the workload and frees its quota (Kueue's ``FailedToStart``)."""
    checks.finish_admission(state, rec)
    admissionfair.on_admitted(state, rec)
    if not failed_to_start or rec.admission is None:
        return
    cq = rec.admission.cluster_queue
    release_usage(state, rec)
    rec.finished = True
    rec.set_condition(cond.condition(ConditionType.FINISHED, True, "FailedToStart", failed_to_start, state.now))
    requeue_inadmissible(state, cq)


def mark_evicted(state: State, rec: WorkloadRecord, reason: EvictionReason, message: str,
                 preemption_reason: str, *, underlying_cause: str = "", deactivate: bool = False) -> None:
    rec.evicting = True
    checks.note_eviction(state, rec, reason)
    if rec.admission is not None:
        touch_tree(state, rec.admission.cluster_queue)  # evicted candidates come first
    for c in cond.eviction(reason, message, preemption_reason, state.now, underlying_cause=underlying_cause):
        rec.set_condition(c)
    podsready.on_evicted(state, rec, reason)
    deactivation.note_evicted(state, rec, deactivate=deactivate, cause=underlying_cause, message=message)


def mark_pending(state: State, rec: WorkloadRecord, message: str, reason: str,
                 kueue_reason: PendingConditionReason) -> bool:
    """Set the pending condition; False when it says nothing new (no decision is recorded then)."""
    old = rec.conditions.get(ConditionType.QUOTA_RESERVED)
    if (old is not None and not cond.is_true(old) and old.reason == kueue_reason and old.message == message
            and rec.pending_reason == reason):
        return False  # checked before building the condition: most parked heads say the same again
    rec.set_condition(cond.pending_as(kueue_reason, message, state.now))
    rec.pending_reason = reason
    return True


def requeue(state: State, rec: WorkloadRecord, h: HeadOutcome) -> None:
    """Put a head that was not admitted back: in its queue, or parked as inadmissible."""
    if h.last_tried is None:
        rec.last_tried = None
    else:
        rec.last_tried = {(ps, group): idx for ps, group, idx in h.last_tried}
        rec.last_generation = generation(state, h.cluster_queue)
        rec.last_cycle = state.cycles
    rec.sticky = h.sticky
    queue = state.index.queues.get(h.cluster_queue)
    if queue is None:  # (not setdefault: that builds a queue for every head put back)
        queue = state.index.queues[h.cluster_queue] = ClusterQueueQueue()
    if h.parked:
        rec.inadmissible = True
        queue.inadmissible[rec.key] = None
    else:
        rec.inadmissible = False
        queue.push(rec)
