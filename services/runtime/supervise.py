"""How a service's runner lives with its log: readiness, back-off, waking, leadership.

Every runner (scheduler, actuator, simulated cluster, ticker, arrivals) steps a
synchronous state machine over the log and uses the same few pieces: a
:class:`ServiceStatus` for ``/readyz``; a :class:`Backoff` and :func:`ride_out` for a
log that is unavailable for a while; a :class:`Bell` that wakes the runners of one
process when one of them commits; and :func:`lead` / :func:`still_leading` for the
single writer of a role, through the log's :class:`~services.runtime.log.Leadership` (the
one mechanism every backend provides).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from services.runtime.log import LeadershipLost, Log, LogError

__all__ = ["POLL_SECONDS", "Backoff", "Bell", "LeadershipLost", "ServiceStatus", "lead", "mark_down", "mark_up",
           "pace", "release", "report_unavailable", "ride_out", "sleep_unless", "still_leading"]

_log = structlog.get_logger(__name__)


POLL_SECONDS = 0.05


STUCK_AFTER_SECONDS = 60.0


@dataclass
class ServiceStatus:
    """What a service's ``/readyz`` says, written by its runners: ready once it leads (a standby
    waits for its role's election; a service without one leads from the start) and has
    recovered its position from the log; not ready while any of its parts reports a problem
    (the log is unavailable) or has made no progress for ``stuck_after`` seconds (a part that
    hangs, which no error would ever report). Parts are the runners sharing one process
    (``run all``: scheduler, actuator, simulated cluster); a service of one part uses ``""``."""

    name: str
    leading: bool = False
    recovered: bool = False
    problems: dict[str, str] = field(default_factory=dict)  # part -> why it is not ready
    beats: dict[str, float] = field(default_factory=dict)  # part -> when it last made progress
    stuck_after: float = STUCK_AFTER_SECONDS
    clock: Callable[[], float] = time.monotonic  # a monotonic timer, not a wall clock

    @property
    def problem(self) -> str:
        """Every part's problem, and every part that seems stuck, in one line ('' when none)."""
        now = self.clock()
        found = [f"{part}: {why}" if part else why for part, why in sorted(self.problems.items())]
        found += [f"{part or self.name}: no progress for {now - at:.0f} s" for part, at in sorted(self.beats.items())
                  if now - at > self.stuck_after]
        return "; ".join(found)

    @property
    def ready(self) -> bool:
        return self.leading and self.recovered and not self.problem

    @property
    def reason(self) -> str:
        if not self.leading:
            return f"{self.name}: standby, waiting for the leadership"
        if not self.recovered:
            return f"{self.name}: recovering"
        if problem := self.problem:
            return f"{self.name}: {problem}"
        return f"{self.name}: ready"

    def up(self, part: str = "") -> None:
        """``part`` made progress: it has recovered and its problem, if any, is over."""
        self.recovered = True
        self.problems.pop(part, None)
        self.beats[part] = self.clock()

    def down(self, problem: str, part: str = "") -> None:
        """``part`` cannot go on for now (it is still alive: it is riding the problem out)."""
        self.problems[part] = problem
        self.beats[part] = self.clock()


def mark_up(status: ServiceStatus | None, part: str = "") -> None:
    if status is not None:
        status.up(part)


def mark_down(status: ServiceStatus | None, e: LogError, part: str = "") -> None:
    if status is not None:
        status.down(f"log unavailable: {e}", part)


class Bell:
    """Wakes the runners of one process when one of them committed something."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def ring(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seconds: float) -> None:
        """Until the next ring or ``seconds``, whichever comes first. Cancellation always goes
        through: ``asyncio.timeout`` tells its own expiry from a cancellation, where a
        ``wait_for`` in ``suppress(TimeoutError)`` could swallow one that raced with it."""
        await _wait_at_most(self._event, seconds)


async def pace(bell: Bell, did: int, idle_seconds: float) -> None:
    if did:
        bell.ring()
        await asyncio.sleep(0)  # let the others run between busy steps
    else:
        await bell.wait(idle_seconds)


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
    await _wait_at_most(stop, seconds)


async def _wait_at_most(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


def report_unavailable(service: str, e: LogError, wait: float) -> None:
    _log.warning("log unavailable; will recover from it", service=service, error=str(e), retry_in_s=round(wait, 2))


async def lead(log: Log, name: str, stop: asyncio.Event) -> bool:
    """Become the single writer ``name`` through the log's leadership: the embedded log's file lock
    (a second one fails at once with WriterLockHeld), or Kafka's election (a standby waits here
    until the leader is gone). False if ``stop`` came first. Taking a role this process holds
    already returns at once."""
    return await log.leadership.acquire(name, stop)


def still_leading(log: Log, name: str, stop: asyncio.Event | None = None) -> None:
    """Raise LeadershipLost when another instance leads ``name`` now (not once ``stop`` is set: a
    runner sharing the log may have released the role already)."""
    if stop is not None and stop.is_set():
        return
    if not log.leadership.holds(name):
        raise LeadershipLost(f"lost the {name} leadership to another instance; stopping")


def release(log: Log, name: str) -> None:
    """Give up ``name`` (a standby may take over at once)."""
    log.leadership.release(name)


async def ride_out(service: str, e: LogError, backoff: Backoff, stop: asyncio.Event,
                   status: ServiceStatus | None = None) -> None:
    """A log error in ``service``'s step: a final one is raised again; one that may pass (a broker
    restarting) marks the service down, is logged, and waits out the back-off or ``stop``."""
    if not e.retriable:
        raise e
    wait = backoff.next()
    report_unavailable(service, e, wait)
    mark_down(status, e, service)
    await sleep_unless(stop, wait)


