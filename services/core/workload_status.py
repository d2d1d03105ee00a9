"""Status-only news: a Workload's admission checks and ``status.requeueState`` as they change.

Kueue's controllers write a Workload's ``status.admissionChecks`` each time a check's controller
reports (Pending with a message or ETA, Ready before the others, Retry, Rejected) and its
``status.requeueState`` when a back-off starts or ends, not only at reservation, eviction and
admission. The cycle tells the actuator the same with :class:`UpdateWorkloadStatus`, a decision
that changes no admission outcome: the state changes came from the events folded (a controller's
report, the clock), so replay changes nothing with it, and ``replay --verify`` re-derives it
from the same state (pure: no clock, no I/O).

When one is emitted (each from a state the log determines):

- a workload holding quota whose checks changed and call for nothing else (:func:`news`);
- just before the eviction a Retry or Rejected check calls for: the check's state as reported;
- right after an eviction that changed ``requeueState`` (a PodsReady timeout's count and
  ``requeueAt``, a Retry's back-off: :func:`requeue_state`);
- when a back-off ends and ``requeueAt`` is cleared (Kueue's workload controller).
"""

from __future__ import annotations

from events import objects as o
from events.manifests import format_time
from events.messages import UpdateWorkloadStatus
from services.core.state import State, WorkloadRecord

RequeueState = tuple[int, int | None]
"""(count, requeueAt in ms or None)."""


def requeue_state(rec: WorkloadRecord) -> RequeueState:
    return rec.requeue_count, rec.requeue_at


def checks_of(rec: WorkloadRecord) -> tuple[o.AdmissionCheckState, ...]:
    return tuple(c for _, c in sorted(rec.checks.items()))


def news(rec: WorkloadRecord) -> bool:
    """Whether a workload whose checks changed (and whose verdict is nothing) has status to tell:
    it holds quota, or waits out a back-off, with checks."""
    return bool(rec.checks) and not rec.finished


def backing_off(state: State) -> list[str]:
    """The workloads waiting for ``requeueAt`` before ``podsready.release`` (sorted)."""
    return sorted(k for k in state.backing_off
                  if k in state.workloads and state.workloads[k].requeue_at is not None)


def released(state: State, before: list[str]) -> list[WorkloadRecord]:
    """Of ``before`` (:func:`backing_off`), those whose ``requeueAt`` the release cleared."""
    out = []
    for key in before:
        rec = state.workloads.get(key)
        if rec is not None and rec.requeue_at is None and not rec.finished:
            out.append(rec)
    return out


def decision(rec: WorkloadRecord, *, id: str, cycle: int, time: int, cluster_queue: str) -> UpdateWorkloadStatus:
    return UpdateWorkloadStatus(
        id=id, cycle=cycle, time=time, namespace=rec.obj.namespace, name=rec.obj.name, cluster_queue=cluster_queue,
        admission_checks=checks_of(rec), requeue_count=rec.requeue_count, requeue_at=rec.requeue_at,
    )


def text(d: UpdateWorkloadStatus) -> str:
    """The decision in words (``tail``, the web view)."""
    parts = [f"{c.name} {c.state}" + (f" ({c.message})" if c.message else "")
             + (f" retry {c.retry_count}" if c.retry_count else "") for c in d.admission_checks]
    if d.requeue_at is not None or d.requeue_count:
        count = f" count {d.requeue_count}" if d.requeue_count else ""
        at = f" requeueAt {format_time(d.requeue_at)}" if d.requeue_at is not None else ""
        parts.append(f"requeueState{count}{at}")
    elif not d.admission_checks:
        parts.append("requeueAt cleared")
    return "status: " + "; ".join(parts)
