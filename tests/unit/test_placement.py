"""MultiKueue placement in the pure core (services.core.placement): where a workload holding quota
on the manager runs, when it waits, what a lost worker does, and that the service replays it."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import objects as o
from events.codec import decode_decision, encode
from events.envelope import Envelope, Topics
from events.kueue_versions import respell
from events.manifests import Document, ManifestError, normalize
from events.messages import (
    AnyDecision,
    ClockTicked,
    ObjectApplied,
    ObjectDeleted,
    PlacementWaiting,
    PlaceWorkload,
    RemovePlacement,
    WorkloadFinished,
)
from services.app.simulate import simulate
from services.core.cycle import run_cycle
from services.core.placement import route
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, finish_eviction
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster import multicluster as mc

MINUTE = 60_000
T0 = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def _world(clusters: int = 2, queues: int = 1, worker_cpu: str = "4", policy: str = "Ordered") -> State:
    state = State()
    for cluster, obj in mc.world(clusters, queues, worker_cpu=worker_cpu, policy=policy):
        route(state, cluster, ObjectApplied(time=T0, object=obj))
    return state


def _submit(state: State, name: str, cpu: str, queue: int = 0, at: int = T0) -> None:
    route(state, "", ObjectApplied(time=at, object=mc.job(name, queue, cpu, "2025-01-01T00:00:00Z")))


def _settle(state: State) -> list[AnyDecision]:
    """Cycles until quiet, evictions completing at once (as ``simulate`` runs them)."""
    out: list[AnyDecision] = []
    for _ in range(50):
        result = run_cycle(state)
        out.extend(result.decisions)
        evicting = [r for r in state.workloads.values() if r.evicting]
        for rec in evicting:
            finish_eviction(state, rec)
        if not result.changed and not evicting and not state.checks_changed:
            return out
    raise AssertionError("no steady state")


def _job(state: State, key: str) -> str:
    owner = state.workloads[key].obj.owner
    return owner.name if owner is not None else key


def _placed(state: State) -> dict[str, str]:
    """Job name -> the worker it is placed on."""
    return {_job(state, k): p.cluster for k, p in sorted(state.multikueue.placements.items())}


def _key(state: State, job: str) -> str:
    """The key of the Workload of Job ``job``."""
    (key,) = [k for k in state.workloads if _job(state, k) == job]
    return key


@pytest.mark.parametrize(("policy", "jobs", "want"), [
    pytest.param("Ordered", [("a", "3"), ("b", "3"), ("c", "1")],
                 {"a": "worker-1", "b": "worker-2", "c": "worker-1"},
                 id="spec.clusters order: the first worker that can admit it now"),
    pytest.param("MostFreeQuota", [("a", "3"), ("b", "1"), ("c", "1")],
                 {"a": "worker-1", "b": "worker-2", "c": "worker-2"},
                 id="most free quota: the worker left with the largest free share, ties in order"),
    pytest.param("Ordered", [("a", "4"), ("b", "4"), ("c", "4")],
                 {"a": "worker-1", "b": "worker-2"},
                 id="no worker can admit the third: it waits holding manager quota"),
])
def test_placement_policy(policy: str, jobs: list[tuple[str, str]], want: dict[str, str]) -> None:
    state = _world(policy=policy)
    for name, cpu in jobs:
        _submit(state, f"job-{name}", cpu)
        _settle(state)
    assert _placed(state) == {f"job-{n}": c for n, c in want.items()}


def test_a_placement_makes_the_check_ready_admits_on_the_manager_with_the_workers_flavor() -> None:
    state = _world()
    _submit(state, "job-a", "2")
    decisions = _settle(state)
    place = [d for d in decisions if isinstance(d, PlaceWorkload)]
    assert [(_job(state, f"{d.namespace}/{d.name}"), d.cluster, d.check) for d in place] == [
        ("job-a", "worker-1", mc.CHECK)]
    assert place[0].admission.pod_set_assignments[0].flavors == (("cpu", "worker-1-pool"),)
    assert [(u.name, u.node_selector) for u in place[0].pod_set_updates] == [
        ("main", (("kueuelog.io/worker", "worker-1"),))]
    rec = state.workloads[_key(state, "job-a")]
    check = rec.checks[mc.CHECK]
    assert (check.state, check.message) == (o.CheckState.READY, 'The workload was admitted on "worker-1"')
    assert str(rec.conditions["Admitted"].status) == "True"
    assert state.multikueue.cluster_names == {_key(state, "job-a"): "worker-1"}


def test_waiting_says_why_per_cluster_and_a_finish_on_the_worker_lets_the_next_in() -> None:
    state = _world()
    for n in ("a", "b", "c"):
        _submit(state, f"job-{n}", "4")
    decisions = _settle(state)
    waiting = [d for d in decisions if isinstance(d, PlacementWaiting)]
    assert [_job(state, f"{d.namespace}/{d.name}") for d in waiting] == ["job-c"]
    assert waiting[0].message == (
        'No worker cluster can admit the workload now: "worker-1": ClusterQueue cq-0: couldn\'t assign flavors to '
        'pod set main: insufficient unused quota for cpu in flavor worker-1-pool, 4 more needed; "worker-2": '
        "ClusterQueue cq-0: couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "worker-2-pool, 4 more needed")
    assert waiting[0].nominated == ("worker-1", "worker-2")  # status.nominatedClusterNames, for the actuator
    assert _settle(state) == []  # said once: the same reason is not decided again
    b = _key(state, "job-b")
    route(state, "worker-2", WorkloadFinished(time=T0 + MINUTE, namespace="team-0", name=b.split("/")[1]))
    decisions = _settle(state)
    assert [(type(d).__name__, _job(state, f"{d.namespace}/{d.name}")) for d in decisions
            if type(d).__name__ != "AdmitChecked"] == [("RemovePlacement", "job-b"), ("PlaceWorkload", "job-c")]
    assert _placed(state) == {"job-a": "worker-1", "job-c": "worker-2"}
    assert state.workloads[b].finished
    assert state.multikueue.cluster_names[b] == "worker-2"  # status.clusterName stays after finishing


def test_a_lost_worker_requeues_its_workloads_elsewhere_and_its_late_report_resurrects_nothing() -> None:
    state = _world(worker_cpu="2")
    _submit(state, "job-a", "2")
    _settle(state)
    assert _placed(state) == {"job-a": "worker-1"}
    a = _key(state, "job-a")
    # worker-2 keeps ticking; worker-1 falls silent past workerLostTimeout (15m).
    route(state, "worker-2", ClockTicked(time=T0 + 10 * MINUTE))
    assert not [d for d in _settle(state) if isinstance(d, RemovePlacement)]
    route(state, "worker-2", ClockTicked(time=T0 + 16 * MINUTE))
    decisions = _settle(state)
    removed = [d for d in decisions if isinstance(d, RemovePlacement)]
    assert [(d.cluster, d.reason, d.message) for d in removed] == [("worker-1", "WorkerLost", "Admitting remote lost")]
    assert _placed(state) == {"job-a": "worker-2"}
    assert state.workloads[a].checks[mc.CHECK].retry_count == 1
    # worker-1 comes back and reports the workload finished there: it is not placed there any more.
    anomalies = state.anomaly_count
    route(state, "worker-1", WorkloadFinished(time=T0 + 17 * MINUTE, namespace="team-0", name=a.split("/")[1]))
    assert not state.workloads[a].finished
    assert state.anomaly_count == anomalies + 1
    assert _placed(state) == {"job-a": "worker-2"}
    assert state.multikueue.cluster_names == {a: "worker-2"}


def test_a_copy_a_lost_worker_still_reports_when_it_is_back_is_removed_once() -> None:
    state = _world(worker_cpu="2")
    _submit(state, "job-a", "2")
    _settle(state)
    a = _key(state, "job-a")
    copy = state.workloads[a].obj
    route(state, "worker-1", ObjectApplied(time=T0 + MINUTE, object=copy))  # its watcher sees the copy
    assert _settle(state) == []  # placed there: nothing to remove
    route(state, "worker-2", ClockTicked(time=T0 + 17 * MINUTE))
    _settle(state)
    assert _placed(state) == {"job-a": "worker-2"}
    route(state, "worker-1", ClockTicked(time=T0 + 18 * MINUTE))  # back, still running its copy
    decisions = _settle(state)
    stale = [(d.cluster, d.reason) for d in decisions if isinstance(d, RemovePlacement)]
    assert stale == [("worker-1", "StaleCopy")]
    assert _placed(state) == {"job-a": "worker-2"}
    assert _settle(state) == []  # asked once
    route(state, "worker-1", ObjectDeleted(time=T0 + 19 * MINUTE, kind="Workload", namespace=copy.namespace,
                                           name=copy.name))
    assert state.multikueue.workers["worker-1"].copies == {}


def test_a_worker_whose_multikueue_cluster_is_inactive_is_no_candidate() -> None:
    state = _world()
    inactive = o.MultiKueueCluster(name="worker-1", location="k", active=False)
    route(state, "", ObjectApplied(time=T0, object=inactive))
    _submit(state, "job-a", "1")
    _settle(state)
    assert _placed(state) == {"job-a": "worker-2"}


def test_worker_queues_stay_out_of_the_managers_state() -> None:
    state = _world(clusters=3, queues=2)
    assert sorted(state.cluster_queues) == ["cq-0", "cq-1"]
    assert sorted(state.flavors) == ["default"]
    assert sorted(state.multikueue.workers["worker-3"].flavors) == ["worker-3-pool"]
    assert sorted(state.multikueue.workers["worker-3"].local_queues) == ["team-0/lq", "team-1/lq"]


def test_snapshot_carries_placements_and_worker_views() -> None:
    state = _world()
    _submit(state, "job-a", "2")
    _settle(state)
    back = decode_state(encode_state(state))
    assert back.multikueue == state.multikueue
    assert encode_state(back) == encode_state(state)


def test_the_service_replays_placements_exactly(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    try:
        topics = Topics()
        recs = []
        for i, (cluster, obj) in enumerate(mc.world(3, 2, worker_cpu="2")):
            ev = ObjectApplied(time=T0, object=obj)
            recs.append(("seed", encode(Envelope(id=f"s{i}", source="watcher", cluster=cluster, event=ev))))
        for i in range(8):
            ev = ObjectApplied(time=T0 + i, object=mc.job(f"job-{i}", i % 2, "1", "2025-01-01T00:00:00Z"))
            recs.append(("j", encode(Envelope(id=f"j{i}", source="watcher", event=ev))))
        log.append(topics.cluster_events, recs)
        live = Scheduler(log, batch_size=7)
        while live.step():
            pass
        placed = [d for r in log.read(topics.decisions, 0, 10_000)
                  if isinstance(d := decode_decision(r.value), PlaceWorkload)]
        assert len({d.name for d in placed}) == len(placed) == 8  # 3 workers x 2 queues x 2 cpu: every one fits
        again = Scheduler(log, batch_size=1000)
        assert list(again.replay(0, verify=True)) == []
        assert encode_state(again.state) == encode_state(live.state)
    finally:
        log.close()


BAD = [
    ({"kind": "MultiKueueConfig", "metadata": {"name": "c"}, "spec": {}},
     "MultiKueueConfig c): spec.clusters: at least 1 cluster is required"),
    ({"kind": "MultiKueueConfig", "metadata": {"name": "c"}, "spec": {"clusters": ["a", "a"]}},
     "spec.clusters[1]: must be unique ('a' is listed twice)"),
    ({"kind": "MultiKueueConfig", "metadata": {"name": "c", "annotations": {"kueuelog.io/placement-policy": "Random"}},
      "spec": {"clusters": ["a"]}},
     "metadata.annotations.kueuelog.io/placement-policy: must be one of Ordered, MostFreeQuota (got 'Random')"),
    ({"kind": "MultiKueueCluster", "metadata": {"name": "w"},
      "spec": {"clusterSource": {"kubeConfig": {"locationType": "File", "location": "x"}}}},
     "MultiKueueCluster w): spec.clusterSource.kubeConfig.locationType: must be Secret or Path (got 'File')"),
    ({"kind": "MultiKueueCluster", "metadata": {"name": "w"}, "spec": {"clusterSource": {}}},
     "spec.clusterSource: exactly one of kubeConfig, clusterProfileRef is required"),
    ({"kind": "MultiKueueCluster", "metadata": {"name": "w"},
      "spec": {"clusterSource": {"kubeConfig": {"location": ""}}}},
     "spec.clusterSource.kubeConfig.location: must be 1 to 256 characters (got 0)"),
    ({"kind": "AdmissionCheck", "metadata": {"name": "mk"},
      "spec": {"controllerName": "kueue.x-k8s.io/multikueue", "parameters": {"kind": "ProvisioningRequestConfig",
                                                                             "name": "x"}}},
     "spec.parameters.kind: must be MultiKueueConfig for controller kueue.x-k8s.io/multikueue"),
]


@pytest.mark.parametrize(("body", "error"), [pytest.param(b, e, id=e.split(":")[0]) for b, e in BAD])
@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_invalid_multikueue_objects_are_refused_naming_object_and_field(body: dict[str, object], error: str,
                                                                        version: str) -> None:
    body = {"apiVersion": f"kueue.x-k8s.io/{version}", **body}
    if version == "v1beta1":  # v1beta1 spells the cluster source at spec itself
        body = respell(body)
        error = error.replace("spec.clusterSource", "spec")
    with pytest.raises(ManifestError) as e:
        normalize(Document(file="f.yaml", index=1, body=body))
    assert error in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("version", "spec", "error"), [
    ("v1beta1", {"clusterSource": {"kubeConfig": {"location": "s"}}},
     "spec.clusterSource: not a v1beta1 field (v1beta1 spells spec.kubeConfig)"),
    ("v1beta2", {"kubeConfig": {"location": "s"}},
     "spec.kubeConfig: not a v1beta2 field (v1beta2 spells spec.clusterSource.kubeConfig)"),
])
def test_a_multikueue_cluster_source_in_the_other_versions_spelling_is_refused(
        version: str, spec: dict[str, object], error: str) -> None:
    with pytest.raises(ManifestError, match=error.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        normalize(Document(file="f.yaml", index=1, body={"apiVersion": f"kueue.x-k8s.io/{version}",
                                                          "kind": "MultiKueueCluster", "metadata": {"name": "w"},
                                                          "spec": spec}))


def test_a_v1beta1_multikueue_cluster_means_what_its_v1beta2_spelling_means() -> None:
    old = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "MultiKueueCluster", "metadata": {"name": "w"},
           "spec": {"kubeConfig": {"locationType": "Path", "location": "/k"}}}
    new = respell({**old, "apiVersion": "kueue.x-k8s.io/v1beta2"})
    assert new["spec"] == {"clusterSource": {"kubeConfig": {"locationType": "Path", "location": "/k"}}}
    assert respell({**new, "apiVersion": "kueue.x-k8s.io/v1beta1"})["spec"] == old["spec"]
    assert (normalize(Document(file="f.yaml", index=1, body=old))
            == normalize(Document(file="f.yaml", index=1, body=new)))


def test_simulate_places_workers_objects_marked_by_annotation(tmp_path: Path) -> None:
    import yaml

    docs = mc.manager_manifests(2, 1, "100")
    for n in mc.worker_names(2):
        for m in mc.worker_manifests(n, 1, "2"):
            m["metadata"].setdefault("annotations", {})["kueuelog.io/cluster"] = n
            docs.append(m)
    docs += [mc.job_manifest(f"job-{i}", 0, "2", f"2025-01-01T00:00:0{i}Z") for i in range(3)]
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = simulate([str(path)], None)
    names = {k: r.obj.owner.name if r.obj.owner else "" for k, r in result.state.workloads.items()}
    got = {names[k]: c for k, c in result.state.multikueue.cluster_names.items()}
    assert got == {"job-0": "worker-1", "job-1": "worker-2"}


def test_simulate_refuses_an_annotation_naming_no_worker(tmp_path: Path) -> None:
    import yaml

    docs = mc.manager_manifests(1, 1, "100")
    flavor = mc.worker_manifests("worker-9", 1, "2")[0]
    flavor["metadata"]["annotations"] = {"kueuelog.io/cluster": "worker-9"}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*docs, flavor]))
    with pytest.raises(ManifestError, match=r"document 7 \(ResourceFlavor worker-9-pool\): metadata.annotations."
                                            r"kueuelog.io/cluster: no MultiKueueCluster named 'worker-9'"):
        simulate([str(path)], None)


def test_nominated_cluster_names_show_while_waiting_and_give_way_to_cluster_name() -> None:
    """As Kueue's default (AllAtOnce) dispatcher: every connected worker, by name, while the
    workload holds manager quota and waits for a worker; never together with status.clusterName."""
    from services.core.render import workload_object

    state = _world(clusters=3)
    for n in ("a", "b", "c", "d"):
        _submit(state, f"job-{n}", "4")
    _settle(state)
    a, d = _key(state, "job-a"), _key(state, "job-d")
    waiting = workload_object(state, state.workloads[d])["status"]
    assert waiting["nominatedClusterNames"] == ["worker-1", "worker-2", "worker-3"] and "clusterName" not in waiting
    placed = workload_object(state, state.workloads[a])["status"]
    assert placed["clusterName"] == "worker-1" and "nominatedClusterNames" not in placed
    # worker-2 falls silent past workerLostTimeout: it is no longer nominated.
    for worker in ("worker-1", "worker-3"):
        route(state, worker, ClockTicked(time=T0 + 16 * MINUTE))
    _settle(state)
    waiting = workload_object(state, state.workloads[d])["status"]
    assert waiting["nominatedClusterNames"] == ["worker-1", "worker-3"]
    # A finish on worker-1 lets job-d in there: clusterName, and the nomination is gone.
    route(state, "worker-1", WorkloadFinished(time=T0 + 17 * MINUTE, namespace="team-0", name=a.split("/")[1]))
    _settle(state)
    assert _placed(state)["job-d"] == "worker-1"
    status = workload_object(state, state.workloads[d])["status"]
    assert status["clusterName"] == "worker-1" and "nominatedClusterNames" not in status
    assert "nominatedClusterNames" not in workload_object(state, state.workloads[a])["status"]
