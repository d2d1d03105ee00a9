"""The shard map and the router: which shard each cluster event goes to."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import objects as o
from events.codec import decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ClockTicked, DecisionApplied, ObjectApplied, ObjectDeleted, PodsReady, WorkloadFinished
from events.shardmap import Move, ShardMap, ShardMapError, ShardRouter, parse_shard_map, stable_shard
from services.runtime.shards import RoutingLog, ShardView, embedded_shards, recorded_map, shard_map_topic
from services.runtime.sqlite import SqliteLog

T = Topics()


def env(event: object) -> Envelope:
    return Envelope(id=f"e{id(event)}", source="test", event=event)  # type: ignore[arg-type]


def applied(obj: o.AnyObject) -> Envelope:
    return env(ObjectApplied(object=obj))


def cq(name: str, cohort: str = "") -> Envelope:
    return applied(o.ClusterQueue(name=name, cohort=cohort))


def cohort(name: str, parent: str = "") -> Envelope:
    return applied(o.Cohort(name=name, parent=parent))


def lq(name: str, cluster_queue: str, namespace: str = "ns") -> Envelope:
    return applied(o.LocalQueue(namespace=namespace, name=name, cluster_queue=cluster_queue))


def wl(name: str, queue: str, namespace: str = "ns", admitted_to: str = "") -> Envelope:
    admission = o.Admission(cluster_queue=admitted_to, pod_set_assignments=()) if admitted_to else None
    return applied(o.Workload(namespace=namespace, name=name, uid=name, queue_name=queue, pod_sets=(),
                              admission=admission))


MAP = ShardMap(shards=3, trees=(("alone", 2), ("root", 1)))


@pytest.mark.parametrize(("events", "want"), [
    pytest.param([cq("alone")], (2,), id="a ClusterQueue without a cohort is its own tree"),
    pytest.param([cq("a", "root")], (1,), id="a ClusterQueue goes to its cohort's shard"),
    pytest.param([cohort("team", "root"), cq("a", "team")], (1,), id="a nested cohort's tree is its root's"),
    pytest.param([cohort("team", "root")], (1,), id="a Cohort goes to its root's shard"),
    pytest.param([cohort("team", "root"), cq("a", "team"), lq("q", "a")], (1,),
                 id="a LocalQueue goes to its ClusterQueue's tree"),
    pytest.param([cq("a", "root"), lq("q", "a"), wl("w", "q")], (1,), id="a Workload goes to its LocalQueue's tree"),
    pytest.param([cq("a", "root"), wl("w", "unknown", admitted_to="a")], (1,),
                 id="an admitted Workload of an unknown LocalQueue goes to the tree it is admitted in"),
    pytest.param([wl("w", "unknown")], (0,), id="a Workload of an unknown LocalQueue goes to shard 0"),
    pytest.param([cq("alone"), lq("q", "alone"), wl("w", "q"), env(PodsReady(namespace="ns", name="w"))], (2,),
                 id="events naming a workload follow it"),
    pytest.param([cq("alone"), lq("q", "alone"), wl("w", "q"),
                  env(DecisionApplied(decision_id="1", namespace="ns", name="w"))], (2,),
                 id="actuation outcomes follow the workload"),
    pytest.param([cq("alone"), lq("q", "alone"), wl("w", "q"),
                  env(ObjectDeleted(kind="Workload", namespace="ns", name="w"))], (2,),
                 id="a Workload's deletion follows it"),
    pytest.param([cq("alone"), env(ObjectDeleted(kind="ClusterQueue", name="alone"))], (2,),
                 id="a ClusterQueue's deletion goes where it was"),
    pytest.param([applied(o.ResourceFlavor(name="f"))], (0, 1, 2), id="a ResourceFlavor goes to every shard"),
    pytest.param([applied(o.Namespace(name="n"))], (0, 1, 2), id="a Namespace goes to every shard"),
    pytest.param([env(ClockTicked(time=5))], (0, 1, 2), id="a clock tick goes to every shard"),
    pytest.param([env(ObjectDeleted(kind="ResourceFlavor", name="f"))], (0, 1, 2),
                 id="a cluster-scoped deletion goes to every shard"),
])
def test_routing(events: list[Envelope], want: tuple[int, ...]) -> None:
    router = ShardRouter(MAP)
    got = [router.route(e) for e in events]
    assert got[-1] == want
    assert router.moves == []


def test_an_unmapped_tree_goes_to_the_stable_hash_of_its_root() -> None:
    router = ShardRouter(ShardMap(shards=4))
    assert router.route(cq("a", "some-root")) == (stable_shard("some-root", 4),)
    # SHA-256, not Python's hash(): the same on every run and machine.
    assert [stable_shard(n, 4) for n in ("a", "b", "team-a", "team-b")] == [
        stable_shard(n, 4) for n in ("a", "b", "team-a", "team-b")]
    assert stable_shard("team-a", 1) == 0


def test_a_tree_change_that_would_move_a_placed_object_is_recorded_and_not_carried_out() -> None:
    router = ShardRouter(MAP)
    assert router.route(cq("a", "root")) == (1,)
    assert router.route(lq("q", "a")) == (1,)
    assert router.route(cq("a", "alone")) == (1,), "the ClusterQueue stays where it is"
    assert router.moves == [Move("ClusterQueue/a", 1, 2)]
    assert router.route(wl("w", "q")) == (1,), "its workloads still go with it"


def test_a_workload_that_waited_for_its_local_queue_moves_to_its_tree_once_the_queue_is_known() -> None:
    router = ShardRouter(MAP)
    assert router.route(wl("w", "q")) == (0,), "waits on shard 0, QueueNotFound, as unsharded"
    assert router.take_extra() == []
    router.route(cq("alone"))
    assert router.route(lq("q", "alone")) == (2,)
    moved = [(shard, type(e.event).__name__, e.source) for shard, e in router.take_extra()]
    assert moved == [(0, "ObjectDeleted", "shard-router"), (2, "ObjectApplied", "shard-router")]
    assert router.route(env(WorkloadFinished(namespace="ns", name="w"))) == (2,)
    assert router.moves == []


def test_a_local_queue_that_came_before_its_cluster_queue_moves_with_its_workloads() -> None:
    router = ShardRouter(MAP)
    waited = router.route(lq("q", "c"))  # ClusterQueue c unknown: as if c were a tree of its own
    assert waited == (stable_shard("c", 3),) != (1,)
    router.route(wl("w", "q"))
    assert router.route(cq("c", "root")) == (1,)
    moved = [(shard, type(e.event).__name__) for shard, e in router.take_extra()]
    assert moved == [(waited[0], "ObjectDeleted"), (1, "ObjectApplied"),
                     (waited[0], "ObjectDeleted"), (1, "ObjectApplied")]
    assert router.route(wl("w", "q")) == (1,)
    assert router.route(lq("q", "c")) == (1,) and router.moves == []


@pytest.mark.parametrize(("data", "error"), [
    pytest.param({"shards": 0}, "shards must be 1..1024, not 0", id="no shards"),
    pytest.param({"shards": 2, "trees": {"a": 2}}, "trees.a: shard 2 is outside 0..1", id="a shard out of range"),
    pytest.param({"shards": 2, "trees": {"a": "x"}}, "trees.a: the shard must be an integer", id="not a number"),
    pytest.param({"shards": "2"}, "shards must be an integer", id="shards not a number"),
    pytest.param({"shard": 2}, "unknown field 'shard'", id="a misspelt field"),
    pytest.param([1], "expected a mapping", id="a list"),
    pytest.param(None, "empty: expected", id="an empty file"),
])
def test_a_bad_map_is_refused_naming_the_field(data: object, error: str) -> None:
    with pytest.raises(ShardMapError, match=error):
        parse_shard_map(data, where="shards.yaml")


def test_a_map_is_parsed() -> None:
    assert parse_shard_map({"shards": 2, "trees": {"b": 1, "a": 0}}) == ShardMap(shards=2, trees=(("a", 0), ("b", 1)))
    assert parse_shard_map(3) == ShardMap(shards=3)


def publish(log: RoutingLog, *envs: Envelope) -> None:
    log.append(T.cluster_events, [(event_key(e), encode(e)) for e in envs])


def test_the_routing_log_writes_each_event_to_its_shards_and_records_the_map(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path, durable=False)
    shards = embedded_shards(log, 3)
    router = RoutingLog(shards, MAP, topics=T)
    publish(router, applied(o.ResourceFlavor(name="f")), cq("a", "root"), lq("q", "a"), wl("w", "q"), cq("alone"))
    per_shard = [len(s.read(T.cluster_events, 0, 100)) for s in shards]
    assert per_shard == [1, 4, 2]
    assert all(recorded_map(s, T) == MAP for s in shards)
    assert isinstance(shards[1], ShardView) and log.end_offset(shard_map_topic(T) + ".shard-1") == 1
    assert len(router.read(T.cluster_events, 0, 100)) == 7, "a publisher's memory sees every shard"
    # A restarted publisher routes as the first did, and records the same map only once.
    again = RoutingLog(shards, MAP, topics=T)
    assert again.router.placement() == router.router.placement()
    publish(again, env(PodsReady(namespace="ns", name="w")))
    assert len(shards[1].read(T.cluster_events, 0, 100)) == 5
    assert log.end_offset(shard_map_topic(T)) == 1
    # A workload that waited on shard 0 for its LocalQueue, moved when the queue came, is where it
    # moved to after a restart; and one still waiting moves when its queue comes after the restart.
    publish(again, wl("early", "q2"), wl("later", "q3"), lq("q2", "alone"))
    restarted = RoutingLog(shards, MAP, topics=T)
    assert restarted.router.placement()["Workload/ns/early"] == 2
    assert restarted.router.placement()["Workload/ns/later"] == 0
    publish(restarted, lq("q3", "a"))
    assert restarted.router.placement()["Workload/ns/later"] == 1
    assert RoutingLog(shards, MAP, topics=T).router.placement() == restarted.router.placement()
    log.close()


def test_each_embedded_shard_has_its_own_writer_lock(tmp_path: Path) -> None:
    import asyncio

    log = SqliteLog(tmp_path, durable=False)
    a, b = embedded_shards(log, 2)
    assert asyncio.run(a.leadership.acquire("scheduler")) and asyncio.run(b.leadership.acquire("scheduler"))
    assert (tmp_path / "scheduler.lock").exists() and (tmp_path / "scheduler.shard-1.lock").exists()
    log.close()


def test_the_watcher_publishes_through_the_router_of_its_shard_map(tmp_path: Path) -> None:
    from services.app.assembly import BadSetting, WatcherSettings, publishing_log, run_settings
    from services.app.cli import build_parser

    (tmp_path / "shards.yaml").write_text("shards: 2\ntrees:\n  team-a: 1\n")
    args = build_parser().parse_args(["run", "watcher", "--log", str(tmp_path / "log"),
                                      "--shard-map", str(tmp_path / "shards.yaml"), "--kubeconfig", "k"])
    settings = run_settings(args, environ={})
    assert isinstance(settings, WatcherSettings)
    assert settings.shard_map == ShardMap(shards=2, trees=(("team-a", 1),))
    log = SqliteLog(tmp_path / "log")
    routed = publishing_log(settings, log)
    assert isinstance(routed, RoutingLog)
    publish(routed, cq("a", "team-a"))
    assert log.end_offset(T.cluster_events + ".shard-1") == 1 and log.end_offset(T.cluster_events) == 0
    log.close()

    (tmp_path / "bad.yaml").write_text("shards: 2\ntrees: {team-a: 5}\n")
    bad = build_parser().parse_args(["run", "watcher", "--log", str(tmp_path / "log"),
                                     "--shard-map", str(tmp_path / "bad.yaml"), "--kubeconfig", "k"])
    with pytest.raises(BadSetting, match=r"--shard-map: .*bad.yaml: trees.team-a: shard 5 is outside 0..1"):
        run_settings(bad, environ={})


def test_replay_and_explain_on_every_embedded_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from services.app.cli import main
    from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_namespace, a_workload
    from tests.shardrun import objects, run_sharded

    log = SqliteLog(tmp_path / "log", durable=False)
    builders = [a_namespace("ns"), a_flavor("default")]
    for cq_name in ("alone", "other"):
        builders += [a_cluster_queue(cq_name).flavor("default", cpu="4"), a_local_queue("ns", cq_name, cq_name)]
    builders += [a_workload("ns", "w1").queue("alone").request(cpu="1"),
                 a_workload("ns", "w2").queue("other").request(cpu="1")]
    shard_map = ShardMap(shards=3, trees=(("alone", 2), ("other", 1)))
    outcome = run_sharded(embedded_shards(log, 3), shard_map, objects(builders))
    log.close()
    assert outcome.per_shard == [0, 1, 1]
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "log"), "--verify", "--shard", "all"]) == 0
    out = capsys.readouterr().out
    for shard in range(3):
        assert f"shard {shard}: verify: all {outcome.cycles[shard]} cycles reproduce" in out
    assert main(["replay", str(tmp_path / "log"), "--verify", "--shard", "2"]) == 0
    assert f"verify: all {outcome.cycles[2]} cycles" in capsys.readouterr().out
    assert main(["explain", "ns/w1", "--log", str(tmp_path / "log"), "--shard", "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("shard 2:\n") and "shard 1:" not in out and "alone" in out
    assert main(["explain", "ns/w1", "--log", str(tmp_path / "log")]) == 0
    assert "(this is shard 0 of 3: try --shard all)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["replay", str(tmp_path / "log"), "--shard", "x"])
    assert exit_.value.code == 2
    assert "a shard is a number from 0, or 'all'" in capsys.readouterr().err


def test_a_seeding_simulated_cluster_routes_its_manifests_in_real_time_only(tmp_path: Path) -> None:
    from services.app.assembly import SettingsError, SimclusterSettings, run_settings
    from services.app.cli import build_parser

    (tmp_path / "shards.yaml").write_text("shards: 2\n")
    common = ["run", "simcluster", "--log", str(tmp_path / "log"), "--shard-map", str(tmp_path / "shards.yaml"),
              "--seed", "x.yaml"]
    with pytest.raises(SettingsError, match="--shard-map with --seed needs --clock real"):
        run_settings(build_parser().parse_args([*common, "--clock", "simulated"]), environ={})
    settings = run_settings(build_parser().parse_args([*common, "--clock", "real"]), environ={})
    assert isinstance(settings, SimclusterSettings) and settings.shard_map == ShardMap(shards=2)


def test_a_publisher_that_died_mid_append_is_finished_at_the_next_start(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path, durable=False)
    shards = embedded_shards(log, 3)
    flavor = applied(o.ResourceFlavor(name="f"))
    shards[0].append(T.cluster_events, [(event_key(flavor), encode(flavor))])  # died before shards 1 and 2
    # A move cut short: the workload waited on shard 0, its queue came (tree on shard 2), the
    # workload was applied on shard 2, and the publisher died before its deletion on shard 0.
    waited, queue, tree = wl("w", "q"), lq("q", "alone"), cq("alone")
    shards[0].append(T.cluster_events, [(event_key(waited), encode(waited))])
    shards[2].append(T.cluster_events, [(event_key(e), encode(e)) for e in (tree, queue, waited)])
    router = RoutingLog(shards, MAP, topics=T)
    assert [len(s.read(T.cluster_events, 0, 100)) for s in shards] == [3, 1, 4]
    last = [decode_envelope(r.value).event for r in shards[0].read(T.cluster_events, 0, 100)][-1]
    assert last == ObjectDeleted(kind="Workload", namespace="ns", name="w")
    assert [decode_envelope(s.read(T.cluster_events, 0, 100)[-1].value).id for s in shards[1:]] == [flavor.id] * 2
    assert router.router.placement()["Workload/ns/w"] == 2
    RoutingLog(shards, MAP, topics=T)
    assert [len(s.read(T.cluster_events, 0, 100)) for s in shards] == [3, 1, 4], "nothing more to finish"
    log.close()
