"""Snapshots: every canonical field survives encode + decode, and an old snapshot is passed over.

The state is built through a real history (objects of every kind, admissions,
a preemption, a drained queue, a finish, an anomaly, a workload whose priority
class is missing), so that every canonical field — of the state and of a
workload record — holds something other than its default. A field the snapshot
forgot would then come back as its default and the comparison names it.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import msgspec
import pytest

from events import objects as o
from events.codec import encode
from events.envelope import Envelope, Topics
from events.manifests import Document, normalize
from events.messages import (
    AdmissionCheckUpdated,
    ClockTicked,
    ClusterEvent,
    EvictionCompleted,
    ObjectApplied,
    PodsReady,
    ProvisioningRequestCondition,
    ProvisioningRequestObserved,
    WorkloadFinished,
)
from services.core import deactivation
from services.core.cycle import run_cycle
from services.core.records import WorkloadRecord, canonical_fields
from services.core.snapshot import FORMAT, canonical, decode_state, encode_state
from services.core.state import State, fold
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler, Snapshot
from tests.builders import (
    Builder,
    a_cluster_queue,
    a_cohort,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_priority_class,
    a_workload,
)

T = Topics()
T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z, where the builders' creation times start


def _objects() -> list[Builder | o.AnyObject]:
    return [
        a_flavor("f"),
        a_cohort("team").flavor("f", cpu="2"),
        a_cluster_queue("cq-a").cohort("team").flavor("f", cpu="4").preemption(within="LowerPriority"),
        a_cluster_queue("cq-stop").flavor("f", cpu="2"),
        a_cluster_queue("cq-b").flavor("f", cpu="2").admission_fair_sharing(),
        a_cluster_queue("cq-slow").flavor("f", cpu="1"),
        a_local_queue("ns", "lq-a", "cq-a"),
        a_local_queue("ns", "lq-stop", "cq-stop"),
        a_local_queue("ns", "lq-b", "cq-b"),
        a_local_queue("ns", "lq-slow", "cq-slow"),
        a_namespace("ns", team="a"),
        a_priority_class("high", 100),
        a_priority_class("low", 1, workload=False),
        o.AdmissionCheck(name="check", controller_name="kueue.x-k8s.io/provisioning-request"),
        o.ProvisioningRequestConfig(name="prc", provisioning_class_name="queued-provisioning.gke.io"),
        o.AdmissionCheck(name="prov", controller_name="kueue.x-k8s.io/provisioning-request",
                         parameters_kind="ProvisioningRequestConfig", parameters_name="prc"),
        a_cluster_queue("cq-c").flavor("f", cpu="6").admission_checks("prov"),
        a_local_queue("ns", "lq-c", "cq-c"),
        a_workload("ns", "retry").queue("lq-c").request(cpu="1").created(6),
        a_workload("ns", "reject").queue("lq-c").request(cpu="1").created(7),
        a_workload("ns", "waits").queue("lq-c").request(cpu="1").created(8),
        o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=60_000,
                        admission_fair_sharing=True, afs_usage_half_life_ms=600_000,
                        afs_usage_sampling_interval_ms=60_000),  # admission fair sharing: State.afs
        a_workload("ns", "low-1").queue("lq-a").request(cpu="2").created(1),
        a_workload("ns", "low-2").queue("lq-a").request(cpu="2").created(2),
        a_workload("ns", "drained").queue("lq-stop").request(cpu="1").created(3),
        a_workload("ns", "done").queue("lq-b").request(cpu="1").created(3),
        a_workload("ns", "offline").queue("lq-b").request(cpu="1").created(3),
        a_workload("ns", "slow").queue("lq-slow").request(cpu="1").created(3).max_exec(3600),
        a_workload("ns", "too-big").queue("lq-a").request(cpu="100").created(4),
        a_workload("ns", "unclassed").queue("lq-a").request(cpu="1").priority_class("missing").created(5),
        a_cluster_queue("cq-e").flavor("f", cpu="4"),
        a_local_queue("ns", "lq-e", "cq-e"),
        a_workload("ns", "elastic").queue("lq-e").request(2, cpu="1").elastic().created(3),
    ]


def _event(item: Builder | o.AnyObject, i: int) -> ClusterEvent:
    obj = normalize(Document("test.yaml", i, item.obj())) if isinstance(item, Builder) else item
    assert obj is not None
    return ObjectApplied(time=getattr(obj, "creation_time", None) or 0, object=obj)


def history() -> list[ClusterEvent | str]:
    """Cluster events, and ``"cycle"`` where the scheduler runs one. It ends with a preemptor
    waiting for its victim, a parked workload and a drained one held: no cycle after the last events."""
    events: list[ClusterEvent | str] = [_event(item, i) for i, item in enumerate(_objects(), start=1)]
    # MultiKueue: a config and a worker cluster (services.core.placement keeps them in state.multikueue).
    events.append(ObjectApplied(time=T0, object=o.MultiKueueConfig(name="mk", clusters=("w1",))))
    events.append(ObjectApplied(time=T0, object=o.MultiKueueCluster(name="w1", location="w1-kubeconfig")))
    events += ["cycle"] * 4  # low-1, low-2, drained and done admitted; too-big and unclassed tried
    # Admission checks: retry fails its provisioning (Retry), reject is rejected, waits waits.
    failed = ProvisioningRequestCondition(type="Failed", status="True", message="no capacity")
    events.append(ProvisioningRequestObserved(time=T0 + 10_000, namespace="ns", name="retry-prov-1", workload="retry",
                                              check="prov", attempt=1, conditions=(failed,)))
    events.append(AdmissionCheckUpdated(time=T0 + 10_000, namespace="ns", name="reject", check=o.AdmissionCheckState(
        name="prov", state=o.CheckState.REJECTED, message="no")))
    events.append(_event(a_cluster_queue("cq-stop").flavor("f", cpu="2").stop("HoldAndDrain"), 90))
    events.append(_event(a_workload("ns", "urgent").queue("lq-a").request(cpu="4").priority(100).created(11), 91))
    events.append(_event(a_workload("ns", "wide").queue("lq-b").request(cpu="3").created(12), 92))
    events.append(WorkloadFinished(time=20_000, namespace="ns", name="done"))
    events += [PodsReady(time=T0 + 15_000, namespace="ns", name=n) for n in ("low-1", "low-2", "drained", "offline",
                                                                              "elastic")]
    events.append(ClockTicked(time=T0 + 80_000))  # slow's pods never became ready: the timeout evicts it
    events += ["cycle"] * 4  # drained is evicted; urgent preempts and waits; wide is parked
    events.append(EvictionCompleted(time=20_000, namespace="ns", name="drained"))
    events.append(EvictionCompleted(time=T0 + 80_000, namespace="ns", name="slow"))  # and it backs off
    events.append(EvictionCompleted(time=T0 + 80_000, namespace="ns", name="retry"))  # back-off until T0 + 140 s
    events.append(EvictionCompleted(time=T0 + 80_000, namespace="ns", name="reject"))  # deactivated
    events.append(AdmissionCheckUpdated(time=T0 + 80_000, namespace="ns", name="waits", check=o.AdmissionCheckState(
        name="prov", message="ETA 5m")))  # settled by the next cycle
    events.append(WorkloadFinished(time=20_000, namespace="ns", name="nobody"))  # an anomaly
    events.append("deactivate ns/too-big")  # the scheduler deactivates a pending workload
    # A user deactivates an admitted one: its eviction waits for the next cycle.
    events.append(_event(a_workload("ns", "offline").queue("lq-b").request(cpu="1").created(3).active(False), 93))
    # The elastic workload scales up: a new slice (State.slices) that replaces it once admitted.
    events.append(_event(a_workload("ns", "elastic").queue("lq-e").request(3, cpu="1").elastic().created(3), 94))
    return events


def play(events: list[ClusterEvent | str]) -> State:
    state = State()
    for ev in events:
        if isinstance(ev, str) and ev.startswith("deactivate "):
            deactivation.deactivate(state, state.workloads[ev.split()[1]], "RequeuingLimitExceeded", "a test")
        elif isinstance(ev, str):
            run_cycle(state)
        else:
            fold(state, ev)
    return state


def _default(cls: type, name: str) -> object:
    f = next(f for f in fields(cls) if f.name == name)
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def test_the_history_sets_every_canonical_field() -> None:
    """Guard for the test below: a field still at its default would not show a forgotten field."""
    state = play(history())
    unset = [name for name in canonical_fields(State) if getattr(state, name) == _default(State, name)]
    assert unset == []
    records = list(state.workloads.values())
    unset = [name for name in canonical_fields(WorkloadRecord)
             if all(getattr(r, name) == _default(WorkloadRecord, name) for r in records)]
    assert unset == []


# What is not canonical, said once more here: marking another field derived must be a conscious change.
NOT_CANONICAL = {State: {"index", "cache", "workers", "released"}, WorkloadRecord: {"usage", "queued_in", "key"}}


@pytest.mark.parametrize("cls", [State, WorkloadRecord], ids=lambda c: c.__name__)
def test_every_field_but_the_derived_ones_is_canonical(cls: type) -> None:
    assert set(canonical_fields(cls)) == {f.name for f in fields(cls)} - NOT_CANONICAL[cls]


def test_a_snapshot_restores_every_canonical_field() -> None:
    state = play(history())
    restored = decode_state(encode_state(state))
    for name in {f.name for f in fields(State)} - NOT_CANONICAL[State] - {"workloads"}:
        assert getattr(restored, name) == getattr(state, name), f"State.{name} not restored"
    assert sorted(restored.workloads) == sorted(state.workloads)
    for key, rec in state.workloads.items():
        again = restored.workloads[key]
        for name in {f.name for f in fields(WorkloadRecord)} - NOT_CANONICAL[WorkloadRecord]:
            assert getattr(again, name) == getattr(rec, name), f"WorkloadRecord.{name} of {key} not restored"
        assert list(again.conditions) == list(rec.conditions), "conditions keep the order they were set in"
        assert (again.key, again.usage) == (rec.key, rec.usage)


def test_the_snapshot_is_the_canonical_state_encoded_as_one_object() -> None:
    """Assembled a workload at a time, it is byte for byte what encoding the whole at once gives
    (older snapshots of this format stay readable, and equal states stay equal bytes)."""
    state = play(history())
    assert len(state.workloads) > 1
    whole = msgspec.json.Encoder(order="sorted").encode(canonical(state))
    assert encode_state(state) == whole
    assert encode_state(decode_state(whole)) == whole


def test_a_restored_state_decides_as_the_original() -> None:
    events = history()
    state, restored = play(events), decode_state(encode_state(play(events)))
    tail: list[ClusterEvent | str] = [
        "cycle", EvictionCompleted(time=30_000, namespace="ns", name="low-1"), "cycle", "cycle",
        WorkloadFinished(time=40_000, namespace="ns", name="urgent"), "cycle", "cycle",
    ]
    decided: dict[int, list[bytes]] = {id(state): [], id(restored): []}
    for s in (state, restored):
        for ev in tail:
            if isinstance(ev, str) and ev.startswith("deactivate "):
                deactivation.deactivate(s, s.workloads[ev.split()[1]], "RequeuingLimitExceeded", "a test")
            elif isinstance(ev, str):
                result = run_cycle(s)
                decided[id(s)].append(encode((result.decisions, result.heads)))
            else:
                fold(s, ev)
    assert any(b'"type":"admit"' in d for d in decided[id(state)]), "the tail decides something"
    assert decided[id(restored)] == decided[id(state)]
    assert encode_state(restored) == encode_state(state)
    restored.ensure_indexed()
    queued = {k: r.queued_in for k, r in state.workloads.items()}
    assert {k: r.queued_in for k, r in restored.workloads.items()} == queued


def test_derived_fields_are_not_encoded() -> None:
    data = msgspec.json.decode(encode_state(play(history())))
    assert "index" not in data and "cache" not in data
    record = next(iter(data["workloads"].values()))
    assert not {"usage", "queued_in", "key"} & set(record)


# --- the scheduler service: a snapshot of another format is passed over -----------------------


def _seed(log: SqliteLog) -> None:
    recs = []
    for i, ev in enumerate(e for e in history() if not isinstance(e, str)):
        recs.append(("seed", encode(Envelope(id=f"seed:{i}", source="test", event=ev))))
    log.append(T.cluster_events, recs)


def _drain(s: Scheduler) -> None:
    while s.step():
        pass


@pytest.mark.parametrize("old", [
    pytest.param({"format": None}, id="a snapshot from before the format field"),
    pytest.param({"format": FORMAT + 1}, id="a snapshot from a newer version"),
])
def test_a_snapshot_of_another_format_is_ignored_and_the_log_replayed(tmp_path: Path, old: dict[str, Any]) -> None:
    log = SqliteLog(tmp_path)
    _seed(log)
    live = Scheduler(log, batch_size=4)
    _drain(live)
    # What an older (or newer) scheduler left: its state in a form this one cannot read, claiming to
    # cover the whole log. Loading it would skip every recorded cycle.
    snap: dict[str, Any] = {"input_offset": live.next_input, "decisions_offset": log.end_offset(T.decisions),
                            "cycles": live.state.cycles, "state": {"now": 1, "workloads": [["not", "this"]]}}
    if old["format"] is not None:
        snap["format"] = old["format"]
    log.append(T.snapshots, [("scheduler", msgspec.json.encode(snap))])
    restarted = Scheduler(log)
    restarted.recover()
    assert encode_state(restarted.state) == encode_state(live.state)
    assert restarted.next_input == live.next_input
    log.close()


def test_the_newest_snapshot_of_this_format_is_loaded(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    _seed(log)
    live = Scheduler(log, batch_size=4)
    _drain(live)
    live.write_snapshot()
    newest = msgspec.json.decode(log.read(T.snapshots, 0)[-1].value, type=Snapshot)
    assert newest.format == FORMAT
    restarted = Scheduler(log)
    assert restarted.load_newest_snapshot() == newest.decisions_offset
    assert restarted.next_input == live.next_input
    assert encode_state(restarted.state) == encode_state(live.state)
    log.close()
