"""The ticker: time passing, as events.

The scheduler reads "now" only from the events it folds (design principle 2),
so when nothing happens in real time it would never notice that a deadline
passed. The ticker appends a ``ClockTicked`` (source ``ticker``) every
interval of wall-clock time; each tick has a deterministic id
(``tick:<cluster>:<ms>``), so two ticker replicas ticking at the same
millisecond are recognised as duplicates.

Simulated time needs no ticker. There, time moves only when the simulated
cluster (or an arrival stream) jumps the clock, and every jump appends the
events that were due at the new time — ``WorkloadFinished``, ``PodsReady``, an
arriving object — each carrying that time; the scheduler's clock advances by
folding them. A ``ClockTicked`` with the same time would fold to nothing and
only lengthen the log.

The core's own deadlines (the waitForPodsReady timeout, the requeuing back-off,
the maximum execution time) do not wait for this ticker's interval: the scheduler
appends a tick exactly when its next one comes (``services.scheduler.deadlines``,
in real time; the simulated driver jumps there), in every deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ClockTicked
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log, LogError
from services.runtime.supervise import Bell, report_unavailable

SOURCE: Final = "ticker"


class Ticker:
    """Appends a ``ClockTicked`` whenever ``interval_ms`` of wall-clock time has passed."""

    def __init__(self, log: Log, wall_clock: Callable[[], int], *, interval_ms: int = 1000,
                 topics: Topics | None = None, cluster: str = "") -> None:
        if interval_ms <= 0:
            raise ValueError(f"the tick interval must be positive, got {interval_ms} ms")
        self.log = log
        self.wall_clock = wall_clock
        self.interval_ms = interval_ms
        self.topics = topics or Topics()
        self.cluster = cluster
        self.last: int | None = None
        self.ticks = 0

    def due_in_ms(self) -> int:
        """Milliseconds until the next tick is due (0: now)."""
        if self.last is None:
            return 0
        return max(0, self.last + self.interval_ms - self.wall_clock())

    def tick(self) -> bool:
        """Append a tick if one is due; returns whether it did."""
        now = self.wall_clock()
        if self.last is not None and now < self.last + self.interval_ms:
            return False
        env = Envelope(id=f"tick:{self.cluster}:{now}", source=SOURCE, cluster=self.cluster,
                       event=ClockTicked(time=now))
        self.log.append(self.topics.cluster_events, [(event_key(env), encode(env))])
        self.last = now
        self.ticks += 1
        return True


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
            report_unavailable("ticker", e, ticker.interval_ms / 1000)  # the next tick is the retry
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ticker.due_in_ms() / 1000)
    return ticker


