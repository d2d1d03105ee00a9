"""Several services in one process, and the one loop that steps them.

:class:`Loop` is the round robin of scheduler, actuator and simulated cluster in
simulated time: step the three; when none did anything (a scheduler step whose cycles decided
nothing counts as nothing), let the earliest time
source act (:func:`advance_time`); when nothing advances either, the run is
finished (or some other consumer of the log is behind). :func:`drive` runs it
in the calling thread, deterministic, with a hook between rounds (the demo
refreshes its view and paces there); :func:`drive_until_idle` is that for tests
and benches; :func:`run_all` in simulated time runs it as one asyncio task that
yields between rounds, rides out log outages and stops on ``stop``. In real time
:func:`run_all` runs the services (and ticker and arrivals) as tasks that wake
each other through one Bell: time then comes from the wall clock, not from the
loop.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from events.envelope import Topics
from services.actuator.loop import Actuator
from services.actuator.runner import run_actuator
from services.actuator.sim_port import SimClusterPort
from services.core.podsready import next_deadline
from services.runtime.clock import ClockMode, wall_clock_ms
from services.runtime.log import Log, LogError
from services.runtime.supervise import (
    POLL_SECONDS,
    Backoff,
    Bell,
    LeadershipLost,
    ServiceStatus,
    lead,
    mark_up,
    release,
    ride_out,
    sleep_unless,
    still_leading,
)
from services.scheduler.deadlines import tick_envelope
from services.scheduler.runner import StepHook, run_scheduler
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig
from services.simcluster.runner import advance_time, finished, run_arrivals, run_simcluster
from services.watcher.ticker import run_ticker


def step_actuator(actuator: Actuator[SimClusterPort]) -> int:
    """The loop's one call of the actuator: its step is a coroutine, which the simulated cluster's
    port lets run to its end here, in the calling thread."""
    return actuator.step_now()


class NotIdle(RuntimeError):
    pass


class Round(enum.Enum):
    BUSY = "busy"  # a service did something
    ADVANCED = "advanced"  # nobody had anything to do: simulated time moved on
    FINISHED = "finished"  # nothing runs, nothing will arrive, every consumer is at its end
    STALLED = "stalled"  # nothing to step, yet some consumer is behind: another process shares the log


@dataclass
class Loop:
    """Scheduler, actuator and simulated cluster (in simulated time) over one log, stepped in turn."""

    scheduler: Scheduler
    actuator: Actuator[SimClusterPort]
    simcluster: SimCluster
    arrivals: ArrivalStream | None = None

    @classmethod
    def recovered(cls, log: Log, *, topics: Topics, config: SimConfig, arrivals: ArrivalStream | None = None,
                  cut_short_steps: bool = True) -> Loop:
        """The three services, each recovered from the log."""
        scheduler = Scheduler(log, topics=topics, cut_short_steps=cut_short_steps)
        scheduler.recover()
        actuator = Actuator(log, SimClusterPort(topics, config.cluster), topics=topics)
        actuator.recover()
        sim = SimCluster.simulated(log, config, topics)
        sim.recover()
        return cls(scheduler, actuator, sim, arrivals)

    def round(self) -> tuple[Round, int]:
        """One turn of each; then, if none did anything, time moves on. Returns what happened and
        the scheduler's part (events folded, or cycles run)."""
        by_scheduler = self.scheduler.step()
        did = step_actuator(self.actuator) + self.simcluster.step()
        if did or self._scheduler_moved(by_scheduler):
            return Round.BUSY, by_scheduler
        if self._deadline_first() or advance_time(self.simcluster, self.arrivals):
            return Round.ADVANCED, by_scheduler
        if by_scheduler:
            return Round.BUSY, by_scheduler  # its cycles go on, and nothing else is left to happen
        return (Round.FINISHED if finished(self.simcluster, self.arrivals) else Round.STALLED), 0

    def _scheduler_moved(self, by_scheduler: int) -> bool:
        """Whether the scheduler's step was progress the clock must wait for: it read events, or its
        cycles decided something. A step that only ran cycles deciding nothing (continuing a step
        cut short) lets simulated time move on, as Kueue's scheduler backs off in real time while
        the cluster goes on: however its cycles turn, time does not stand still."""
        return by_scheduler > 0 and (self.scheduler.last_events > 0 or bool(self.scheduler.last_decisions))

    def _deadline_first(self) -> bool:
        """Simulated time, system idle: if the scheduler's next deadline (waitForPodsReady, back-off,
        maximum execution time) comes before anything the cluster or the arrivals would report, jump
        the clock there with a tick (``services.scheduler.deadlines``)."""
        deadline = next_deadline(self.scheduler.state)
        sim = self.simcluster
        other = _earliest(sim.next_due(), self.arrivals.next_due() if self.arrivals is not None else None)
        if deadline is None or (other is not None and other <= deadline) or not sim.system_idle():
            return False
        sim.log.append(sim.topics.cluster_events, [tick_envelope(deadline, sim.config.cluster)])
        return True


def _earliest(*times: int | None) -> int | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


class Rounds(Protocol):
    """What :func:`drive` steps: a :class:`Loop`, or the MultiKueue demo's (``services.app.mcdemo``)."""

    def round(self) -> tuple[Round, int]: ...


def drive(loop: Rounds, *, between: Callable[[Round], None] | None = None, max_rounds: int | None = None) -> int:
    """Round after round until nothing is left to do; returns the rounds. ``between`` is called
    after every round that did something (busy, or time advanced)."""
    rounds = 0
    while max_rounds is None or rounds < max_rounds:
        rounds += 1
        happened, _ = loop.round()
        if happened is Round.FINISHED:
            return rounds
        if happened is Round.STALLED:
            # Every step was empty yet some consumer is behind: someone else shares this log.
            raise NotIdle("nothing to step, but the system is not idle: is another process consuming?")
        if between is not None:
            between(happened)
    raise NotIdle(f"still busy after {max_rounds} rounds")


async def stop_when(done: asyncio.Event, stop: asyncio.Event, bell: Bell) -> None:
    """Set ``stop`` (and wake everyone) once ``done`` is set, or return when ``stop`` is."""
    waiters = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(stop.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    stop.set()
    bell.ring()


@dataclass
class RunResult:
    scheduler: Scheduler
    actuator: Actuator[SimClusterPort]
    simcluster: SimCluster
    done: bool  # stopped because nothing was left (rather than by ``stop``)


# Many arguments: keyword-only options with defaults: tests and benches pick a few.
async def run_all(log: Log, *, clock: ClockMode = "simulated", stop: asyncio.Event | None = None,  # noqa: PLR0913
                  arrivals: ArrivalStream | None = None, config: SimConfig | None = None,
                  topics: Topics | None = None, tick_interval_ms: int = 1000,
                  until_done: bool | None = None, wall_clock: Callable[[], int] = wall_clock_ms,
                  poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                  on_step: StepHook | None = None) -> RunResult:
    """Scheduler, actuator, simulated cluster (and in real mode ticker and arrivals) in one process,
    as the leader of ``scheduler`` (every service here writes as it), until ``stop`` — or, by
    default in simulated mode, until nothing is left to do. Every part reports to ``status`` (one
    part down or stuck makes the process unready); ``on_step`` is the scheduler's (see
    :func:`run_scheduler`). One part failing for good stops them all and raises its error."""
    topics = topics or Topics()
    config = config or SimConfig()
    stop = stop or asyncio.Event()
    if until_done is None:
        until_done = clock == "simulated"
    if not await lead(log, "scheduler", stop):
        raise LeadershipLost("stopped before becoming the leader")
    if clock == "simulated":
        return await _run_loop(log, stop, topics=topics, config=config, arrivals=arrivals,
                               until_done=until_done, poll_seconds=poll_seconds, status=status, on_step=on_step)
    done = asyncio.Event()
    bell = Bell()
    common: dict[str, Any] = {"topics": topics, "bell": bell, "poll_seconds": poll_seconds}
    coros: list[Coroutine[Any, Any, object]] = [
        run_scheduler(log, stop, status=status, on_step=on_step, wall_clock=wall_clock, cluster=config.cluster,
                      **common),
        run_actuator(log, stop, port=SimClusterPort(topics, config.cluster), status=status, **common),
        run_simcluster(log, stop, clock=clock, config=config, arrivals=arrivals, done=done if until_done else None,
                       wall_clock=wall_clock, status=status, **common),
        run_ticker(log, stop, interval_ms=tick_interval_ms, topics=topics, cluster=config.cluster,
                   wall_clock=wall_clock, bell=bell),
    ]
    if arrivals is not None:
        coros.append(run_arrivals(arrivals, stop, wall_clock=wall_clock, bell=bell, poll_seconds=poll_seconds))
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(stop_when(done, stop, bell))
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as eg:
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None  # one service failed: say which, not "unhandled errors in a TaskGroup"
        raise
    scheduler, actuator, sim = (t.result() for t in tasks[:3])
    assert isinstance(scheduler, Scheduler) and isinstance(actuator, Actuator) and isinstance(sim, SimCluster)
    return RunResult(scheduler, actuator, sim, done.is_set())


async def _run_loop(log: Log, stop: asyncio.Event, *, topics: Topics, config: SimConfig,
                    arrivals: ArrivalStream | None, until_done: bool,
                    poll_seconds: float, status: ServiceStatus | None, on_step: StepHook | None) -> RunResult:
    """``run_all`` in simulated time: the :class:`Loop` as one task, yielding between rounds. A log
    error that may pass is waited out, and the three are rebuilt from the log (the scheduler's
    state may be ahead of what was committed). Holds ``scheduler`` (taken by the caller) until it
    returns."""
    if status is not None:
        status.leading = True
    backoff = Backoff()
    loop: Loop | None = None
    done = False
    try:
        while not stop.is_set():
            try:
                if loop is None:
                    loop = Loop.recovered(log, topics=topics, config=config, arrivals=arrivals)
                    mark_up(status, "all")
                    if on_step is not None:
                        on_step(loop.scheduler, None)  # nothing written yet: gauges of the recovered state
                happened, by_scheduler = loop.round()
            except LogError as e:
                loop = None
                await ride_out("all", e, backoff, stop, status)
                continue
            backoff.reset()
            mark_up(status, "all")
            if by_scheduler and on_step is not None:
                on_step(loop.scheduler, loop.scheduler.last_events)
            still_leading(log, "scheduler")
            if happened is Round.FINISHED and until_done:
                done = True
                stop.set()  # as in real time: whoever else waits on ``stop`` ends too
                break
            if happened in (Round.FINISHED, Round.STALLED):
                await sleep_unless(stop, poll_seconds)  # another process may add to the log, or catch up
            else:
                await asyncio.sleep(0)  # let the event loop run (signals, ``stop``) between rounds
    finally:
        release(log, "scheduler")
    if loop is None:  # stopped while the log was unavailable: unrecovered services, as they stand
        loop = Loop(Scheduler(log, topics=topics), Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                    SimCluster.simulated(log, config, topics))
    return RunResult(loop.scheduler, loop.actuator, loop.simcluster, done)


@dataclass
class DriveResult:
    scheduler: Scheduler
    actuator: Actuator[SimClusterPort]
    simcluster: SimCluster
    rounds: int


def drive_live(loop: Rounds, redraw: Callable[[], None], *, pace: float = 0.0,
               each: Callable[[], None] | None = None) -> None:
    """:func:`drive` for a live view: ``each`` after every round that did something, a ``pace``
    of wall time after each advance of simulated time, ``redraw`` at most every 0.1 s of wall time
    and once at the end (a redraw interval, not the time of day)."""
    import time

    last_draw = 0.0

    def between(happened: Round) -> None:
        nonlocal last_draw
        if each is not None:
            each()
        if happened is Round.ADVANCED and pace:
            time.sleep(pace)
        now = time.monotonic()
        if now - last_draw > 0.1:
            redraw()
            last_draw = now

    try:
        drive(loop, between=between)
    except NotIdle as e:
        raise RuntimeError("the demo's services stalled: nothing to step but not idle") from e
    redraw()


def drive_until_idle(log: Log, *, topics: Topics | None = None, config: SimConfig | None = None,
                     arrivals: ArrivalStream | None = None, max_rounds: int = 1_000_000) -> DriveResult:
    """Step scheduler, actuator and simulated cluster round-robin in simulated time until
    nothing is left to do; deterministic (no asyncio, no wall clock, no threads)."""
    loop = Loop.recovered(log, topics=topics or Topics(), config=config or SimConfig(), arrivals=arrivals,
                          cut_short_steps=False)
    rounds = drive(loop, max_rounds=max_rounds)
    return DriveResult(loop.scheduler, loop.actuator, loop.simcluster, rounds)
