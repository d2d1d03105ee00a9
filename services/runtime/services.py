"""Running the services: asyncio runners, one process running them all, and a sync driver.

Each service is a synchronous state machine over the log (``Scheduler``,
``Actuator``, ``SimCluster``, ``Ticker``, ``ArrivalStream``); this module owns
*when* they step. The runners poll the log (the embedded log has no
notifications) and, within one process, wake each other through a
:class:`Bell` as soon as one of them commits, so that hand-offs do not wait
for a poll interval.

Time. In real mode the wall clock (:func:`wall_clock_ms`, injected everywhere
it is used) drives the simulated cluster's finishes, the ticker and the
arrival stream. In simulated mode nothing reads the wall clock: when the whole
system is idle, :func:`advance_time` lets the earliest time source act — the
simulated cluster's next report or the arrival stream's next object (on a tie
the cluster goes first: a finish frees quota before the next submission is
seen, as in a real cluster where both happen "at once"). Only one task ever
calls it, so two time sources can never both jump.

:func:`drive_until_idle` steps scheduler, actuator and simulated cluster
round-robin in the calling thread — deterministic, for tests and
simulate-through-services — until nothing is left to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import structlog

from events.envelope import Topics
from services.actuator.actuator import ActuationPort, Actuator, SimClusterPort
from services.runtime.log import Log, LogError
from services.schedulerd import Scheduler
from services.simcluster.cluster import SimCluster, SimConfig
from services.watcher.seed import ArrivalStream
from services.watcher.ticker import Ticker

if TYPE_CHECKING:
    from services.runtime.metrics import SchedulerMetrics

_log = structlog.get_logger(__name__)

ClockMode = Literal["simulated", "real"]


class LeadershipLost(RuntimeError):
    """Another instance leads now: this one must stop writing (the process exits, and a
    supervisor restarts it as a standby)."""


POLL_SECONDS = 0.05


@dataclass
class ServiceStatus:
    """What a service's ``/readyz`` says, written by its runner: ready once it leads (a standby
    waits for its role's election; a service without one leads from the start) and has
    recovered its position from the log; not ready again while the log is unavailable."""

    name: str
    leading: bool = False
    recovered: bool = False
    problem: str = ""  # why it is not ready although it leads and recovered (the log is unavailable)

    @property
    def ready(self) -> bool:
        return self.leading and self.recovered and not self.problem

    @property
    def reason(self) -> str:
        if not self.leading:
            return f"{self.name}: standby, waiting for the leadership"
        if not self.recovered:
            return f"{self.name}: recovering"
        if self.problem:
            return f"{self.name}: {self.problem}"
        return f"{self.name}: ready"

    def up(self) -> None:
        self.recovered, self.problem = True, ""

    def down(self, problem: str) -> None:
        self.problem = problem


def _up(status: ServiceStatus | None) -> None:
    if status is not None:
        status.up()


def _down(status: ServiceStatus | None, e: LogError) -> None:
    if status is not None:
        status.down(f"log unavailable: {e}")


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
        if events is None or events >= scheduler.batch_size:
            lag = max(0, scheduler.log.end_offset(scheduler.topics.cluster_events) - scheduler.next_input)
        metrics.observe(scheduler.last_decisions, scheduler.last_cycles, scheduler.state,
                        events_folded=events or 0, log_lag=lag)
        if events is None:
            metrics.refresh(scheduler.state)  # just recovered: the gauges show the recovered state at once

    return hook


def wall_clock_ms() -> int:
    """The only wall clock of the services: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


@runtime_checkable
class SupportsExclusive(Protocol):
    def exclusive(self, name: str) -> None: ...

    def release(self, name: str) -> None: ...


class Bell:
    """Wakes the runners of one process when one of them committed something."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def ring(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seconds: float) -> None:
        """Until the next ring or ``seconds``, whichever comes first."""
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)


async def _pace(bell: Bell, did: int, idle_seconds: float) -> None:
    if did:
        bell.ring()
        await asyncio.sleep(0)  # let the others run between busy steps
    else:
        await bell.wait(idle_seconds)


# --- the runners --------------------------------------------------------------------------------


@runtime_checkable
class SupportsLeadership(Protocol):
    """A log whose writers elect a leader (Kafka): standbys wait in ``acquire``."""

    async def acquire(self, name: str, stop: asyncio.Event | None = None) -> bool: ...

    def holds(self, name: str) -> bool: ...

    def release(self, name: str) -> None: ...


@runtime_checkable
class SupportsWaiting(Protocol):
    """A log whose readers can wait for new records without polling (Kafka: a long-poll fetch)."""

    async def wait_for_records(self, topic: str, start: int, timeout: float) -> bool: ...


class Backoff:
    """Capped exponential back-off between attempts to reach an unavailable log."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.current = first, cap, first

    def next(self) -> float:
        wait, self.current = self.current, min(self.cap, self.current * 2)
        return wait

    def reset(self) -> None:
        self.current = self.first


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _unavailable(service: str, e: LogError, wait: float) -> None:
    _log.warning("log unavailable; will recover from it", service=service, error=str(e), retry_in_s=round(wait, 2))


async def lead(log: Log, name: str, stop: asyncio.Event) -> bool:
    """Become the single writer ``name``: the embedded log's file lock (a second one fails at once
    with WriterLockHeld), or Kafka's election (a standby waits here until the leader is gone)."""
    if isinstance(log, SupportsLeadership):
        return await log.acquire(name, stop)
    if isinstance(log, SupportsExclusive):
        log.exclusive(name)
    return True


def still_leading(log: Log, name: str, stop: asyncio.Event | None = None) -> None:
    """Raise LeadershipLost when another instance leads ``name`` now (not once ``stop`` is set: a
    runner sharing the log may have released the role already)."""
    if stop is not None and stop.is_set():
        return
    if isinstance(log, SupportsLeadership) and not log.holds(name):
        raise LeadershipLost(f"lost the {name} leadership to another instance; stopping")


async def ride_out(service: str, e: LogError, backoff: Backoff, stop: asyncio.Event,
                   status: ServiceStatus | None = None) -> None:
    """A log error in ``service``'s step: a final one is raised again; one that may pass (a broker
    restarting) marks the service down, is logged, and waits out the back-off or ``stop``."""
    if not e.retriable:
        raise e
    wait = backoff.next()
    _unavailable(service, e, wait)
    _down(status, e)
    await sleep_unless(stop, wait)


async def run_scheduler(log: Log, stop: asyncio.Event, *, topics: Topics | None = None, bell: Bell | None = None,
                        poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                        on_step: StepHook | None = None, long_poll: bool = False) -> Scheduler:
    """The single writer: becomes leader (embedded log: a file lock; Kafka: the election, where a
    standby waits), recovers, then steps until ``stop``. When the log fails in a way that may
    pass (a broker restarting), the in-memory state may be ahead of what was committed, so the
    scheduler is rebuilt from the log once it is reachable again. ``status`` follows leadership
    and recovery; ``on_step`` is called after every live step that committed something.

    ``long_poll`` (a scheduler alone in its process, on Kafka): when idle, wait in a fetch for the
    next cluster event rather than sleeping ``poll_seconds``, so an event is folded as soon as it
    is committed (in a shared process the Bell wakes it instead, and a fetch would hold up the
    others' reads of the same topic)."""
    bell = bell or Bell()
    topics = topics or Topics()
    scheduler = Scheduler(log, topics=topics)
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
                    scheduler = Scheduler(log, topics=topics)
                    scheduler.recover()
                    fresh = False
                    _up(status)
                    if on_step is not None:
                        on_step(scheduler, None)  # nothing written yet: gauges of the recovered state
                did = scheduler.step()
            except LogError as e:
                fresh = True
                await ride_out("scheduler", e, backoff, stop, status)
                continue
            backoff.reset()
            if did and on_step is not None:
                on_step(scheduler, scheduler.last_events)
            still_leading(log, "scheduler")
            if not did and long_poll and isinstance(log, SupportsWaiting):
                await log.wait_for_records(topics.cluster_events, scheduler.next_input, poll_seconds)
            else:
                await _pace(bell, did, poll_seconds)
        return scheduler
    finally:
        if isinstance(log, SupportsExclusive | SupportsLeadership):
            log.release("scheduler")


async def run_actuator(log: Log, stop: asyncio.Event, *, port: ActuationPort | None = None,
                       topics: Topics | None = None, bell: Bell | None = None,
                       poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                       long_poll: bool = False) -> Actuator:
    """Applies decisions until ``stop``. ``long_poll`` (a log of its own, on Kafka): when idle, wait
    in a fetch for the next decision instead of sleeping up to ``poll_seconds``, as the scheduler does."""
    topics = topics or Topics()
    bell = bell or Bell()
    actuator = Actuator(log, port or SimClusterPort(topics), topics=topics)
    backoff = Backoff()
    while not stop.is_set():
        try:
            did = actuator.step()  # recovers first when its view may be stale (start, a failed commit)
        except LogError as e:
            await ride_out("actuator", e, backoff, stop, status)
            continue
        backoff.reset()
        _up(status)
        if not did and long_poll and isinstance(log, SupportsWaiting):
            await log.wait_for_records(topics.decisions, actuator.next_offset, poll_seconds)
        else:
            await _pace(bell, did, poll_seconds)
    return actuator


def advance_time(sim: SimCluster, arrivals: ArrivalStream | None) -> int:
    """Simulated mode, system idle: let the earliest time source act; returns events appended."""
    t_sim = sim.next_due()
    t_arr = arrivals.next_due() if arrivals is not None else None
    if arrivals is not None and t_arr is not None and (t_sim is None or t_arr < t_sim):
        return arrivals.release_until(t_arr) if sim.system_idle() else 0
    return sim.jump()


def finished(sim: SimCluster, arrivals: ArrivalStream | None) -> bool:
    """Nothing runs, nothing will arrive, every consumer is at the end of its input."""
    return (arrivals is None or arrivals.exhausted) and sim.done()


async def run_simcluster(log: Log, stop: asyncio.Event, *, clock: ClockMode = "simulated",
                         config: SimConfig | None = None, topics: Topics | None = None, bell: Bell | None = None,
                         arrivals: ArrivalStream | None = None, done: asyncio.Event | None = None,
                         wall_clock: Callable[[], int] = wall_clock_ms,
                         poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                         long_poll: bool = False) -> SimCluster:
    """The simulated cluster. In simulated mode it also owns time: it advances the clock (its own
    reports and ``arrivals``) whenever the system is idle. ``done`` is set once nothing is left
    (in real mode ``arrivals`` is released by :func:`run_arrivals` and only consulted for that).
    ``long_poll`` (a log of its own, on Kafka): when idle, wait in a fetch for the next command
    (until the next report is due at the latest) instead of sleeping."""
    topics = topics or Topics()
    bell = bell or Bell()
    if clock == "simulated":
        sim = SimCluster.simulated(log, config, topics)
    else:
        sim = SimCluster.real(log, wall_clock, config, topics)
    backoff = Backoff()
    while not stop.is_set():
        try:
            did = sim.step()  # recovers first when its view may be stale (start, a failed commit)
            if not did and clock == "simulated":
                did = advance_time(sim, arrivals)
        except LogError as e:
            sim.invalidate()
            await ride_out("simcluster", e, backoff, stop, status)
            continue
        backoff.reset()
        _up(status)
        if did:
            await _pace(bell, did, poll_seconds)
            continue
        if done is not None and finished(sim, arrivals):
            done.set()
        hint = sim.wait_hint_ms() if clock == "real" else None
        idle = poll_seconds if hint is None else min(poll_seconds, hint / 1000)
        if long_poll and isinstance(log, SupportsWaiting):
            await log.wait_for_records(sim.topic, sim.next_offset, idle)
        else:
            await bell.wait(idle)
    return sim


async def run_arrivals(stream: ArrivalStream, stop: asyncio.Event, *, wall_clock: Callable[[], int] = wall_clock_ms,
                       bell: Bell | None = None, poll_seconds: float = POLL_SECONDS) -> int:
    """Real mode: release the stream's objects as the wall clock reaches them."""
    bell = bell or Bell()
    backoff = Backoff()
    while not stop.is_set() and not stream.exhausted:
        try:
            if stream.release_until(wall_clock()):
                bell.ring()
        except LogError as e:
            await ride_out("arrivals", e, backoff, stop)
            continue
        backoff.reset()
        due = stream.next_due()
        wait = poll_seconds if due is None else max(0.0, min(poll_seconds, (due - wall_clock()) / 1000))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
    return stream.released


async def run_ticker(log: Log, stop: asyncio.Event, *, interval_ms: int = 1000, topics: Topics | None = None,
                     cluster: str = "", wall_clock: Callable[[], int] = wall_clock_ms,
                     bell: Bell | None = None) -> Ticker:
    """Real mode only (see ``services.watcher.ticker`` for why simulated time needs no ticks)."""
    ticker = Ticker(log, wall_clock, interval_ms=interval_ms, topics=topics, cluster=cluster)
    while not stop.is_set():
        try:
            if ticker.tick() and bell is not None:
                bell.ring()
        except LogError as e:
            if not e.retriable:
                raise
            _unavailable("ticker", e, ticker.interval_ms / 1000)  # the next tick is the retry
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ticker.due_in_ms() / 1000)
    return ticker


# --- all in one process --------------------------------------------------------------------------


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
    actuator: Actuator
    simcluster: SimCluster
    done: bool  # stopped because nothing was left (rather than by ``stop``)


async def run_all(log: Log, *, clock: ClockMode = "simulated", stop: asyncio.Event | None = None,
                  arrivals: ArrivalStream | None = None, config: SimConfig | None = None,
                  topics: Topics | None = None, port: ActuationPort | None = None, tick_interval_ms: int = 1000,
                  until_done: bool | None = None, wall_clock: Callable[[], int] = wall_clock_ms,
                  poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                  on_step: StepHook | None = None) -> RunResult:
    """Scheduler, actuator, simulated cluster (and in real mode ticker and arrivals) as tasks of one
    process, until ``stop`` — or, by default in simulated mode, until nothing is left to do.
    ``status`` and ``on_step`` are the scheduler's (see :func:`run_scheduler`)."""
    topics = topics or Topics()
    config = config or SimConfig()
    stop = stop or asyncio.Event()
    done = asyncio.Event()
    bell = Bell()
    if until_done is None:
        until_done = clock == "simulated"

    if isinstance(log, SupportsLeadership) and not await log.acquire("scheduler", stop):
        raise LeadershipLost("stopped before becoming the leader")  # every service here writes as the leader
    common: dict[str, Any] = {"topics": topics, "bell": bell, "poll_seconds": poll_seconds}
    coros: list[Coroutine[Any, Any, object]] = [
        run_scheduler(log, stop, status=status, on_step=on_step, **common),
        run_actuator(log, stop, port=port or SimClusterPort(topics, config.cluster), **common),
        run_simcluster(log, stop, clock=clock, config=config, arrivals=arrivals, done=done if until_done else None,
                       wall_clock=wall_clock, **common),
    ]
    if clock == "real":
        coros.append(run_ticker(log, stop, interval_ms=tick_interval_ms, topics=topics, cluster=config.cluster,
                                wall_clock=wall_clock, bell=bell))
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


# --- the deterministic in-process driver ---------------------------------------------------------


@dataclass
class DriveResult:
    scheduler: Scheduler
    actuator: Actuator
    simcluster: SimCluster
    rounds: int


class NotIdle(RuntimeError):
    pass


def drive_until_idle(log: Log, *, topics: Topics | None = None, config: SimConfig | None = None,
                     arrivals: ArrivalStream | None = None, port: ActuationPort | None = None,
                     max_rounds: int = 1_000_000) -> DriveResult:
    """Step scheduler, actuator and simulated cluster round-robin in simulated time until
    nothing is left to do; deterministic (no asyncio, no wall clock, no threads)."""
    topics = topics or Topics()
    config = config or SimConfig()
    scheduler = Scheduler(log, topics=topics, cut_short_steps=False)
    scheduler.recover()
    actuator = Actuator(log, port or SimClusterPort(topics, config.cluster), topics=topics)
    actuator.recover()
    sim = SimCluster.simulated(log, config, topics)
    sim.recover()
    for rounds in range(1, max_rounds + 1):
        did = scheduler.step() + actuator.step() + sim.step()
        if not did and not advance_time(sim, arrivals):
            if not finished(sim, arrivals):
                # Every step was empty yet some consumer is behind: someone else shares this log.
                raise NotIdle("nothing to step, but the system is not idle: is another process consuming?")
            return DriveResult(scheduler, actuator, sim, rounds)
    raise NotIdle(f"still busy after {max_rounds} rounds")
