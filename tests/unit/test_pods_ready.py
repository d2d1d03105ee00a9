"""waitForPodsReady, requeuing back-off and maximum execution time (services.core.podsready), with Kueue's numbers."""

from __future__ import annotations

from typing import Any

import pytest

from events.cluster import ConditionType, EvictionReason
from events.manifests import Document, normalize
from events.messages import (
    ClockTicked,
    DeactivateWorkload,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    PendingReason,
    PodsNotReady,
    PodsReady,
    UpdateWorkloadStatus,
)
from services.core import podsready
from services.core.cycle import run_cycle
from services.core.state import State, fold
from tests.builders import (
    Builder,
    WorkloadBuilder,
    a_cluster_queue,
    a_configuration,
    a_flavor,
    a_local_queue,
    a_workload,
    build_state,
)

T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z: the builders' creation times count from here
MIN = 60_000


def _wl(name: str, cpu: str = "2", created: int = 1) -> WorkloadBuilder:
    return a_workload("ns", name).queue("lq").request(cpu=cpu).created(created)


def _state(*workloads: Builder, cpu: str = "4", **wait: Any) -> State:
    objects: list[Builder] = [a_flavor("f"), a_cluster_queue("cq").flavor("f", cpu=cpu),
                              a_local_queue("ns", "lq", "cq")]
    if wait.pop("on", True):
        objects.insert(0, a_configuration().wait_for_pods_ready(**wait))
    return build_state(*objects, *workloads)


def _at(state: State, ms: int) -> None:
    fold(state, ClockTicked(time=T0 + ms))


def _cond(state: State, key: str, ctype: str) -> tuple[str, str] | None:
    c = state.workloads[key].conditions.get(ctype)
    return (str(c.status), str(c.reason)) if c is not None else None


# --- the back-off ------------------------------------------------------------------------------


@pytest.mark.parametrize(("base", "cap", "want"), [
    pytest.param(60, 3600, [60, 120, 240, 480, 960, 1920, 3600, 3600], id="Kueue's defaults: 60 s doubling, 1 h cap"),
    pytest.param(10, 100, [10, 20, 40, 80, 100, 100], id="a cap that is not a doubling of the base"),
    pytest.param(5, 5, [5, 5, 5], id="base equals cap"),
])
def test_the_back_off_doubles_from_the_base_up_to_the_cap(base: int, cap: int, want: list[int]) -> None:
    assert [podsready.backoff_seconds(base, cap, n) for n in range(1, len(want) + 1)] == want


def test_a_huge_count_does_not_compute_a_huge_power() -> None:
    assert podsready.backoff_seconds(60, 3600, 10**9) == 3600


# --- the timeout -------------------------------------------------------------------------------


def test_without_wait_for_pods_ready_nothing_times_out() -> None:
    state = _state(_wl("job"), on=False)
    run_cycle(state)
    assert _cond(state, "ns/job", ConditionType.PODS_READY) is None
    _at(state, 24 * 60 * MIN)
    assert run_cycle(state).decisions == []
    assert podsready.next_deadline(state) is None


def test_pods_ready_condition_follows_kueues_reasons() -> None:
    state = _state(_wl("job"))
    run_cycle(state)
    assert _cond(state, "ns/job", ConditionType.PODS_READY) == ("False", "WaitForStart")
    fold(state, PodsReady(time=T0 + MIN, namespace="ns", name="job"))
    assert _cond(state, "ns/job", ConditionType.PODS_READY) == ("True", "Started")
    fold(state, PodsNotReady(time=T0 + 2 * MIN, namespace="ns", name="job"))
    assert _cond(state, "ns/job", ConditionType.PODS_READY) == ("False", "WaitForRecovery")
    fold(state, PodsReady(time=T0 + 3 * MIN, namespace="ns", name="job"))
    assert _cond(state, "ns/job", ConditionType.PODS_READY) == ("True", "Recovered")


def test_a_gang_not_ready_after_the_timeout_is_evicted_and_backs_off_60_seconds() -> None:
    state = _state(_wl("job", created=0), timeout="5m")  # v1beta1 default would be 5m too
    run_cycle(state)
    assert podsready.next_deadline(state) == T0 + 5 * MIN
    _at(state, 5 * MIN - 1)
    assert run_cycle(state).decisions == []
    _at(state, 5 * MIN)
    [d, news] = run_cycle(state).decisions
    assert isinstance(d, EvictWorkload) and d.reason == EvictionReason.PODS_READY_TIMEOUT
    assert d.message == "Exceeded the PodsReady timeout ns/job"
    rec = state.workloads["ns/job"]
    assert (rec.requeue_count, rec.requeue_at) == (1, T0 + 6 * MIN)
    # status.requeueState as it changes (status only: services.core.workload_status)
    assert isinstance(news, UpdateWorkloadStatus) and (news.requeue_count, news.requeue_at) == (1, T0 + 6 * MIN)
    assert rec.past_execution_ms == 5 * MIN
    fold(state, EvictionCompleted(time=T0 + 5 * MIN, namespace="ns", name="job"))
    assert _cond(state, "ns/job", ConditionType.REQUEUED) == ("False", "PodsReadyTimeout")
    assert rec.pending_reason == PendingReason.BACKING_OFF
    assert podsready.next_deadline(state) == T0 + 6 * MIN
    assert run_cycle(state).admitted_heads == [], "backing off"
    _at(state, 6 * MIN)
    result = run_cycle(state)
    assert result.admitted_heads == ["ns/job"]
    assert [(type(x).__name__, getattr(x, "requeue_at", 0)) for x in result.decisions] == [
        ("UpdateWorkloadStatus", None), ("AdmitWorkload", 0)]  # requeueAt cleared, then admitted
    assert _cond(state, "ns/job", ConditionType.REQUEUED) == ("True", "BackoffFinished")
    assert rec.requeue_count == 1, "kept until the workload is deactivated or re-activated"


def test_each_timeout_doubles_the_back_off() -> None:
    state = _state(_wl("job", created=0), timeout="1m")
    run_cycle(state)
    waits = []
    for _ in range(3):
        _at(state, state.now - T0 + MIN)
        run_cycle(state)
        rec = state.workloads["ns/job"]
        assert rec.requeue_at is not None
        waits.append((rec.requeue_at - state.now) // 1000)
        fold(state, EvictionCompleted(time=state.now, namespace="ns", name="job"))
        _at(state, rec.requeue_at - T0)
        assert run_cycle(state).admitted_heads == ["ns/job"]
    assert waits == [60, 120, 240]


def test_past_the_back_off_limit_the_workload_is_deactivated() -> None:
    state = _state(_wl("job", created=0), timeout="1m", requeuingStrategy={"backoffLimitCount": 1})
    run_cycle(state)
    _at(state, MIN)
    run_cycle(state)
    fold(state, EvictionCompleted(time=T0 + MIN, namespace="ns", name="job"))
    _at(state, 2 * MIN)
    assert run_cycle(state).admitted_heads == ["ns/job"]
    _at(state, 3 * MIN)
    [d, news] = run_cycle(state).decisions
    assert isinstance(news, UpdateWorkloadStatus) and (news.requeue_count, news.requeue_at) == (0, None)  # cleared
    assert isinstance(d, DeactivateWorkload)
    assert (d.reason, d.underlying_cause) == (EvictionReason.DEACTIVATED, "RequeuingLimitExceeded")
    assert d.message == "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    rec = state.workloads["ns/job"]
    assert not rec.active and (rec.requeue_count, rec.requeue_at) == (0, None)
    assert _cond(state, "ns/job", ConditionType.EVICTED) == ("True", "DeactivatedDueToRequeuingLimitExceeded")
    fold(state, EvictionCompleted(time=T0 + 3 * MIN, namespace="ns", name="job"))
    _at(state, 60 * MIN)
    assert run_cycle(state).decisions == [], "inactive: never requeued"


def test_a_limit_of_zero_deactivates_at_the_first_timeout() -> None:
    state = _state(_wl("job", created=0), timeout="1m", requeuingStrategy={"backoffLimitCount": 0})
    run_cycle(state)
    _at(state, MIN)
    [d] = run_cycle(state).decisions
    assert isinstance(d, DeactivateWorkload) and d.underlying_cause == "RequeuingLimitExceeded"


def test_a_lost_readiness_is_evicted_after_the_recovery_timeout() -> None:
    state = _state(_wl("job", created=0), timeout="10m", recoveryTimeout="2m")
    run_cycle(state)
    fold(state, PodsReady(time=T0 + MIN, namespace="ns", name="job"))
    _at(state, 30 * MIN)
    assert run_cycle(state).decisions == [], "ready: no timeout"
    fold(state, PodsNotReady(time=T0 + 31 * MIN, namespace="ns", name="job"))
    assert podsready.next_deadline(state) == T0 + 33 * MIN
    _at(state, 33 * MIN)
    [d, _] = run_cycle(state).decisions  # and its requeueState (UpdateWorkloadStatus)
    assert isinstance(d, EvictWorkload) and d.reason == EvictionReason.PODS_READY_TIMEOUT


@pytest.mark.parametrize(("strategy", "want_queue_time"), [
    pytest.param("Eviction", T0 + MIN, id="Eviction (the default): queued by the eviction's time"),
    pytest.param("Creation", T0, id="Creation: queued by its creation time"),
])
def test_the_requeuing_timestamp_orders_the_requeued_workload(strategy: str, want_queue_time: int) -> None:
    state = _state(_wl("job", created=0), timeout="1m", requeuingStrategy={"timestamp": strategy})
    run_cycle(state)
    _at(state, MIN)
    run_cycle(state)
    assert state.workloads["ns/job"].queue_time == want_queue_time


def test_block_admission_admits_nothing_while_an_admitted_workload_is_not_ready() -> None:
    state = _state(_wl("first", created=0), _wl("second", created=1), timeout="5m", blockAdmission=True)
    result = run_cycle(state)
    assert result.admitted_heads == ["ns/first"]
    run_cycle(state)
    rec = state.workloads["ns/second"]
    assert rec.admission is None and rec.pending_reason == PendingReason.WAITING_FOR_PODS_READY
    assert "waiting for all admitted workloads to be in PodsReady condition" in \
        rec.conditions[ConditionType.QUOTA_RESERVED].message
    fold(state, PodsReady(time=T0 + MIN, namespace="ns", name="first"))
    assert run_cycle(state).admitted_heads == ["ns/second"]


def test_without_block_admission_both_are_admitted_at_once() -> None:
    state = _state(_wl("first", created=0), _wl("second", created=1), timeout="5m", blockAdmission=False)
    run_cycle(state)
    assert run_cycle(state).admitted_heads == ["ns/second"]


# --- maximum execution time ---------------------------------------------------------------------


def test_the_maximum_execution_time_deactivates_the_workload() -> None:
    state = _state(_wl("job", created=0).max_exec(600), on=False)
    run_cycle(state)
    assert podsready.next_deadline(state) == T0 + 10 * MIN
    _at(state, 10 * MIN - 1)
    assert run_cycle(state).decisions == []
    _at(state, 10 * MIN)
    [d] = run_cycle(state).decisions
    assert isinstance(d, DeactivateWorkload) and d.underlying_cause == "MaximumExecutionTimeExceeded"
    assert d.message == "The workload is deactivated due to exceeding the maximum execution time"


def test_the_execution_time_accumulates_across_requeues() -> None:
    state = _state(_wl("job", created=0).max_exec(150), timeout="1m")
    run_cycle(state)
    _at(state, MIN)
    run_cycle(state)  # a PodsReady timeout after 60 s admitted
    fold(state, EvictionCompleted(time=T0 + MIN, namespace="ns", name="job"))
    _at(state, 2 * MIN)
    assert run_cycle(state).admitted_heads == ["ns/job"]
    fold(state, PodsReady(time=T0 + 2 * MIN, namespace="ns", name="job"))
    assert state.workloads["ns/job"].past_execution_ms == MIN
    assert podsready.next_deadline(state) == T0 + 2 * MIN + 90_000, "150 s in all, 60 s already spent"
    _at(state, 2 * MIN + 90_000)
    [d, _] = run_cycle(state).decisions  # and its requeueState cleared (UpdateWorkloadStatus)
    assert isinstance(d, DeactivateWorkload) and d.underlying_cause == "MaximumExecutionTimeExceeded"


def test_the_job_label_sets_the_maximum_execution_time() -> None:
    from tests.builders import a_job

    job = a_job("ns", "j", "lq").obj()
    job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "90"
    wl = normalize(Document("t.yaml", 1, job))
    assert wl is not None and getattr(wl, "maximum_execution_time_seconds", None) == 90


def test_a_bad_max_exec_time_label_is_refused_naming_the_label() -> None:
    from events.manifests import ManifestError
    from tests.builders import a_job

    job = a_job("ns", "j", "lq").obj()
    job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "0"
    with pytest.raises(ManifestError, match="max-exec-time-seconds"):
        normalize(Document("t.yaml", 1, job))


def test_a_user_re_activating_a_deactivated_workload_starts_over() -> None:
    state = _state(_wl("job", created=0), timeout="1m", requeuingStrategy={"backoffLimitCount": 0})
    run_cycle(state)
    _at(state, MIN)
    run_cycle(state)
    fold(state, EvictionCompleted(time=T0 + MIN, namespace="ns", name="job"))
    for active, at in ((False, 2 * MIN), (True, 3 * MIN)):  # the actuator's write, then the user's edit
        obj = normalize(Document("t.yaml", 9, _wl("job", created=0).active(active).obj()))
        assert obj is not None
        fold(state, ObjectApplied(time=T0 + at, object=obj))
    assert _cond(state, "ns/job", ConditionType.REQUEUED) == ("True", "Reactivated")
    assert run_cycle(state).admitted_heads == ["ns/job"]
    assert state.workloads["ns/job"].requeue_count == 0


def test_evictions_are_counted_by_reason() -> None:
    from services.scheduler.metrics import SchedulerMetrics

    state = _state(_wl("job", created=0), timeout="1m", requeuingStrategy={"backoffLimitCount": 1})
    metrics = SchedulerMetrics()
    run_cycle(state)
    for at in (MIN, 3 * MIN):
        _at(state, at)
        metrics.observe(run_cycle(state).decisions, [], state)
        fold(state, EvictionCompleted(time=T0 + at, namespace="ns", name="job"))
        _at(state, at + MIN)
        run_cycle(state)
    registry = metrics.registry
    for reason in ("PodsReadyTimeout", "Deactivated"):
        got = registry.get_sample_value("kueue_evicted_workloads_total", {"cluster_queue": "cq", "reason": reason})
        assert got == 1.0, reason
    tagged = registry.get_sample_value("kueuelog_decisions_total", {"type": "evict.deactivate"})
    assert tagged == 1.0


def test_an_eviction_completing_after_the_back_off_queues_at_once() -> None:
    state = _state(_wl("job", created=0), timeout="1m")
    run_cycle(state)
    _at(state, MIN)
    run_cycle(state)  # requeueAt = 2m
    fold(state, EvictionCompleted(time=T0 + 3 * MIN, namespace="ns", name="job"))  # pods gone only at 3m
    rec = state.workloads["ns/job"]
    assert (rec.requeue_count, rec.requeue_at) == (1, None)
    assert _cond(state, "ns/job", ConditionType.REQUEUED) == ("True", "BackoffFinished")
    assert run_cycle(state).admitted_heads == ["ns/job"]


def test_a_head_blocked_by_block_admission_does_not_keep_simulate_busy() -> None:
    from services.app.simulate import run

    state = build_state(a_configuration().wait_for_pods_ready(timeout="5m", blockAdmission=True),
                        a_flavor("f1"), a_flavor("f2"),
                        a_cluster_queue("cq").group(("f1", {"cpu": "4"}), ("f2", {"cpu": "4"})),
                        a_local_queue("ns", "lq", "cq"), _wl("first", created=0), _wl("second", created=1))
    result = run(state, None)
    assert result.converged
    assert state.workloads["ns/second"].pending_reason == PendingReason.WAITING_FOR_PODS_READY
