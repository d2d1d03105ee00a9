"""SchedulerMetrics: Kueue's metric names, labels and units, fed from real cycles over a small state."""

from __future__ import annotations

from typing import Any

import pytest

from events.manifests import Document, normalize
from events.messages import (
    AnyDecision,
    CycleCompleted,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    ObjectDeleted,
)
from services.core.cycle import run_cycle
from services.core.state import State, fold
from services.scheduler.metrics import WAIT_TIME_BUCKETS, SchedulerMetrics
from tests.builders import (
    Builder,
    a_cluster_queue,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_workload,
    build_state,
)

GiB = 1 << 30
BASE_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z, the builders' time zero
PROVISIONING_CHECK = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck",
                      "metadata": {"name": "prov"}, "spec": {"controllerName": "example.com/prov"}}


def step(state: State) -> tuple[list[AnyDecision], list[CycleCompleted]]:
    """Cycles until quiet, with the records the scheduler writes for them."""
    decisions: list[AnyDecision] = []
    records: list[CycleCompleted] = []
    while True:
        result = run_cycle(state)
        decisions.extend(result.decisions)
        records.append(CycleCompleted(cycle=state.cycles, input_offset=0, time=state.now,
                                      decisions=len(result.decisions), admitted_heads=tuple(result.admitted_heads),
                                      heads=tuple(result.heads)))
        if not result.changed:
            return decisions, records


def apply(state: State, builder: Builder, at_seconds: int) -> None:
    obj = normalize(Document("test.yaml", 1, builder.obj()))
    assert obj is not None
    fold(state, ObjectApplied(time=BASE_MS + at_seconds * 1000, object=obj))


def two_queues() -> State:
    """cq-a: 4 cpu / 8Gi, preempts lower priority; cq-b: 2 cpu behind an admission check.
    Three 2-cpu workloads for cq-a (created at 0s, 10s, 20s), one 500m for cq-b (5s)."""
    return build_state(
        a_flavor("default"), PROVISIONING_CHECK,
        a_cluster_queue("cq-a").flavor("default", cpu="4", memory="8Gi").preemption(within="LowerPriority"),
        a_cluster_queue("cq-b").cohort("all").flavor("default", cpu="2").admission_checks("prov"),
        a_namespace("team-a"), a_namespace("team-b"),
        a_local_queue("team-a", "lq", "cq-a"), a_local_queue("team-b", "lq", "cq-b"),
        a_workload("team-a", "w1").queue("lq").request(cpu="2", memory="1Gi").created(0),
        a_workload("team-a", "w2").queue("lq").request(cpu="2", memory="1Gi").created(10),
        a_workload("team-a", "w3").queue("lq").request(cpu="2", memory="1Gi").created(20),
        a_workload("team-b", "w5").queue("lq").request(cpu="500m").created(5),
    )


def value(m: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def series(m: SchedulerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in m.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


@pytest.fixture
def first_step() -> tuple[SchedulerMetrics, State]:
    state = two_queues()
    metrics = SchedulerMetrics()
    decisions, records = step(state)
    metrics.observe(decisions, records, state, events_folded=12, log_lag=3)
    return metrics, state


@pytest.mark.parametrize(("name", "labels", "expected"), [
    # w1 and w2 fit cq-a's 4 cpu; w3 does not and may not preempt an equal priority: parked.
    pytest.param("kueue_pending_workloads", {"cluster_queue": "cq-a", "status": "active"}, 0.0,
                 id="nothing left in cq-a's active queue"),
    pytest.param("kueue_pending_workloads", {"cluster_queue": "cq-a", "status": "inadmissible"}, 1.0,
                 id="w3 is parked as inadmissible"),
    pytest.param("kueue_pending_workloads", {"cluster_queue": "cq-b", "status": "active"}, 0.0,
                 id="an empty queue still reports zero"),
    pytest.param("kueue_reserving_active_workloads", {"cluster_queue": "cq-a"}, 2.0, id="w1 and w2 reserve"),
    pytest.param("kueue_admitted_active_workloads", {"cluster_queue": "cq-a"}, 2.0, id="and are admitted"),
    pytest.param("kueue_reserving_active_workloads", {"cluster_queue": "cq-b"}, 1.0,
                 id="w5 reserves quota in cq-b"),
    pytest.param("kueue_admitted_active_workloads", {"cluster_queue": "cq-b"}, 0.0,
                 id="but waits for its admission check"),
    pytest.param("kueue_quota_reserved_workloads_total", {"cluster_queue": "cq-a"}, 2.0, id="two reservations in a"),
    pytest.param("kueue_quota_reserved_workloads_total", {"cluster_queue": "cq-b"}, 1.0, id="one reservation in b"),
    pytest.param("kueue_admitted_workloads_total", {"cluster_queue": "cq-a"}, 2.0, id="two admissions in a"),
    pytest.param("kueue_admitted_workloads_total", {"cluster_queue": "cq-b"}, None,
                 id="no admission in b before its check passes"),
    pytest.param("kueue_admission_attempts_total", {"result": "success"}, 2.0, id="two cycles admitted something"),
    pytest.param("kueue_admission_attempts_total", {"result": "inadmissible"}, 1.0,
                 id="one cycle only had w3, which did not fit"),
    pytest.param("kueue_cluster_queue_nominal_quota",
                 {"cohort": "", "cluster_queue": "cq-a", "flavor": "default", "resource": "cpu"}, 4.0,
                 id="cpu quota in cores"),
    pytest.param("kueue_cluster_queue_nominal_quota",
                 {"cohort": "", "cluster_queue": "cq-a", "flavor": "default", "resource": "memory"}, 8.0 * GiB,
                 id="memory quota in bytes"),
    pytest.param("kueue_cluster_queue_nominal_quota",
                 {"cohort": "all", "cluster_queue": "cq-b", "flavor": "default", "resource": "cpu"}, 2.0,
                 id="the cohort label names the ClusterQueue's cohort"),
    pytest.param("kueue_cluster_queue_resource_usage",
                 {"cohort": "", "cluster_queue": "cq-a", "flavor": "default", "resource": "cpu"}, 4.0,
                 id="admitted usage in cores"),
    pytest.param("kueue_cluster_queue_resource_usage",
                 {"cohort": "", "cluster_queue": "cq-a", "flavor": "default", "resource": "memory"}, 2.0 * GiB,
                 id="admitted usage in bytes"),
    pytest.param("kueue_cluster_queue_resource_reservation",
                 {"cohort": "all", "cluster_queue": "cq-b", "flavor": "default", "resource": "cpu"}, 0.5,
                 id="500m reserved is half a core"),
    pytest.param("kueue_cluster_queue_resource_usage",
                 {"cohort": "all", "cluster_queue": "cq-b", "flavor": "default", "resource": "cpu"}, 0.0,
                 id="reserved but not admitted is not usage"),
    pytest.param("kueue_cluster_queue_status", {"cluster_queue": "cq-a", "status": "active"}, 1.0,
                 id="cq-a is active"),
    pytest.param("kueue_cluster_queue_status", {"cluster_queue": "cq-a", "status": "pending"}, 0.0,
                 id="and only active"),
    pytest.param("kueuelog_events_folded_total", {}, 12.0, id="events folded as the shell reports them"),
    pytest.param("kueuelog_log_lag", {}, 3.0, id="lag as the shell reports it"),
    pytest.param("kueuelog_cycles_total", {}, 4.0, id="three deciding cycles and a quiet one"),
    pytest.param("kueuelog_decisions_total", {"type": "admit"}, 3.0, id="three admit decisions"),
    pytest.param("kueuelog_decisions_total", {"type": "pending"}, 1.0, id="one pending decision for w3"),
])
def test_first_step(first_step: tuple[SchedulerMetrics, State], name: str, labels: dict[str, str],
                    expected: float | None) -> None:
    metrics, _ = first_step
    assert value(metrics, name, **labels) == expected


def test_wait_times_use_kueues_buckets_and_seconds(first_step: tuple[SchedulerMetrics, State]) -> None:
    metrics, state = first_step
    # The cycle ran at the newest event's time, 20s: w1 (created at 0s) waited 20s, w2 10s.
    assert state.now == BASE_MS + 20_000
    name = "kueue_admission_wait_time_seconds"
    assert value(metrics, f"{name}_count", cluster_queue="cq-a") == 2.0
    assert value(metrics, f"{name}_sum", cluster_queue="cq-a") == 30.0
    buckets = {float(labels[1][1]) if labels[1][1] != "+Inf" else float("inf"): v
               for labels, v in series(metrics, f"{name}_bucket").items() if ("cluster_queue", "cq-a") in labels}
    assert sorted(buckets) == [*WAIT_TIME_BUCKETS, float("inf")]
    assert WAIT_TIME_BUCKETS[:4] == (1.0, 2.5, 5.0, 10.0) and WAIT_TIME_BUCKETS[-1] == 10240.0
    assert (buckets[5.0], buckets[10.0], buckets[20.0], buckets[float("inf")]) == (0.0, 1.0, 2.0, 2.0)
    # Quota reservation is timed for cq-b too (w5 created at 5s), admission is not.
    assert value(metrics, "kueue_quota_reserved_wait_time_seconds_sum", cluster_queue="cq-b") == 15.0
    assert value(metrics, f"{name}_count", cluster_queue="cq-b") is None


def test_preemption_counts_evictions_for_the_victim_and_preemptions_for_the_preemptor(
    first_step: tuple[SchedulerMetrics, State],
) -> None:
    metrics, state = first_step
    urgent = a_workload("team-a", "urgent").queue("lq").request(cpu="2", memory="1Gi").priority(100).created(30)
    apply(state, urgent, 30)
    decisions, records = step(state)
    evictions = [d for d in decisions if isinstance(d, EvictWorkload)]
    assert [(e.cluster_queue, e.reason, e.preemption_reason, e.preemptor) for e in evictions] == [
        ("cq-a", "Preempted", "InClusterQueue", "team-a/urgent")]
    metrics.observe(decisions, records, state, events_folded=1)

    assert value(metrics, "kueue_evicted_workloads_total", cluster_queue="cq-a", reason="Preempted") == 1.0
    assert value(metrics, "kueue_preempted_workloads_total", preempting_cluster_queue="cq-a",
                 reason="InClusterQueue") == 1.0
    assert value(metrics, "kueuelog_decisions_total", type="evict") == 1.0
    assert value(metrics, "kueuelog_events_folded_total") == 13.0
    # Until its eviction completes the victim holds its quota and, as in Kueue, stays Admitted.
    assert value(metrics, "kueue_reserving_active_workloads", cluster_queue="cq-a") == 2.0
    assert value(metrics, "kueue_admitted_active_workloads", cluster_queue="cq-a") == 2.0
    # The preemptor waits for its victim: it is pending, in the active queue again.
    assert value(metrics, "kueue_pending_workloads", cluster_queue="cq-a", status="active") == 1.0
    # Counters never go down between steps.
    assert value(metrics, "kueue_admitted_workloads_total", cluster_queue="cq-a") == 2.0

    # The victim's pods are gone: its quota is released and the preemptor takes it.
    victim = evictions[0]
    fold(state, EvictionCompleted(time=state.now, namespace=victim.namespace, name=victim.name))
    metrics.observe(*step(state), state, events_folded=1)
    assert value(metrics, "kueue_admitted_workloads_total", cluster_queue="cq-a") == 3.0
    assert value(metrics, "kueue_admitted_active_workloads", cluster_queue="cq-a") == 2.0
    # The victim went back to its queue, and stays parked next to w3 (neither may preempt).
    assert value(metrics, "kueue_pending_workloads", cluster_queue="cq-a", status="inadmissible") == 2.0


def test_a_deleted_cluster_queue_takes_its_series_with_it(first_step: tuple[SchedulerMetrics, State]) -> None:
    metrics, state = first_step
    fold(state, ObjectDeleted(time=state.now, kind="ClusterQueue", name="cq-b"))
    metrics.observe([], [], state)
    remaining: set[str] = set()
    for family in metrics.registry.collect():
        for sample in family.samples:
            remaining.add(sample.labels.get("cluster_queue", ""))
            remaining.add(sample.labels.get("preempting_cluster_queue", ""))
    assert "cq-b" not in remaining
    assert "cq-a" in remaining
    assert value(metrics, "kueue_quota_reserved_workloads_total", cluster_queue="cq-a") == 2.0


def test_an_inactive_cluster_queue_is_reported_pending() -> None:
    state = build_state(a_cluster_queue("cq").flavor("missing-flavor", cpu="1"))
    metrics = SchedulerMetrics()
    metrics.observe(*step(state), state)
    assert value(metrics, "kueue_cluster_queue_status", cluster_queue="cq", status="pending") == 1.0
    assert value(metrics, "kueue_cluster_queue_status", cluster_queue="cq", status="active") == 0.0


def test_every_instance_has_its_own_registry() -> None:
    state = two_queues()
    observed, untouched = SchedulerMetrics(), SchedulerMetrics()
    observed.observe(*step(state), state)
    assert value(observed, "kueue_quota_reserved_workloads_total", cluster_queue="cq-a") == 2.0
    assert value(untouched, "kueue_quota_reserved_workloads_total", cluster_queue="cq-a") is None
    assert observed.registry is not untouched.registry


def test_kueue_metric_names_and_labels() -> None:
    """The names and label sets Kueue dashboards query (pkg/metrics/metrics.go)."""
    metrics = SchedulerMetrics()
    state = two_queues()
    metrics.observe(*step(state), state)
    got: dict[str, Any] = {}
    for family in metrics.registry.collect():
        labels: set[str] = set()
        for sample in family.samples:
            labels.update(k for k in sample.labels if k != "le")
        got[family.name] = (family.type, labels)
    fr = {"cohort", "cluster_queue", "flavor", "resource"}
    assert got["kueue_pending_workloads"] == ("gauge", {"cluster_queue", "status"})
    assert got["kueue_admitted_workloads"] == ("counter", {"cluster_queue"})
    assert got["kueue_quota_reserved_workloads"] == ("counter", {"cluster_queue"})
    assert got["kueue_admission_attempts"] == ("counter", {"result"})
    assert got["kueue_admission_wait_time_seconds"] == ("histogram", {"cluster_queue"})
    assert got["kueue_reserving_active_workloads"] == ("gauge", {"cluster_queue"})
    assert got["kueue_admitted_active_workloads"] == ("gauge", {"cluster_queue"})
    assert got["kueue_cluster_queue_resource_usage"] == ("gauge", fr)
    assert got["kueue_cluster_queue_nominal_quota"] == ("gauge", fr)
    assert got["kueue_evicted_workloads"][0] == "counter"
    assert got["kueue_preempted_workloads"][0] == "counter"
    assert got["kueuelog_log_lag"][0] == "gauge"


def test_gauges_are_refreshed_at_most_once_per_interval_counters_every_step() -> None:
    now = [0.0]
    metrics = SchedulerMetrics(gauge_interval_s=1.0, clock=lambda: now[0])
    calls: list[float] = []
    real = metrics._refresh_gauges
    metrics._refresh_gauges = lambda state: (calls.append(now[0]), real(state))  # type: ignore[method-assign]
    state = State()
    for t in (0.0, 0.3, 0.9, 1.0, 1.5, 2.2):
        now[0] = t
        metrics.observe([], [], state, events_folded=1)
    assert calls == [0.0, 1.0, 2.2]
    assert metrics.registry.get_sample_value("kueuelog_events_folded_total") == 6
    metrics.refresh(state)
    assert calls[-1] == 2.2 and len(calls) == 4


def test_lazy_gauges_are_refreshed_by_a_scrape_not_by_steps() -> None:
    from prometheus_client import generate_latest

    metrics = SchedulerMetrics(gauge_interval_s=None)
    calls: list[int] = []
    real = metrics._refresh_gauges
    metrics._refresh_gauges = lambda state: (calls.append(1), real(state))  # type: ignore[method-assign]
    state = State()
    for _ in range(5):
        metrics.observe([], [], state, events_folded=1)
    assert calls == []
    text = generate_latest(metrics.registry).decode()
    assert calls == [1] and "kueuelog_events_folded_total 5.0" in text


def test_a_check_ready_admits_and_observes_the_wait_from_reservation() -> None:
    """kueue_admission_checks_wait_time_seconds: from quota reservation to admission (Kueue's
    ReportAdmissionChecksWaitTime); w5 is admitted when its check is Ready, 30 s later."""
    from events import objects as o
    from events.messages import AdmissionCheckUpdated

    state = two_queues()
    metrics = SchedulerMetrics()
    metrics.observe(*step(state), state)
    assert value(metrics, "kueue_admitted_workloads_total", cluster_queue="cq-b") in (None, 0.0)
    reserved = state.workloads["team-b/w5"].reserved_at
    assert reserved is not None
    fold(state, AdmissionCheckUpdated(time=reserved + 30_000, namespace="team-b", name="w5",
                                      check=o.AdmissionCheckState(name="prov", state=o.CheckState.READY)))
    metrics.observe(*step(state), state)
    assert value(metrics, "kueue_admitted_workloads_total", cluster_queue="cq-b") == 1.0
    assert value(metrics, "kueue_admission_checks_wait_time_seconds_count", cluster_queue="cq-b") == 1.0
    assert value(metrics, "kueue_admission_checks_wait_time_seconds_sum", cluster_queue="cq-b") == 30.0
