"""All-or-nothing with timeouts: Kueue's ``waitForPodsReady``, requeuing back-off and maximum execution time.

Kueue's rules (``pkg/controller/core/workload_controller.go``, ``pkg/workload/workload.go``,
``pkg/scheduler/scheduler.go``), with time taken from the log (``state.now``):

- **PodsReady condition** (with waitForPodsReady on): ``False``/``WaitForStart`` when quota is
  reserved; ``True``/``Started`` when all pods are ready; ``False``/``WaitForRecovery`` when a
  started workload loses readiness; ``True``/``Recovered`` when it is ready again.
- **timeout**: an admitted workload whose PodsReady is still ``WaitForStart`` ``timeout`` after its
  ``Admitted`` condition is evicted with reason ``PodsReadyTimeout`` ("Exceeded the PodsReady
  timeout ns/name"); one in ``WaitForRecovery`` for ``recoveryTimeout`` likewise.
- **back-off**: such an eviction adds one to ``status.requeueState.count`` (n) and sets
  ``requeueAt = now + min(base * 2^(n-1), max)`` seconds. Kueue adds a small random jitter; kueuelog
  does not (decisions are a function of the log). The workload goes back to its queue only when
  ``requeueAt`` has passed (``Requeued=True``, ``BackoffFinished``); with
  ``requeuingStrategy.timestamp: Eviction`` (the default) it queues by its eviction time,
  with ``Creation`` by its creation time.
- **limit**: a timeout that would make n exceed ``backoffLimitCount`` deactivates the workload
  instead (``services.core.deactivation``, cause ``RequeuingLimitExceeded``).
- **blockAdmission**: while an admitted workload is not ready yet, nothing else is admitted
  (Kueue's ``waitForPodsReadyIfNeeded``); the head waits with "waiting for all admitted workloads
  to be in PodsReady condition".
- **maximumExecutionTimeSeconds**: a workload admitted for that long in total (this admission plus
  ``accumulatedPastExecutionTimeSeconds`` of earlier ones) is deactivated with cause
  ``MaximumExecutionTimeExceeded``. This holds with or without waitForPodsReady.

:func:`next_deadline` says when the next of these falls due, so a clock source can wake the
scheduler exactly then.
"""

from __future__ import annotations

from events import conditions as cond
from events.cluster import ConditionReason, ConditionType, DeactivationCause, EvictionReason
from events.messages import Condition
from services.core.state import State, WorkloadRecord, enqueue

NOT_READY = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"
WAITING_FOR_PODS_READY = "waiting for all admitted workloads to be in PodsReady condition"
REQUEUING_LIMIT = "exceeding the maximum number of re-queuing retries"
MAX_EXECUTION_TIME = "exceeding the maximum execution time"

WAIT_FOR_START, WAIT_FOR_RECOVERY = "WaitForStart", "WaitForRecovery"
STARTED, RECOVERED = "Started", "Recovered"


def backoff_seconds(base: int, cap: int, count: int) -> int:
    """The n-th back-off (n = ``count`` >= 1): ``min(base * 2^(n-1), cap)``, without jitter."""
    if count < 1:
        return 0
    # Doubling stops as soon as the cap is reached (no huge powers for a large count).
    wait = base
    for _ in range(count - 1):
        if wait >= cap:
            break
        wait *= 2
    return min(wait, cap)


def _pods_ready(reason: str, at: int) -> Condition:
    ready = reason in (STARTED, RECOVERED)
    message = READY if ready else (WAITING_FOR_RECOVERY if reason == WAIT_FOR_RECOVERY else NOT_READY)
    return cond.condition(ConditionType.PODS_READY, ready, reason, message, at)


# --- facts ---------------------------------------------------------------------------------------


def on_admitted(state: State, rec: WorkloadRecord) -> None:
    """Quota reserved: the workload waits for its pods to start."""
    if state.config.wait_for_pods_ready:
        rec.set_condition(_pods_ready(WAIT_FOR_START, state.now))


def on_readiness(state: State, rec: WorkloadRecord, *, ready: bool) -> None:
    """The cluster says all pods of the admitted ``rec`` are ready (or that one no longer is)."""
    old = rec.conditions.get(ConditionType.PODS_READY)
    if ready:
        recovering = old is not None and old.reason in (WAIT_FOR_RECOVERY, RECOVERED)
        rec.set_condition(_pods_ready(RECOVERED if recovering else STARTED, state.now))
    elif old is not None and cond.is_true(old):
        rec.set_condition(_pods_ready(WAIT_FOR_RECOVERY, state.now))
    elif old is None:
        rec.set_condition(_pods_ready(WAIT_FOR_START, state.now))


def on_evicted(state: State, rec: WorkloadRecord, reason: str) -> None:
    """An eviction was decided (live or replayed): time admitted so far is accumulated, and a
    PodsReady timeout counts toward the back-off."""
    admitted = rec.conditions.get(ConditionType.ADMITTED)
    if admitted is not None and cond.is_true(admitted):
        rec.past_execution_ms += max(0, state.now - admitted.last_transition_time)
    if reason != EvictionReason.PODS_READY_TIMEOUT:
        return
    cfg = state.config
    rec.requeue_count += 1
    wait = backoff_seconds(cfg.requeuing_backoff_base_seconds, cfg.requeuing_backoff_max_seconds, rec.requeue_count)
    rec.requeue_at = state.now + wait * 1000
    if cfg.requeuing_timestamp == "Eviction":
        rec.queue_time = state.now  # Kueue's GetQueueOrderTimestamp: the eviction's time


# --- the cycle's steps ---------------------------------------------------------------------------


def release(state: State) -> None:
    """Workloads whose back-off has passed go back to their queue (``Requeued=True``,
    ``BackoffFinished``). A change without a decision: ``apply_cycle`` runs it too."""
    for key in sorted(state.backing_off):
        rec = state.workloads.get(key)
        if rec is None or not rec.pending:
            del state.backing_off[key]
            continue
        if rec.requeue_at is not None and rec.requeue_at > state.now:
            continue
        del state.backing_off[key]
        rec.requeue_at = None
        rec.set_condition(cond.backoff_finished(state.now))
        rec.inadmissible = False
        enqueue(state, rec)


class Timeout:
    """An admitted workload to evict now, and how."""

    __slots__ = ("cause", "message", "reason", "rec")

    def __init__(self, rec: WorkloadRecord, reason: EvictionReason, message: str, cause: str = "") -> None:
        self.rec, self.reason, self.message, self.cause = rec, reason, message, cause


def _admitted_since(rec: WorkloadRecord) -> int | None:
    admitted = rec.conditions.get(ConditionType.ADMITTED)
    return admitted.last_transition_time if admitted is not None and cond.is_true(admitted) else None


def _ready_deadline(state: State, rec: WorkloadRecord) -> int | None:
    """When ``rec`` times out waiting for its pods (start or recovery), or None."""
    cfg = state.config
    if not cfg.wait_for_pods_ready:
        return None
    since = _admitted_since(rec)
    if since is None:
        return None
    ready = rec.conditions.get(ConditionType.PODS_READY)
    if ready is None or (ready.reason in (WAIT_FOR_START, ConditionReason.PODS_READY) and not cond.is_true(ready)):
        return since + cfg.wait_for_pods_ready_timeout_ms
    if ready.reason == WAIT_FOR_RECOVERY and not cond.is_true(ready):
        recovery = cfg.wait_for_pods_ready_recovery_timeout_ms
        return ready.last_transition_time + (cfg.wait_for_pods_ready_timeout_ms if recovery is None else recovery)
    return None


def _execution_deadline(rec: WorkloadRecord) -> int | None:
    limit = rec.obj.maximum_execution_time_seconds
    since = _admitted_since(rec)
    if limit is None or since is None:
        return None
    return since + max(0, limit * 1000 - rec.past_execution_ms)


def _watched(state: State) -> list[WorkloadRecord]:
    """Admitted, active workloads not being evicted, in key order; none when no timer can run on
    them (no waitForPodsReady, no maximumExecutionTimeSeconds seen), so that cycles cost nothing more."""
    if not (state.config.wait_for_pods_ready or state.timed):
        return []
    out = []
    for cq_name in sorted(state.index.admitted):
        for key in state.index.admitted[cq_name]:
            rec = state.workloads[key]
            if not rec.evicting and rec.active and not rec.finished:
                out.append(rec)
    out.sort(key=lambda r: r.key)
    return out


def due(state: State) -> list[Timeout]:
    """Everything that times out at ``state.now``: maximum execution times first (a deactivation
    wins), then PodsReady timeouts (over the back-off limit: a deactivation)."""
    out: list[Timeout] = []
    for rec in _watched(state):
        limit = _execution_deadline(rec)
        if limit is not None and limit <= state.now:
            out.append(Timeout(rec, EvictionReason.DEACTIVATED, MAX_EXECUTION_TIME,
                               DeactivationCause.MAXIMUM_EXECUTION_TIME_EXCEEDED))
            continue
        deadline = _ready_deadline(state, rec)
        if deadline is None or deadline > state.now:
            continue
        cap = state.config.requeuing_backoff_limit_count
        if cap is not None and rec.requeue_count + 1 > cap:
            out.append(Timeout(rec, EvictionReason.DEACTIVATED, REQUEUING_LIMIT,
                               DeactivationCause.REQUEUING_LIMIT_EXCEEDED))
        else:
            out.append(Timeout(rec, EvictionReason.PODS_READY_TIMEOUT,
                               f"Exceeded the PodsReady timeout {rec.key}"))
    return out


def blocks_admission(state: State) -> bool:
    """blockAdmission: an admitted workload is not ready yet (Kueue's ``PodsReadyForAllAdmittedWorkloads``)."""
    cfg = state.config
    if not (cfg.wait_for_pods_ready and cfg.wait_for_pods_ready_block_admission):
        return False
    for rec in _watched(state):
        ready = rec.conditions.get(ConditionType.PODS_READY)
        if not cond.is_true(ready):
            return True
    return False


def deadlines_of(state: State, rec: WorkloadRecord) -> list[tuple[str, int]]:
    """(what, when) for every timer running on ``rec``, for ``explain``."""
    out: list[tuple[str, int]] = []
    if rec.admission is not None and not rec.evicting and rec.active:
        ready = _ready_deadline(state, rec)
        if ready is not None:
            out.append(("PodsReady timeout: evicted (PodsReadyTimeout) if its pods are not all ready by", ready))
        limit = _execution_deadline(rec)
        if limit is not None:
            out.append(("maximumExecutionTimeSeconds: deactivated at", limit))
    if rec.pending and rec.requeue_at is not None:
        out.append((f"backing off after PodsReady timeout #{rec.requeue_count}: queued again at", rec.requeue_at))
    return out


def next_deadline(state: State) -> int | None:
    """The earliest time after ``state.now`` at which a timeout, a maximum execution time or a
    back-off falls due (None: nothing is waiting): when a clock source should wake the scheduler."""
    times: list[int] = []
    for rec in _watched(state):
        times.extend(t for t in (_execution_deadline(rec), _ready_deadline(state, rec)) if t is not None)
    for key in state.backing_off:
        at = state.workloads[key].requeue_at if key in state.workloads else None
        if at is not None:
            times.append(at)
    later = [t for t in times if t > state.now]
    return min(later) if later else None
