"""The simulated cluster's runner, and how simulated time advances.

In simulated mode nothing reads the wall clock: when the whole system is idle,
:func:`advance_time` lets the earliest time source act: the simulated cluster's
next report or the arrival stream's next object (on a tie the cluster goes
first: a finish frees quota before the next submission is seen, as in a real
cluster where both happen "at once"). Only one task ever calls it, so two time
sources can never both jump.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from events.envelope import Topics
from services.runtime.clock import ClockMode, wall_clock_ms
from services.runtime.log import Log, LogError
from services.runtime.supervise import (
    POLL_SECONDS,
    Backoff,
    Bell,
    ServiceStatus,
    mark_up,
    pace,
    ride_out,
    still_leading,
)
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig

if TYPE_CHECKING:
    pass


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


# Many arguments: keyword-only options with defaults.
async def run_simcluster(log: Log, stop: asyncio.Event, *, clock: ClockMode = "simulated",  # noqa: PLR0913
                         config: SimConfig | None = None, topics: Topics | None = None, bell: Bell | None = None,
                         arrivals: ArrivalStream | None = None, done: asyncio.Event | None = None,
                         wall_clock: Callable[[], int] = wall_clock_ms,
                         poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                         long_poll: bool = False, role: str | None = None) -> SimCluster:
    """The simulated cluster. In simulated mode it also owns time: it advances the clock (its own
    reports and ``arrivals``) whenever the system is idle. ``done`` is set once nothing is left
    (in real mode ``arrivals`` is released by :func:`run_arrivals` and only consulted for that).
    ``long_poll`` (a log of its own, on Kafka): when idle, wait in a fetch for the next command
    (until the next report is due at the latest) instead of sleeping. ``role``: the leadership the
    caller acquired for it alone, checked after every step (as the actuator's runner does)."""
    topics = topics or Topics()
    bell = bell or Bell()
    if clock == "simulated":
        sim = SimCluster.simulated(log, config, topics)
    else:
        sim = SimCluster.real(log, wall_clock, config, topics)
    backoff = Backoff()
    waiter = log.waiter if long_poll else None
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
        mark_up(status, "simcluster")
        if role is not None:
            still_leading(log, role, stop)
        if did:
            await pace(bell, did, poll_seconds)
            continue
        if done is not None and finished(sim, arrivals):
            done.set()
        hint = sim.wait_hint_ms() if clock == "real" else None
        idle = poll_seconds if hint is None else min(poll_seconds, hint / 1000)
        if waiter is not None:
            await waiter.wait_for_records(sim.topic, sim.next_offset, idle)
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


