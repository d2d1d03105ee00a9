"""MultiKueue placement over 10 simulated worker clusters of 100 ClusterQueues each: whatever
arrives, finishes, falls silent or comes back late, no workload is ever running in two clusters,
no worker's ClusterQueue holds more than its nominal quota, and what runs on a worker holds quota
on the manager. And through the services (scheduler, actuator, a simulated cluster per cluster, as
``kueuelog demo --clusters N`` runs them): no workload ever runs on two simulated clusters, and
each is placed once."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from functools import cache
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from events import objects as o
from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import format_time
from events.messages import (
    AnyDecision,
    ClockTicked,
    ObjectApplied,
    PlaceWorkload,
    RemovePlacement,
    WorkloadFinished,
)
from services.app.driver import Round, drive
from services.app.mcdemo import build
from services.core.cycle import run_cycle
from services.core.placement import route
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, finish_eviction
from services.runtime.sqlite import SqliteLog
from services.simcluster import multicluster as mc

CLUSTERS, QUEUES = 10, 100
T0 = 1_735_689_600_000
MINUTE = 60_000
WORKERS = mc.worker_names(CLUSTERS)


@cache
def _world() -> bytes:
    state = State()
    for cluster, obj in mc.world(CLUSTERS, QUEUES, worker_cpu="4"):
        route(state, cluster, ObjectApplied(time=T0, object=obj))
    return encode_state(state)


Submit = st.tuples(st.just("submit"), st.integers(0, 4), st.sampled_from(["1", "2", "3", "4", "5"]))
Finish = st.tuples(st.just("finish"), st.integers(0, 200), st.sampled_from(WORKERS))  # the nth job, from a worker
Tick = st.tuples(st.just("tick"), st.sets(st.sampled_from(WORKERS), max_size=CLUSTERS), st.integers(1, 20))
Ops = st.lists(st.one_of(Submit, Submit, Finish, Tick), min_size=1, max_size=40)


class Running:
    """Where each workload runs, from the decisions alone: from PlaceWorkload to RemovePlacement."""

    def __init__(self) -> None:
        self.on: dict[str, str] = {}

    def take(self, decisions: list[AnyDecision]) -> None:
        for d in decisions:
            key = f"{d.namespace}/{d.name}"
            if isinstance(d, PlaceWorkload):
                assert key not in self.on, f"{key} placed on {d.cluster} while running on {self.on[key]}"
                self.on[key] = d.cluster
            elif isinstance(d, RemovePlacement) and d.reason != "StaleCopy":
                assert self.on.pop(key) == d.cluster


def _settle(state: State, running: Running) -> None:
    for _ in range(200):
        result = run_cycle(state)
        running.take(result.decisions)
        evicting = [r for r in state.workloads.values() if r.evicting]
        for rec in evicting:
            finish_eviction(state, rec)
        if not result.changed and not evicting and not state.checks_changed:
            return
    raise AssertionError("no steady state")


def _check(state: State, running: Running) -> None:
    assert running.on == {k: p.cluster for k, p in state.multikueue.placements.items()}
    used: dict[tuple[str, str], int] = defaultdict(int)
    for key, p in sorted(state.multikueue.placements.items()):
        rec = state.workloads[key]
        assert rec.admission is not None and not rec.finished, f"{key} runs on {p.cluster} without manager quota"
        assert rec.checks[p.check].state == o.CheckState.READY
        for psa in p.admission.pod_set_assignments:
            for _, amount in psa.resource_usage:
                used[(p.cluster, p.admission.cluster_queue)] += amount
    for (cluster, cq), amount in sorted(used.items()):
        assert amount <= 4000, f"{cluster}/{cq} holds {amount}m cpu, more than its 4 cpu"


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(Ops)
def test_no_workload_is_ever_running_in_two_clusters(ops: list[tuple[object, ...]]) -> None:
    state = decode_state(_world())
    running = Running()
    now = T0
    submitted: list[str] = []
    for op in ops:
        if op[0] == "submit":
            _, queue, cpu = op
            name = f"job-{len(submitted)}"
            wl = mc.job(name, int(str(queue)), str(cpu), "2025-01-01T00:00:00Z")
            route(state, "", ObjectApplied(time=now, object=wl))
            submitted.append(f"{wl.namespace}/{wl.name}")
        elif op[0] == "finish" and submitted:
            _, nth, cluster = op
            key = submitted[int(str(nth)) % len(submitted)]
            placed = state.multikueue.placements.get(key)
            finished_before = state.workloads[key].finished
            ns, _, name = key.partition("/")
            route(state, str(cluster), WorkloadFinished(time=now, namespace=ns, name=name))
            # only the worker it runs on can finish it: a late or stray report changes nothing
            assert state.workloads[key].finished == (finished_before or (placed is not None
                                                                         and placed.cluster == cluster))
        elif op[0] == "tick":
            _, alive, minutes = op
            now += int(str(minutes)) * MINUTE
            for cluster in sorted(alive):  # type: ignore[call-overload]
                route(state, cluster, ClockTicked(time=now))
            route(state, "", ClockTicked(time=now))
        _settle(state, running)
        _check(state, running)


# --- through the services: the simulated workers of ``kueuelog demo --clusters N`` ---------------

# (queue, cpu, seconds after the previous job, minutes it runs)
Job = st.tuples(st.integers(0, 2), st.integers(1, 5), st.integers(0, 1200), st.integers(1, 30))


@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(1, 4), st.lists(Job, min_size=1, max_size=12))
@example(2, [(0, 5, 0, 1), (0, 4, 0, 1)])  # a job no worker fits holds manager quota: the manager has plenty
def test_through_the_services_no_workload_runs_in_two_clusters_and_each_is_placed_once(
        clusters: int, jobs: list[tuple[int, int, int, int]]) -> None:
    """Scheduler, the manager's actuator and one simulated cluster per cluster on one log: after
    every round no workload runs on two simulated workers, and none on the manager's; at the end
    each workload that fits a worker was placed exactly once and finished there, and one that
    fits none (5 cpu, workers have 4 per queue) was never placed. The manager's queues hold every
    job at once (one that fits no worker waits there holding its quota, as with Kueue)."""
    docs = mc.manager_manifests(clusters, 3, "100")
    for n in mc.worker_names(clusters):
        docs.extend(mc.as_worker(m, n) for m in mc.worker_manifests(n, 3, "4"))
    at = mc.DEMO_START_MS
    for i, (queue, cpu, gap, minutes) in enumerate(jobs):
        at += gap * 1000
        docs.append(mc.job_manifest(f"j{i}", queue, str(cpu), format_time(at), f"{minutes}m"))
    with tempfile.TemporaryDirectory() as tmp:
        log = SqliteLog(Path(tmp))
        try:
            loop = build(log, Topics(), {"<jobs>": yaml.safe_dump_all(docs, sort_keys=False)}, 60_000)

            def between(_: Round) -> None:
                assert not loop.manager.state.runs, "a placed workload runs on the manager"
                on: dict[str, str] = {}
                for name in sorted(loop.workers):
                    for key in loop.workers[name].state.runs:
                        assert key not in on, f"{key} runs on {on[key]} and {name}"
                        on[key] = name

            drive(loop, between=between, max_rounds=100_000)
            placed: dict[str, int] = defaultdict(int)
            offset = 0
            while batch := log.read(Topics().decisions, offset, 5000):
                for rec in batch:
                    d = decode_decision(rec.value)
                    if isinstance(d, PlaceWorkload):
                        placed[f"{d.namespace}/{d.name}"] += 1
                offset = batch[-1].offset + 1
        finally:
            log.close()
    state = loop.scheduler.state
    for key, wl in sorted(state.workloads.items()):
        fits = dict(wl.obj.pod_sets[0].requests).get("cpu", 0) <= 4000
        assert placed.get(key, 0) == (1 if fits else 0), key
        assert wl.finished == fits, key
