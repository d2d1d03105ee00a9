"""The whole loop on the embedded log: watcher (seed) -> scheduler -> actuator -> simulated cluster -> back.

Seeds ``examples/*.yaml`` plus a few Jobs of our own, runs every service until
nothing is left to do, and checks the loop's promises from the log alone: every
workload finishes once, nothing is admitted twice, quota is never exceeded, the
decisions replay exactly, recovery reproduces the state, the run is deterministic
and survives crashes of any service at any commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from events import objects as o
from events.cluster import SIM_DURATION_ANNOTATION as DURATION_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.envelope import Envelope, Topics
from events.manifests import load
from events.messages import (
    AdmitWorkload,
    ClockTicked,
    CycleCompleted,
    DecisionApplied,
    EvictionCompleted,
    EvictWorkload,
    WorkloadFinished,
)
from events.simcluster import (
    Reported,
    ReportKind,
    RunStarted,
    StartWorkload,
    StopWorkload,
    decode_sim_record,
    sim_cluster_topic,
)
from services.actuator.loop import Actuator
from services.actuator.sim_port import SIM_TUNING, SimClusterPort
from services.app.driver import NotIdle, drive_until_idle, run_all
from services.core.snapshot import encode_state
from services.core.state import admission_usage
from services.runtime.clock import wall_clock_ms
from services.runtime.log import LogError, WriterLockHeld, values_of
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream, arrival_schedule, read_files, seed_all
from services.simcluster.cluster import SimCluster, SimConfig
from services.simcluster.runner import advance_time
from tests.builders import a_job
from tests.crashing_log import CrashingLog

# Each test runs the whole loop (hundreds of fsynced commits): seconds, more on a busy or slow disk.
pytestmark = pytest.mark.integration

TOPICS = Topics()
SIM = sim_cluster_topic(TOPICS)
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
NINE = 9 * 3600  # 09:00 on 2025-01-01, in builder seconds


def extra_jobs() -> str:
    """Jobs that exercise every way of giving (or not giving) a duration, and a preemptor."""
    jobs = [
        a_job("team-a", "nightly", "default").request(cpu="2", memory="4Gi").created(NINE + 400)
        .annotate(DURATION_ANNOTATION, "1h30m"),
        a_job("team-b", "quick", "default").request(cpu="1", memory="1Gi").created(NINE + 405)
        .annotate(DURATION_ANNOTATION, "2500"),
        a_job("ml", "probe", "gpu").request(cpu="1", memory="1Gi", **{"nvidia.com/gpu": "1"}).created(NINE + 410),
        a_job("team-a", "typo", "default").request(cpu="1", memory="1Gi").created(NINE + 415)
        .annotate(DURATION_ANNOTATION, "ten minutes"),
        a_job("team-a", "hotfix", "default").parallelism(3).request(cpu="3", memory="8Gi").created(NINE + 420)
        .label("kueue.x-k8s.io/priority-class", "production").annotate(DURATION_ANNOTATION, "2m"),
    ]
    return yaml.safe_dump_all([j.obj() for j in jobs], sort_keys=False)


EXAMPLE_JOBS = 45  # the first Jobs of examples/20-jobs.yaml: enough traffic, seconds per run
EXAMPLE_KINDS = 4  # examples/30-workload-kinds.yaml: a JobSet, a PyTorchJob, a RayJob and a TrainJob


def manifest_files() -> dict[str, str]:
    files = read_files(EXAMPLES)
    jobs = [p for p in files if p.endswith("20-jobs.yaml")]
    for path in jobs:
        files[path] = "\n---\n".join(files[path].split("\n---\n")[:EXAMPLE_JOBS])
    files["extra-jobs.yaml"] = extra_jobs()
    return files


# --- reading the log ----------------------------------------------------------------------------


def records(log: SqliteLog, topic: str) -> Iterator[bytes]:
    return values_of(log, topic)


def envelopes(log: SqliteLog) -> list[Envelope]:
    return [decode_envelope(v) for v in records(log, TOPICS.cluster_events)]


def decisions(log: SqliteLog) -> list[Any]:
    return [decode_decision(v) for v in records(log, TOPICS.decisions)]


def dump(log: SqliteLog) -> dict[str, list[bytes]]:
    return {t: list(records(log, t)) for t in (TOPICS.cluster_events, TOPICS.decisions, SIM)}


# --- the checks ---------------------------------------------------------------------------------


def assert_every_workload_finished_once(log: SqliteLog, scheduler: Scheduler) -> None:
    workloads = scheduler.state.workloads
    assert len(workloads) == EXAMPLE_JOBS + EXAMPLE_KINDS + 5  # example Jobs and kinds + 5 of ours
    assert [k for k, rec in workloads.items() if not rec.finished] == []
    finishes = sorted(f"{e.event.namespace}/{e.event.name}" for e in envelopes(log)
                      if isinstance(e.event, WorkloadFinished))
    assert finishes == sorted(workloads)


def assert_each_decision_applied_once(log: SqliteLog) -> None:
    orders = [d.id for d in decisions(log) if isinstance(d, AdmitWorkload | EvictWorkload)]
    applied = [e.event.decision_id for e in envelopes(log) if isinstance(e.event, DecisionApplied)]
    carried = [c.decision_id for c in map(decode_sim_record, records(log, SIM))
               if isinstance(c, StartWorkload | StopWorkload)]
    assert applied == orders
    assert carried == orders


def assert_never_two_runs_at_once(log: SqliteLog) -> None:
    running: dict[str, int] = {}
    for r in map(decode_sim_record, records(log, SIM)):
        key = f"{getattr(r, 'namespace', '')}/{getattr(r, 'name', '')}"
        if isinstance(r, RunStarted):
            assert key not in running, f"{key} started run {r.run} while run {running.get(key)} was running"
            running[key] = r.run
        elif isinstance(r, Reported) and r.kind != ReportKind.PODS_READY and running.get(key) == r.run:
            del running[key]
    assert running == {}


def quota_limits(objects: Sequence[tuple[Any, o.AnyObject]]) -> tuple[dict[str, o.ClusterQueue],
                                                                      dict[str, dict[tuple[str, str], int]]]:
    cqs = {obj.name: obj for _, obj in objects if isinstance(obj, o.ClusterQueue)}
    nominal: dict[str, dict[tuple[str, str], int]] = {}
    for cq in cqs.values():
        for group in cq.resource_groups:
            for fq in group.flavors:
                for res, q in fq.resources:
                    nominal.setdefault(cq.name, {})[(fq.name, res)] = q.nominal
    return cqs, nominal


def check_quota(held: Mapping[str, tuple[str, dict[tuple[str, str], int]]], cqs: Mapping[str, o.ClusterQueue],
                nominal: Mapping[str, Mapping[tuple[str, str], int]], where: str) -> None:
    usage: dict[str, dict[tuple[str, str], int]] = {}
    for cq, use in held.values():
        for fr, v in use.items():
            usage.setdefault(cq, {})[fr] = usage.setdefault(cq, {}).get(fr, 0) + v
    cohorts: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}
    for name, use in usage.items():
        cq = cqs[name]
        limits = {(fq.name, res): q for g in cq.resource_groups for fq in g.flavors for res, q in fq.resources}
        for fr, v in use.items():
            q = limits[fr]
            if not cq.cohort:
                assert v <= q.nominal, f"{where}: {name} uses {v} of {fr}, nominal {q.nominal}"
            elif q.borrowing_limit is not None:
                assert v <= q.nominal + q.borrowing_limit, f"{where}: {name} borrows past its limit for {fr}"
            if cq.cohort:
                used, cap = cohorts.setdefault(cq.cohort, {}).get(fr, (0, 0))
                cohorts[cq.cohort][fr] = (used + v, cap)
    for cohort, frs in cohorts.items():
        for fr, (used, _) in frs.items():
            cap = sum(nominal[c.name].get(fr, 0) for c in cqs.values() if c.cohort == cohort)
            assert used <= cap, f"{where}: cohort {cohort} uses {used} of {fr}, has {cap}"


def assert_quota_never_exceeded(log: SqliteLog, objects: Sequence[tuple[Any, o.AnyObject]]) -> int:
    """Walk the decisions cycle by cycle, folding the releases the scheduler had seen by then
    (each cycle records its input offset): what holds quota after each cycle must fit."""
    cqs, nominal = quota_limits(objects)
    events = envelopes(log)
    held: dict[str, tuple[str, dict[tuple[str, str], int]]] = {}
    folded, cycles = 0, 0
    this_cycle: list[Any] = []
    for d in decisions(log):
        if not isinstance(d, CycleCompleted):
            this_cycle.append(d)
            continue
        for env in events[folded:d.input_offset]:
            if isinstance(env.event, WorkloadFinished | EvictionCompleted):
                held.pop(f"{env.event.namespace}/{env.event.name}", None)
        folded = d.input_offset
        for dd in this_cycle:
            if isinstance(dd, AdmitWorkload):
                key = f"{dd.namespace}/{dd.name}"
                assert key not in held, f"cycle {d.cycle}: {key} admitted while it already holds quota"
                held[key] = (dd.admission.cluster_queue, admission_usage(dd.admission))
        this_cycle = []
        check_quota(held, cqs, nominal, f"after cycle {d.cycle}")
        cycles += 1
    return cycles


def assert_replay_and_recovery_are_exact(log: SqliteLog, live: Scheduler) -> None:
    assert list(Scheduler(log).replay(0, verify=True)) == []
    fresh = Scheduler(log)
    fresh.recover()
    assert encode_state(fresh.state) == encode_state(live.state)


# --- the loop, driven in-process ----------------------------------------------------------------


def seed(log: SqliteLog, how: str) -> ArrivalStream | None:
    files = manifest_files()
    if how == "all at once":
        assert seed_all(log, load(files)) == len(load(files))
        return None
    return ArrivalStream.from_files(log, files)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    out = SqliteLog(tmp_path / "log")
    yield out
    out.close()


@pytest.mark.parametrize("how", ["all at once", "arriving over time"])
def test_the_loop_runs_every_workload_to_completion_within_quota(log: SqliteLog, how: str) -> None:
    result = drive_until_idle(log, arrivals=seed(log, how))
    assert_every_workload_finished_once(log, result.scheduler)
    assert_each_decision_applied_once(log)
    assert_never_two_runs_at_once(log)
    assert assert_quota_never_exceeded(log, load(manifest_files())) > 10
    assert_replay_and_recovery_are_exact(log, result.scheduler)
    # The examples are meant to show preemption: production releases evict batch jobs.
    evicted = [d for d in decisions(log) if isinstance(d, EvictWorkload)]
    assert evicted, "expected the production Jobs to preempt something"
    assert result.simcluster.stats.reports["eviction-completed"] == len(evicted)


def test_durations_come_from_the_annotation_or_the_default(log: SqliteLog) -> None:
    drive_until_idle(log, config=SimConfig(default_duration_ms=77_000), arrivals=seed(log, "arriving over time"))
    runs = {r.name: r for r in map(decode_sim_record, records(log, SIM)) if isinstance(r, RunStarted)}
    by_job = {name.rsplit("-", 1)[0].removeprefix("job-"): r for name, r in runs.items()}
    assert by_job["nightly"].end_at - by_job["nightly"].time == 5_400_000
    assert by_job["quick"].end_at - by_job["quick"].time == 2_500
    assert by_job["probe"].end_at - by_job["probe"].time == 77_000
    assert (by_job["probe"].duration_source, by_job["quick"].duration_source) == ("default", "annotation")
    assert by_job["typo"].end_at - by_job["typo"].time == 77_000
    assert "invalid annotation" in by_job["typo"].duration_source
    assert by_job["etl-000"].end_at - by_job["etl-000"].time == 60_000


def test_simulated_time_follows_the_arrivals_and_the_finishes(log: SqliteLog) -> None:
    drive_until_idle(log, arrivals=seed(log, "arriving over time"))
    times = [e.event.time for e in envelopes(log) if e.source in ("watcher", "simcluster")]
    assert times == sorted(times), "time sources must act in time order"
    first_job = min(obj.creation_time or 0 for _, obj in load(manifest_files()) if isinstance(obj, o.Workload))
    starts = [r.time for r in map(decode_sim_record, records(log, SIM)) if isinstance(r, RunStarted)]
    assert min(starts) == first_job  # nothing runs before the first Job is created


def test_the_loop_is_deterministic(tmp_path: Path) -> None:
    logs = [SqliteLog(tmp_path / name) for name in ("one", "two")]
    for lg in logs:
        drive_until_idle(lg, arrivals=seed(lg, "arriving over time"))
    assert dump(logs[0]) == dump(logs[1])


@pytest.mark.parametrize("stop_after", [3, 17, 60])
def test_stopping_and_restarting_every_service_changes_nothing(tmp_path: Path, stop_after: int) -> None:
    straight = SqliteLog(tmp_path / "straight")
    drive_until_idle(straight, arrivals=seed(straight, "arriving over time"))
    restarted = SqliteLog(tmp_path / "restarted")
    with pytest.raises(NotIdle):
        drive_until_idle(restarted, arrivals=seed(restarted, "arriving over time"), max_rounds=stop_after)
    # New processes: each recovers from the log alone; the stream resumes after what it released.
    drive_until_idle(restarted, arrivals=ArrivalStream.from_files(restarted, manifest_files()))
    assert dump(restarted) == dump(straight)




def test_an_actuator_that_crashes_before_or_after_its_commits_applies_nothing_twice(log: SqliteLog) -> None:
    arrivals = seed(log, "arriving over time")
    crashing = CrashingLog(log, set(range(3, 200, 7)))
    scheduler = Scheduler(log)
    scheduler.recover()
    sim = SimCluster.simulated(log)
    sim.recover()
    actuator = Actuator(crashing, SimClusterPort(TOPICS, tuning=replace(SIM_TUNING, batch_size=3)))  # type: ignore[arg-type]
    crashes = 0
    for _ in range(100_000):
        did = scheduler.step()
        try:
            did += actuator.step_now()
        except LogError:
            crashes += 1  # before commit: restart from the committed position
            actuator = Actuator(crashing, SimClusterPort(TOPICS, tuning=replace(SIM_TUNING, batch_size=3)))  # type: ignore[arg-type]
            continue
        did += sim.step()
        if not did and not advance_time(sim, arrivals):
            break
    assert crashes > 5
    assert_each_decision_applied_once(log)
    assert_every_workload_finished_once(log, scheduler)
    # After its last commit: a restarted actuator over the same decisions applies nothing.
    before = dump(log)
    again = Actuator(log, SimClusterPort(TOPICS))
    assert again.step_now() == 0
    assert dump(log) == before


# --- the asyncio runners ------------------------------------------------------------------------


async def test_run_all_in_simulated_time_stops_by_itself_when_everything_finished(log: SqliteLog) -> None:
    result = await asyncio.wait_for(run_all(log, arrivals=seed(log, "arriving over time")), timeout=60)
    assert result.done
    assert_every_workload_finished_once(log, result.scheduler)
    assert_each_decision_applied_once(log)
    assert_never_two_runs_at_once(log)
    assert_replay_and_recovery_are_exact(log, result.scheduler)


def short_jobs() -> dict[str, str]:
    """The example queues with a few Jobs that run for a fraction of a second of real time."""
    files = read_files(EXAMPLES[:2])
    jobs = [a_job("team-a", f"blink-{i}", "default").request(cpu="4", memory="1Gi").created(NINE + i)
            .annotate(DURATION_ANNOTATION, f"{150 + 50 * i}ms") for i in range(6)]
    files["blink.yaml"] = yaml.safe_dump_all([j.obj() for j in jobs], sort_keys=False)
    return files


async def test_run_all_in_real_time_ticks_runs_and_holds_the_scheduler_lock(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = SqliteLog(directory)
    began = wall_clock_ms()
    arrivals = ArrivalStream(log, arrival_schedule(load(short_jobs()), start=began, compress=1000))
    task = asyncio.create_task(run_all(log, clock="real", arrivals=arrivals, tick_interval_ms=50, until_done=True,
                                       poll_seconds=0.01))
    other = SqliteLog(directory)  # another process's view of the same data directory
    deadline = asyncio.get_running_loop().time() + 30
    locked = False
    while not task.done() and asyncio.get_running_loop().time() < deadline:
        try:
            other.exclusive("scheduler")
            other.release("scheduler")
        except WriterLockHeld:
            locked = True
            break
        await asyncio.sleep(0.005)  # deadline poll for the runner to take the lock
    result = await asyncio.wait_for(task, timeout=30)
    other.close()
    assert locked, "a second scheduler could take the lock while one was running"
    assert result.done
    workloads = result.scheduler.state.workloads
    assert len(workloads) == 6
    assert all(rec.finished for rec in workloads.values())
    finishes = [e.event for e in envelopes(log) if isinstance(e.event, WorkloadFinished)]
    assert len(finishes) == 6
    assert all(f.time >= began for f in finishes), "real time: reports carry wall-clock times"
    ticks = [e for e in envelopes(log) if isinstance(e.event, ClockTicked)]
    assert ticks and all(e.source == "ticker" for e in ticks)
    assert list(Scheduler(log).replay(0, verify=True)) == []
    log.close()
