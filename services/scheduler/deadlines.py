"""Waking the scheduler at its own deadlines: a ``ClockTicked`` appended exactly when one falls due.

The core reads time only from the log, so a PodsReady timeout, the end of a requeuing back-off
or a maximum execution time would pass unnoticed while nothing else happens. The scheduler knows
when the next of them falls due (``services.core.podsready.next_deadline``); whoever owns the
clock appends a ``ClockTicked`` then, and the scheduler folds it and runs a cycle like after any
event — so ``replay`` sees the same tick and decides the same.

- real time (``kueuelog run scheduler`` on Kafka or Kubernetes, the embedded real-time loop):
  :class:`DeadlineTicker`, driven by the scheduler's runner between steps, with the wall clock;
- simulated time: the driver's loop jumps to the deadline when it is the earliest time source
  (``services.app.driver``), with :func:`tick_envelope`.

No polling every second: nothing is appended unless a deadline has come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ClockTicked
from services.core.podsready import next_deadline
from services.core.state import State
from services.runtime.log import Log

SOURCE: Final = "scheduler-deadline"


def tick_envelope(time_ms: int, cluster: str = "") -> tuple[str, bytes]:
    """The record of a deadline tick at ``time_ms`` (its id is deterministic: a re-append is a duplicate)."""
    env = Envelope(id=f"deadline:{cluster}:{time_ms}", source=SOURCE, cluster=cluster,
                   event=ClockTicked(time=time_ms))
    return event_key(env), encode(env)


class DeadlineTicker:
    """Appends one ``ClockTicked`` per deadline of the scheduler's state, once the wall clock reaches it."""

    def __init__(self, log: Log, wall_clock: Callable[[], int], *, topics: Topics | None = None,
                 cluster: str = "") -> None:
        self.log = log
        self.wall_clock = wall_clock
        self.topics = topics or Topics()
        self.cluster = cluster
        self._ticked_for: int | None = None  # the deadline whose tick is appended but maybe not folded yet
        self.ticks = 0

    def due_in_seconds(self, state: State) -> float | None:
        """How long until the next deadline (0: due now; None: none)."""
        deadline = next_deadline(state)
        if deadline is None or deadline == self._ticked_for:
            return None
        return max(0, deadline - self.wall_clock()) / 1000

    def tick(self, state: State) -> bool:
        """Append a tick if the state's next deadline has come (once per deadline); returns whether it did."""
        deadline = next_deadline(state)
        if deadline is None or deadline == self._ticked_for:
            return False
        now = self.wall_clock()
        if now < deadline:
            return False
        self.log.append(self.topics.cluster_events, [tick_envelope(now, self.cluster)])
        self._ticked_for = deadline
        self.ticks += 1
        return True
