"""The state changes a scheduling cycle makes, as functions of their recorded outcome.

A cycle decides; these functions carry out what it decided. They are shared by
the cycle itself and by :mod:`services.core.apply`, which replays a
recorded cycle from its decisions and head outcomes without deciding again —
so a replayed state is the live state by construction, not by coincidence.
"""

from __future__ import annotations

from events import objects as o
from events.messages import Condition, HeadOutcome
from services.core import conditions as cond
from services.core.state import ClusterQueueQueue, State, WorkloadRecord, generation, reserve_quota, touch_tree


def commit_admission(state: State, rec: WorkloadRecord, adm: o.Admission) -> None:
    now = state.now
    reserve_quota(state, rec, adm, now)
    rec.sticky = False
    rec.set_condition(cond.quota_reserved(adm.cluster_queue, now))
    cq = state.cluster_queues.get(adm.cluster_queue)
    if cq is not None and cq.admission_checks:
        rec.set_condition(cond.pending_admission_checks(now))
    else:
        rec.set_condition(cond.admitted(now))
    for ctype in ("Evicted", "Preempted"):
        old = rec.conditions.get(ctype)
        if old is not None and old.status == "True":
            rec.set_condition(cond._c(ctype, False, "QuotaReserved", f"Previously: {old.message}", now))
    rec.pending_reason = ""


def mark_evicted(state: State, rec: WorkloadRecord, reason: str, message: str, preemption_reason: str) -> None:
    now = state.now
    rec.evicting = True
    if rec.admission is not None:
        touch_tree(state, rec.admission.cluster_queue)  # evicted candidates come first
    rec.set_condition(cond.evicted(reason, message, now))
    if preemption_reason:
        rec.set_condition(cond.preempted(preemption_reason, message, now))


def pending_condition(state: State, message: str, kueue_reason: str) -> Condition:
    if kueue_reason == "Inadmissible":
        return cond.inadmissible(message, state.now)
    return cond.pending(message, state.now)


def mark_pending(state: State, rec: WorkloadRecord, message: str, reason: str, kueue_reason: str) -> bool:
    """Set the pending condition; False when it says nothing new (no decision is recorded then)."""
    old = rec.conditions.get("QuotaReserved")
    c_reason = "Inadmissible" if kueue_reason == "Inadmissible" else "Pending"  # as pending_condition
    if (old is not None and old.status == "False" and old.reason == c_reason and old.message == message
            and rec.pending_reason == reason):
        return False  # checked before building the condition: most parked heads say the same again
    rec.set_condition(pending_condition(state, message, kueue_reason))
    rec.pending_reason = reason
    return True


def requeue(state: State, rec: WorkloadRecord, h: HeadOutcome) -> None:
    """Put a head that was not admitted back: in its queue, or parked as inadmissible."""
    if h.last_tried is None:
        rec.last_tried = None
    else:
        rec.last_tried = {(ps, group): idx for ps, group, idx in h.last_tried}
        rec.last_generation = generation(state, h.cluster_queue)
    rec.sticky = h.sticky
    queue = state.index.queues.setdefault(h.cluster_queue, ClusterQueueQueue())
    if h.parked:
        rec.inadmissible = True
        queue.inadmissible[rec.key] = None
    else:
        rec.inadmissible = False
        queue.push(rec)
