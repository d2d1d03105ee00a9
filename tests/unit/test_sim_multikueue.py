"""MultiKueue over simulated clusters (services.actuator.sim_multikueue, services.simcluster.workers):
the manager's actuator turns a placement into a start on the chosen worker's simulated cluster, the
worker reports it running under its own name, the manager runs nothing itself; on the embedded log,
every service stepped by hand."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec

from events import objects as o
from events.cluster import EvictionReason
from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics
from events.messages import (
    AdmitChecked,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    PlacementEnd,
    PlaceWorkload,
    PodsReady,
    RemovePlacement,
    WorkloadFinished,
)
from events.simcluster import StartWorkload, StopWorkload, decode_sim_record, sim_cluster_topic
from services.actuator.loop import Actuator, complete
from services.actuator.sim_multikueue import SimMultiKueuePort
from services.runtime.log import Log, values_of
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster import multicluster as mc
from services.simcluster.cluster import SimCluster
from services.simcluster.workers import beat, worker_config

T = Topics()
T0 = 1_735_689_600_000
WORKERS = ("worker-1", "worker-2")


def _all(log: Log, topic: str) -> list[bytes]:
    return list(values_of(log, topic))


class World:
    def __init__(self, tmp: Path) -> None:
        self.log = SqliteLog(tmp / "log")
        self.now = T0
        seed = [("s", encode(Envelope(id=f"s{i}", source="watcher", cluster=c,
                                      event=ObjectApplied(time=T0, object=obj))))
                for i, (c, obj) in enumerate(mc.world(len(WORKERS), 1, worker_cpu="2"))]
        self.log.append(T.cluster_events, seed)
        self.scheduler = Scheduler(self.log, T)
        self.port = SimMultiKueuePort(T)
        self.actuator = Actuator(self.log, self.port, topics=T, placer=self.port)
        self.workers = {n: SimCluster.real(self.log, lambda: self.now, worker_config(n), T) for n in WORKERS}

    def submit(self, i: int, cpu: str = "1") -> None:
        wl = mc.job(f"job-{i}", 0, cpu, "2025-01-01T00:00:00Z")
        self.log.append(T.cluster_events, [("j", encode(Envelope(id=f"j{i}", source="watcher",
                                                                 event=ObjectApplied(time=self.now, object=wl))))])

    def settle(self, *, silent: tuple[str, ...] = ()) -> None:
        for _ in range(50):
            did = 0
            while self.scheduler.step():
                did += 1
            did += self.actuator.step_now()
            for name, sim in self.workers.items():
                if name not in silent:
                    did += sim.step()
            if not did:
                return
        raise AssertionError("no steady state")

    def decisions(self) -> list[object]:
        return [decode_decision(v) for v in _all(self.log, T.decisions)]

    def events(self) -> list[Envelope]:
        return [decode_envelope(v) for v in _all(self.log, T.cluster_events)]

    def commands(self) -> list[object]:
        return [decode_sim_record(v) for v in _all(self.log, sim_cluster_topic(T))]


def test_a_placement_starts_the_workload_on_its_worker_only_and_the_worker_reports_it_running(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    for i in range(3):
        w.submit(i)
    w.settle()
    placed = {(d.name, d.cluster) for d in w.decisions() if isinstance(d, PlaceWorkload)}
    assert sorted(c for _, c in placed) == ["worker-1", "worker-1", "worker-2"]
    starts = [(c.name, c.cluster) for c in w.commands() if isinstance(c, StartWorkload)]
    assert sorted(starts) == sorted(placed)  # one start per placement, on the chosen worker, none on the manager
    assert any(isinstance(d, AdmitChecked) for d in w.decisions())  # admitted on the manager, which runs nothing
    running = {(e.event.name, e.cluster) for e in w.events() if isinstance(e.event, PodsReady)}
    assert running == placed


def test_a_silent_worker_is_lost_its_workload_runs_on_the_other_once_and_its_late_report_is_ignored(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    w.submit(0, cpu="2")
    w.settle()
    (first,) = [d for d in w.decisions() if isinstance(d, PlaceWorkload)]
    assert first.cluster == "worker-1"
    w.now += 16 * 60_000  # worker-1 silent past workerLostTimeout (15m); worker-2 beats
    beat(w.log, T, "worker-2", w.now)
    w.settle(silent=("worker-1",))
    decisions = w.decisions()
    assert [(d.cluster, d.reason) for d in decisions if isinstance(d, RemovePlacement)] == [("worker-1", "WorkerLost")]
    assert [d.cluster for d in decisions if isinstance(d, PlaceWorkload)] == ["worker-1", "worker-2"]
    assert any(isinstance(d, EvictWorkload) for d in decisions)
    assert any(isinstance(e.event, EvictionCompleted) and e.cluster == "sim" for e in w.events())
    # worker-1 is back: it carries out the stop, and reports what it ran (late): nothing changes.
    w.now += 30_000  # worker-2's run (60 s) goes on
    w.settle()
    late = [e for e in w.events() if isinstance(e.event, WorkloadFinished)]
    assert [e.cluster for e in late] == ["worker-1"]  # its run's end (due at T0 + 60 s), reported late
    assert not w.scheduler.state.workloads[f"{first.namespace}/{first.name}"].finished
    stops = [c.cluster for c in w.commands() if isinstance(c, StopWorkload)]
    assert stops == ["worker-1"]
    after = w.decisions()
    assert [d.cluster for d in after if isinstance(d, PlaceWorkload)] == ["worker-1", "worker-2"]
    starts = Counter(c.cluster for c in w.commands() if isinstance(c, StartWorkload))
    assert starts == {"worker-1": 1, "worker-2": 1}
    assert w.scheduler.state.multikueue.placements[f"{first.namespace}/{first.name}"].cluster == "worker-2"
    assert list(Scheduler(w.log, T).replay(0, verify=True)) == []


def _port_after(history: list[PlaceWorkload | RemovePlacement]) -> SimMultiKueuePort:
    port = SimMultiKueuePort(T)
    port.recover(iter(history))
    return port


def test_the_port_recovers_which_workloads_are_placed_and_forgets_the_finished() -> None:
    admission = o_admission()
    place = PlaceWorkload(id="c1-0", cycle=1, namespace="ns", name="a", cluster="worker-1", check="mk",
                          admission=admission)
    place_b = PlaceWorkload(id="c1-1", cycle=1, namespace="ns", name="b", cluster="worker-2", check="mk",
                            admission=admission)
    done = RemovePlacement(id="c2-0", cycle=2, namespace="ns", name="b", cluster="worker-2", check="mk",
                           reason=PlacementEnd.WORKLOAD_FINISHED)
    lost = RemovePlacement(id="c2-1", cycle=2, namespace="ns", name="a", cluster="worker-1", check="mk",
                           reason=PlacementEnd.WORKER_LOST)
    assert _port_after([place, place_b, done, lost]).placed == {"ns/a"}  # lost: still MultiKueue's, requeued


def test_an_eviction_of_a_placed_workload_completes_at_once_any_other_goes_to_the_managers_cluster() -> None:
    admission = o_admission()
    port = _port_after([PlaceWorkload(id="c1-0", cycle=1, namespace="ns", name="a", cluster="worker-1", check="mk",
                                      admission=admission)])
    evict = EvictWorkload(id="c3-0", cycle=3, time=7, namespace="ns", name="a", reason=EvictionReason.ADMISSION_CHECK,
                          message="m")
    ((topic, _, value),) = complete(port.stop(evict))
    env = decode_envelope(value)
    assert (topic, env.cluster, env.event) == (T.cluster_events, "sim",
                                               EvictionCompleted(time=7, namespace="ns", name="a"))
    other = msgspec.structs.replace(evict, name="b")
    ((topic, _, value),) = complete(port.stop(other))
    cmd = decode_sim_record(value)
    assert (topic, cmd) == (sim_cluster_topic(T), StopWorkload(time=7, cluster="sim", decision_id="c3-0",
                                                               namespace="ns", name="b", reason="AdmissionCheck"))
    checked = AdmitChecked(id="c4-0", cycle=4, namespace="ns", name="a", admission=admission)
    assert complete(port.start(checked)) == ()  # it runs on its worker, not on the manager


def o_admission() -> o.Admission:
    return o.Admission(cluster_queue="cq", pod_set_assignments=(
        o.PodSetAssignment(name="main", flavors=(("cpu", "pool"),), resource_usage=(("cpu", 1000),), count=1),))
