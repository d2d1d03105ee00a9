"""The actuator's runner: steps the one loop (:mod:`services.actuator.loop`) over either port until ``stop``.

The simulated cluster's port (:mod:`services.actuator.sim_port`, in ``run all``, ``run actuator``
on the embedded log or Kafka, the benches) and the Kubernetes port
(:mod:`services.actuator.kube_port`, inside :class:`~services.actuator.service.ActuatorService`)
run the same way: a log that is unavailable for a while is ridden out with back-off; a retriable
actuation failure waits out the loop's ``retry_after``; when idle, the runner waits for the next
decision (the Bell of a process's runners, or a long-poll fetch on Kafka).
"""

from __future__ import annotations

import asyncio

from events.envelope import Topics
from services.actuator.loop import Actuator, P, Placer
from services.runtime.log import Log, LogError
from services.runtime.supervise import (
    POLL_SECONDS,
    Backoff,
    Bell,
    ServiceStatus,
    mark_up,
    pace,
    ride_out,
    sleep_unless,
    still_leading,
)


async def run_loop(actuator: Actuator[P], stop: asyncio.Event, *, bell: Bell | None = None,
                   poll_seconds: float = POLL_SECONDS, status: ServiceStatus | None = None,
                   long_poll: bool = False, role: str | None = None) -> None:
    """Step ``actuator`` until ``stop``. ``role``: the leadership the caller acquired for it alone,
    checked after every step (a process whose runners share one leadership checks it elsewhere).
    ``long_poll`` (a log of its own, on Kafka): when idle, wait in a fetch for the next decision
    instead of sleeping up to ``poll_seconds``."""
    log, topic = actuator.log, actuator.topics.decisions
    bell = bell or Bell()
    backoff = Backoff()
    while not stop.is_set():
        try:
            did = await actuator.step()  # recovers first when its view may be stale (start, a failed commit)
        except LogError as e:
            await ride_out("actuator", e, backoff, stop, status)
            continue
        backoff.reset()
        mark_up(status, "actuator")
        if role is not None:
            still_leading(log, role, stop)
        if actuator.retry_after is not None:
            await sleep_unless(stop, actuator.retry_after)
        elif not did and long_poll and (waiter := log.waiter) is not None:
            await waiter.wait_for_records(topic, actuator.next_offset, poll_seconds)
        else:
            await pace(bell, did, poll_seconds)


async def run_actuator(log: Log, stop: asyncio.Event, *, port: P, topics: Topics | None = None,
                       bell: Bell | None = None, poll_seconds: float = POLL_SECONDS,
                       status: ServiceStatus | None = None, long_poll: bool = False,
                       role: str | None = None, placer: Placer | None = None) -> Actuator[P]:
    """Applies decisions through ``port`` (MultiKueue placements through ``placer``) until ``stop``;
    returns the actuator (for its stats)."""
    actuator = Actuator(log, port, topics=topics, placer=placer)
    await run_loop(actuator, stop, bell=bell, poll_seconds=poll_seconds, status=status, long_poll=long_poll,
                   role=role)
    return actuator
