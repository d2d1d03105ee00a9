"""Deactivation and re-activation (``spec.active``): services.core.deactivation through fold and cycles."""

from __future__ import annotations

from events.cluster import ConditionType, DeactivationCause, EvictionReason
from events.manifests import Document, normalize
from events.messages import (
    DeactivateWorkload,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    PendingReason,
    WorkloadActivation,
)
from services.core import deactivation
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.snapshot import encode_state
from services.core.state import State, fold
from tests.builders import Builder, a_cluster_queue, a_flavor, a_local_queue, a_workload, build_state


def _setup(*workloads: Builder) -> State:
    return build_state(a_flavor("f"), a_cluster_queue("cq").flavor("f", cpu="4"), a_local_queue("ns", "lq", "cq"),
                       *workloads)


def _apply(state: State, b: Builder, time: int = 0) -> None:
    obj = normalize(Document("test.yaml", 99, b.obj()))
    assert obj is not None
    fold(state, ObjectApplied(time=time, object=obj))


def _wl(name: str, cpu: str = "2", created: int = 1) -> Builder:
    return a_workload("ns", name).queue("lq").request(cpu=cpu).created(created)


def _reason(state: State, key: str, ctype: str) -> tuple[str, str] | None:
    c = state.workloads[key].conditions.get(ctype)
    return (c.status, c.reason) if c is not None else None


def test_an_inactive_workload_is_never_nominated() -> None:
    state = _setup(_wl("off").active(False), _wl("on", created=2))
    result = run_cycle(state)
    assert result.admitted_heads == ["ns/on"]
    rec = state.workloads["ns/off"]
    assert rec.admission is None and rec.pending_reason == PendingReason.INACTIVE
    assert run_cycle(state).decisions == []


def test_a_user_deactivating_an_admitted_workload_evicts_it_with_reason_deactivated() -> None:
    state = _setup(_wl("job"))
    run_cycle(state)
    _apply(state, _wl("job").active(False), time=5_000)
    d = run_cycle(state).decisions
    assert len(d) == 1 and isinstance(d[0], DeactivateWorkload)
    assert (d[0].reason, d[0].underlying_cause, d[0].message) == (EvictionReason.DEACTIVATED, "",
                                                                  "The workload is deactivated")
    assert _reason(state, "ns/job", ConditionType.EVICTED) == ("True", "Deactivated")
    fold(state, EvictionCompleted(time=6_000, namespace="ns", name="job"))
    assert _reason(state, "ns/job", ConditionType.REQUEUED) == ("False", "Deactivated")
    assert run_cycle(state).decisions == [], "not requeued while inactive"


def test_the_scheduler_deactivating_names_its_cause_as_kueue_does() -> None:
    state = _setup(_wl("job"))
    run_cycle(state)
    rec = state.workloads["ns/job"]
    deactivation.deactivate(state, rec, DeactivationCause.REQUEUING_LIMIT_EXCEEDED,
                            "exceeding the maximum number of re-queuing retries")
    assert not rec.active
    [d] = run_cycle(state).decisions
    assert isinstance(d, DeactivateWorkload) and isinstance(d, EvictWorkload)
    assert d.underlying_cause == "RequeuingLimitExceeded"
    assert d.message == "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    assert _reason(state, "ns/job", ConditionType.EVICTED) == ("True", "DeactivatedDueToRequeuingLimitExceeded")
    assert run_cycle(state).decisions == [], "evicted once"


def test_a_user_re_activating_starts_over_and_it_is_admitted_again() -> None:
    state = _setup(_wl("job"))
    run_cycle(state)
    _apply(state, _wl("job").active(False), time=5_000)
    run_cycle(state)
    fold(state, EvictionCompleted(time=6_000, namespace="ns", name="job"))
    _apply(state, _wl("job").active(True), time=7_000)
    assert _reason(state, "ns/job", ConditionType.REQUEUED) == ("True", "Reactivated")
    assert run_cycle(state).admitted_heads == ["ns/job"]


def test_re_activated_before_its_eviction_it_keeps_its_quota() -> None:
    state = _setup(_wl("job"))
    run_cycle(state)
    _apply(state, _wl("job").active(False))
    _apply(state, _wl("job").active(True))
    assert run_cycle(state).decisions == []
    assert state.workloads["ns/job"].admission is not None


def test_a_pending_workload_deactivated_leaves_its_queue_and_frees_the_head() -> None:
    state = _setup(_wl("big", cpu="4"), _wl("next", cpu="4", created=2))
    deactivation.deactivate(state, state.workloads["ns/big"], DeactivationCause.ADMISSION_CHECK, "rejected")
    assert run_cycle(state).admitted_heads == ["ns/next"]


def test_a_workload_arriving_inactive_but_holding_quota_is_evicted() -> None:
    state = _setup(_wl("held").active(False).admitted("cq", {"cpu": "f"}))
    [d] = run_cycle(state).decisions
    assert isinstance(d, DeactivateWorkload) and d.name == "held"


def test_replaying_a_deactivation_gives_the_live_state() -> None:
    live = _setup(_wl("job"), _wl("other", created=2))
    run_cycle(live)
    replayed = _setup(_wl("job"), _wl("other", created=2))
    first = run_cycle(replayed)
    deactivation.deactivate(live, live.workloads["ns/job"], DeactivationCause.MAXIMUM_EXECUTION_TIME_EXCEEDED,
                            "exceeding the maximum execution time")
    second = run_cycle(live)
    assert first.decisions  # both admitted
    from events.messages import CycleCompleted

    record = CycleCompleted(cycle=2, input_offset=0, time=0, decisions=len(second.decisions),
                            admitted_heads=tuple(second.admitted_heads), heads=tuple(second.heads))
    apply_cycle(replayed, second.decisions, record)
    assert encode_state(replayed) == encode_state(live)


def test_a_jobs_workload_set_active_again_is_re_activated_and_admitted() -> None:
    """On a cluster the Job is its Workload's source of truth: the watcher publishes only the
    Workload's spec.active (WorkloadActivation), and true after the scheduler's deactivation
    starts the workload over, as a user editing Kueue's Workload expects."""
    state = _setup(_wl("job"))
    run_cycle(state)
    rec = state.workloads["ns/job"]
    deactivation.deactivate(state, rec, DeactivationCause.REQUEUING_LIMIT_EXCEEDED, "too many retries")
    run_cycle(state)
    fold(state, EvictionCompleted(time=6_000, namespace="ns", name="job"))
    # The actuator's write-back of spec.active=false says nothing new.
    fold(state, WorkloadActivation(time=6_500, namespace="ns", name="job", active=False))
    assert not rec.active and run_cycle(state).admitted_heads == []
    fold(state, WorkloadActivation(time=7_000, namespace="ns", name="job", active=True))
    assert rec.active and rec.requeue_count == 0
    assert _reason(state, "ns/job", ConditionType.REQUEUED) == ("True", "Reactivated")
    assert run_cycle(state).admitted_heads == ["ns/job"]
    # For an active workload, and for one nobody knows, it is nothing.
    fold(state, WorkloadActivation(time=8_000, namespace="ns", name="job", active=True))
    fold(state, WorkloadActivation(time=8_000, namespace="ns", name="nobody", active=True))
    assert state.anomaly_count == 0 and rec.admission is not None
