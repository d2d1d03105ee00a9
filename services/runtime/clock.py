"""The wall clock of the services, in one place.

The core never reads a clock: time enters it through events. Shells that need
the time of day (the ticker, the real-time simulated cluster, arrivals in real
time, the watcher and the job reconciler stamping events, the demo naming its
directory, the Kafka election ordering its standbys) take a ``Callable[[], int]``
and get :func:`wall_clock_ms` by default (or call it), so tests pass a clock of
their own. Nothing else in ``services/`` reads the time of day.

Monotonic timers are not wall clocks and stay where they are: rate limits and
refresh intervals (the actuator's API rate limiter, the scheduler's gauge refresh,
the demo's redraw) and deadlines on an event loop's own ``time()``.
"""

from __future__ import annotations

import time
from typing import Literal

ClockMode = Literal["simulated", "real"]


def wall_clock_ns() -> int:
    """The only wall clock of the services: nanoseconds since the epoch."""
    return time.time_ns()


def wall_clock_ms() -> int:
    """:func:`wall_clock_ns` in milliseconds, the resolution of event times."""
    return wall_clock_ns() // 1_000_000
