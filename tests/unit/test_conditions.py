"""The Workload condition transitions of ``events.conditions``, and proof that the two writers
agree: the scheduler core's state and the Kubernetes actuator's Workload status end up with the
same conditions after the same decisions (one implementation, so they cannot drift)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from events import conditions as cond
from events.cluster import ConditionType, EvictionReason, PendingConditionReason, PreemptionReason
from events.codec import decode_decision, encode
from events.manifests import Document, normalize
from events.messages import (
    AdmitWorkload,
    AnyDecision,
    Condition,
    EvictionCompleted,
    EvictWorkload,
    MarkPending,
    ObjectApplied,
    PendingReason,
    WorkloadFinished,
)
from services.actuator.kubeplan import (
    admitted_status,
    condition_json,
    conditions_by_type,
    evicted_status,
    pending_status,
)
from services.core.cycle import run_cycle
from services.core.state import State, fold
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, build_state

T = 1_700_000_000_000

Seen = dict[str, tuple[str, str, str]]
"""Conditions by type: (status, reason, message)."""


def seen(conditions: list[Condition]) -> Seen:
    return {str(c.type): (str(c.status), str(c.reason), c.message) for c in conditions}


# --- the transitions ------------------------------------------------------------------------------


def test_admission_reserves_quota_and_admits() -> None:
    assert seen(cond.admission({}, "cq", T)) == {
        "QuotaReserved": ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        "Admitted": ("True", "Admitted", "The workload is admitted"),
    }


def test_admission_with_pending_admission_checks_is_not_admitted_yet() -> None:
    assert seen(cond.admission({}, "cq", T, checks_pending=True))["Admitted"] == (
        "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready")


@pytest.mark.parametrize(("current", "want_history"), [
    pytest.param({"Evicted": cond.evicted(EvictionReason.PREEMPTED, "to make room", T),
                  "Preempted": cond.preempted(PreemptionReason.IN_CLUSTER_QUEUE, "to make room", T)},
                 {"Evicted": ("False", "QuotaReserved", "Previously: to make room"),
                  "Preempted": ("False", "QuotaReserved", "Previously: to make room")},
                 id="a preemption still True becomes history"),
    pytest.param({"Evicted": cond.evicted(EvictionReason.CLUSTER_QUEUE_STOPPED, "stopped", T)},
                 {"Evicted": ("False", "QuotaReserved", "Previously: stopped")},
                 id="a drain leaves Evicted history only"),
    pytest.param({"Evicted": cond.condition(ConditionType.EVICTED, False, "QuotaReserved", "Previously: x", T)},
                 {}, id="history already written is left alone"),
])
def test_readmission_turns_an_eviction_into_history(current: Mapping[str, Condition],
                                                    want_history: Seen) -> None:
    got = seen(cond.admission(current, "cq", T + 5))
    assert {k: v for k, v in got.items() if k not in ("QuotaReserved", "Admitted")} == want_history


@pytest.mark.parametrize(("reason", "preemption_reason", "want_types"), [
    pytest.param(EvictionReason.PREEMPTED, PreemptionReason.IN_COHORT_RECLAMATION, ["Evicted", "Preempted"],
                 id="preempted: Evicted and Preempted"),
    pytest.param(EvictionReason.LOCAL_QUEUE_STOPPED, "", ["Evicted"], id="drained: Evicted only"),
])
def test_eviction_says_why(reason: EvictionReason, preemption_reason: str, want_types: list[str]) -> None:
    out = cond.eviction(reason, "why", preemption_reason, T)
    assert [str(c.type) for c in out] == want_types
    assert out[0].reason == reason and all(c.status == "True" and c.message == "why" for c in out)
    if preemption_reason:
        assert out[1].reason == preemption_reason


@pytest.mark.parametrize(("evicted", "want"), [
    pytest.param(cond.evicted(EvictionReason.PREEMPTED, "to make room", T), {
        "QuotaReserved": ("False", "Pending", "to make room"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Requeued": ("True", "Preempted", "to make room"),
    }, id="a preempted workload goes straight back"),
    pytest.param(cond.evicted(EvictionReason.CLUSTER_QUEUE_STOPPED, "The ClusterQueue is stopped", T), {
        "QuotaReserved": ("False", "Pending", "The ClusterQueue is stopped"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Requeued": ("False", "ClusterQueueStopped", "The ClusterQueue is stopped"),
    }, id="a drained workload waits for its queue"),
    pytest.param(None, {
        "QuotaReserved": ("False", "Pending", "The workload is pending after eviction"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Requeued": ("False", "Requeued", "The workload was requeued after eviction"),
    }, id="without an Evicted condition: Kueue's default texts"),
])
def test_eviction_completed(evicted: Condition | None, want: Seen) -> None:
    assert seen(cond.eviction_completed(evicted, T)) == want


def test_pending_as_is_quota_reserved_false_with_the_given_reason() -> None:
    assert seen([cond.pending_as(PendingConditionReason.INADMISSIBLE, "no queue", T)]) == {
        "QuotaReserved": ("False", "Inadmissible", "no queue")}
    assert cond.pending("m", T) == cond.pending_as(PendingConditionReason.PENDING, "m", T)


def test_closed_set_members_are_their_strings_on_the_wire() -> None:
    d = EvictWorkload(id="c1-0", cycle=1, namespace="ns", name="w", reason=EvictionReason.PREEMPTED, message="m",
                      preemption_reason=PreemptionReason.IN_CLUSTER_QUEUE)
    raw = encode(d)
    assert b'"reason":"Preempted"' in raw and b'"preemption_reason":"InClusterQueue"' in raw
    back = decode_decision(raw)
    assert back == d and isinstance(back, EvictWorkload) and back.reason is EvictionReason.PREEMPTED
    pending = MarkPending(id="c1-1", cycle=1, namespace="ns", name="w", reason=PendingReason.ON_HOLD, message="m",
                          condition_reason=PendingConditionReason.INADMISSIBLE)
    assert b'"condition_reason":"Inadmissible"' in encode(pending)


# --- the core and the actuator agree ----------------------------------------------------------------


def _written(status: Mapping[str, Any]) -> Seen:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions", [])}


def _kept(state: State, key: str) -> Seen:
    return seen(list(state.workloads[key].conditions.values()))


def _write(status: dict[str, Any], decisions: list[AnyDecision], key: str) -> dict[str, Any]:
    """What the Kubernetes actuator writes to the Workload ``key`` for these decisions, in order."""
    for d in decisions:
        if f"{d.namespace}/{d.name}" != key:
            continue
        if isinstance(d, AdmitWorkload):
            status = admitted_status(status, d)
        elif isinstance(d, EvictWorkload):
            status = evicted_status(status, d)
        else:
            status = pending_status(status, d)
    return status


def test_the_actuator_reads_back_the_conditions_it_wrote() -> None:
    written = [condition_json(c) for c in cond.eviction(EvictionReason.PREEMPTED, "m", "InClusterQueue", T + 1000)]
    written.append({"type": "SomeoneElses", "status": "True", "reason": "X", "message": ""})
    written.append({"type": "Finished", "status": "True", "reason": "Succeeded", "lastTransitionTime": "soon"})
    got = conditions_by_type(written)
    assert got == {
        "Evicted": cond.evicted(EvictionReason.PREEMPTED, "m", T + 1000),
        "Preempted": cond.preempted("InClusterQueue", "m", T + 1000),
        "Finished": cond.condition(ConditionType.FINISHED, True, "Succeeded", "", 0),  # an unreadable time reads as 0
    }


def _apply(state: State, body: dict[str, Any]) -> None:
    obj = normalize(Document("test.yaml", 1, body))
    assert obj is not None
    fold(state, ObjectApplied(time=state.now, object=obj))


def test_the_actuator_writes_the_conditions_the_scheduler_keeps_through_preemption_and_readmission() -> None:
    state = build_state(
        a_flavor("default"),
        a_cluster_queue("cq").flavor("default", cpu="1").preemption(within="LowerPriority"),
        a_local_queue("ns", "lq", "cq"),
        a_workload("ns", "low").queue("lq").request(cpu="1").priority(0),
    )
    status: dict[str, Any] = {}
    status = _write(status, run_cycle(state).decisions, "ns/low")
    assert _written(status) == _kept(state, "ns/low")
    assert _written(status)["Admitted"][0] == "True"

    _apply(state, a_workload("ns", "high").queue("lq").request(cpu="1").priority(10).obj())
    status = _write(status, run_cycle(state).decisions, "ns/low")
    fold(state, EvictionCompleted(namespace="ns", name="low"))
    assert _written(status) == _kept(state, "ns/low")
    assert _written(status)["Preempted"] == ("True", "InClusterQueue", _written(status)["Evicted"][2])

    status = _write(status, run_cycle(state).decisions, "ns/low")  # high is admitted, low waits
    assert _written(status) == _kept(state, "ns/low")
    assert _written(status)["QuotaReserved"][0] == "False"

    fold(state, WorkloadFinished(namespace="ns", name="high"))
    status = _write(status, run_cycle(state).decisions, "ns/low")  # low is admitted again
    assert _written(status) == _kept(state, "ns/low")
    assert _written(status)["Evicted"][:2] == ("False", "QuotaReserved")


def test_the_actuator_writes_the_conditions_the_scheduler_keeps_through_a_drain() -> None:
    cq = a_cluster_queue("cq").flavor("default", cpu="1")
    state = build_state(a_flavor("default"), cq, a_local_queue("ns", "lq", "cq"),
                        a_workload("ns", "w").queue("lq").request(cpu="1"))
    status = _write({}, run_cycle(state).decisions, "ns/w")
    _apply(state, cq.stop("HoldAndDrain").obj())
    status = _write(status, run_cycle(state).decisions, "ns/w")
    fold(state, EvictionCompleted(namespace="ns", name="w"))
    assert _written(status) == _kept(state, "ns/w")
    assert _written(status)["Requeued"] == ("False", "ClusterQueueStopped", "The ClusterQueue is stopped")
