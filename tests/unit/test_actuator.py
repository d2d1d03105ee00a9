"""The actuator's loop over the simulated cluster's port: what it applies, that it applies each
decision exactly once, and how it fails."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest

from events import objects as o
from events.codec import decode_envelope, encode
from events.envelope import Topics
from events.messages import (
    ActuationFailed,
    AdmitWorkload,
    AnyDecision,
    CycleCompleted,
    DecisionApplied,
    EvictWorkload,
    MarkPending,
    PendingReason,
)
from events.simcluster import StartWorkload, StopWorkload, decode_sim_record, sim_cluster_topic
from services.actuator.loop import GROUP, ActuationError, Actuator, Staged, Tuning
from services.actuator.sim_port import SIM_TUNING, SimClusterPort
from services.runtime.log import LogError
from services.runtime.sqlite import SqliteLog
from tests.crashing_log import CrashingLog

TOPICS = Topics()
SIM = sim_cluster_topic(TOPICS)
ADMISSION = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "default"),), resource_usage=(("cpu", 1000),), count=1),))


@pytest.fixture
def log(tmp_path: object) -> SqliteLog:
    out = SqliteLog(str(tmp_path))
    yield out  # type: ignore[misc]
    out.close()


def admit(cycle: int, i: int, name: str) -> AdmitWorkload:
    return AdmitWorkload(id=f"c{cycle}-{i}", cycle=cycle, time=1000 * cycle, namespace="ns", name=name,
                         cluster_queue="cq", admission=ADMISSION)


def evict(cycle: int, i: int, name: str) -> EvictWorkload:
    return EvictWorkload(id=f"c{cycle}-{i}", cycle=cycle, time=1000 * cycle, namespace="ns", name=name,
                         cluster_queue="cq", reason="Preempted", message="to make room")


def pending(cycle: int, i: int, name: str) -> MarkPending:
    return MarkPending(id=f"c{cycle}-{i}", cycle=cycle, time=1000 * cycle, namespace="ns", name=name,
                       cluster_queue="cq", reason=PendingReason.WAITING_FOR_QUOTA, message="no room")


def done(cycle: int, decisions: int) -> CycleCompleted:
    return CycleCompleted(cycle=cycle, input_offset=cycle, time=1000 * cycle, decisions=decisions)


def write(log: SqliteLog, *records: object) -> None:
    log.append(TOPICS.decisions, [("k", encode(r)) for r in records])


def commands(log: SqliteLog) -> list[StartWorkload | StopWorkload]:
    out = []
    for r in log.read(SIM, 0, 10_000):
        c = decode_sim_record(r.value)
        assert isinstance(c, StartWorkload | StopWorkload)
        out.append(c)
    return out


def outcomes(log: SqliteLog) -> list[DecisionApplied | ActuationFailed]:
    out = []
    for r in log.read(TOPICS.cluster_events, 0, 10_000):
        ev = decode_envelope(r.value).event
        assert isinstance(ev, DecisionApplied | ActuationFailed)
        out.append(ev)
    return out


def drain(actuator: Actuator[SimClusterPort] | Actuator[FlakyPort]) -> None:
    for _ in range(100):
        if actuator.step_now() == 0:
            return
    raise AssertionError("the actuator never caught up")


def in_batches_of(n: int) -> SimClusterPort:
    return SimClusterPort(TOPICS, tuning=replace(SIM_TUNING, batch_size=n))


def test_admit_starts_evict_stops_and_the_rest_is_not_for_a_cluster(log: SqliteLog) -> None:
    write(log, admit(0, 0, "a"), pending(0, 1, "b"), done(0, 2), evict(1, 0, "a"), done(1, 1))
    actuator = Actuator(log, SimClusterPort(TOPICS))
    drain(actuator)
    got = commands(log)
    assert [(type(c), c.decision_id, c.name, c.cluster) for c in got] == [
        (StartWorkload, "c0-0", "a", "sim"), (StopWorkload, "c1-0", "a", "sim")]
    start = got[0]
    assert isinstance(start, StartWorkload)
    assert (start.admission, start.time) == (ADMISSION, 0)
    assert [(type(e), e.decision_id) for e in outcomes(log)] == [(DecisionApplied, "c0-0"),
                                                               (DecisionApplied, "c1-0")]
    ids = [decode_envelope(r.value).id for r in log.read(TOPICS.cluster_events, 0, 10)]
    assert ids == ["actuator:sim:c0-0", "actuator:sim:c1-0"]
    assert log.position(GROUP, TOPICS.decisions) == log.end_offset(TOPICS.decisions)
    assert (actuator.stats.started, actuator.stats.stopped, actuator.stats.ignored) == (1, 1, 1)


class SpyLog:
    """Records every transaction (a port-contract check, not a mock of our internals)."""

    def __init__(self, inner: SqliteLog) -> None:
        self.inner = inner
        self.transactions: list[tuple[set[str], dict[tuple[str, str], int]]] = []

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        self.transactions.append(({t for t, recs in appends.items() if recs}, dict(commits)))
        return self.inner.transact(appends, commits)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_the_command_its_report_and_the_position_are_committed_in_one_transaction(log: SqliteLog) -> None:
    write(log, admit(0, 0, "a"), admit(0, 1, "b"), done(0, 2))
    spy = SpyLog(log)
    actuator = Actuator(spy, in_batches_of(1))  # type: ignore[arg-type]
    drain(actuator)
    with_commands = [(topics, commits) for topics, commits in spy.transactions if SIM in topics]
    assert len(with_commands) == 2
    for topics, commits in with_commands:
        assert topics == {SIM, TOPICS.cluster_events}
        assert (GROUP, TOPICS.decisions) in commits


def test_a_decision_that_appears_twice_is_applied_once(log: SqliteLog) -> None:
    write(log, admit(0, 0, "a"), admit(0, 0, "a"), done(0, 1), admit(0, 0, "a"), evict(1, 0, "a"), evict(1, 0, "a"))
    actuator = Actuator(log, SimClusterPort(TOPICS))
    drain(actuator)
    assert [c.decision_id for c in commands(log)] == ["c0-0", "c1-0"]
    assert actuator.stats.duplicates == 3




def test_a_crash_before_commit_applies_nothing_and_the_restart_applies_everything_once(log: SqliteLog) -> None:
    write(log, admit(0, 0, "a"), admit(0, 1, "b"), done(0, 2), evict(1, 0, "a"), done(1, 1))
    crashing = CrashingLog(log, {2})
    first = Actuator(crashing, in_batches_of(2))  # type: ignore[arg-type]
    assert first.step_now() == 2
    with pytest.raises(LogError):
        first.step_now()  # dies before its second commit
    assert [c.decision_id for c in commands(log)] == ["c0-0", "c0-1"]
    assert log.position(GROUP, TOPICS.decisions) == 2

    restarted = Actuator(log, in_batches_of(2))
    drain(restarted)
    assert [c.decision_id for c in commands(log)] == ["c0-0", "c0-1", "c1-0"]
    assert [e.decision_id for e in outcomes(log)] == ["c0-0", "c0-1", "c1-0"]


def test_after_a_crash_after_commit_the_restart_applies_nothing_again(log: SqliteLog) -> None:
    write(log, admit(0, 0, "a"), done(0, 1), evict(1, 0, "a"), done(1, 1))
    drain(Actuator(log, SimClusterPort(TOPICS)))
    before = (commands(log), outcomes(log))
    restarted = Actuator(log, SimClusterPort(TOPICS))
    drain(restarted)
    assert (commands(log), outcomes(log)) == before
    assert restarted.stats.started == restarted.stats.stopped == 0


def test_a_restart_in_the_middle_of_a_cycle_remembers_what_it_applied_of_it(log: SqliteLog) -> None:
    # A duplicate of c0-0 later in the same cycle: only the recovered watermark can tell.
    write(log, admit(0, 0, "a"), admit(0, 1, "b"), admit(0, 0, "a"), done(0, 2))
    first = Actuator(log, in_batches_of(1))
    assert first.step_now() == 1
    restarted = Actuator(log, SimClusterPort(TOPICS))
    drain(restarted)
    assert [c.decision_id for c in commands(log)] == ["c0-0", "c0-1"]
    assert restarted.stats.duplicates == 1


THREE_ATTEMPTS = Tuning(max_attempts=3)


@dataclass
class FlakyPort:
    """A port that fails its first ``failures`` calls."""

    failures: int
    retriable: bool
    calls: list[str] = field(default_factory=list)
    tuning: Tuning = THREE_ATTEMPTS
    takes_pending_marks: bool = False

    @property
    def cluster(self) -> str:
        return "flaky"

    def recover(self, history: Iterator[AnyDecision]) -> None:
        pass

    deferred = 0

    async def before_batch(self, batch: int) -> None:
        pass

    async def start(self, decision: AdmitWorkload) -> Sequence[Staged]:
        self.calls.append(decision.id)
        if len(self.calls) <= self.failures:
            raise ActuationError("API server unavailable", retriable=self.retriable)
        return []

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        raise AssertionError("not used")

    async def mark_pending(self, decision: MarkPending) -> None:
        raise AssertionError("not used")

    async def after_batch(self) -> None:
        pass


@pytest.mark.parametrize(
    ("failures", "retriable", "want_outcome", "want_calls"),
    [
        pytest.param(2, True, DecisionApplied, 3, id="a retriable error is retried until it works"),
        pytest.param(99, True, ActuationFailed, 3, id="retries exhausted: reported as failed, retriable"),
        pytest.param(1, False, ActuationFailed, 1, id="a permanent error is reported at once"),
    ],
)
def test_port_errors(log: SqliteLog, failures: int, retriable: bool, want_outcome: type, want_calls: int) -> None:
    write(log, admit(0, 0, "a"), done(0, 1))
    port = FlakyPort(failures, retriable)
    actuator = Actuator(log, port)
    drain(actuator)
    assert port.calls == ["c0-0"] * want_calls
    (outcome,) = outcomes(log)
    assert isinstance(outcome, want_outcome)
    assert outcome.cluster == "flaky"
    if isinstance(outcome, ActuationFailed):
        assert outcome.retriable is retriable
        assert "API server unavailable" in outcome.error
    assert log.position(GROUP, TOPICS.decisions) == 2


def test_a_retry_does_not_hold_back_what_came_before_it(log: SqliteLog) -> None:
    write(log, pending(0, 0, "x"), admit(0, 1, "a"), done(0, 2))
    actuator = Actuator(log, FlakyPort(1, True))
    assert actuator.step_now() == 2  # the MarkPending consumed, plus a retry still to do
    assert log.position(GROUP, TOPICS.decisions) == 1
    drain(actuator)
    assert log.position(GROUP, TOPICS.decisions) == 3


def test_an_undecodable_decision_is_skipped(log: SqliteLog) -> None:
    log.append(TOPICS.decisions, [("k", b"garbage"), ("k", b'{"type": "provision", "id": "c0-0"}')])
    write(log, admit(0, 1, "a"))
    actuator = Actuator(log, SimClusterPort(TOPICS))
    drain(actuator)
    assert actuator.stats.skipped == 2
    assert [c.decision_id for c in commands(log)] == ["c0-1"]
