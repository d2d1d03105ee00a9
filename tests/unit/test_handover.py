"""Handing a cohort tree over from one shard to another: the router's state machine, the
schedulers' release and adoption, and a restart of the router at every point."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import pytest

from events import objects as o
from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import AdmitWorkload, ObjectApplied, TreeAdopted, TreeHandOver, WorkloadFinished
from events.shardmap import ShardMap, ShardRouter, TreeReleased, hand_over_id, handed_workloads, stable_shard
from services.app.logview import replay
from services.core.handover import tree_parts
from services.runtime.log import Log
from services.runtime.shards import RoutingLog, embedded_shards, hand_over_topic, held_topic
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import envelope, seed_all
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_namespace, a_workload
from tests.shardrun import objects

T = Topics()
BEFORE = ShardMap(shards=2, trees=(("a", 0), ("b", 1)))
AFTER = ShardMap(shards=2, trees=(("a", 1), ("b", 1)))


def workload(name: str, queue: str, at: int) -> Builder:
    return a_workload("ns", name).queue(queue).request(cpu="1").created(at)


def cluster() -> list[Builder]:
    return [a_namespace("ns"), a_flavor("default"), a_cohort("a"), a_cohort("b"),
            a_cluster_queue("a1").flavor("default", cpu="2").cohort("a"), a_local_queue("ns", "qa", "a1"),
            a_cluster_queue("b1").flavor("default", cpu="2").cohort("b"), a_local_queue("ns", "qb", "b1"),
            *[workload(f"a{i}", "qa", i) for i in range(4)], workload("b0", "qb", 1)]


def finished(name: str) -> Envelope:
    return Envelope(id=f"finish-{name}", source="test", event=WorkloadFinished(time=100_000, namespace="ns",
                                                                               name=name))


def publish(log: RoutingLog | Log, *envs: Envelope) -> None:
    log.append(T.cluster_events, [(event_key(e), encode(e)) for e in envs])


def settle(shards: Sequence[Log]) -> list[Scheduler]:
    """Every shard's scheduler, recovered and stepped until it has nothing to do."""
    out = []
    for log in shards:
        sched = Scheduler(log, T)
        sched.recover()
        while sched.step():
            pass
        out.append(sched)
    return out


def admitted(log: Log) -> list[str]:
    return [f"{d.namespace}/{d.name}" for d in (decode_decision(r.value) for r in log.read(T.decisions, 0, 10_000))
            if isinstance(d, AdmitWorkload)]


def events(log: Log) -> list[Envelope]:
    return [decode_envelope(r.value) for r in log.read(T.cluster_events, 0, 10_000)]


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[list[Log]]:
    log = SqliteLog(tmp_path / "log", durable=False)
    yield embedded_shards(log, 2)
    log.close()


def test_the_router_places_a_moved_tree_on_its_new_shard_and_holds_its_events_until_adopted() -> None:
    router = ShardRouter(BEFORE)
    for i, (_, obj) in enumerate(objects(cluster())):
        router.route(Envelope(id=f"seed-{i}", source="t", event=ObjectApplied(object=obj)))
    router.map = AFTER
    [(shard, marker)] = router.start_hand_overs()
    assert shard == 0 and isinstance(marker.event, TreeHandOver)
    assert marker.event.handover == hand_over_id("a", 0) and marker.event.to_shard == 1
    assert router.start_hand_overs() == []  # one hand-over at a time per tree
    assert router.route(finished("a0")) == ()  # held
    held = router.held(finished("a0"))
    assert held is not None and held.target == 1
    assert router.route(finished("b0")) == (1,)  # another tree: as before
    adopted = router.adopt(held.id, msgspec.Raw(b"{}"))
    assert isinstance(adopted.event, TreeAdopted) and adopted.id == f"{held.id}:adopted"
    assert router.route(finished("a0")) == (1,)  # the new shard's now
    assert router.placement()["ClusterQueue/a1"] == 1 and router.placement()["Workload/ns/a3"] == 1
    assert router.moves == []


def test_a_tree_handed_over_is_decided_by_its_new_shard_from_the_state_it_had(shards: list[Log]) -> None:
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    first = settle(shards)
    assert sorted(admitted(shards[0])) == ["ns/a0", "ns/a1"]

    routing = RoutingLog(shards, AFTER)  # the new map: the marker goes to shard 0
    assert [type(e.event) for e in events(shards[0])][-1] is TreeHandOver
    publish(routing, finished("a0"))  # held on shard 1 until the tree is adopted there
    assert [r.key for r in shards[1].read(held_topic(T), 0)] == [hand_over_id("a", 0)]
    assert not any(isinstance(e.event, WorkloadFinished) for e in events(shards[1]))

    old = settle(shards[:1])[0]  # shard 0 folds the marker: the tree leaves its state
    assert tree_parts(old.state, "a") == ([], [], [], [])
    assert "a1" not in old.state.cluster_queues and old.state.released == []
    [released] = [msgspec.json.decode(r.value, type=TreeReleased) for r in shards[0].read(hand_over_topic(T), 0)]
    assert released.handover == hand_over_id("a", 0)
    assert [wl.name for wl in handed_workloads(released.state)] == ["a0", "a1", "a2", "a3"]
    assert admitted(shards[0]) == ["ns/a0", "ns/a1"]  # nothing decided for it after the marker

    assert routing.pump() == 2  # the state, then the held finish, on shard 1
    assert [type(e.event) for e in events(shards[1])][-2:] == [TreeAdopted, WorkloadFinished]
    new = settle(shards[1:])[0]
    assert admitted(shards[1]) == ["ns/b0", "ns/a2"]  # a0's quota, freed on the new shard, goes to a2
    assert new.state.workloads["ns/a1"].admission is not None
    assert sorted(tree_parts(new.state, "a")[3]) == ["ns/a0", "ns/a1", "ns/a2", "ns/a3"]
    assert routing.route(encode(finished("a1"))) == (1,)
    for log in shards:
        assert replay(log, T, verify=True).mismatches == []
    assert first[1].state.cycles >= 1


def test_an_unsharded_run_decides_the_same(tmp_path: Path, shards: list[Log]) -> None:
    one = SqliteLog(tmp_path / "one", durable=False)
    seed_all(one, objects(cluster()))
    settle([one])
    publish(one, finished("a0"))
    settle([one])
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    publish(RoutingLog(shards, AFTER), finished("a0"))
    settle(shards)
    RoutingLog(shards, AFTER).pump()
    settle(shards)
    assert sorted(admitted(one)) == sorted(admitted(shards[0]) + admitted(shards[1]))
    one.close()


@pytest.mark.parametrize("crash", ["after-marker", "after-held", "after-release", "after-adopt"])
def test_a_router_restarted_at_any_point_finishes_the_hand_over_once(shards: list[Log], crash: str) -> None:
    """Each step with a new router (as after a SIGKILL), at every point: no record twice."""
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    RoutingLog(shards, AFTER)
    if crash != "after-marker":
        publish(RoutingLog(shards, AFTER), finished("a0"))
    if crash in ("after-release", "after-adopt"):
        settle(shards[:1])
    if crash == "after-adopt":
        RoutingLog(shards, AFTER)
    for _ in range(3):  # restarts change nothing more
        RoutingLog(shards, AFTER)
    if crash == "after-marker":
        publish(RoutingLog(shards, AFTER), finished("a0"))
    settle(shards)
    RoutingLog(shards, AFTER).pump()
    settle(shards)
    for log in shards:
        ids = [e.id for e in events(log)]
        assert len(ids) == len(set(ids)), "a record written twice"
    markers = [e for e in events(shards[0]) if isinstance(e.event, TreeHandOver)]
    adoptions = [e for e in events(shards[1]) if isinstance(e.event, TreeAdopted)]
    assert len(markers) == 1 and len(adoptions) == 1
    assert sorted(admitted(shards[0]) + admitted(shards[1])) == ["ns/a0", "ns/a1", "ns/a2", "ns/b0"]
    for log in shards:
        assert replay(log, T, verify=True).mismatches == []


def test_what_the_old_shard_hears_about_a_handed_over_workload_is_forwarded(shards: list[Log]) -> None:
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    routing = RoutingLog(shards, AFTER)
    settle(shards[:1])
    routing.pump()
    publish(shards[0], finished("a1"))  # the old shard's simulated cluster, say, finishing a1
    assert routing.pump() == 1
    assert RoutingLog(shards, AFTER).pump() == 0  # forwarded once, also after a restart
    forwarded = [e for e in events(shards[1]) if e.id == "finish-a1:to-shard-1"]
    assert len(forwarded) == 1
    settle(shards)
    assert admitted(shards[1]) == ["ns/b0", "ns/a2"]
    assert settle(shards[:1])[0].state.anomaly_count >= 1  # the old shard only noted it


def test_the_hand_over_records_are_not_copied_to_every_shard() -> None:
    marker = Envelope(id="m", source="shard-router", event=TreeHandOver(root="a", to_shard=1, handover="x"))
    assert not ShardRouter.everywhere(marker)
    assert o.Cohort(name="a").name == "a"


def test_a_router_restarted_while_a_tree_is_in_transit_knows_what_it_held(shards: list[Log]) -> None:
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    [(doc, obj)] = objects([workload("late", "qa", 50)])
    publish(RoutingLog(shards, AFTER), envelope(doc, obj, time=50_000, cluster="sim"))  # held: only on the held topic
    again = RoutingLog(shards, AFTER)  # restarted before the tree was adopted
    assert again.router.placement()["Workload/ns/late"] == 1
    assert again.route(encode(finished("late"))) == ()  # still held, for the new shard
    settle(shards[:1])
    again.pump()
    assert again.route(encode(finished("late"))) == (1,)


def test_a_large_tree_state_is_one_record_others_stay_bounded() -> None:
    from events.codec import MalformedRecord
    from events.validation import MAX_RECORD_BYTES

    big = b'{"workloads":{"' + b"x" * MAX_RECORD_BYTES + b'":null}}'
    adopted = encode(Envelope(id="h:adopted", source="shard-router",
                              event=TreeAdopted(root="a", from_shard=0, handover="h", state=msgspec.Raw(big))))
    env = decode_envelope(adopted)
    assert isinstance(env.event, TreeAdopted) and len(bytes(env.event.state)) == len(big)
    other = encode(Envelope(id="big", source="t", event=WorkloadFinished(namespace="ns", name="w",
                                                                        message="x" * MAX_RECORD_BYTES)))
    with pytest.raises(MalformedRecord, match="larger than"):
        decode_envelope(other)


def test_explain_follows_a_workload_across_its_hand_over(shards: list[Log]) -> None:
    from services.app.explainer import explain

    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    routing = RoutingLog(shards, AFTER)
    publish(routing, finished("a0"))
    settle(shards[:1])
    routing.pump()
    settle(shards)
    old, new = explain(shards[0], T, "ns/a2"), explain(shards[1], T, "ns/a2")
    assert old.answer is not None and old.answer.status == "handed-over"
    assert "handed over to shard 1 (hand-over:a:0)" in old.answer.paragraph()
    assert any(e.kind == "HandedOver" for e in old.timeline)
    assert new.answer is not None and new.answer.status == "admitted"
    assert new.timeline[0].kind == "Adopted"
    untouched = explain(shards[1], T, "ns/b0")  # another tree's workload: nothing about hand-overs
    assert not any(e.kind in ("HandedOver", "Adopted") for e in untouched.timeline)


def test_a_part_of_the_tree_left_on_a_third_shard_keeps_its_shard() -> None:
    """A ClusterQueue placed alone on shard 2, then given the cohort of a tree on shard 0 (a move
    not carried out): handing the tree to shard 1 leaves it, and its events, on shard 2, where
    its state is."""
    three = ShardMap(shards=3, trees=(("a", 0), ("x", 2)))
    router = ShardRouter(three)
    for i, obj in enumerate([o.Cohort(name="a"), o.ClusterQueue(name="a1", cohort="a"), o.ClusterQueue(name="x"),
                             o.ClusterQueue(name="x", cohort="a")]):
        router.route(Envelope(id=f"s{i}", source="t", event=ObjectApplied(object=obj)))
    assert router.placement()["ClusterQueue/x"] == 2 and router.moves
    router.map = ShardMap(shards=3, trees=(("a", 1), ("x", 2)))
    [(shard, _)] = router.start_hand_overs()
    assert shard == 0
    assert router.placement()["ClusterQueue/a1"] == 1 and router.placement()["ClusterQueue/x"] == 2
    assert router.route(Envelope(id="u", source="t", event=ObjectApplied(object=o.ClusterQueue(name="x",
                                                                                            cohort="a")))) == (2,)
    assert router.route(Envelope(id="v", source="t", event=ObjectApplied(object=o.ClusterQueue(name="a1",
                                                                                            cohort="a")))) == ()


def test_a_map_with_more_shards_hands_over_the_trees_whose_hash_moved(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "grow", durable=False)
    builders: list[Builder] = [a_namespace("ns"), a_flavor("default")]
    for t in range(8):
        builders += [a_cohort(f"t{t}"), a_cluster_queue(f"cq{t}").flavor("default", cpu="2").cohort(f"t{t}")]
    seed_all(RoutingLog(embedded_shards(log, 2), ShardMap(shards=2)), objects(builders))
    grown = RoutingLog(embedded_shards(log, 3), ShardMap(shards=3))
    moved = sorted(ho.root for ho in grown.router.hand_overs.values())
    want = sorted(f"t{t}" for t in range(8) if stable_shard(f"t{t}", 2) != stable_shard(f"t{t}", 3))
    assert moved == want and moved
    for ho in grown.router.hand_overs.values():
        assert (ho.source, ho.target) == (stable_shard(ho.root, 2), stable_shard(ho.root, 3))
    log.close()


def test_where_multikueue_placed_a_handed_over_workload_goes_with_it(shards: list[Log]) -> None:
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    routing = RoutingLog(shards, AFTER)
    old = Scheduler(shards[0], T)
    old.recover()  # up to the marker
    old.state.multikueue.cluster_names["ns/a1"] = "worker-1"
    old.state.multikueue.cluster_names["ns/b0"] = "worker-2"  # not of the tree handed over: stays
    while old.step():
        pass
    assert old.state.multikueue.cluster_names == {"ns/b0": "worker-2"}
    routing.pump()
    new = settle(shards[1:])[0]
    assert new.state.multikueue.cluster_names == {"ns/a1": "worker-1"}


def test_an_elastic_jobs_chain_of_slices_goes_with_its_tree(shards: list[Log]) -> None:
    seed_all(RoutingLog(shards, BEFORE), objects(cluster()))
    settle(shards)
    routing = RoutingLog(shards, AFTER)
    old = Scheduler(shards[0], T)
    old.recover()  # up to the marker
    old.state.slices["ns/a1"] = "ns/a1-slice-1"
    old.state.slices["ns/b0"] = "ns/b0-slice-1"  # not of the tree handed over: stays
    while old.step():
        pass
    assert old.state.slices == {"ns/b0": "ns/b0-slice-1"}
    routing.pump()
    new = settle(shards[1:])[0]
    assert new.state.slices == {"ns/a1": "ns/a1-slice-1"}
