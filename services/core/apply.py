"""Replaying a recorded cycle without deciding it again.

A cycle's record — its decisions and what became of the heads it did not admit —
is everything the cycle changed. Applying it to the state folded up to the
same input offset gives the state the live scheduler had, through the same
functions (:mod:`services.core.effects`), at the cost of the changes
alone rather than of the decisions. ``replay --verify`` still re-runs every
cycle and compares; recovery and plain replay apply.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    CycleCompleted,
    DeactivateWorkload,
    EvictWorkload,
    MarkPending,
    UpdateLocalQueueFairSharing,
)
from services.core import admissionfair, effects, placement, podsready
from services.core.cycle import release_and_settle, restart_held
from services.core.state import State


class ApplyError(RuntimeError):
    """The record does not fit the state (a log from another version, or a corrupt one)."""


def apply_cycle(state: State, decisions: Sequence[AnyDecision], record: CycleCompleted) -> None:
    state.ensure_indexed()
    state.cycles += 1
    if state.cycles != record.cycle:
        raise ApplyError(f"cycle {record.cycle} recorded, but the state is at cycle {state.cycles}")
    restart_held(state)
    podsready.release(state)
    release_and_settle(state, None)
    for key in (*record.admitted_heads, *(h.key for h in record.heads)):
        rec = state.workloads.get(key)
        if rec is None:
            raise ApplyError(f"cycle {record.cycle}: head {key} is not a known workload")
        queue = state.index.queues.get(rec.queued_in)
        if queue is not None:
            queue.remove(rec)
    for d in decisions:
        if isinstance(d, placement.PLACEMENT_DECISIONS):
            placement.apply(state, d)
            continue
        if isinstance(d, UpdateLocalQueueFairSharing):  # about a LocalQueue: its status was said
            entry = state.afs.get(f"{d.namespace}/{d.name}")
            if entry is not None:
                admissionfair.mark_said(entry)
            continue
        rec = state.workloads.get(f"{d.namespace}/{d.name}")
        if rec is None:
            raise ApplyError(f"cycle {record.cycle}: decision {d.id} is about unknown {d.namespace}/{d.name}")
        if isinstance(d, AdmitWorkload):
            effects.commit_admission(state, rec, d.admission, d.replaced_slice or "")
        elif isinstance(d, EvictWorkload):
            deactivating = isinstance(d, DeactivateWorkload)
            effects.mark_evicted(state, rec, d.reason, d.message, d.preemption_reason, deactivate=deactivating,
                                 underlying_cause=d.underlying_cause if isinstance(d, DeactivateWorkload) else "")
        elif isinstance(d, MarkPending):
            effects.mark_pending(state, rec, d.message, d.reason, d.condition_reason)
        elif isinstance(d, AdmitChecked):
            effects.admit_checked(state, rec, d.failed_to_start)
    for h in record.heads:
        effects.requeue(state, state.workloads[h.key], h)
