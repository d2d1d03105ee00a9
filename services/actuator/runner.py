"""The actuator's runner over the simulated cluster's port."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from events.envelope import Topics
from services.actuator.actuator import ActuationPort, Actuator, SimClusterPort
from services.runtime.log import Log, LogError
from services.runtime.supervise import (
    POLL_SECONDS,
    Backoff,
    Bell,
    ServiceStatus,
    SupportsWaiting,
    mark_up,
    pace,
    ride_out,
)

if TYPE_CHECKING:
    pass


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
        mark_up(status)
        if not did and long_poll and isinstance(log, SupportsWaiting):
            await log.wait_for_records(topics.decisions, actuator.next_offset, poll_seconds)
        else:
            await pace(bell, did, poll_seconds)
    return actuator


