"""Chaos: services SIGKILLed again and again over a run lose and double nothing.

The services run as ``kueuelog run`` processes over one embedded log, in simulated time.
Every time the log has grown by a few dozen records, one service chosen at random (from a
fixed seed, so a failure can be reproduced) is killed with SIGKILL and started again. When
every Job has finished, the log must show:

- every decision id once, and no workload admitted twice without an eviction in between;
- every decision applied once by the actuator (one ``actuation.applied`` per decision id);
- every start command run once by the simulated cluster, and every run finished once;
- each Job finished exactly once, and ``kueuelog replay --verify`` reproducing every decision.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from events.cluster import PRIORITY_CLASS_LABEL, SIM_DURATION_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import AdmitWorkload, DecisionApplied, EvictWorkload, WorkloadFinished
from events.simcluster import RunStarted, StartWorkload, decode_sim_record, sim_cluster_topic
from services.runtime.log import Log, values_of
from services.runtime.sqlite import SqliteLog
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue, a_priority_class

pytestmark = pytest.mark.integration

T = Topics()
JOBS = 36
KILL_EVERY_RECORDS = 20  # one process for all of them goes faster: it is killed twice as often
STALL_S = 120  # the run must keep making progress: the log grows at least this often
CAP_S = 900  # and end at all (a loaded machine only slows the restarts down)
CLI = [sys.executable, "-m", "services.app.cli"]


def _manifests() -> str:
    """One ClusterQueue of 4 cpu preempting within itself; 36 one-cpu Jobs, every sixth of high priority."""
    jobs = []
    for i in range(JOBS):
        job = (a_job("team", f"job-{i:02d}", "lq").parallelism(1).request(cpu="1")
               .annotate(SIM_DURATION_ANNOTATION, f"{30 + 7 * (i % 5)}s").created((i // 6) * 60 + (i % 6) * 10))
        if i % 6 == 5:
            job.label(PRIORITY_CLASS_LABEL, "high")
        jobs.append(job)
    objects = [a_flavor("default"), a_cluster_queue("cq").flavor("default", cpu="4").preemption(within="LowerPriority"),
               a_local_queue("team", "lq", "cq"), a_priority_class("high", 1000), *jobs]
    return yaml.safe_dump_all([b.obj() for b in objects], sort_keys=False)


def _all(log: Log, topic: str) -> list[bytes]:
    return list(values_of(log, topic))


def _size(log: Log) -> int:
    return sum(log.end_offset(t) for t in (T.cluster_events, T.decisions, sim_cluster_topic(T)))


def _finished(log: Log) -> int:
    return len({e.event.name for v in _all(log, T.cluster_events)
                if isinstance((e := decode_envelope(v)).event, WorkloadFinished)})


class _Services:
    def __init__(self, directory: Path, manifests: Path, out: Path, *, together: bool) -> None:
        where = ["--log", str(directory), "--http-port", "0"]
        seed = ["--clock", "simulated", "--seed", str(manifests)]
        self.args = {"all": ["run", "all", *where, *seed, "--no-until-done"]} if together else {
            "scheduler": ["run", "scheduler", *where],
            "actuator": ["run", "actuator", *where],
            "simcluster": ["run", "simcluster", *where, *seed],
        }
        self.out = out
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills: Counter[str] = Counter()

    def start(self, name: str) -> None:
        with (self.out / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen([*CLI, *self.args[name]], stdout=log, stderr=subprocess.STDOUT)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.kills[name] += 1

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n"
                                     f"{(self.out / f'{name}.log').read_text()[-3000:]}")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _check_invariants(log: Log) -> None:
    decisions = [decode_decision(v) for v in _all(log, T.decisions)]
    orders = [d for d in decisions if isinstance(d, AdmitWorkload | EvictWorkload)]
    assert any(isinstance(d, EvictWorkload) for d in orders), "the run should preempt, so evictions are tried too"
    ids = Counter(d.id for d in orders)
    assert not [i for i, n in ids.items() if n > 1], "a decision id was written twice"
    holding: dict[str, bool] = {}
    for d in orders:
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, AdmitWorkload):
            assert not holding.get(key), f"{key} admitted twice without an eviction in between"
            holding[key] = True
        else:
            holding[key] = False
    events = [decode_envelope(v) for v in _all(log, T.cluster_events)]
    applied = Counter(e.event.decision_id for e in events if isinstance(e.event, DecisionApplied))
    assert set(applied) == set(ids), "every order applied, and nothing else"
    assert max(applied.values()) == 1, "a decision was applied twice"
    finished = Counter(e.event.name for e in events if isinstance(e.event, WorkloadFinished))
    assert len(finished) == JOBS and max(finished.values()) == 1, finished
    sim = [decode_sim_record(v) for v in _all(log, sim_cluster_topic(T))]
    starts = Counter(r.decision_id for r in sim if isinstance(r, StartWorkload))
    runs = Counter(r.decision_id for r in sim if isinstance(r, RunStarted))
    assert max(starts.values()) == 1 and runs == starts, "each start command sent once and run once"


@pytest.mark.parametrize("together", [False, True], ids=["each service a process", "run all"])
def test_services_killed_at_random_lose_and_double_nothing(tmp_path: Path, together: bool) -> None:
    directory, out = tmp_path / "log", tmp_path / "out"
    out.mkdir()
    manifests = tmp_path / "jobs.yaml"
    manifests.write_text(_manifests())
    services = _Services(directory, manifests, out, together=together)
    chooser = random.Random(20261125)
    for name in services.args:
        services.start(name)
    try:
        cap = time.monotonic() + CAP_S
        while not directory.joinpath("log.db").exists() and time.monotonic() < cap:
            time.sleep(0.05)
        log = SqliteLog(directory, create=False)
        last, grown, grown_at = 0, 0, time.monotonic()
        while _finished(log) < JOBS:
            services.check_alive()
            size, now = _size(log), time.monotonic()
            if size > grown:
                grown, grown_at = size, now
            assert now - grown_at < STALL_S and now < cap, (
                f"no progress for {now - grown_at:.0f} s ({_finished(log)} of {JOBS} finished) "
                f"after kills {dict(services.kills)}")
            if size - last >= (KILL_EVERY_RECORDS // 2 if together else KILL_EVERY_RECORDS):
                victim = chooser.choice(sorted(services.args))
                services.kill(victim)
                services.start(victim)
                last = size
            time.sleep(0.05)
    finally:
        services.stop()
    assert sum(services.kills.values()) >= 4, f"too few kills to mean anything: {dict(services.kills)}"
    print(f"kills: {dict(services.kills)}")
    _check_invariants(SqliteLog(directory, create=False))
    verify = subprocess.run([*CLI, "replay", str(directory), "--verify"], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
