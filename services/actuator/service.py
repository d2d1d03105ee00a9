"""The actuator on Kubernetes as ``kueuelog run actuator --kube`` runs it.

The actuator and the job reconciler run side by side in one process: without
an admission webhook, a queued Job waits for quota only because the reconciler
suspends it, so the two run and stop together. If either fails for good, the
process ends (a supervisor restarts it). Leadership is the caller's; the actuator
checks on every step that it still leads.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from events.envelope import Topics
from services.actuator.job_reconciler import JobReconciler, Policy
from services.actuator.kube import KubeActuator
from services.runtime.log import Log, LogError
from services.runtime.metrics import StatsCollector
from services.runtime.supervise import POLL_SECONDS, Backoff, ServiceStatus, ride_out, sleep_unless, still_leading


class ActuatorService:
    """Decisions applied to one cluster (:class:`KubeActuator`) and its queued Jobs kept waiting
    for them (:class:`JobReconciler`), in one process."""

    def __init__(self, log: Log, api: client.ApiClient, *, cluster: str, topics: Topics | None = None,
                 policy: Policy = "suspend", qps: float = 20, burst: int = 40, status: ServiceStatus | None = None,
                 role: str = "actuator", poll_seconds: float = POLL_SECONDS,
                 reconciler_api: client.ApiClient | None = None, **options: Any) -> None:
        """``role`` is the leadership the caller acquired (checked on every step); ``options`` are
        :class:`KubeActuator`'s other keyword arguments; ``reconciler_api`` another client for the
        reconciler (default: the actuator's, which then shares its connections)."""
        self.log, self.role, self.poll_seconds = log, role, poll_seconds
        self.status = status or ServiceStatus("actuator", leading=True)
        self.actuator = KubeActuator(log, api, cluster=cluster, topics=topics, qps=qps, burst=burst, **options)
        self.reconciler = JobReconciler(reconciler_api or api, cluster=cluster, policy=policy)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``; raises what stopped either task for good (the other is stopped too)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._actuate(stop), name="actuator")
                group.create_task(self.reconciler.run(stop), name="job reconciler")
        except BaseExceptionGroup as eg:
            if len(eg.exceptions) == 1:
                raise eg.exceptions[0] from None  # say which failed, not "unhandled errors in a TaskGroup"
            raise

    async def _actuate(self, stop: asyncio.Event) -> None:
        actuator, backoff = self.actuator, Backoff()
        while not stop.is_set():
            try:
                did = await actuator.step()  # recovers first at start and after a failed commit
            except LogError as e:
                await ride_out("actuator", e, backoff, stop, self.status)
                continue
            backoff.reset()
            self.status.up()
            still_leading(self.log, self.role, stop)
            if actuator.retry_after is not None:
                await sleep_unless(stop, actuator.retry_after)
            elif did:
                await asyncio.sleep(0)
            else:
                await sleep_unless(stop, self.poll_seconds)

    def collector(self) -> StatsCollector:
        return StatsCollector("actuator", {"": lambda: self.actuator.stats,
                                           "job_reconciler_": lambda: self.reconciler.stats})


