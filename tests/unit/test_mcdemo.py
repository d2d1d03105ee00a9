"""``kueuelog demo --clusters N`` in process: a manager and N simulated workers on one log.

Every workload is placed once, runs on its worker only (never on the manager's simulated cluster)
with the worker flavor's node labels, its finish comes from the worker and ends its placement;
idle gaps longer than workerLostTimeout lose no worker (the simulated workers heartbeat); and the
scheduler's decisions replay byte for byte."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_WORKER_LABEL
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import PlacementEnd, PlaceWorkload, RemovePlacement, WorkloadFinished
from events.simcluster import StartWorkload, decode_sim_record, sim_cluster_topic
from services.app.driver import Round, drive
from services.app.logview import replay
from services.app.mcdemo import MANAGER, MultiLoop, build, generated_files, schedule
from services.runtime.log import values_of
from services.runtime.sqlite import SqliteLog
from services.simcluster.multicluster import demo_manifests
from services.web.model import overview
from services.web.workers import worker_clusters

TOPICS = Topics()


def _run(tmp_path: Path, files: dict[str, str],
         seen: list[list[dict[str, object]]] | None = None) -> tuple[SqliteLog, MultiLoop, list[str]]:
    log = SqliteLog(tmp_path)
    loop = build(log, TOPICS, files, 60_000)
    twice: list[str] = []

    def between(_: Round) -> None:
        if seen is not None:
            seen.append(worker_clusters(loop.scheduler.state))
        on: dict[str, str] = {}
        for name in sorted(loop.workers):
            for key in loop.workers[name].state.runs:
                if key in on:
                    twice.append(f"{key}: {on[key]} and {name}")
                on[key] = name

    drive(loop, between=between, max_rounds=200_000)
    return log, loop, twice


def _records(log: SqliteLog, topic: str) -> list[bytes]:
    return list(values_of(log, topic))


def _decisions(log: SqliteLog) -> list[object]:
    return [decode_decision(v) for v in _records(log, TOPICS.decisions)]


def test_every_workload_runs_once_on_its_worker_with_the_worker_flavors_labels(tmp_path: Path) -> None:
    seen: list[list[dict[str, object]]] = []
    log, loop, twice = _run(tmp_path, generated_files(3, 30), seen)
    assert not twice
    decisions = _decisions(log)
    placed = [d for d in decisions if isinstance(d, PlaceWorkload)]
    assert len(placed) == 30 and len({(d.namespace, d.name) for d in placed}) == 30, "each workload placed once"
    assert {d.cluster for d in placed} <= {"worker-1", "worker-2", "worker-3"}
    removed = [d for d in decisions if isinstance(d, RemovePlacement)]
    assert sorted((d.namespace, d.name, d.cluster) for d in removed) == sorted(
        (d.namespace, d.name, d.cluster) for d in placed)
    assert {d.reason for d in removed} == {PlacementEnd.WORKLOAD_FINISHED}, "nobody lost, nothing evicted"
    where = {f"{d.namespace}/{d.name}": d.cluster for d in placed}
    starts = [r for v in _records(log, sim_cluster_topic(TOPICS))
              if isinstance(r := decode_sim_record(v), StartWorkload)]
    assert all(s.cluster != MANAGER for s in starts), "the manager runs no pods of a placed workload"
    assert sorted(f"{s.namespace}/{s.name}" for s in starts) == sorted(where)
    for s in starts:
        assert s.cluster == where[f"{s.namespace}/{s.name}"]
        assert s.node_selector == ((SIM_WORKER_LABEL, s.cluster),), "the worker flavor's node labels"
        assert {f for psa in s.admission.pod_set_assignments for _, f in psa.flavors} == {f"{s.cluster}-pool"}
    finishes = sorted((e.cluster, f"{e.event.namespace}/{e.event.name}") for v in _records(log, TOPICS.cluster_events)
                      if isinstance((e := decode_envelope(v)).event, WorkloadFinished))
    assert finishes == sorted((c, k) for k, c in where.items()), "each finish is reported by the worker it ran on"
    state = loop.scheduler.state
    assert all(r.finished for r in state.workloads.values()) and len(state.workloads) == 30
    assert not state.multikueue.placements
    assert {state.multikueue.cluster_names[k] for k in where} == set(where.values())
    report = replay(log, TOPICS, verify=True)
    assert report.mismatches == [] and report.cycles == state.cycles
    # What the views show per worker (services.web.workers): along the way, and at the end.
    assert max(int(str(w["running"])) for view in seen for w in view) > 0
    assert all(int(str(w["running"])) <= int(str(w["placed"])) for view in seen for w in view)
    final = overview(state, 0)["workerClusters"]
    assert [w["name"] for w in final] == ["worker-1", "worker-2", "worker-3"]
    assert all(w["active"] and w["placed"] == w["running"] == 0 and w["clusterQueues"] == 4 for w in final)
    assert {w["name"]: w["finished"] for w in final} == dict(Counter(where.values()))


def test_idle_gaps_longer_than_worker_lost_timeout_lose_no_worker(tmp_path: Path) -> None:
    """Jobs an hour apart: the system idles far past the 15 minutes, yet the workers' heartbeats
    keep them alive, so nothing is requeued and each workload is placed once."""
    docs = demo_manifests(2, queues=2, jobs=5, gap_s=3600)
    log, _, twice = _run(tmp_path, {"<gaps>": yaml.safe_dump_all(docs, sort_keys=False)})
    assert not twice
    decisions = _decisions(log)
    assert Counter(type(d).__name__ for d in decisions if isinstance(d, PlaceWorkload | RemovePlacement)) == {
        "PlaceWorkload": 5, "RemovePlacement": 5}
    assert all(d.reason == PlacementEnd.WORKLOAD_FINISHED for d in decisions if isinstance(d, RemovePlacement))


def test_ten_workers_of_a_hundred_cluster_queues_place_every_workload_once(tmp_path: Path) -> None:
    docs = demo_manifests(10, queues=100, jobs=300, gap_s=1)
    log, loop, twice = _run(tmp_path, {"<10x100>": yaml.safe_dump_all(docs, sort_keys=False)})
    assert not twice
    placed = Counter(f"{d.namespace}/{d.name}" for d in _decisions(log) if isinstance(d, PlaceWorkload))
    assert len(placed) == 300 and set(placed.values()) == {1}
    state = loop.scheduler.state
    assert all(r.finished for r in state.workloads.values()) and len(state.workloads) == 300
    # Ordered: the first worker in spec.clusters that fits, so later ones take the overflow.
    assert len({state.multikueue.cluster_names[k] for k in placed}) >= 2


def test_manifests_without_workers_are_refused() -> None:
    files = {"a.yaml": "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: f}\n"}
    with pytest.raises(ValueError, match="no MultiKueueCluster"):
        schedule(files)


def test_a_worker_object_naming_an_unknown_cluster_is_refused_naming_the_field() -> None:
    docs = demo_manifests(1, queues=1, jobs=0)
    docs[-1]["metadata"]["annotations"]["kueuelog.io/cluster"] = "worker-9"
    with pytest.raises(ValueError, match=r"metadata.annotations.kueuelog.io/cluster.*worker-9"):
        schedule({"w.yaml": yaml.safe_dump_all(docs)})
