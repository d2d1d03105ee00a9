"""Prometheus metrics of the scheduler, with Kueue's names and labels.

Dashboards and alerts written for Kueue (``pkg/metrics/metrics.go``) work unchanged:
the ``kueue_*`` series below have Kueue's names, label names, label values and
units (cpu in cores, memory in bytes, wait times in seconds with Kueue's buckets).
``kueuelog_*`` series are ours.

:class:`SchedulerMetrics` is fed by the scheduler's shell after each committed step,
never by the pure core: counters from the decisions and cycle records the step
wrote, gauges recomputed from the state it left. Each instance owns its registry,
so several schedulers (or tests) never share series.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from events import objects as o
from events.cluster import ConditionType
from events.conditions import is_true
from events.messages import AdmitChecked, AdmitWorkload, AnyDecision, CycleCompleted, EvictWorkload
from events.quantity import MILLI_RESOURCES
from services.core import admissionfair
from services.core.quota import FR
from services.core.state import State, WorkloadRecord
from services.core.treeview import tree_nodes

# Kueue's generateExponentialBuckets(14): 1, then 2.5 doubling 13 times (up to 10240 s).
WAIT_TIME_BUCKETS: tuple[float, ...] = (1.0, *(2.5 * 2**i for i in range(13)))

PENDING_ACTIVE, PENDING_INADMISSIBLE = "active", "inadmissible"
CQ_STATUSES = ("pending", "active", "terminating")


def resource_value(resource: str, amount: int) -> float:
    """Our integer amount in Kueue's unit for the metric: cores for cpu, else the unit itself."""
    return amount / 1000 if resource in MILLI_RESOURCES else float(amount)


class _RefreshOnCollect:
    """A collector with no metrics of its own: collecting it brings the lazy gauges up to date."""

    def __init__(self, metrics: SchedulerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        m = self.metrics
        if m.gauge_interval_s is None and m._latest is not None:
            m._refresh_gauges(m._latest)
        return []


class SchedulerMetrics:
    """The scheduler's metrics; call :meth:`observe` after every live step (not during recovery)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, gauge_interval_s: float | None = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``gauge_interval_s``: refresh the state gauges at most this often (0: after every step);
        None: only when the registry is collected (a scrape), so a busy scheduler never stalls on
        them between scrapes. ``clock`` times that interval: a monotonic timer, not a wall clock."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._latest: State | None = None
        # Registered first, so that a collection refreshes the gauges before they are read.
        r.register(_RefreshOnCollect(self))
        cq = ["cluster_queue"]
        fr_labels = ["cohort", "cluster_queue", "flavor", "resource"]
        # --- Kueue: counters and histograms fed by decisions ---------------------------------
        self.admission_attempts = Counter(
            "kueue_admission_attempts_total",
            "The total number of attempts to admit workloads (scheduling cycles with at least one head); "
            "result is 'success' when at least one workload was admitted, else 'inadmissible'.",
            ["result"], registry=r)
        self.quota_reserved = Counter(
            "kueue_quota_reserved_workloads_total", "The total number of quota reserved workloads per 'cluster_queue'",
            cq, registry=r)
        self.quota_reserved_wait = Histogram(
            "kueue_quota_reserved_wait_time_seconds",
            "The time between a workload was created or requeued until it got quota reservation, per 'cluster_queue'",
            cq, buckets=WAIT_TIME_BUCKETS, registry=r)
        self.admitted = Counter(
            "kueue_admitted_workloads_total", "The total number of admitted workloads per 'cluster_queue'",
            cq, registry=r)
        self.admission_wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "The time between a workload was created or requeued until admission, per 'cluster_queue'",
            cq, buckets=WAIT_TIME_BUCKETS, registry=r)
        self.admission_checks_wait = Histogram(
            "kueue_admission_checks_wait_time_seconds",
            "The time from when a workload got the quota reservation until admission, per 'cluster_queue'",
            cq, buckets=WAIT_TIME_BUCKETS, registry=r)
        self.evicted = Counter(
            "kueue_evicted_workloads_total", "The number of evicted workloads per 'cluster_queue' and 'reason'",
            ["cluster_queue", "reason"], registry=r)
        self.preempted = Counter(
            "kueue_preempted_workloads_total",
            "The number of preempted workloads per 'preempting_cluster_queue' and 'reason'",
            ["preempting_cluster_queue", "reason"], registry=r)
        # --- Kueue: gauges recomputed from the state -----------------------------------------
        self.pending = Gauge(
            "kueue_pending_workloads",
            "The number of pending workloads, per 'cluster_queue' and 'status' (active or inadmissible)",
            ["cluster_queue", "status"], registry=r)
        self.reserving_active = Gauge(
            "kueue_reserving_active_workloads", "The number of Workloads that are reserving quota, per 'cluster_queue'",
            cq, registry=r)
        self.admitted_active = Gauge(
            "kueue_admitted_active_workloads",
            "The number of admitted Workloads that are active (unsuspended and not finished), per 'cluster_queue'",
            cq, registry=r)
        self.cluster_queue_status = Gauge(
            "kueue_cluster_queue_status",
            "Reports 'cluster_queue' with its 'status' (pending, active or terminating); 1 for exactly one status",
            ["cluster_queue", "status"], registry=r)
        self.resource_reservation = Gauge(
            "kueue_cluster_queue_resource_reservation",
            "Reports the cluster_queue's total resource reservation within all the flavors", fr_labels, registry=r)
        self.resource_usage = Gauge(
            "kueue_cluster_queue_resource_usage",
            "Reports the cluster_queue's total resource usage within all the flavors", fr_labels, registry=r)
        self.nominal_quota = Gauge(
            "kueue_cluster_queue_nominal_quota",
            "Reports the cluster_queue's resource nominal quota within all the flavors", fr_labels, registry=r)
        self.afs_usage = Gauge(
            "kueue_local_queue_admission_fair_sharing_usage",
            "The LocalQueue's admission fair sharing usage: resource-weighted consumed resources and pending "
            "entry penalties, over the LocalQueue's weight", ["name", "namespace", "cluster_queue"], registry=r)
        # --- ours ------------------------------------------------------------------------------
        self.events_folded = Counter(
            "kueuelog_events_folded_total", "Cluster events folded into the scheduler's state", registry=r)
        self.decisions = Counter(
            "kueuelog_decisions_total", "Decisions written, per 'type' (admit, evict, pending)", ["type"], registry=r)
        self.cycles = Counter("kueuelog_cycles_total", "Scheduling cycles run", registry=r)
        self.log_lag = Gauge(
            "kueuelog_log_lag", "Cluster events in the log not folded yet (end offset - next input offset)",
            registry=r)
        self.tree_quota = Gauge(
            "kueuelog_elastic_quota_tree_node",
            "An ElasticQuotaTree node's min, max and used per resource ('value'), in Kueue's units "
            "(services/core/treeview.py)", ["node", "parent", "resource", "value"], registry=r)
        self._counted_queues: set[str] = set()
        # Each admission moves these per-ClusterQueue series; ``labels()`` is slow enough to show at
        # 50,000 admissions, so the series are kept (and dropped with their ClusterQueue).
        self._series: dict[tuple[int, str], Any] = {}
        self._clock = clock
        self.gauge_interval_s = gauge_interval_s
        self._gauges_at = -math.inf

    def observe(self, decisions: Sequence[AnyDecision], cycle_records: Sequence[CycleCompleted], state: State, *,
                events_folded: int = 0, log_lag: int | None = None) -> None:
        """One committed step: ``decisions`` and ``cycle_records`` are what it wrote, ``state`` what it
        left; ``events_folded`` the cluster events it folded, ``log_lag`` how many are still unread."""
        self.events_folded.inc(events_folded)
        if log_lag is not None:
            self.log_lag.set(log_lag)
        self.cycles.inc(len(cycle_records))
        # Counted first, then one increment per label: a step can hold thousands of cycles.
        success = sum(1 for record in cycle_records if record.admitted_heads)
        inadmissible = sum(1 for record in cycle_records if not record.admitted_heads and record.heads)
        if success:
            self.admission_attempts.labels("success").inc(success)
        if inadmissible:
            self.admission_attempts.labels("inadmissible").inc(inadmissible)
        by_type: dict[str, int] = {}
        for d in decisions:
            tag = str(type(d).__struct_config__.tag)
            by_type[tag] = by_type.get(tag, 0) + 1
        for tag in sorted(by_type):
            self.decisions.labels(tag).inc(by_type[tag])
        for d in decisions:
            if isinstance(d, AdmitWorkload):
                self._admitted(d, state)
            elif isinstance(d, AdmitChecked):
                self._checked(d, state)
            elif isinstance(d, EvictWorkload):
                self._evicted(d, state)
        self._latest = state
        if self.gauge_interval_s is None:
            return
        now = self._clock()
        if now - self._gauges_at >= self.gauge_interval_s:
            # The gauges walk every workload: once per interval, not after every step of a busy loop.
            self._refresh_gauges(state)
            self._gauges_at = now

    def refresh(self, state: State) -> None:
        """Bring the gauges up to date now (e.g. after recovery, or before a scrape)."""
        self._refresh_gauges(state)
        self._gauges_at = self._clock()

    # --- counters ----------------------------------------------------------------------------

    def _admitted(self, d: AdmitWorkload, state: State) -> None:
        cq_name = d.admission.cluster_queue
        self._counted_queues.add(cq_name)
        rec = state.workloads.get(f"{d.namespace}/{d.name}")
        wait = _queued_wait_seconds(rec, d.time) if rec is not None else None
        self._series_of(self.quota_reserved, cq_name).inc()
        if wait is not None:
            self._series_of(self.quota_reserved_wait, cq_name).observe(wait)
        # Without admission checks, reserving quota is admission (services/core/effects.py); with
        # them, admission is AdmitChecked.
        if not d.admission_checks:
            self._series_of(self.admitted, cq_name).inc()
            if wait is not None:
                self._series_of(self.admission_wait, cq_name).observe(wait)

    def _series_of(self, metric: Counter | Histogram, cq_name: str) -> Any:
        key = (id(metric), cq_name)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(cq_name)
        return series

    def _checked(self, d: AdmitChecked, state: State) -> None:
        """Every admission check Ready: admitted, after waiting since the reservation."""
        if d.failed_to_start:
            return
        cq_name = d.admission.cluster_queue
        rec = state.workloads.get(f"{d.namespace}/{d.name}")
        self.admitted.labels(cq_name).inc()
        if rec is None:
            return
        wait = _queued_wait_seconds(rec, d.time)
        if wait is not None:
            self.admission_wait.labels(cq_name).observe(wait)
        if rec.reserved_at is not None:
            self.admission_checks_wait.labels(cq_name).observe(max(0, d.time - rec.reserved_at) / 1000)

    def _evicted(self, d: EvictWorkload, state: State) -> None:
        self._counted_queues.add(d.cluster_queue)
        self.evicted.labels(d.cluster_queue, d.reason).inc()
        if d.preemption_reason:
            preemptor = state.workloads.get(d.preemptor)
            preempting = state.cluster_queue_for(preemptor.obj)[0] if preemptor is not None else ""
            self._counted_queues.add(preempting)
            self.preempted.labels(preempting, d.preemption_reason).inc()

    # --- gauges ------------------------------------------------------------------------------

    def _refresh_tree(self, state: State) -> None:
        for node in tree_nodes(state):
            for resource in sorted(set(node.min) | set(node.used)):
                for what, amount in (("min", node.min.get(resource)), ("max", node.max.get(resource)),
                                     ("used", node.used.get(resource, 0))):
                    if amount is not None:
                        self.tree_quota.labels(node.name, node.parent, resource, what).set(
                            resource_value(resource, amount))

    def _refresh_gauges(self, state: State) -> None:
        pending: dict[str, list[int]] = {name: [0, 0] for name in state.cluster_queues}
        reserving: dict[str, int] = dict.fromkeys(state.cluster_queues, 0)
        admitted: dict[str, int] = dict.fromkeys(state.cluster_queues, 0)
        reservation: dict[str, dict[FR, int]] = {name: {} for name in state.cluster_queues}
        usage: dict[str, dict[FR, int]] = {name: {} for name in state.cluster_queues}
        for rec in state.workloads.values():
            if rec.finished:
                continue
            if rec.admission is None:
                counts = pending.get(rec.queued_in)
                if counts is not None:
                    counts[1 if rec.inadmissible else 0] += 1
                continue
            cq_name = rec.admission.cluster_queue
            if cq_name not in reserving:
                continue  # its ClusterQueue was deleted: Kueue drops that queue's series too
            reserving[cq_name] += 1
            _add(reservation[cq_name], rec.usage)
            if _is_admitted(rec):
                admitted[cq_name] += 1
                _add(usage[cq_name], rec.usage)
        for gauge in (self.pending, self.reserving_active, self.admitted_active, self.cluster_queue_status,
                      self.resource_reservation, self.resource_usage, self.nominal_quota, self.tree_quota,
                      self.afs_usage):
            gauge.clear()
        for key in sorted(state.afs):
            lq = state.local_queues.get(key)
            if lq is not None:
                self.afs_usage.labels(lq.name, lq.namespace, lq.cluster_queue).set(admissionfair.lq_usage(state, key))
        self._refresh_tree(state)
        for name in sorted(state.cluster_queues):
            cq = state.cluster_queues[name]
            self.pending.labels(name, PENDING_ACTIVE).set(pending[name][0])
            self.pending.labels(name, PENDING_INADMISSIBLE).set(pending[name][1])
            self.reserving_active.labels(name).set(reserving[name])
            self.admitted_active.labels(name).set(admitted[name])
            status = "pending" if name in state.index.inactive else "active"
            for s in CQ_STATUSES:
                self.cluster_queue_status.labels(name, s).set(1 if s == status else 0)
            quotas = _quotas(cq)
            for flavor, resource in sorted(set(quotas) | set(reservation[name]) | set(usage[name])):
                labels = (cq.cohort, name, flavor, resource)
                fr = (flavor, resource)
                self.resource_reservation.labels(*labels).set(resource_value(resource, reservation[name].get(fr, 0)))
                self.resource_usage.labels(*labels).set(resource_value(resource, usage[name].get(fr, 0)))
                if fr in quotas:
                    self.nominal_quota.labels(*labels).set(resource_value(resource, quotas[fr]))
        self._forget_deleted(state)

    def _forget_deleted(self, state: State) -> None:
        """Counters of a deleted ClusterQueue go with it, as Kueue's ClearClusterQueueMetrics does."""
        gone = sorted(name for name in self._counted_queues if name not in state.cluster_queues)
        for name in gone:
            self._counted_queues.discard(name)
            for metric, labels in ((self.quota_reserved, _CQ), (self.quota_reserved_wait, _CQ),
                                   (self.admitted, _CQ), (self.admission_wait, _CQ),
                                   (self.evicted, ("cluster_queue", "reason")),
                                   (self.preempted, ("preempting_cluster_queue", "reason"))):
                _remove_series(metric, labels, name)
                self._series.pop((id(metric), name), None)


_CQ = ("cluster_queue",)


def _remove_series(metric: Counter | Histogram, labels: tuple[str, ...], queue: str) -> None:
    """Remove every series of ``metric`` whose first label (the ClusterQueue) is ``queue``."""
    keys = sorted({
        tuple(sample.labels[n] for n in labels)
        for family in metric.collect() for sample in family.samples
        if sample.labels.get(labels[0]) == queue
    })
    for key in keys:
        metric.remove(*key)


def _add(into: dict[FR, int], usage: dict[FR, int]) -> None:
    for fr, v in usage.items():
        into[fr] = into.get(fr, 0) + v


def _is_admitted(rec: WorkloadRecord) -> bool:
    return is_true(rec.conditions.get(ConditionType.ADMITTED))


def _quotas(cq: o.ClusterQueue) -> dict[FR, int]:
    return {(fq.name, res): q.nominal for g in cq.resource_groups for fq in g.flavors for res, q in fq.resources}


def _queued_wait_seconds(rec: WorkloadRecord, at: int) -> float:
    """Kueue's QueuedWaitTime: from creation, or from the last requeue if later, until ``at``."""
    start = rec.obj.creation_time if rec.obj.creation_time is not None else rec.queue_time
    requeued = rec.conditions.get(ConditionType.REQUEUED)
    if requeued is not None and is_true(requeued) and requeued.last_transition_time > start:
        start = requeued.last_transition_time
    return max(0, at - start) / 1000
