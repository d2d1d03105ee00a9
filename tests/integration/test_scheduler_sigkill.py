"""SIGKILL the scheduler process at random points of a run; nothing is lost or doubled.

The actuator and the simulated cluster run as their own processes (``kueuelog run``)
over one embedded log; the scheduler process is killed again and again at random
moments (after a random number of committed decision records) and restarted. At
the end every workload has finished exactly once, no workload was ever admitted
twice without an eviction or finish in between, the decisions replay exactly,
and a recovered scheduler's state equals a fold from zero.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import load
from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload, WorkloadFinished
from services.core.snapshot import encode_state
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import GROUP, Scheduler
from services.simcluster.arrivals import seed_all
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue

pytestmark = pytest.mark.integration
T = Topics()
KUEUELOG = [sys.executable, "-m", "services.app.cli"]


def _manifests() -> str:
    import yaml

    objs = [a_flavor("default").obj(),
            a_cluster_queue("cq-a").cohort("c").flavor("default", cpu=(4, 4)).preemption(
                within="LowerPriority", reclaim="Any").obj(),
            a_cluster_queue("cq-b").cohort("c").flavor("default", cpu=4).preemption(reclaim="Any").obj(),
            a_local_queue("a", "lq", "cq-a").obj(), a_local_queue("b", "lq", "cq-b").obj()]
    rng = random.Random(7)
    for i in range(60):
        ns = "a" if i % 3 else "b"
        job = a_job(ns, f"j{i:02d}", "lq").parallelism(rng.choice([1, 2]))
        job = job.request(cpu=rng.choice([1, 2])).created(i * 5)
        job = job.annotate("kueuelog.io/sim-duration", f"{rng.randint(20, 200)}s")
        if i % 7 == 0:
            job = job.label("kueue.x-k8s.io/priority-class", "high")
        objs.append(job.obj())
    objs.insert(0, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                    "metadata": {"name": "high"}, "value": 100})
    return yaml.safe_dump_all(objs)


def _start(*args: str, log_dir: Path, name: str) -> subprocess.Popen[bytes]:
    out = open(log_dir.parent / f"{name}.out", "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([*KUEUELOG, "run", *args, "--log", str(log_dir)], stdout=out, stderr=out,
                            cwd=Path.cwd(), start_new_session=True)


def _decisions(log: SqliteLog) -> Iterator[object]:
    offset = 0
    while batch := log.read(T.decisions, offset, 5000):
        for rec in batch:
            yield decode_decision(rec.value)
        offset = batch[-1].offset + 1


def _finished(log: SqliteLog) -> set[str]:
    from events.codec import decode_envelope

    done = set()
    offset = 0
    while batch := log.read(T.cluster_events, offset, 5000):
        for rec in batch:
            ev = decode_envelope(rec.value).event
            if isinstance(ev, WorkloadFinished):
                done.add(f"{ev.namespace}/{ev.name}")
        offset = batch[-1].offset + 1
    return done


def _wait(predicate, seconds: float, what: str, procs: list[subprocess.Popen[bytes]]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args} exited with {p.returncode} while waiting for {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")


def test_scheduler_sigkilled_at_random_points_loses_and_doubles_nothing(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    log = SqliteLog(log_dir)
    objects = load({"jobs.yaml": _manifests()})
    seed_all(log, objects)
    workloads = {f"{o.namespace}/{o.name}" for _, o in objects if type(o).__name__ == "Workload"}
    helpers = [_start("actuator", log_dir=log_dir, name="actuator"),
               _start("simcluster", "--clock", "simulated", log_dir=log_dir, name="simcluster")]
    rng = random.Random(int(os.environ.get("KUEUELOG_CRASH_SEED", "20261122")))
    kills = 0
    try:
        for _ in range(8):
            before = log.end_offset(T.decisions)
            scheduler = _start("scheduler", log_dir=log_dir, name="scheduler")
            grow = rng.randint(1, 40)
            try:
                _wait(lambda b=before, g=grow: log.end_offset(T.decisions) >= b + g or _finished(log) >= workloads,
                      120, "the scheduler to commit decisions", [*helpers, scheduler])
            finally:
                scheduler.send_signal(signal.SIGKILL)
                scheduler.wait()
                kills += 1
            if _finished(log) >= workloads:
                break
        scheduler = _start("scheduler", log_dir=log_dir, name="scheduler")
        try:
            _wait(lambda: _finished(log) >= workloads, 300, "every workload to finish", [*helpers, scheduler])
            _wait(lambda: log.position(GROUP, T.cluster_events) == log.end_offset(T.cluster_events), 60,
                  "the scheduler to catch up", [*helpers, scheduler])
        finally:
            scheduler.send_signal(signal.SIGTERM)
            scheduler.wait(30)
    finally:
        for p in helpers:
            p.send_signal(signal.SIGTERM)
        for p in helpers:
            p.wait(30)
    assert kills >= 2

    # No workload admitted twice without an eviction or a finish in between; ids never repeat.
    holding: dict[str, bool] = {}
    ids: set[str] = set()
    cycles = []
    for d in _decisions(log):
        if isinstance(d, CycleCompleted):
            cycles.append(d.cycle)
            continue
        assert d.id not in ids, f"decision {d.id} written twice"  # type: ignore[attr-defined]
        ids.add(d.id)  # type: ignore[attr-defined]
        key = f"{d.namespace}/{d.name}"  # type: ignore[attr-defined]
        if isinstance(d, AdmitWorkload):
            assert not holding.get(key), f"{key} admitted twice"
            holding[key] = True
        elif isinstance(d, EvictWorkload):
            holding[key] = False  # a finished workload is never admitted again, so only evictions reopen
    assert cycles == list(range(1, len(cycles) + 1)), "cycle numbers must be contiguous across restarts"
    assert _finished(log) == workloads  # none lost

    # The log replays exactly, and recovery equals a fold from zero.
    from_zero = Scheduler(log)
    assert list(from_zero.replay(0, verify=True)) == []
    from_zero.fold_until(log.position(GROUP, T.cluster_events))
    recovered = Scheduler(log)
    recovered.recover()
    assert encode_state(recovered.state) == encode_state(from_zero.state)
    log.close()

