"""MultiKueue on the real broker: crash safety of placement, and a lost worker.

The scheduler (``kueuelog run scheduler``) and the manager's actuator (``kueuelog run actuator``:
a placement becomes a start on the chosen worker's simulated cluster) run as processes; the worker
clusters are simulated (``python -m services.simcluster.workers``: a simulated cluster in real time
and a heartbeat per worker), all on one Kafka broker.

1. SIGKILL of the scheduler, and separately of the actuator, at random points while workloads are
   being placed, each time restarted: every workload is placed exactly once (never a second
   ``PlaceWorkload`` without a ``RemovePlacement`` in between), the copy on its worker is created
   exactly once (one ``StartWorkload`` and one run there), nothing runs on the manager, every
   workload finishes, and ``replay --verify`` reproduces every decision.
2. A worker whose watcher goes silent (its process killed) past ``workerLostTimeout``: its workload
   is requeued on the manager and placed on the other worker, exactly once; when it comes back, its
   late report of the run it had cannot resurrect the workload there.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events import objects as o
from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics
from events.manifests import Document, normalize
from events.messages import (
    CycleCompleted,
    ObjectApplied,
    PlaceWorkload,
    PodsReady,
    RemovePlacement,
    WorkloadFinished,
)
from events.simcluster import RunStarted, StartWorkload, decode_sim_record, sim_cluster_topic
from services.runtime.clock import wall_clock_ms
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.runtime.log import caught_up, values_of
from services.scheduler.service import GROUP, Scheduler
from services.simcluster import multicluster as mc
from tests.infra.kafka import LocalKafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
KUEUELOG = [sys.executable, "-m", "services.app.cli"]


class Procs:
    """The services as processes on the broker, by role, each with its output in a file. A service
    that steps down on its own (exit 5, saying it lost its leadership or was fenced: a heartbeat
    starved past its session on a loaded machine) is the protocol working: it is started again."""

    def __init__(self, bootstrap: str, prefix: str, out_dir: Path) -> None:
        self.bootstrap, self.prefix, self.out_dir = bootstrap, prefix, out_dir
        self.env = {**os.environ, "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS": "2000",
                    "KUEUELOG_KAFKA_HEARTBEAT_INTERVAL_MS": "300"}
        self.live: dict[str, subprocess.Popen[bytes]] = {}
        self.argv: dict[str, list[str]] = {}
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.stepped_down = 0

    def _start(self, role: str, argv: list[str]) -> None:
        path = self.out_dir / f"{role.replace(':', '-')}-{len(self.started) + 1}.out"
        out = open(path, "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=Path.cwd(),
                             start_new_session=True)
        self.live[role], self.argv[role] = p, argv
        self.started.append((p, path))

    def service(self, service: str) -> None:
        self._start(service, [*KUEUELOG, "run", service, "--bootstrap-servers", self.bootstrap,
                              "--topic-prefix", self.prefix])

    def workers(self, *names: str, duration_s: float) -> None:
        self._start("workers:" + ",".join(names), [
            sys.executable, "-m", "services.simcluster.workers", "--bootstrap-servers", self.bootstrap,
            "--topic-prefix", self.prefix, "--workers", ",".join(names), "--heartbeat", "0.5",
            "--default-duration", str(duration_s)])

    def kill(self, role: str) -> None:
        p = self.live.pop(role)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def wait(self, predicate: Callable[[], bool], seconds: float, what: str) -> None:
        """Until ``predicate``; every live role must stay up (or step down, and is restarted)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if predicate():
                return
            for role, p in list(self.live.items()):
                if p.poll() is None:
                    continue
                text = self._output(p)
                if p.returncode == 5 and ("leadership" in text or "fenced" in text):
                    self.stepped_down += 1
                    self._start(role, self.argv[role])
                    continue
                raise AssertionError(f"{role} exited with {p.returncode} while waiting for {what}:\n{text[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")

    def _output(self, p: subprocess.Popen[bytes]) -> str:
        return next(path for q, path in self.started if q is p).read_text(errors="replace")

    def stop_all(self) -> None:
        for p, _ in self.started:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in self.started:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def outputs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}" for _, path in self.started)


def _records(log: KafkaLog, topic: str) -> Iterator[bytes]:
    return values_of(log, topic)


def _events(log: KafkaLog, topics: Topics) -> list[Envelope]:
    return [decode_envelope(v) for v in _records(log, topics.cluster_events)]


def _decisions(log: KafkaLog, topics: Topics) -> list[object]:
    return [decode_decision(v) for v in _records(log, topics.decisions)]


def _finished_on_workers(log: KafkaLog, topics: Topics) -> set[str]:
    return {f"{e.event.namespace}/{e.event.name}" for e in _events(log, topics)
            if isinstance(e.event, WorkloadFinished) and e.cluster.startswith("worker-")}


def _state_at(log: KafkaLog, topics: Topics, offset: int) -> Scheduler:
    """The scheduler's state with the events below ``offset`` folded and the decisions made on them
    applied (a replay up to there)."""
    s = Scheduler(log, topics)
    for _ in s.replay(0, verify=False, until_input=offset):
        pass
    s.fold_until(offset)
    return s


def _job(i: int, queue: int, cpu: str, duration: str) -> o.Workload:
    body = mc.job_manifest(f"job-{i:02d}", queue, cpu, "2025-01-01T00:00:00Z", duration=duration)
    obj = normalize(Document(file="<test>", index=i, body=body))
    assert isinstance(obj, o.Workload)
    return obj


def _open(broker: LocalKafka, prefix: str, objects: list[tuple[str, o.AnyObject]]) -> tuple[KafkaLog, Topics]:
    """The topics, and ``objects`` appended to cluster-events, each under its cluster's name."""
    topics = Topics(prefix=prefix)
    log = KafkaLog(KafkaSettings(bootstrap_servers=broker.bootstrap_servers), prefix=prefix)
    log.ensure_topics([topics.cluster_events, topics.decisions, topics.snapshots, topics.dead_letters,
                       sim_cluster_topic(topics)])
    now = wall_clock_ms()
    log.append(topics.cluster_events, [
        ("seed", encode(Envelope(id=f"seed:{i}", source="watcher", cluster=cluster,
                                 event=ObjectApplied(time=now, object=obj))))
        for i, (cluster, obj) in enumerate(objects)])
    return log, topics


def _check_placed_once(log: KafkaLog, topics: Topics, workloads: set[str]) -> None:
    """Every workload placed exactly once, its copy created once, nothing run on the manager, the
    decisions written once each by one writer at a time, and replayed exactly."""
    placements: dict[str, list[str]] = {}
    ids: set[str] = set()
    cycles: list[int] = []
    for d in _decisions(log, topics):
        if isinstance(d, CycleCompleted):
            cycles.append(d.cycle)
            continue
        assert d.id not in ids, f"decision {d.id} written twice"  # type: ignore[attr-defined]
        ids.add(d.id)  # type: ignore[attr-defined]
        if isinstance(d, PlaceWorkload | RemovePlacement):
            key = f"{d.namespace}/{d.name}"
            seq = placements.setdefault(key, [])
            if isinstance(d, PlaceWorkload):
                assert not seq or seq[-1] != "place", f"{key} placed twice without a removal between: {seq}"
                seq.append("place")
            else:
                seq.append("remove")
    assert cycles == list(range(1, len(cycles) + 1)), "cycle numbers must be contiguous across restarts"
    assert {k: s.count("place") for k, s in placements.items()} == dict.fromkeys(workloads, 1)
    sim = [decode_sim_record(v) for v in _records(log, sim_cluster_topic(topics))]
    starts = Counter((r.cluster, f"{r.namespace}/{r.name}") for r in sim if isinstance(r, StartWorkload))
    runs = Counter((r.cluster, f"{r.namespace}/{r.name}") for r in sim if isinstance(r, RunStarted))
    assert all(c.startswith("worker-") for c, _ in starts), f"something started on the manager: {starts}"
    assert sorted(k for _, k in starts) == sorted(workloads), "each copy created exactly once"
    assert runs == starts, "each copy run exactly once, where it was created"
    assert _finished_on_workers(log, topics) == workloads
    assert list(Scheduler(log, topics).replay(0, verify=True)) == []


@pytest.mark.parametrize("victim", ["scheduler", "actuator"])
def test_a_service_sigkilled_mid_placement_places_every_workload_exactly_once(
        victim: str, kafka_broker: LocalKafka, kafka_topic_prefix: str, tmp_path: Path) -> None:
    workers = mc.worker_names(3)
    rng = random.Random(int(os.environ.get("KUEUELOG_CRASH_SEED", "20261126")))
    jobs = [_job(i, i % 2, "1", f"{rng.randint(2, 4)}s") for i in range(30)]
    world = mc.world(3, 2, worker_cpu="2")  # 12 run at a time: the others wait for a worker
    log, topics = _open(kafka_broker, kafka_topic_prefix.rstrip("-"), [*world, *(("", j) for j in jobs)])
    workloads = {f"{j.namespace}/{j.name}" for j in jobs}
    procs = Procs(kafka_broker.bootstrap_servers, topics.prefix, tmp_path)
    procs.workers(*workers, duration_s=3)
    procs.service("actuator" if victim == "scheduler" else "scheduler")
    # What the victim has done so far: the scheduler's decisions written, the actuator's consumed.
    progress: Callable[[], int] = ((lambda: log.end_offset(topics.decisions)) if victim == "scheduler"
                                   else (lambda: log.position("actuator", topics.decisions)))
    kills = 0
    try:
        for _ in range(8):
            if _finished_on_workers(log, topics) >= workloads:
                break
            target = progress() + rng.randint(1, 25)

            def moved(t: int = target) -> bool:
                return progress() >= t or _finished_on_workers(log, topics) >= workloads

            procs.service(victim)
            procs.wait(moved, 120, f"the {victim} to make progress")
            procs.kill(victim)
            kills += 1
        procs.service(victim)
        procs.wait(lambda: _finished_on_workers(log, topics) >= workloads, 300, "every workload to finish")
        procs.wait(lambda: caught_up(log, GROUP, topics.cluster_events), 60, "the scheduler to catch up")
    except AssertionError:
        procs.stop_all()
        print(procs.outputs())
        raise
    finally:
        procs.stop_all()
    assert kills >= 3
    _check_placed_once(log, topics, workloads)
    log.close()


def test_a_worker_silent_past_worker_lost_timeout_is_replaced_once_and_its_late_report_resurrects_nothing(
        kafka_broker: LocalKafka, kafka_topic_prefix: str, tmp_path: Path) -> None:
    lost_ms = 6000
    job = _job(0, 0, "2", "")  # how long it runs is the worker's: 2 s on worker-1, 20 s on worker-2
    config = o.Configuration(multikueue_worker_lost_timeout_ms=lost_ms)
    log, topics = _open(kafka_broker, kafka_topic_prefix.rstrip("-"),
                        [("", config), *mc.world(2, 1, worker_cpu="2"), ("", job)])
    key = f"{job.namespace}/{job.name}"
    procs = Procs(kafka_broker.bootstrap_servers, topics.prefix, tmp_path)
    procs.workers("worker-1", duration_s=2)
    procs.workers("worker-2", duration_s=20)
    procs.service("scheduler")
    procs.service("actuator")

    def running_on(cluster: str) -> bool:
        return any(isinstance(e.event, PodsReady) and e.cluster == cluster for e in _events(log, topics))

    def reported(cluster: str, kind: type) -> list[Envelope]:
        return [e for e in _events(log, topics) if isinstance(e.event, kind) and e.cluster == cluster]

    try:
        procs.wait(lambda: running_on("worker-1"), 120, "the job to run on worker-1")
        procs.kill("workers:worker-1")  # its watcher falls silent; its run (2 s) ends while nobody listens
        procs.wait(lambda: running_on("worker-2"), 120, "the job to run on worker-2 once worker-1 is lost")
        procs.workers("worker-1", duration_s=2)  # back: it reports the end of the run it had
        procs.wait(lambda: bool(reported("worker-1", WorkloadFinished)), 120, "worker-1's late report")
        late = log.end_offset(topics.cluster_events)
        procs.wait(lambda: log.position(GROUP, topics.cluster_events) >= late, 60,
                   "the scheduler to fold the late report")
        folded = _state_at(log, topics, late)
        still = folded.state.workloads[key]
        assert not still.finished, "worker-1's late report finished a workload placed on worker-2"
        assert folded.state.multikueue.placements[key].cluster == "worker-2"
        procs.wait(lambda: bool(reported("worker-2", WorkloadFinished)), 120, "the job to finish on worker-2")
        procs.wait(lambda: caught_up(log, GROUP, topics.cluster_events), 60, "the scheduler to catch up")
    except (AssertionError, KeyError):
        procs.stop_all()
        print(procs.outputs())
        print("\n".join(repr(d) for d in _decisions(log, topics) if not isinstance(d, CycleCompleted)))
        raise
    finally:
        procs.stop_all()
    decisions = _decisions(log, topics)
    assert [d.cluster for d in decisions if isinstance(d, PlaceWorkload)] == ["worker-1", "worker-2"]
    removed = [(d.cluster, str(d.reason)) for d in decisions if isinstance(d, RemovePlacement)]
    assert removed[0] == ("worker-1", "WorkerLost") and ("worker-2", "WorkloadFinished") in removed, removed
    sim = [decode_sim_record(v) for v in _records(log, sim_cluster_topic(topics))]
    assert Counter(r.cluster for r in sim if isinstance(r, StartWorkload)) == {"worker-1": 1, "worker-2": 1}
    recovered = _state_at(log, topics, log.position(GROUP, topics.cluster_events))
    assert recovered.state.workloads[key].finished
    assert recovered.state.multikueue.cluster_names == {key: "worker-2"}
    assert list(Scheduler(log, topics).replay(0, verify=True)) == []
    log.close()
