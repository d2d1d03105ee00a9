"""Counters of the services' ``stats`` dataclasses, exposed to Prometheus at scrape time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import structlog
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

_log = structlog.get_logger(__name__)


@runtime_checkable
class ApiStats(Protocol):
    """What a service counts of its API calls (the actuator's and job reconciler's Kubernetes calls)."""

    calls: dict[str, int]
    errors: dict[str, int]
    seconds: float
    throttled_seconds: float


class StatsCollector(Collector):
    """Every integer field of a service's ``stats`` dataclass as a counter
    ``kueuelog_<service>_<prefix><field>_total``; an :class:`ApiStats` field as API call and
    error counters by call and by status. A source may give a tuple of such dataclasses (a
    service whose counters live in two parts, as the actuator's loop and port): their fields
    share the prefix. Read at scrape time: the services only count."""

    def __init__(self, service: str, sources: dict[str, Callable[[], object]]) -> None:
        self.service, self.sources = service, sources

    def collect(self) -> Iterator[Metric]:
        for prefix, source in self.sources.items():
            given = source()
            for stats in given if isinstance(given, tuple) else (given,):
                yield from self._counters(prefix, stats)

    def _counters(self, prefix: str, stats: object) -> Iterator[Metric]:
        if not dataclasses.is_dataclass(stats):
            return
        whose = getattr(stats, "WHOSE", f"the {self.service}'s")  # a ClassVar naming whose counters
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


