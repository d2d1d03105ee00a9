"""Several services in one process: ``run all`` (asyncio tasks) and the deterministic driver.

:func:`run_all` runs scheduler, actuator and simulated cluster (and in real mode
ticker and arrivals) as tasks that wake each other through one Bell.
:func:`drive_until_idle` steps scheduler, actuator and simulated cluster
round-robin in the calling thread, deterministic, for tests and benches, until
nothing is left to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from events.envelope import Topics
from services.actuator.loop import Actuator
from services.actuator.runner import run_actuator
from services.actuator.sim_port import SimClusterPort
from services.runtime.clock import ClockMode, wall_clock_ms
from services.runtime.log import Log
from services.runtime.supervise import POLL_SECONDS, Bell, LeadershipLost, ServiceStatus, lead
from services.scheduler.runner import StepHook, run_scheduler
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig
from services.simcluster.runner import advance_time, finished, run_arrivals, run_simcluster
from services.watcher.ticker import run_ticker

if TYPE_CHECKING:
    pass


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


async def run_all(log: Log, *, clock: ClockMode = "simulated", stop: asyncio.Event | None = None,
                  arrivals: ArrivalStream | None = None, config: SimConfig | None = None,
                  topics: Topics | None = None, tick_interval_ms: int = 1000,
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

    if not await lead(log, "scheduler", stop):
        raise LeadershipLost("stopped before becoming the leader")  # every service here writes as the leader
    common: dict[str, Any] = {"topics": topics, "bell": bell, "poll_seconds": poll_seconds}
    coros: list[Coroutine[Any, Any, object]] = [
        run_scheduler(log, stop, status=status, on_step=on_step, **common),
        run_actuator(log, stop, port=SimClusterPort(topics, config.cluster), **common),
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


@dataclass
class DriveResult:
    scheduler: Scheduler
    actuator: Actuator[SimClusterPort]
    simcluster: SimCluster
    rounds: int


class NotIdle(RuntimeError):
    pass


def drive_until_idle(log: Log, *, topics: Topics | None = None, config: SimConfig | None = None,
                     arrivals: ArrivalStream | None = None, max_rounds: int = 1_000_000) -> DriveResult:
    """Step scheduler, actuator and simulated cluster round-robin in simulated time until
    nothing is left to do; deterministic (no asyncio, no wall clock, no threads)."""
    topics = topics or Topics()
    config = config or SimConfig()
    scheduler = Scheduler(log, topics=topics, cut_short_steps=False)
    scheduler.recover()
    actuator = Actuator(log, SimClusterPort(topics, config.cluster), topics=topics)
    actuator.recover()
    sim = SimCluster.simulated(log, config, topics)
    sim.recover()
    for rounds in range(1, max_rounds + 1):
        did = scheduler.step() + actuator.step_now() + sim.step()
        if not did and not advance_time(sim, arrivals):
            if not finished(sim, arrivals):
                # Every step was empty yet some consumer is behind: someone else shares this log.
                raise NotIdle("nothing to step, but the system is not idle: is another process consuming?")
            return DriveResult(scheduler, actuator, sim, rounds)
    raise NotIdle(f"still busy after {max_rounds} rounds")


