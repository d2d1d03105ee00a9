"""The wall clock of the services, in one place.

The core never reads a clock: time enters it through events. Shells that need
the time of day (the ticker, the real-time simulated cluster, arrivals in real
time, the watcher stamping envelopes) take a ``Callable[[], int]`` and get
:func:`wall_clock_ms` by default, so tests pass a clock of their own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    pass


ClockMode = Literal["simulated", "real"]


def wall_clock_ms() -> int:
    """The only wall clock of the services: milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


