"""Deactivation and re-activation of a workload (Kueue's ``spec.active``), as one mechanism.

A workload is *inactive* while its spec says ``active: false`` (a user, or an actuator writing
back what the scheduler decided) or while the scheduler has deactivated it (Kueue's
``DeactivationTarget``: the requeuing limit of waitForPodsReady, the maximum execution time, an
admission check's ``Rejected``). An inactive workload is never queued, so never nominated. One
that holds quota is evicted by the next cycle with reason ``Deactivated`` (with the scheduler's
cause: ``DeactivatedDueTo<cause>``, message "The workload is deactivated due to ..."), and that
eviction carries ``deactivate=True`` so that the actuator sets ``spec.active=false``. After the
eviction completes it stays pending with ``Requeued=False``.

A user sets ``spec.active`` back to true (an applied Workload whose previous spec said false):
the workload is re-activated — requeue state and deactivation cleared, ``Requeued=True`` with
reason ``Reactivated`` if it had been evicted — and queued again; so it starts over.

The API (all pure; time is ``state.now``):

- :func:`is_active` — whether a record may be queued.
- :func:`deactivate` — the scheduler deactivates a workload for ``cause``. Call it from ``fold``
  (any workload) or from a cycle (a workload holding quota: its eviction is the decision that
  records the deactivation, so ``replay`` reproduces it). The next cycle evicts it.
- :func:`observe_spec` — ``fold`` saw a new spec of a known workload: deactivation by a user,
  or re-activation.
- :func:`take_evictions` — the cycle's step: the inactive workloads holding quota, in key order,
  each with the Evicted reason, cause and message to evict it with.
- :func:`note_evicted` — the effect of an eviction decision on this module's state (live and
  replayed alike).
"""

from __future__ import annotations

from typing import NamedTuple

from events import conditions as cond
from events.cluster import ConditionType, EvictionReason
from events.messages import PendingReason
from services.core.state import State, WorkloadRecord

DEACTIVATED_MESSAGE = "The workload is deactivated"


class Eviction(NamedTuple):
    """How the cycle evicts an inactive workload."""

    rec: WorkloadRecord
    reason: EvictionReason
    underlying_cause: str
    message: str


def is_active(rec: WorkloadRecord) -> bool:
    return rec.active


def deactivate(state: State, rec: WorkloadRecord, cause: str, message: str) -> None:
    """The scheduler deactivates ``rec`` because of ``cause`` (a ``DeactivationCause``);
    ``message`` says why in Kueue's words ("exceeding the maximum number of re-queuing retries").
    A workload holding quota is evicted by the next cycle; a pending one leaves its queue now."""
    if not is_active(rec) or rec.finished:
        return
    _mark(rec, cause, message)
    if rec.admission is not None and not rec.evicting:
        state.deactivating[rec.key] = None
    elif rec.admission is None:
        _leave_queue(state, rec)


def observe_spec(state: State, rec: WorkloadRecord, was_active: bool) -> None:
    """``rec.obj`` is a newly applied spec; ``was_active`` is what the previous spec said. Called by
    ``fold`` before the record is queued again (an inactive record is not queued)."""
    now_active = rec.obj.active
    if was_active and not now_active:
        if rec.admission is not None and not rec.evicting and not rec.finished:
            state.deactivating[rec.key] = None
    elif not was_active and now_active:
        reactivate(state, rec)


def reactivate(state: State, rec: WorkloadRecord) -> None:
    """spec.active is true again: the workload starts over (no deactivation, no requeue state)."""
    state.deactivating.pop(rec.key, None)
    had_evicted = rec.deactivated or _evicted_inactive(rec)
    rec.deactivated = False
    rec.deactivation_cause = rec.deactivation_message = ""
    if rec.pending and had_evicted:
        rec.set_condition(cond.reactivated(state.now))
    if rec.pending_reason == PendingReason.INACTIVE:
        rec.pending_reason = ""
    rec.inadmissible = False


def take_evictions(state: State) -> list[Eviction]:
    """The inactive workloads that still hold quota and are not being evicted yet, in key order."""
    out: list[Eviction] = []
    for key in sorted(state.deactivating):
        rec = state.workloads.get(key)
        if rec is None or rec.admission is None or rec.evicting or is_active(rec):
            state.deactivating.pop(key, None)
            continue
        cause = rec.deactivation_cause if rec.deactivated else ""
        message = f"{DEACTIVATED_MESSAGE} due to {rec.deactivation_message}" if cause else DEACTIVATED_MESSAGE
        out.append(Eviction(rec, EvictionReason.DEACTIVATED, cause, message))
    return out


def note_evicted(state: State, rec: WorkloadRecord, *, deactivate: bool, cause: str, message: str) -> None:
    """An eviction was decided (live or replayed): if it deactivates, the record is inactive from now
    on; either way it no longer waits in ``state.deactivating``."""
    state.deactivating.pop(rec.key, None)
    if deactivate and is_active(rec):
        prefix = f"{DEACTIVATED_MESSAGE} due to "
        _mark(rec, cause, message.removeprefix(prefix) if cause else message)


def _mark(rec: WorkloadRecord, cause: str, message: str) -> None:
    rec.deactivated = True
    rec.deactivation_cause = cause
    rec.deactivation_message = message


def _leave_queue(state: State, rec: WorkloadRecord) -> None:
    if rec.queued_in and not state.index.dirty:
        queue = state.index.queues.get(rec.queued_in)
        if queue is not None:
            queue.remove(rec)
            queue.inadmissible.pop(rec.key, None)
    rec.queued_in = ""
    rec.pending_reason = PendingReason.INACTIVE


def _evicted_inactive(rec: WorkloadRecord) -> bool:
    evicted = rec.conditions.get(ConditionType.EVICTED)
    return evicted is not None and evicted.reason.startswith(EvictionReason.DEACTIVATED)

