"""The scheduler service over the embedded log: commits, dead letters, stops, snapshots, replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.codec import decode_decision, encode
from events.envelope import Envelope, Topics
from events.manifests import Document, load, normalize
from events.messages import AdmitWorkload, CycleCompleted, ObjectApplied, WorkloadFinished
from services.core.snapshot import encode_state
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import GROUP, Scheduler, SchedulerStopped
from tests.builders import Builder, a_cluster_queue, a_flavor, a_local_queue, a_namespace, a_workload

EXAMPLES = sorted(str(p) for p in Path("examples").glob("*.yaml"))
T = Topics()


def _append_objects(log: SqliteLog, objects: list[Any], source: str) -> int:
    start = log.end_offset(T.cluster_events)
    recs = []
    for i, obj in enumerate(objects):
        ev = ObjectApplied(time=getattr(obj, "creation_time", None) or 0, object=obj)
        recs.append((source, encode(Envelope(id=f"{source}:{start + i}", source=source, event=ev))))
    log.append(T.cluster_events, recs)
    return len(recs)


def _seed(log: SqliteLog) -> int:
    files = {f: Path(f).read_text() for f in EXAMPLES}
    return _append_objects(log, [obj for _, obj in load(files)], "seed")


@pytest.fixture
def log(tmp_path: Path) -> SqliteLog:
    lg = SqliteLog(tmp_path)
    yield lg
    lg.close()


def _drain(s: Scheduler) -> None:
    while s.step():
        pass


def test_each_batch_commits_decisions_cycle_records_and_the_input_position(log: SqliteLog) -> None:
    n = _seed(log)
    s = Scheduler(log, batch_size=10)
    _drain(s)
    assert log.position(GROUP, T.cluster_events) == n
    records = [decode_decision(r.value) for r in log.read(T.decisions, 0, 100_000)]
    cycles = [r for r in records if isinstance(r, CycleCompleted)]
    admits = [r for r in records if isinstance(r, AdmitWorkload)]
    assert admits, "the examples admit workloads"
    assert [c.cycle for c in cycles] == list(range(1, len(cycles) + 1))
    assert all(0 < c.input_offset <= n for c in cycles)
    assert len({d.id for d in admits}) == len(admits)


def test_malformed_records_go_to_dead_letters_and_the_scheduler_carries_on(log: SqliteLog) -> None:
    log.append(T.cluster_events, [("x", b"not json"), ("y", b'{"id": 1}')])
    n = _seed(log)
    s = Scheduler(log)
    _drain(s)
    dead = log.read(T.dead_letters, 0)
    assert len(dead) == 2
    assert b"not JSON" in dead[0].value and b'"offset":0' in dead[0].value
    assert b"Expected `str`" in dead[1].value
    assert log.position(GROUP, T.cluster_events) == n + 2
    assert any(isinstance(decode_decision(r.value), AdmitWorkload) for r in log.read(T.decisions, 0, 10_000))


def test_an_unknown_event_type_stops_the_scheduler_without_skipping_it(log: SqliteLog) -> None:
    n = _seed(log)
    log.append(T.cluster_events, [("z", b'{"id":"new:1","source":"v2","event":{"type":"workload.teleported"}}')])
    s = Scheduler(log, batch_size=n)
    assert s.step() == n  # the first batch is fine
    with pytest.raises(SchedulerStopped, match=r"workload\.teleported"):
        s.step()
    assert log.position(GROUP, T.cluster_events) == n  # nothing after the fact we could not read


def test_recovery_from_snapshot_plus_tail_equals_the_live_state(log: SqliteLog) -> None:
    _seed(log)
    live = Scheduler(log, batch_size=5, snapshot_every=12)
    _drain(live)
    assert log.end_offset(T.snapshots) >= 2
    restarted = Scheduler(log)
    restarted.recover()
    assert encode_state(restarted.state) == encode_state(live.state)
    assert restarted.next_input == live.next_input


def test_replay_verify_reproduces_every_recorded_decision(log: SqliteLog) -> None:
    _seed(log)
    _drain(Scheduler(log, batch_size=3))
    assert list(Scheduler(log).replay(0, verify=True)) == []


def test_a_step_stops_at_its_head_budget_and_the_next_goes_on_without_new_events(log: SqliteLog,
                                                                                 tmp_path: Path) -> None:
    n = _seed(log)
    whole = SqliteLog(tmp_path / "whole")
    whole.append(T.cluster_events, [(r.key, r.value) for r in log.read(T.cluster_events, 0, 100_000)])
    _drain(Scheduler(whole, batch_size=n))

    cut = Scheduler(log, batch_size=n, max_heads_per_step=1)
    assert cut.step() == n  # every event, then one cycle's worth of heads
    first = len(cut.last_cycles)
    resumed = 0
    while did := cut.step():
        assert cut.next_input == n  # nothing new was read: the cycles went on
        resumed += did
    assert resumed > 0
    assert first < cut.stats.cycles
    assert cut.step() == 0  # quiet now: nothing to do until an event arrives

    def admissions(lg: SqliteLog) -> list[tuple[str, str]]:
        out = []
        for r in lg.read(T.decisions, 0, 100_000):
            d = decode_decision(r.value)
            if isinstance(d, AdmitWorkload):
                out.append((f"{d.namespace}/{d.name}", d.admission.cluster_queue))
        return out

    # Cutting a run of cycles into steps decides the same (all events were folded before either
    # ran a cycle), and a replay re-derives every cycle from the recorded input offsets.
    assert admissions(log) == admissions(whole)
    assert list(Scheduler(log).replay(0, verify=True)) == []
    whole.close()


def _apply(log: SqliteLog, *builders: Builder) -> None:
    objects = [normalize(Document("test.yaml", i + 1, b.obj())) for i, b in enumerate(builders)]
    assert None not in objects
    _append_objects(log, objects, "test")


def test_a_sweep_that_admits_nothing_stops_at_the_idle_budget_and_ends_where_an_uncut_one_does(
        log: SqliteLog, tmp_path: Path) -> None:
    # Two ClusterQueues of one cohort, each full: every pending workload is parked again, one head
    # per queue per cycle, without any cycle admitting; then a finish sends them all back.
    builders: list[Builder] = [a_flavor("f"), a_namespace("ns")]
    for cq in ("a", "b"):
        builders += [a_cluster_queue(cq).cohort("co").flavor("f", cpu=1), a_local_queue("ns", f"lq-{cq}", cq),
                     a_workload("ns", f"run-{cq}").queue(f"lq-{cq}").request(cpu="1").created(0)]
        builders += [a_workload("ns", f"w-{cq}-{i}").queue(f"lq-{cq}").request(cpu="1").created(10 + i)
                     for i in range(12)]
    whole = SqliteLog(tmp_path / "whole")
    for lg in (log, whole):
        _apply(lg, *builders)
    uncut = Scheduler(whole, max_idle_heads_per_step=10**9)
    cut = Scheduler(log, max_idle_heads_per_step=4)
    for s in (uncut, cut):
        _drain(s)
    assert len(uncut.last_cycles) > 3  # the sweep is long enough to be cut

    finish = WorkloadFinished(time=cut.state.now, namespace="ns", name="run-a")
    for lg in (log, whole):
        lg.append(T.cluster_events, [("f", encode(Envelope(id="f:1", source="test", event=finish)))])
    _drain(uncut)
    sweeps = []
    while cut.step():
        sweeps.append([len(c.heads) + len(c.admitted_heads) for c in cut.last_cycles])
    # The first step admits into the released quota, then parks; later steps only park, and each
    # stops once it has nominated 4 heads (two cycles of two heads) with nothing admitted.
    assert len(sweeps) > 3, sweeps
    assert all(sum(heads) == 4 for heads in sweeps[1:-1]), sweeps

    def admitted(lg: SqliteLog) -> list[str]:
        return [f"{d.namespace}/{d.name}" for r in lg.read(T.decisions, 0, 100_000)
                if isinstance(d := decode_decision(r.value), AdmitWorkload)]

    assert admitted(log) == admitted(whole)
    assert encode_state(cut.state) == encode_state(uncut.state)
    assert list(Scheduler(log).replay(0, verify=True)) == []
    whole.close()


def test_replay_verify_catches_a_tampered_decision(log: SqliteLog, tmp_path: Path) -> None:
    _seed(log)
    _drain(Scheduler(log, batch_size=3))
    # Copy the log with one admission's flavor changed, as a bug or a tampering would.
    other = SqliteLog(tmp_path / "tampered")
    other.append(T.cluster_events, [(r.key, r.value) for r in log.read(T.cluster_events, 0, 100_000)])
    tampered = []
    changed = False
    for r in log.read(T.decisions, 0, 100_000):
        value = r.value
        if not changed and b'"type":"admit"' in value and b"on-demand" in value:
            value, changed = value.replace(b"on-demand", b"spot", 1), True
        tampered.append((r.key, value))
    assert changed
    other.append(T.decisions, tampered)
    mismatches = list(Scheduler(other).replay(0, verify=True))
    assert len(mismatches) >= 1
    assert "spot" in mismatches[0][1]
    other.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(batch=st.integers(2, 20), snapshot_every=st.integers(1, 40), finish=st.lists(st.integers(0, 30), max_size=8))
def test_snapshot_plus_tail_equals_a_full_replay(tmp_path_factory: pytest.TempPathFactory, batch: int,
                                                 snapshot_every: int, finish: list[int]) -> None:
    log = SqliteLog(tmp_path_factory.mktemp("log"))
    _seed(log)
    live = Scheduler(log, batch_size=batch, snapshot_every=snapshot_every)
    _drain(live)
    admitted = sorted(k for k, r in live.state.workloads.items() if r.admission is not None)
    for i in finish:
        if admitted:
            ns, name = admitted[i % len(admitted)].split("/")
            log.append(T.cluster_events, [("f", encode(Envelope(id=f"f:{i}", source="test",
                                                                event=WorkloadFinished(time=live.state.now,
                                                                                       namespace=ns, name=name))))])
    _drain(live)
    from_snapshot = Scheduler(log)
    from_snapshot.recover()
    from_zero = Scheduler(log)
    assert list(from_zero.replay(0, verify=True)) == []
    from_zero.fold_until(log.position(GROUP, T.cluster_events))
    assert encode_state(from_snapshot.state) == encode_state(live.state) == encode_state(from_zero.state)
    log.close()




def test_a_live_step_folds_the_whole_backlog_before_its_cycles_and_replays_exactly(log: SqliteLog) -> None:
    n = _seed(log)
    live = Scheduler(log, batch_size=7, backlog_per_step=10**6)
    assert live.step() == n  # every waiting event, read 7 at a time, then the cycles
    assert {c.input_offset for c in live.last_cycles} == {n}
    _drain(live)
    assert list(Scheduler(log).replay(0, verify=True)) == []


def test_a_step_folds_no_more_of_the_backlog_than_its_limit(log: SqliteLog) -> None:
    n = _seed(log)
    assert n > 20
    live = Scheduler(log, batch_size=7, backlog_per_step=20)
    assert live.step() == 21  # three reads: the limit is checked after each
    assert live.next_input == 21
    _drain(live)
    assert live.next_input == n
    assert list(Scheduler(log).replay(0, verify=True)) == []


def test_snapshots_are_spaced_by_the_size_of_the_state(log: SqliteLog) -> None:
    n = _seed(log)
    plain = Scheduler(log, batch_size=5, snapshot_every=10)
    _drain(plain)
    by_events = log.end_offset(T.snapshots)
    assert by_events >= 2
    spaced_log = SqliteLog(log.directory.parent / "spaced")
    spaced_log.append(T.cluster_events, [(r.key, r.value) for r in log.read(T.cluster_events, 0, 100_000)])
    workloads = len(plain.state.workloads)
    assert 10 < workloads < n
    spaced = Scheduler(spaced_log, batch_size=5, snapshot_every=10, snapshot_per_workload=1)
    _drain(spaced)
    assert 1 <= spaced_log.end_offset(T.snapshots) < by_events
    assert encode_state(spaced.state) == encode_state(plain.state)  # the same decisions either way
    spaced_log.close()


def test_a_step_that_only_parked_workloads_again_pauses_the_next_as_long_as_it_took() -> None:
    """The live runner's pause after a step (services/scheduler/runner.py): events gather while it
    waits, so a trickle of releases does not pay for one sweep of the cohort each."""
    from events import objects as o
    from events.messages import AdmitWorkload, CycleCompleted, HeadOutcome, MarkPending, PendingReason
    from services.scheduler.runner import IDLE_SWEEP_PAUSE_FACTOR, IDLE_SWEEP_PAUSE_MAX, idle_sweep_pause

    mark = MarkPending(id="c1-0", cycle=1, namespace="ns", name="a", reason=PendingReason.WAITING_FOR_QUOTA,
                       message="couldn't assign flavors")
    admit = AdmitWorkload(id="c1-1", cycle=1, namespace="ns", name="b",
                          admission=o.Admission(cluster_queue="cq", pod_set_assignments=()))
    parked = HeadOutcome(key="ns/a", cluster_queue="cq", parked=True)
    swept = [CycleCompleted(cycle=1, input_offset=0, time=0, decisions=1, heads=(parked,))]
    quiet = [CycleCompleted(cycle=1, input_offset=0, time=0, decisions=0)]
    assert idle_sweep_pause([mark], swept, 0.01) == pytest.approx(IDLE_SWEEP_PAUSE_FACTOR * 0.01)
    assert idle_sweep_pause([], swept, 0.002) == pytest.approx(IDLE_SWEEP_PAUSE_FACTOR * 0.002), "cheap: briefly"
    assert idle_sweep_pause([mark], swept, 5.0) == IDLE_SWEEP_PAUSE_MAX
    assert idle_sweep_pause([mark, admit], swept, 0.03) == 0.0, "a step that decided something goes on at once"
    assert idle_sweep_pause([], quiet, 0.03) == 0.0, "no head tried: no sweep to pause after"
    assert idle_sweep_pause([], [], 0.03) == 0.0, "reports folded, no cycle"
