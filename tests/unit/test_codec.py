"""The wire codec: every tag round-trips, old schemas are upcast, and the three kinds of bad
record are told apart (malformed -> dead letter, unknown type -> stop)."""

from __future__ import annotations

import contextlib
import json

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from events import codec
from events import objects as o
from events.cluster import EvictionReason
from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope, encode
from events.envelope import SCHEMA_VERSION, Envelope, event_key
from events.messages import (
    ActuationFailed,
    AdmissionCheckUpdated,
    AdmitChecked,
    AdmitWorkload,
    ClockTicked,
    CycleCompleted,
    DeactivateWorkload,
    DecisionApplied,
    EvictionCompleted,
    EvictWorkload,
    HeadOutcome,
    MarkPending,
    ObjectApplied,
    ObjectDeleted,
    PendingReason,
    PlacementEnd,
    PlacementWaiting,
    PlaceWorkload,
    PodsNotReady,
    PodsReady,
    ProvisioningRequestCondition,
    ProvisioningRequestObserved,
    RemovePlacement,
    TreeAdopted,
    TreeHandOver,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
    WorkloadActivation,
    WorkloadFinished,
)
from events.simcluster import decode_sim_record

WL = o.Workload(namespace="ns", name="w", uid="u", queue_name="lq",
                pod_sets=(o.PodSet(name="main", count=2, requests=(("cpu", 1500),)),), creation_time=5, priority=3)
ADM = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "f"),), resource_usage=(("cpu", 3000),), count=2),))
EVENTS = [
    ObjectApplied(time=1, object=WL),
    ObjectApplied(time=1, object=o.ClusterQueue(name="cq", cohort="c")),
    ObjectApplied(time=1, object=o.Cohort(name="c", parent="root")),
    ObjectApplied(time=1, object=o.ResourceFlavor(name="f", node_labels=(("k", "v"),))),
    ObjectApplied(time=1, object=o.LocalQueue(namespace="ns", name="lq", cluster_queue="cq")),
    ObjectApplied(time=1, object=o.Namespace(name="ns")),
    ObjectApplied(time=1, object=o.WorkloadPriorityClass(name="p", value=1)),
    ObjectApplied(time=1, object=o.PriorityClass(name="p", value=1)),
    ObjectApplied(time=1, object=o.AdmissionCheck(name="a")),
    ObjectApplied(time=1, object=o.ProvisioningRequestConfig(name="p")),
    ObjectApplied(time=1, object=o.Configuration(fair_sharing=True)),
    ObjectApplied(time=1, object=o.MultiKueueConfig(name="mk", clusters=("w1", "w2"),
                                                   policy=o.PlacementPolicy.MOST_FREE_QUOTA)),
    ObjectApplied(time=1, object=o.MultiKueueCluster(name="w1", location_type="Path", location="/k", active=True)),
    ObjectDeleted(time=2, kind="Workload", namespace="ns", name="w"),
    WorkloadFinished(time=3, namespace="ns", name="w"),
    EvictionCompleted(time=4, namespace="ns", name="w"),
    ClockTicked(time=5),
    PodsReady(time=6, namespace="ns", name="w"),
    PodsNotReady(time=6, namespace="ns", name="w"),
    WorkloadActivation(time=6, namespace="ns", name="w", active=True),
    DecisionApplied(time=7, decision_id="c1-0", namespace="ns", name="w", cluster="sim"),
    ActuationFailed(time=8, decision_id="c1-0", namespace="ns", name="w", error="boom", retriable=True),
    AdmissionCheckUpdated(time=9, namespace="ns", name="w", check=o.AdmissionCheckState(
        name="prov", state=o.CheckState.READY,
        pod_set_updates=(o.PodSetUpdate(name="main", node_selector=(("k", "v"),)),), retry_count=1,
        requeue_after_seconds=60)),
    ProvisioningRequestObserved(time=9, namespace="ns", name="w-prov-1", workload="w", check="prov", attempt=1,
                                conditions=(ProvisioningRequestCondition(type="Provisioned", status="True"),),
                                class_details=(("RequestKey", "abc"),)),
    TreeHandOver(time=10, root="research", to_shard=2, handover="hand-over:research:0"),
    TreeAdopted(time=10, root="research", from_shard=0, handover="hand-over:research:0",
                state=msgspec.Raw(b'{"cohorts":{}}')),
]
DECISIONS = [
    AdmitWorkload(id="c1-0", cycle=1, namespace="ns", name="w", cluster_queue="cq", admission=ADM, time=9),
    EvictWorkload(id="c1-1", cycle=1, namespace="ns", name="w", reason="Preempted", message="m",
                  preemption_reason="InClusterQueue", preemptor="ns/x"),
    DeactivateWorkload(id="c1-3", cycle=1, namespace="ns", name="w", reason=EvictionReason.DEACTIVATED,
                       message="The workload is deactivated due to x", underlying_cause="RequeuingLimitExceeded"),
    MarkPending(id="c1-2", cycle=1, namespace="ns", name="w", reason=PendingReason.WAITING_FOR_QUOTA, message="m"),
    AdmitWorkload(id="c1-3", cycle=1, namespace="ns", name="w", cluster_queue="cq", admission=ADM,
                  admission_checks=("prov",), provisioning_requests=(o.ProvisioningRequestPlan(
                      name="w-prov-1", check="prov", attempt=1, provisioning_class_name="c",
                      pod_sets=(o.ProvisioningRequestPodSet(pod_set="main", pod_template="ppt-w-prov-1-main",
                                                            count=2),)),)),
    AdmitChecked(id="c1-4", cycle=1, namespace="ns", name="w", cluster_queue="cq", admission=ADM,
                 pod_set_updates=(o.PodSetUpdate(name="main", labels=(("a", "b"),)),)),
    UpdateWorkloadStatus(id="c1-5", cycle=1, namespace="ns", name="w", cluster_queue="cq",
                         admission_checks=(o.AdmissionCheckState(name="prov", message="ETA 1m"),), requeue_count=1,
                         requeue_at=70_000),
    PlaceWorkload(id="c1-6", cycle=1, namespace="ns", name="w", cluster_queue="cq", cluster="w1", check="mk",
                  admission=ADM, message='The workload was admitted on "w1"',
                  pod_set_updates=(o.PodSetUpdate(name="main", node_selector=(("pool", "w1"),)),)),
    PlacementWaiting(id="c1-7", cycle=1, namespace="ns", name="w", cluster_queue="cq", check="mk", message="m"),
    RemovePlacement(id="c1-8", cycle=1, namespace="ns", name="w", cluster_queue="cq", cluster="w1", check="mk",
                    reason=PlacementEnd.WORKER_LOST, message="Admitting remote lost"),
    AdmitWorkload(id="c1-9", cycle=1, namespace="ns", name="w-slice-2", cluster_queue="cq", admission=ADM,
                  replaced_slice="ns/w"),
    UpdateLocalQueueFairSharing(id="c1-10", cycle=1, namespace="ns", name="lq", cluster_queue="cq",
                                consumed_resources=(("cpu", "31999m"),), last_update=300_000),
    CycleCompleted(cycle=1, input_offset=10, time=9, decisions=5, admitted_heads=("ns/w",),
                   heads=(HeadOutcome(key="ns/y", cluster_queue="cq", parked=True, last_tried=((0, 0, -1),)),)),
]


def test_every_event_type_is_covered_here() -> None:
    assert {msgspec.inspect.type_info(type(e)).tag for e in EVENTS} == codec.EVENT_TYPES  # type: ignore[attr-defined]
    assert {msgspec.inspect.type_info(type(d)).tag for d in DECISIONS} == codec.DECISION_TYPES  # type: ignore[attr-defined]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips(event: object) -> None:
    env = Envelope(id="x:1", source="test", event=event, cluster="c1")  # type: ignore[arg-type]
    assert decode_envelope(encode(env)) == env


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: type(d).__name__)
def test_every_decision_round_trips(decision: object) -> None:
    assert decode_decision(encode(decision)) == decision


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: type(d).__name__)
def test_a_peek_reads_the_tag_and_cycle_of_every_decision_record(decision: object) -> None:
    peek = codec.peek_decision(encode(decision))
    assert peek.type == msgspec.inspect.type_info(type(decision)).tag  # type: ignore[attr-defined]
    assert peek.cycle == decision.cycle  # type: ignore[attr-defined]


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b'{"cycle": "seven"}'])
def test_a_peek_at_garbage_has_no_type(data: bytes) -> None:
    assert codec.peek_decision(data).type == ""


@given(st.binary())
@example(b'"\x80"')  # invalid UTF-8 inside a JSON string: msgspec raises UnicodeDecodeError
@example(b'{"type": "admit", "id": "\xff"}')
def test_arbitrary_bytes_are_malformed_or_unknown_never_a_crash(data: bytes) -> None:
    for decode in (decode_envelope, decode_decision, decode_sim_record):
        with contextlib.suppress(MalformedRecord, UnknownEventType):
            decode(data)
    codec.peek_decision(data)


def test_an_unknown_event_type_is_not_malformed() -> None:
    with pytest.raises(UnknownEventType, match=r"workload\.teleported"):
        decode_envelope(b'{"id":"1","source":"s","event":{"type":"workload.teleported","time":1}}')
    with pytest.raises(UnknownEventType):
        decode_decision(b'{"type":"reticulate","id":"1"}')


def test_a_newer_schema_version_stops_rather_than_guesses() -> None:
    raw = json.loads(encode(Envelope(id="1", source="s", event=ClockTicked(time=1))))
    raw["schema"] = SCHEMA_VERSION + 1
    with pytest.raises(UnknownEventType, match="schema"):
        decode_envelope(json.dumps(raw).encode())


def test_an_old_schema_version_is_upcast(monkeypatch: pytest.MonkeyPatch) -> None:
    def from_zero(raw: dict[str, object]) -> dict[str, object]:
        event = dict(raw["event"])  # type: ignore[arg-type]
        event["time"] = event.pop("at")  # version 0 called it "at"
        return {**raw, "event": event}

    monkeypatch.setitem(codec.UPCASTS, 0, from_zero)
    env = decode_envelope(b'{"id":"1","source":"s","schema":0,"event":{"type":"clock.ticked","at":42}}')
    assert env.event == ClockTicked(time=42)
    assert env.schema == SCHEMA_VERSION


def test_malformed_records_say_what_is_wrong() -> None:
    with pytest.raises(MalformedRecord, match="not JSON"):
        decode_envelope(b"\xff")
    with pytest.raises(MalformedRecord, match=r"\$\.event"):
        decode_envelope(b'{"id":"1","source":"s","event":{"type":"clock.ticked","time":"noon"}}')


def test_event_keys_follow_the_object() -> None:
    env = Envelope(id="1", source="s", cluster="c1", event=ObjectApplied(time=1, object=WL))
    assert event_key(env) == "c1/ns/w"
    assert event_key(Envelope(id="2", source="s", cluster="c1", event=WorkloadFinished(namespace="ns", name="w"))) \
        == "c1/ns/w"
