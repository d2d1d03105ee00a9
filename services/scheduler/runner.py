"""The scheduler service's runner: leadership, recovery, stepping, riding out log outages."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from events.envelope import Topics
from events.messages import AnyDecision, CycleCompleted, MarkPending
from services.runtime.log import Log, LogError
from services.runtime.supervise import (
    POLL_SECONDS,
    Backoff,
    Bell,
    ServiceStatus,
    lead,
    mark_up,
    pace,
    release,
    ride_out,
    still_leading,
)
from services.scheduler.deadlines import DeadlineTicker
from services.scheduler.service import BACKLOG_PER_STEP, SNAPSHOT_EVENTS_PER_WORKLOAD, Scheduler

if TYPE_CHECKING:
    from services.scheduler.metrics import SchedulerMetrics


IDLE_SWEEP_PAUSE_MAX: Final = 0.1
"""The longest pause after a step that decided nothing but pending marks (:func:`idle_sweep_pause`)."""
IDLE_SWEEP_PAUSE_FACTOR: Final = 4
"""That pause, as a multiple of the step's own time."""


def idle_sweep_pause(decisions: Sequence[AnyDecision], cycles: Sequence[CycleCompleted], step_seconds: float) -> float:
    """How long the live scheduler waits before its next step, so that events gather meanwhile.

    Every release of quota sends its cohort's parked workloads back (Kueue's
    ``QueueInadmissibleWorkloads``), and a step then retries them one head per ClusterQueue per
    cycle. A step whose cycles tried heads and admitted, evicted or placed nothing (pending marks
    at most) only parked them again; stepping again at once, each release that trickles in would
    pay for its own sweep of the cohort. After such a step the scheduler waits
    :data:`IDLE_SWEEP_PAUSE_FACTOR` times as long as the step took (sweeping is then at most a
    fifth of its time), up to :data:`IDLE_SWEEP_PAUSE_MAX`. A step that decided anything else
    goes on at once; a cheap one pauses briefly (a 2 ms step, 8 ms); a step that tried no head (it
    folded reports, or its cycle found every queue empty or parked) does not pause. Through the
    kube-apiserver at Kueue's baseline, where events trickle, this halved the scheduler's CPU,
    cut the broker's by a quarter and the time to admission with them (docs/benchmarks.md)."""
    if not any(c.heads for c in cycles) or any(not isinstance(d, MarkPending) for d in decisions):
        return 0.0
    return min(IDLE_SWEEP_PAUSE_FACTOR * step_seconds, IDLE_SWEEP_PAUSE_MAX)


StepHook = Callable[[Scheduler, int | None], None]
"""Called after each committed live step of the scheduler with the events it folded (metrics;
0 for a step that went on with cycles cut short before), and once after each recovery with
None (``last_decisions`` and ``last_cycles`` empty)."""


def observe_scheduler(metrics: SchedulerMetrics) -> StepHook:
    """The hook that feeds :class:`SchedulerMetrics` from each committed step. The lag is only
    asked of the log after recovery and after a full batch: a shorter one read everything there
    was. Gauges are refreshed at once only after recovery; steps leave that to the metrics'
    own pace (a sweep of parked workloads can be hundreds of short steps, and the gauges walk
    every workload)."""

    def hook(scheduler: Scheduler, events: int | None) -> None:
        lag = 0
        if events is None or events >= max(scheduler.batch_size, scheduler.backlog_per_step):
            lag = max(0, scheduler.log.end_offset(scheduler.topics.cluster_events) - scheduler.next_input)
        metrics.observe(scheduler.last_decisions, scheduler.last_cycles, scheduler.state,
                        events_folded=events or 0, log_lag=lag)
        if events is None:
            metrics.refresh(scheduler.state)  # just recovered: the gauges show the recovered state at once

    return hook


def _live(log: Log, topics: Topics) -> Scheduler:
    """A scheduler as a live service steps: the waiting backlog folded before its cycles,
    snapshots spaced by the state's size."""
    return Scheduler(log, topics=topics, backlog_per_step=BACKLOG_PER_STEP, commit_in_background=True,
                     snapshot_per_workload=SNAPSHOT_EVENTS_PER_WORKLOAD)


async def run_scheduler(log: Log, stop: asyncio.Event, *, topics: Topics | None = None, bell: Bell | None = None,
                        poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                        on_step: StepHook | None = None, long_poll: bool = False,
                        wall_clock: Callable[[], int] | None = None, cluster: str = "") -> Scheduler:
    """The single writer: becomes leader (embedded log: a file lock; Kafka: the election, where a
    standby waits), recovers, then steps until ``stop``. When the log fails in a way that may
    pass (a broker restarting), the in-memory state may be ahead of what was committed, so the
    scheduler is rebuilt from the log once it is reachable again. ``status`` follows leadership
    and recovery; ``on_step`` is called after every live step that committed something.

    ``long_poll`` (a scheduler alone in its process, on Kafka): when idle, wait in a fetch for the
    next cluster event rather than sleeping ``poll_seconds``, so an event is folded as soon as it
    is committed (in a shared process the Bell wakes it instead, and a fetch would hold up the
    others' reads of the same topic).

    ``wall_clock`` (real time): when the state's next deadline (a PodsReady timeout, a back-off,
    a maximum execution time) comes, a ``ClockTicked`` is appended to cluster-events
    (:class:`~services.scheduler.deadlines.DeadlineTicker`), so the next step folds it and decides.
    Simulated time leaves that to its driver."""
    bell = bell or Bell()
    topics = topics or Topics()
    scheduler = _live(log, topics)
    waiter = log.waiter if long_poll else None
    deadlines = DeadlineTicker(log, wall_clock, topics=topics, cluster=cluster) if wall_clock is not None else None
    if not await lead(log, "scheduler", stop):
        return scheduler
    if status is not None:
        status.leading = True
    backoff = Backoff()
    try:
        fresh = True
        while not stop.is_set():
            try:
                if fresh:
                    scheduler = _live(log, topics)
                    scheduler.recover()
                    fresh = False
                    mark_up(status, "scheduler")
                    if on_step is not None:
                        on_step(scheduler, None)  # nothing written yet: gauges of the recovered state
                started = time.monotonic()
                did = scheduler.step()
                spent = time.monotonic() - started
                if not did:
                    scheduler.settle()  # nothing new to decide: the last step's commit is waited for now
                ticked = deadlines is not None and deadlines.tick(scheduler.state)
            except LogError as e:
                fresh = True
                with contextlib.suppress(LogError):
                    scheduler.settle()  # settled either way before the state is rebuilt from the log
                await ride_out("scheduler", e, backoff, stop, status)
                continue
            backoff.reset()
            mark_up(status, "scheduler")  # a heartbeat too: a part that stops beating shows on /readyz
            if did and on_step is not None:
                on_step(scheduler, scheduler.last_events)
            still_leading(log, "scheduler")
            if ticked:
                continue  # the tick is the next input: step again at once
            if not did and waiter is not None:
                await waiter.wait_for_records(topics.cluster_events, scheduler.next_input, poll_seconds)
            else:
                await pace(bell, did, poll_seconds)
                if did and (pause := idle_sweep_pause(scheduler.last_decisions, scheduler.last_cycles, spent)) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), pause)
        return scheduler
    finally:
        with contextlib.suppress(LogError):
            scheduler.settle()  # a step still committing ends before the leadership does
        release(log, "scheduler")


