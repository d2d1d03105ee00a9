"""The watcher as ``kueuelog run watcher`` runs it: the Kubernetes watcher with readiness.

The watcher has no election (every replica publishes the same deterministic
envelopes, which the memory and the fold deduplicate); it is ready once it has
rebuilt its memory from the log and the API server has answered its first LIST
(Namespaces, of which every cluster has some): the log is readable and its
credentials and RBAC work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from kubernetes_asyncio import client

from events.envelope import Topics
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log
from services.runtime.metrics import StatsCollector
from services.runtime.supervise import ServiceStatus
from services.watcher.heartbeat import run_heartbeat
from services.watcher.kube import (
    DEFAULT_KINDS,
    T9K_KINDS,
    WatchedKind,
    WatcherStats,
    job_kind_watches,
    run_kube_watcher,
)


class WatcherService:
    """One cluster's watcher with its readiness (see the module docstring)."""

    def __init__(self, log: Log, api: client.ApiClient, *, cluster: str, topics: Topics | None = None,
                 status: ServiceStatus | None = None, backoff: tuple[float, float] = (0.2, 30.0),
                 clock: Callable[[], int] = wall_clock_ms, t9k: bool = False,
                 job_kinds: Sequence[str] = (), heartbeat_s: float = 0) -> None:
        """``t9k``: also watch T9k Scheduler's Queues (before the Jobs that name them); ``job_kinds``:
        also watch these workload kinds besides Job (``events.jobkinds``; their CRDs must exist);
        ``heartbeat_s``: append a tick under this cluster's name that often while its API server
        answers (``services.watcher.heartbeat``; a MultiKueue worker's liveness), 0 for none."""
        self.log, self.api, self.cluster = log, api, cluster
        self.kinds: tuple[WatchedKind, ...] = (
            (*DEFAULT_KINDS[:-1], *T9K_KINDS, DEFAULT_KINDS[-1]) if t9k else DEFAULT_KINDS)
        self.kinds += job_kind_watches(job_kinds)
        self.topics = topics or Topics()
        self.status = status or ServiceStatus("watcher")
        self.status.leading = True  # no election
        self.stats = WatcherStats()
        self.backoff = backoff
        self._clock = clock
        self.heartbeat_s = heartbeat_s

    def _clock_marking_ready(self) -> int:
        # The watcher reads the clock first when it translates the first object it listed, which
        # is after it rebuilt its memory from the log: from then on it is ready.
        if not self.status.recovered:
            self.status.up()
        return self._clock()

    async def run(self, stop: asyncio.Event) -> WatcherStats:
        watching = run_kube_watcher(self.log, self.api, stop, cluster=self.cluster, topics=self.topics,
                                    clock=self._clock_marking_ready, stats=self.stats, backoff=self.backoff,
                                    kinds=self.kinds)
        if self.heartbeat_s <= 0:
            return await watching
        try:
            async with asyncio.TaskGroup() as group:
                watcher = group.create_task(watching, name="watcher")
                group.create_task(run_heartbeat(self.log, self.api, stop, cluster=self.cluster, topics=self.topics,
                                                interval_s=self.heartbeat_s, wall_clock=self._clock),
                                  name="heartbeat")
        except BaseExceptionGroup as eg:
            if len(eg.exceptions) == 1:
                raise eg.exceptions[0] from None  # what stopped it, not "unhandled errors in a TaskGroup"
            raise
        return watcher.result()

    def collector(self) -> StatsCollector:
        return StatsCollector("watcher", {"": lambda: self.stats})


