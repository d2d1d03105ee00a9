"""The simulated cluster: durations, reports, simulated-time jumps, idleness, restarts and crashes.

Each test drives ``SimCluster`` over its own embedded log, writing the commands an
actuator would write and standing in for the other consumers by committing their
positions (that is all "idle" looks at).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from events import objects as o
from events.cluster import SIM_DURATION_ANNOTATION as DURATION_ANNOTATION
from events.codec import decode_envelope, encode
from events.envelope import Envelope, Topics
from events.manifests import Document, normalize
from events.messages import EvictionCompleted, ObjectApplied, PodsReady, WorkloadFinished
from events.simcluster import Reported, RunStarted, StartWorkload, StopWorkload, decode_sim_record, sim_cluster_topic
from services.runtime.log import LogError, Record
from services.runtime.sqlite import SqliteLog
from services.simcluster.cluster import GROUP, SimCluster, SimConfig
from services.simcluster.durations import DurationError, duration_of, parse_duration
from tests.builders import a_job
from tests.crashing_log import CrashingLog

TOPICS = Topics()
SIM = sim_cluster_topic(TOPICS)
T0 = 1_735_722_000_000  # 2025-01-01T09:00:00Z
ADMISSION = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "default"),), resource_usage=(("cpu", 1000),), count=1),))


# --- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want_ms"),
    [
        pytest.param("90s", 90_000, id="seconds"),
        pytest.param("5m", 300_000, id="minutes"),
        pytest.param("1h30m", 5_400_000, id="hours and minutes"),
        pytest.param("1.5h", 5_400_000, id="fractional hours"),
        pytest.param("1.1h", 3_960_000, id="a fraction a float would get wrong"),
        pytest.param("250ms", 250, id="milliseconds with unit"),
        pytest.param("2h0m0.5s", 7_200_500, id="every unit at once"),
        pytest.param("1500", 1_500, id="a bare integer is milliseconds"),
        pytest.param("0", 0, id="zero"),
        pytest.param("999us", 0, id="below a millisecond rounds down"),
    ],
)
def test_parse_duration_reads_go_durations_and_milliseconds(text: str, want_ms: int) -> None:
    assert parse_duration(text) == want_ms


@pytest.mark.parametrize("text", ["", "5x", "m5", "-1s", "1h 30m", "1.1.1s", "s", "1.5"])
def test_parse_duration_refuses_what_go_would_refuse(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_a_workload_without_annotation_or_with_a_bad_one_runs_for_the_default() -> None:
    assert duration_of(None, 7_000).ms == 7_000
    assert duration_of(((DURATION_ANNOTATION, "3s"),), 7_000) == duration_of(((DURATION_ANNOTATION, "3000"),), 1)
    bad = duration_of(((DURATION_ANNOTATION, "soon"),), 7_000)
    assert bad.ms == 7_000
    assert "invalid annotation" in bad.source


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def log(tmp_path: object) -> SqliteLog:
    out = SqliteLog(str(tmp_path))
    yield out  # type: ignore[misc]
    out.close()


def apply_job(log: SqliteLog, name: str, duration: str | None = None, namespace: str = "team-a") -> str:
    """Put a Job's Workload on cluster-events; returns its namespace/name."""
    job = a_job(namespace, name, "lq").request(cpu="1")
    if duration is not None:
        job.annotate(DURATION_ANNOTATION, duration)
    wl = normalize(Document("test.yaml", 1, job.obj()))
    assert isinstance(wl, o.Workload)
    env = Envelope(id=f"test:{name}", source="test", event=ObjectApplied(time=T0, object=wl))
    log.append(TOPICS.cluster_events, [(wl.key, encode(env))])
    return wl.key


def start(log: SqliteLog, key: str, decision: str, time: int = T0, cluster: str = "sim") -> None:
    ns, _, name = key.partition("/")
    cmd = StartWorkload(time=time, cluster=cluster, decision_id=decision, namespace=ns, name=name, admission=ADMISSION)
    log.append(SIM, [(key, encode(cmd))])


def stop(log: SqliteLog, key: str, decision: str, time: int = T0) -> None:
    ns, _, name = key.partition("/")
    log.append(SIM, [(key, encode(StopWorkload(time=time, cluster="sim", decision_id=decision, namespace=ns,
                                               name=name, reason="Preempted")))])


def others_caught_up(log: SqliteLog) -> None:
    """Stand in for scheduler and actuator: they have read everything."""
    log.commit("scheduler", TOPICS.cluster_events, log.end_offset(TOPICS.cluster_events))
    log.commit("actuator", TOPICS.decisions, log.end_offset(TOPICS.decisions))


def reports(log: SqliteLog) -> list[Envelope]:
    return [e for e in (decode_envelope(r.value) for r in log.read(TOPICS.cluster_events, 0, 10_000))
            if e.source == "simcluster"]


def settle(sim: SimCluster) -> None:
    """Step until the simulated cluster has read everything (its own status records included)."""
    for _ in range(100):
        if sim.step() == 0:
            return
    raise AssertionError("the simulated cluster never settled")


def run_to_end(sim: SimCluster, log: SqliteLog) -> None:
    for _ in range(100):
        settle(sim)
        others_caught_up(log)
        if sim.jump() == 0:
            return
    raise AssertionError("simulated time never ran out")


# --- starting, finishing, stopping --------------------------------------------------------------


def test_a_started_workload_is_ready_at_once_and_finishes_only_when_time_jumps(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "90s")
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log)
    settle(sim)
    got = reports(log)
    assert [type(e.event) for e in got] == [PodsReady]
    assert got[0].id == f"sim:pods-ready:{key}:1"
    assert (got[0].event.time, got[0].source, got[0].cluster) == (T0, "simcluster", "sim")
    assert sim.next_due() == T0 + 90_000

    others_caught_up(log)
    assert sim.jump() == 1
    finished = reports(log)[1]
    assert isinstance(finished.event, WorkloadFinished)
    assert finished.id == f"sim:finished:{key}:1"
    assert finished.event.time == T0 + 90_000
    assert sim.state.clock == T0 + 90_000
    assert sim.next_due() is None


def test_time_does_not_jump_while_any_consumer_is_behind(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "5s")
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log)
    settle(sim)
    # The PodsReady it just reported is unread by the scheduler: not idle.
    assert sim.jump() == 0
    log.commit("scheduler", TOPICS.cluster_events, log.end_offset(TOPICS.cluster_events))
    log.append(TOPICS.decisions, [("x", b"{}")])  # a decision the actuator has not read
    assert sim.jump() == 0
    others_caught_up(log)
    start(log, key, "c1-0")  # a command the simulated cluster has not read
    assert sim.jump() == 0
    assert [type(e.event) for e in reports(log)] == [PodsReady]


def test_jumps_visit_due_times_in_order(log: SqliteLog) -> None:
    short, long_ = apply_job(log, "short", "5s"), apply_job(log, "long", "10s")
    start(log, long_, "c0-0")
    start(log, short, "c0-1")
    sim = SimCluster.simulated(log)
    run_to_end(sim, log)
    finishes = [(e.event.time, e.id) for e in reports(log) if isinstance(e.event, WorkloadFinished)]
    assert finishes == [(T0 + 5_000, f"sim:finished:{short}:1"), (T0 + 10_000, f"sim:finished:{long_}:1")]
    assert sim.stats.jumps == 2


def test_workloads_without_annotation_run_for_the_configured_default(log: SqliteLog) -> None:
    key = apply_job(log, "plain")
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log, SimConfig(default_duration_ms=42_000))
    run_to_end(sim, log)
    (fin,) = [e for e in reports(log) if isinstance(e.event, WorkloadFinished)]
    assert fin.event.time == T0 + 42_000


def test_stopping_a_running_workload_completes_the_eviction_and_cancels_its_finish(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "60s")
    start(log, key, "c0-0")
    stop(log, key, "c3-0", time=T0 + 1_000)
    sim = SimCluster.simulated(log)
    run_to_end(sim, log)
    got = [(type(e.event), e.id, e.event.time) for e in reports(log)]
    assert got == [
        (PodsReady, f"sim:pods-ready:{key}:1", T0),
        (EvictionCompleted, f"sim:eviction-completed:{key}:1", T0 + 1_000),
    ]


@pytest.mark.parametrize("started", [pytest.param(False, id="never started"),
                                     pytest.param(True, id="already finished")])
def test_a_stop_for_a_workload_not_running_still_reports_the_eviction_completed(log: SqliteLog,
                                                                                started: bool) -> None:
    key = apply_job(log, "etl", "1s")
    sim = SimCluster.simulated(log)
    if started:
        start(log, key, "c0-0")
        run_to_end(sim, log)
    stop(log, key, "c5-0", time=T0 + 9_000)
    settle(sim)
    evictions = [e for e in reports(log) if isinstance(e.event, EvictionCompleted)]
    assert [e.id for e in evictions] == [f"sim:eviction-completed:{key}:1"]


def test_a_readmitted_workload_runs_again_with_new_report_ids(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "10s")
    start(log, key, "c0-0")
    stop(log, key, "c1-0", time=T0 + 1_000)
    start(log, key, "c2-0", time=T0 + 2_000)
    sim = SimCluster.simulated(log)
    run_to_end(sim, log)
    ids = [e.id for e in reports(log)]
    assert ids == [f"sim:pods-ready:{key}:1", f"sim:eviction-completed:{key}:1", f"sim:pods-ready:{key}:2",
                   f"sim:finished:{key}:1"]
    (fin,) = [e for e in reports(log) if isinstance(e.event, WorkloadFinished)]
    assert fin.event.time == T0 + 12_000  # run 2 started at its decision's time


def test_a_command_whose_decision_was_already_carried_out_is_ignored(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "10s")
    start(log, key, "c0-0")
    start(log, key, "c0-0")
    stop(log, key, "c1-0", time=T0 + 1)
    stop(log, key, "c1-0", time=T0 + 1)
    sim = SimCluster.simulated(log)
    run_to_end(sim, log)
    assert sim.stats.duplicates == 2
    assert [type(e.event) for e in reports(log)] == [PodsReady, EvictionCompleted]


def test_commands_for_another_simulated_cluster_are_not_ours(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "10s")
    start(log, key, "c0-0", cluster="other")
    sim = SimCluster.simulated(log)
    settle(sim)
    assert reports(log) == []
    assert sim.stats.foreign == 1


def test_an_undecodable_record_is_skipped_and_the_rest_carried_out(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "10s")
    log.append(SIM, [("x", b"not json"), ("x", b'{"type": "sim.from-the-future"}')])
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log)
    settle(sim)
    assert sim.stats.skipped == 2
    assert [type(e.event) for e in reports(log)] == [PodsReady]
    assert log.position(GROUP, SIM) == 3  # past both, committed with the run they preceded
    assert sim.next_offset == log.end_offset(SIM)


@pytest.mark.parametrize(
    ("delay_ms", "duration", "want"),
    [
        pytest.param(3_000, "10s", [(PodsReady, T0 + 3_000), (WorkloadFinished, T0 + 10_000)],
                     id="pods become ready after the delay"),
        pytest.param(3_000, "3s", [(PodsReady, T0 + 3_000), (WorkloadFinished, T0 + 3_000)],
                     id="ready and finished at once: ready first"),
        pytest.param(30_000, "10s", [(WorkloadFinished, T0 + 10_000)],
                     id="finished before it would be ready: no PodsReady"),
    ],
)
def test_pods_ready_delay(log: SqliteLog, delay_ms: int, duration: str, want: list[tuple[type, int]]) -> None:
    key = apply_job(log, "etl", duration)
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log, SimConfig(pods_ready_delay_ms=delay_ms))
    settle(sim)
    assert reports(log) == []
    run_to_end(sim, log)
    assert [(type(e.event), e.event.time) for e in reports(log)] == want


# --- real time ----------------------------------------------------------------------------------


class FakeWallClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_in_real_time_a_finish_is_reported_when_the_wall_clock_reaches_it(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "5s")
    start(log, key, "c0-0", time=0)  # a decision's time does not matter in real time
    clock = FakeWallClock(T0)
    sim = SimCluster.real(log, clock)
    settle(sim)
    assert [(type(e.event), e.event.time) for e in reports(log)] == [(PodsReady, T0)]
    clock.now = T0 + 4_999
    assert sim.wait_hint_ms() == 1
    settle(sim)
    assert len(reports(log)) == 1
    clock.now = T0 + 7_000
    settle(sim)
    assert [(type(e.event), e.event.time) for e in reports(log)][1:] == [(WorkloadFinished, T0 + 5_000)]


def test_the_clock_mode_and_the_wall_clock_go_together(log: SqliteLog) -> None:
    with pytest.raises(ValueError, match="wall clock"):
        SimCluster(log, mode="simulated", config=SimConfig(), topics=TOPICS, wall_clock=FakeWallClock(0))
    with pytest.raises(ValueError, match="wall clock"):
        SimCluster(log, mode="real", config=SimConfig(), topics=TOPICS, wall_clock=None)
    with pytest.raises(RuntimeError, match="simulated time"):
        SimCluster.real(log, FakeWallClock(0)).jump()


# --- restarts and crashes -----------------------------------------------------------------------


def test_a_restarted_simulated_cluster_rebuilds_its_state_from_the_topic(log: SqliteLog) -> None:
    a, b = apply_job(log, "a", "5s"), apply_job(log, "b", "50s")
    start(log, a, "c0-0")
    start(log, b, "c0-1")
    first = SimCluster.simulated(log)
    settle(first)
    others_caught_up(log)
    assert first.jump() == 1  # a finished

    second = SimCluster.simulated(log)
    second.recover()
    assert second.state.clock == first.state.clock == T0 + 5_000
    assert second.state.runs == first.state.runs
    assert second.next_due() == T0 + 50_000
    run_to_end(second, log)
    finishes = sorted(e.id for e in reports(log) if isinstance(e.event, WorkloadFinished))
    assert finishes == [f"sim:finished:{a}:1", f"sim:finished:{b}:1"]  # each exactly once




@pytest.mark.parametrize("crash_on", [pytest.param({1}, id="while starting"),
                                      pytest.param({3}, id="while reporting a finish"),
                                      pytest.param({1, 2, 3, 4, 5}, id="on every one of the first five commits")])
def test_a_crash_before_commit_loses_and_doubles_no_report(log: SqliteLog, crash_on: set[int]) -> None:
    keys = [apply_job(log, "a", "5s"), apply_job(log, "b", "7s")]
    start(log, keys[0], "c0-0")
    start(log, keys[1], "c0-1")
    crashing = CrashingLog(log, crash_on)
    sim = SimCluster.simulated(crashing)  # type: ignore[arg-type]
    for _ in range(200):
        try:
            run_to_end(sim, log)
            break
        except LogError:
            sim = SimCluster.simulated(crashing)  # type: ignore[arg-type]  # the restarted process
    ids = [e.id for e in reports(log)]
    assert sorted(ids) == sorted({*ids})
    assert sorted(ids) == sorted(f"sim:{kind}:{k}:1" for k in keys for kind in ("pods-ready", "finished"))


def test_status_records_fold_idempotently(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "5s")
    start(log, key, "c0-0")
    sim = SimCluster.simulated(log)
    run_to_end(sim, log)
    records = [decode_sim_record(r.value) for r in log.read(SIM, 0, 100)]
    assert [type(r) for r in records] == [StartWorkload, RunStarted, Reported, Reported]
    # Committed with the last report: only that step's own status record lies beyond.
    assert log.position(GROUP, SIM) == log.end_offset(SIM) - 1 == sim.next_offset - 1
    before = (sim.state.clock, dict(sim.state.report_counts), dict(sim.state.runs))
    log.commit(GROUP, SIM, 0)  # as if the position were lost: everything read again
    settle(sim)
    assert (sim.state.clock, dict(sim.state.report_counts), dict(sim.state.runs)) == before
    assert len(reports(log)) == 2


class CountingLog:
    """A real log that counts transactions and reads of each topic."""

    def __init__(self, inner: SqliteLog) -> None:
        self.inner, self.transactions, self.reads = inner, 0, dict[str, int]()

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        self.transactions += 1
        return self.inner.transact(appends, commits)

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]:
        self.reads[topic] = self.reads.get(topic, 0) + 1
        return self.inner.read(topic, start, limit)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_step_that_writes_nothing_commits_nothing_and_time_still_moves(log: SqliteLog) -> None:
    key = apply_job(log, "etl", "5s")
    start(log, key, "c0-0")
    counting = CountingLog(log)
    sim = SimCluster.simulated(counting)  # type: ignore[arg-type]
    assert sim.step() > 0
    assert counting.transactions == 1  # the run started (and its pods are ready)
    committed = log.position(GROUP, SIM)
    assert sim.step() > 0  # its own status records, read back
    assert counting.transactions == 1
    assert log.position(GROUP, SIM) == committed < sim.next_offset == log.end_offset(SIM)
    others_caught_up(log)
    assert sim.system_idle()  # idle by what it has read, not by what it has committed
    assert sim.jump() == 1
    assert counting.transactions == 2

    restarted = SimCluster.simulated(log)
    run_to_end(restarted, log)  # re-reads what the first one never committed: no report twice
    assert sorted(e.id for e in reports(log)) == [f"sim:finished:{key}:1", f"sim:pods-ready:{key}:1"]


def test_cluster_events_are_read_only_to_learn_a_workload_not_seen_yet(log: SqliteLog) -> None:
    a, b = apply_job(log, "a", "5s"), apply_job(log, "b", "7s")
    counting = CountingLog(log)
    sim = SimCluster.simulated(counting)  # type: ignore[arg-type]
    start(log, a, "c0-0")
    settle(sim)
    learned = counting.reads[TOPICS.cluster_events]
    assert learned > 0
    start(log, b, "c0-1")  # b was applied before the catch-up for a: known already
    settle(sim)
    assert counting.reads[TOPICS.cluster_events] == learned
    c = apply_job(log, "c", "9s")
    start(log, c, "c0-2")
    settle(sim)
    assert counting.reads[TOPICS.cluster_events] > learned
    run_to_end(sim, log)
    finishes = sorted(e.event.time for e in reports(log) if isinstance(e.event, WorkloadFinished))
    assert finishes == [T0 + 5_000, T0 + 7_000, T0 + 9_000]  # every duration from its own annotation
