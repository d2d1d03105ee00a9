"""The Kubernetes services as ``kueuelog run`` runs them: the watcher, and the actuator with the
job reconciler beside it in one process; their Kubernetes client configuration and metrics.

- :func:`client_configuration`: a kubeconfig file when one is given, else the in-cluster
  configuration of the pod (its ServiceAccount token, refreshed as it rotates). Anything
  wrong with either is a :class:`KubeConfigError` that says what to give instead.
- :class:`WatcherService`: :func:`~services.watcher.kube.run_kube_watcher` with a readiness
  status. The watcher has no election (every replica publishes the same deterministic
  envelopes, which the memory and the fold deduplicate); it is ready once it has rebuilt its
  memory from the log and the API server has answered its first LIST (Namespaces, of which
  every cluster has some): the log is readable and its credentials and RBAC work.
- :class:`ActuatorService`: a :class:`~services.actuator.kube.KubeActuator` stepped like
  :func:`~services.actuator.kube.run_kube_actuator`, but riding out an unavailable log as
  the other runners do (:mod:`services.runtime.services`), and the
  :class:`~services.actuator.jobs.JobReconciler` as a second task: without an admission
  webhook, a queued Job waits for quota only because the reconciler suspends it, so the two
  run and stop together. If either fails for good, the process ends (a supervisor restarts it).
- :class:`StatsCollector`: the services' counters (their ``stats`` dataclasses) as Prometheus
  counters, read at scrape time.

Leadership is the caller's (``kueuelog run`` acquires the actuator's role on Kafka before it
starts an :class:`ActuatorService`); the actuator checks on every step that it still leads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import ConfigException
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from events.envelope import Topics
from services.actuator.jobs import JobReconciler, Policy, ReconcilerStats
from services.actuator.kube import KubeActuator
from services.actuator.kubeerrors import ApiStats
from services.runtime.log import Log, LogError
from services.runtime.services import (
    POLL_SECONDS,
    Backoff,
    ServiceStatus,
    ride_out,
    sleep_unless,
    still_leading,
    wall_clock_ms,
)
from services.watcher.kube import WatcherStats, run_kube_watcher

_log = structlog.get_logger(__name__)


class KubeConfigError(Exception):
    """No usable Kubernetes client configuration; the message says what was tried."""


async def client_configuration(kubeconfig: str | None, *, context: str | None = None) -> client.Configuration:
    """The configuration of ``kubeconfig`` (a path, or several joined by ':' as in KUBECONFIG),
    else the pod's in-cluster configuration."""
    cfg = client.Configuration()
    if kubeconfig:
        try:
            await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg,
                                          persist_config=False)
        except (ConfigException, OSError, ValueError, KeyError, TypeError) as e:
            raise KubeConfigError(f"kubeconfig {kubeconfig}: {e}") from e
        return cfg
    try:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except ConfigException as e:
        raise KubeConfigError(
            f"no Kubernetes configuration: give --kubeconfig PATH (or set KUEUELOG_KUBECONFIG or KUBECONFIG), "
            f"or run in a pod with a ServiceAccount token (in-cluster configuration: {e})") from e
    return cfg


def api_client(cfg: client.Configuration, *, impersonate: str | None = None) -> client.ApiClient:
    """An ApiClient on the running loop; ``impersonate`` sends every request as that user (the
    caller's credentials must be allowed to impersonate it)."""
    if impersonate:
        return client.ApiClient(configuration=cfg, header_name="Impersonate-User", header_value=impersonate)
    return client.ApiClient(configuration=cfg)


# --- the watcher -----------------------------------------------------------------------------------


class WatcherService:
    """One cluster's watcher with its readiness (see the module docstring)."""

    def __init__(self, log: Log, api: client.ApiClient, *, cluster: str, topics: Topics | None = None,
                 status: ServiceStatus | None = None, backoff: tuple[float, float] = (0.2, 30.0),
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.log, self.api, self.cluster = log, api, cluster
        self.topics = topics or Topics()
        self.status = status or ServiceStatus("watcher")
        self.status.leading = True  # no election
        self.stats = WatcherStats()
        self.backoff = backoff
        self._clock = clock

    def _clock_marking_ready(self) -> int:
        # The watcher reads the clock first when it translates the first object it listed, which
        # is after it rebuilt its memory from the log: from then on it is ready.
        if not self.status.recovered:
            self.status.up()
        return self._clock()

    async def run(self, stop: asyncio.Event) -> WatcherStats:
        return await run_kube_watcher(self.log, self.api, stop, cluster=self.cluster, topics=self.topics,
                                      clock=self._clock_marking_ready, stats=self.stats, backoff=self.backoff)

    def collector(self) -> StatsCollector:
        return StatsCollector("watcher", {"": lambda: self.stats})


# --- the actuator and the job reconciler -------------------------------------------------------------


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



# --- metrics -----------------------------------------------------------------------------------------

_DOCS = {
    WatcherStats: "the Kubernetes watcher's",
    ReconcilerStats: "the job reconciler's",
}


class StatsCollector(Collector):
    """Every integer field of a service's ``stats`` dataclass as a counter
    ``kueuelog_<service>_<prefix><field>_total``; an :class:`ApiStats` field as API call and
    error counters by call and by status. Read at scrape time: the services only count."""

    def __init__(self, service: str, sources: dict[str, Callable[[], object]]) -> None:
        self.service, self.sources = service, sources

    def collect(self) -> Iterator[Metric]:
        for prefix, source in self.sources.items():
            stats = source()
            if not dataclasses.is_dataclass(stats):
                continue
            whose = _DOCS.get(type(stats), f"the {self.service}'s")
            for f in dataclasses.fields(stats):
                value = getattr(stats, f.name)
                name = f"kueuelog_{self.service}_{prefix}{f.name}"
                if isinstance(value, ApiStats):
                    yield from _api_metrics(name, value)
                elif isinstance(value, int) and not isinstance(value, bool):
                    yield CounterMetricFamily(name, f"{f.name.replace('_', ' ')}: {whose} counter", value=value)


def _api_metrics(name: str, api: ApiStats) -> Iterator[Metric]:
    calls = CounterMetricFamily(f"{name}_calls", "Kubernetes API calls made, per 'call'", labels=["call"])
    for call, n in sorted(api.calls.items()):
        calls.add_metric([call], n)
    yield calls
    errors = CounterMetricFamily(f"{name}_errors", "Kubernetes API calls failed, per HTTP 'status' (or transport)",
                                 labels=["status"])
    for status, n in sorted(api.errors.items()):
        errors.add_metric([status], n)
    yield errors
    yield CounterMetricFamily(f"{name}_seconds", "Time spent in Kubernetes API calls", value=api.seconds)
    yield CounterMetricFamily(f"{name}_throttled_seconds", "Time waited for the client-side rate limit (qps/burst)",
                              value=api.throttled_seconds)
