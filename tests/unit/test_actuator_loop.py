"""One loop, two kinds of port: the same dedup, retries and reports whichever port applies the decisions.

The two kinds are the ones the actuator has: a port that returns records to commit with the
position (the simulated cluster's, the real :class:`SimClusterPort` here) and a port that makes
idempotent calls itself, suspends while it does, and writes pending marks (the Kubernetes
port's shape; its behaviour against a real API server is in tests/integration/test_kube_actuator.py).
Both refuse workload ``bad`` for good and fail ``flaky``'s first attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
    UpdateWorkloadStatus,
)
from events.simcluster import sim_cluster_topic
from services.actuator.loop import GROUP, ActuationError, ActuationPort, Actuator, P, Staged, Tuning
from services.actuator.sim_port import SimClusterPort
from services.runtime.sqlite import SqliteLog

TOPICS = Topics()
TUNING = Tuning(batch_size=100, max_attempts=3)
ADMISSION = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "default"),), resource_usage=(("cpu", 1000),), count=1),))


def refusal(name: str, attempt: int) -> ActuationError | None:
    """What both ports say to the ``attempt``-th call for workload ``name``."""
    if name == "bad":
        return ActuationError(f"ns/{name}: forbidden", retriable=False)
    if name == "flaky" and attempt == 1:
        return ActuationError(f"ns/{name}: unavailable", retriable=True)
    return None


@dataclass
class RefusingSimPort:
    """The simulated cluster's real port, refusing as :func:`refusal` says."""

    inner: SimClusterPort = field(default_factory=lambda: SimClusterPort(TOPICS, "c1", tuning=TUNING))
    attempts: dict[str, int] = field(default_factory=dict)

    @property
    def cluster(self) -> str:
        return self.inner.cluster

    @property
    def tuning(self) -> Tuning:
        return self.inner.tuning

    @property
    def takes_pending_marks(self) -> bool:
        return self.inner.takes_pending_marks

    def recover(self, history: Iterator[AnyDecision]) -> None:
        self.inner.recover(history)

    @property
    def deferred(self) -> int:
        return self.inner.deferred

    async def before_batch(self, batch: int) -> None:
        await self.inner.before_batch(batch)

    def _check(self, name: str) -> None:
        self.attempts[name] = self.attempts.get(name, 0) + 1
        error = refusal(name, self.attempts[name])
        if error is not None:
            raise error

    async def start(self, decision: AdmitWorkload) -> Sequence[Staged]:
        self._check(decision.name)
        return await self.inner.start(decision)

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        self._check(decision.name)
        return await self.inner.stop(decision)

    async def mark_pending(self, decision: MarkPending) -> None:
        await self.inner.mark_pending(decision)

    async def write_status(self, decision: UpdateWorkloadStatus) -> None:
        self._check(decision.name)
        await self.inner.write_status(decision)

    async def after_batch(self) -> None:
        await self.inner.after_batch()


@dataclass
class CallingPort:
    """An API server's port in miniature: each call suspends (as a request does) and changes an
    in-memory "cluster"; it returns no records, writes pending marks, and rebuilds what it
    counts from the history at recovery."""

    cluster: str = "c1"
    tuning: Tuning = TUNING
    takes_pending_marks: bool = True
    running: dict[str, str] = field(default_factory=dict)  # ns/name -> the decision that started it
    pending: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    recovered_from: int = -1
    batches: int = 0
    statuses: list[str] = field(default_factory=list)  # the status decisions written, in order

    def recover(self, history: Iterator[AnyDecision]) -> None:
        self.recovered_from = sum(1 for _ in history)

    deferred = 0

    async def before_batch(self, batch: int) -> None:
        await asyncio.sleep(0)

    async def _call(self, name: str) -> None:
        await asyncio.sleep(0)
        self.attempts[name] = self.attempts.get(name, 0) + 1
        error = refusal(name, self.attempts[name])
        if error is not None:
            raise error

    async def start(self, decision: AdmitWorkload) -> Sequence[Staged]:
        await self._call(decision.name)
        self.running[f"{decision.namespace}/{decision.name}"] = decision.id
        return ()

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        await self._call(decision.name)
        self.running.pop(f"{decision.namespace}/{decision.name}", None)
        return ()

    async def mark_pending(self, decision: MarkPending) -> None:
        await asyncio.sleep(0)
        self.pending[f"{decision.namespace}/{decision.name}"] = str(decision.reason)

    async def write_status(self, decision: UpdateWorkloadStatus) -> None:
        await self._call(decision.name)
        self.statuses.append(decision.id)

    async def after_batch(self) -> None:
        await asyncio.sleep(0)
        self.batches += 1


CONCURRENT = Tuning(batch_size=100, max_attempts=3, concurrency=8)
PORTS: dict[str, Callable[[], ActuationPort]] = {"records to commit (simulated cluster)": RefusingSimPort,
                                                 "calls of its own (API server)": CallingPort,
                                                 "calls of its own, workloads at once": lambda: CallingPort(
                                                     tuning=CONCURRENT)}


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    out = SqliteLog(tmp_path / "log")
    yield out
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


def status(cycle: int, i: int, name: str) -> UpdateWorkloadStatus:
    return UpdateWorkloadStatus(id=f"c{cycle}-{i}", cycle=cycle, time=1000 * cycle, namespace="ns", name=name,
                                cluster_queue="cq", admission_checks=(o.AdmissionCheckState(name="prov"),))


def done(cycle: int, decisions: int) -> CycleCompleted:
    return CycleCompleted(cycle=cycle, input_offset=cycle, time=1000 * cycle, decisions=decisions)


def write(log: SqliteLog, *records: object) -> None:
    log.append(TOPICS.decisions, [("k", encode(r)) for r in records])


def reports(log: SqliteLog) -> list[tuple[str, str, str, str, bool | None]]:
    """(envelope id, report type, decision id, error, retriable) of every report."""
    out: list[tuple[str, str, str, str, bool | None]] = []
    for r in log.read(TOPICS.cluster_events, 0, 10_000):
        env = decode_envelope(r.value)
        ev = env.event
        if isinstance(ev, ActuationFailed):
            out.append((env.id, "ActuationFailed", ev.decision_id, ev.error, ev.retriable))
        else:
            assert isinstance(ev, DecisionApplied)
            out.append((env.id, "DecisionApplied", ev.decision_id, "", None))
    return out


async def drain(actuator: Actuator[P]) -> None:
    for _ in range(100):
        if await actuator.step() == 0:
            return
    raise AssertionError("the actuator never caught up")


HISTORY = (
    admit(0, 0, "good"), admit(0, 1, "bad"), admit(0, 0, "good"),  # c0-0 re-delivered within its cycle
    done(0, 2),
    admit(0, 0, "good"),  # ... and after the cycle closed
    pending(1, 0, "waiting"), admit(1, 1, "flaky"), evict(1, 2, "good"), evict(1, 2, "good"),
    done(1, 3),
)

WANT_REPORTS = [
    ("actuator:c1:c0-0", "DecisionApplied", "c0-0", "", None),
    ("actuator:c1:c0-1:failed", "ActuationFailed", "c0-1", "ns/bad: forbidden", False),
    ("actuator:c1:c1-1", "DecisionApplied", "c1-1", "", None),
    ("actuator:c1:c1-2", "DecisionApplied", "c1-2", "", None),
]


@pytest.mark.parametrize("make_port", PORTS.values(), ids=PORTS.keys())
async def test_the_same_loop_dedups_retries_and_reports_alike_for_both_ports(
        log: SqliteLog, make_port: Callable[[], ActuationPort]) -> None:
    write(log, *HISTORY)
    actuator = Actuator(log, make_port(), topics=TOPICS)
    await drain(actuator)
    assert reports(log) == WANT_REPORTS
    s = actuator.stats
    assert (s.started, s.stopped, s.failed, s.retries, s.duplicates) == (2, 1, 1, 1, 3)
    assert log.position(GROUP, TOPICS.decisions) == log.end_offset(TOPICS.decisions)

    # Delivered again after the commit, to a restarted actuator: the recovered watermark knows it.
    write(log, evict(1, 2, "good"))
    restarted = Actuator(log, make_port(), topics=TOPICS)
    await drain(restarted)
    assert reports(log) == WANT_REPORTS
    assert (restarted.stats.duplicates, restarted.stats.started, restarted.stats.stopped) == (1, 0, 0)


async def test_what_differs_is_only_what_each_port_does_with_a_decision(log: SqliteLog, tmp_path: Path) -> None:
    write(log, *HISTORY)
    sim = Actuator(log, RefusingSimPort(), topics=TOPICS)
    await drain(sim)
    commands = [r.key for r in log.read(sim_cluster_topic(TOPICS), 0, 100)]
    assert commands == ["ns/good", "ns/flaky", "ns/good"]  # start, start, stop: in the loop's transactions
    assert sim.stats.ignored == 1  # the pending mark: not for this port, not even decoded

    calling, api_log = CallingPort(), SqliteLog(tmp_path / "api")
    try:
        write(api_log, *HISTORY)
        await drain(Actuator(api_log, calling, topics=TOPICS))
        assert api_log.read(sim_cluster_topic(TOPICS), 0, 100) == []
        assert (calling.running, calling.pending) == ({"ns/flaky": "c1-1"}, {"ns/waiting": "WaitingForQuota"})
        assert calling.recovered_from == 0 and calling.batches >= 1
        restarted = CallingPort()
        await drain(Actuator(api_log, restarted, topics=TOPICS))
        assert restarted.recovered_from == 8  # every decision before the committed position
    finally:
        api_log.close()


def test_a_port_that_never_suspends_is_stepped_without_an_event_loop(log: SqliteLog) -> None:
    write(log, *HISTORY)
    sim = Actuator(log, RefusingSimPort(), topics=TOPICS)
    while sim.step_now():
        pass
    assert reports(log) == WANT_REPORTS


def test_a_port_that_suspends_cannot_be_stepped_without_one(log: SqliteLog) -> None:
    write(log, *HISTORY)
    with pytest.raises(RuntimeError, match="only a port that never waits can be stepped synchronously"):
        Actuator(log, CallingPort(), topics=TOPICS).step_now()
    assert log.position(GROUP, TOPICS.decisions) == 0


@pytest.mark.parametrize("make", list(PORTS.values()), ids=list(PORTS))
async def test_status_news_is_written_in_line_retried_and_never_reported(log: SqliteLog,
                                                                         make: Callable[[], ActuationPort]) -> None:
    port = make()
    write(log, admit(0, 0, "good"), status(0, 1, "flaky"), status(0, 2, "bad"), status(0, 1, "flaky"),
          status(0, 3, "good"), done(0, 4))
    actuator = Actuator(log, port, topics=TOPICS)
    await drain(actuator)
    # Status is not an order: the scheduler hears only of the admission.
    assert reports(log) == [("actuator:c1:c0-0", "DecisionApplied", "c0-0", "", None)]
    s = actuator.stats
    assert (s.started, s.statuses, s.retries, s.failed, s.duplicates) == (1, 2, 1, 1, 1)
    if isinstance(port, CallingPort) and port.tuning.concurrency == 1:
        assert port.statuses == ["c0-1", "c0-3"]  # flaky's write retried before the ones after it: order kept
    elif isinstance(port, CallingPort):  # workloads at once: good's write may go first, and again after the cut
        assert port.statuses.count("c0-1") == 1 and set(port.statuses) == {"c0-1", "c0-3"}
    assert actuator.log.position(GROUP, TOPICS.decisions) == 6


async def test_only_a_workloads_last_pending_mark_in_a_batch_is_written(log: SqliteLog) -> None:
    """A behind actuator reads several cycles' marks at once: each workload's last one is written,
    the others are counted as coalesced; an admission in between is applied as always."""
    calls: list[str] = []

    class Counting(CallingPort):
        async def mark_pending(self, decision: MarkPending) -> None:
            calls.append(decision.id)
            await super().mark_pending(decision)

    write(log, pending(0, 0, "a"), pending(0, 1, "b"), done(0, 2), pending(1, 0, "a"), admit(1, 1, "c"),
          done(1, 2), pending(2, 0, "a"), done(2, 1))
    actuator = Actuator(log, Counting(), topics=TOPICS)
    await drain(actuator)
    assert calls == ["c0-1", "c2-0"]
    assert actuator.stats.coalesced == 2 and actuator.stats.started == 1
    assert log.position(GROUP, TOPICS.decisions) == 8


async def test_marks_in_separate_batches_are_each_written(log: SqliteLog) -> None:
    calls: list[str] = []

    class Counting(CallingPort):
        async def mark_pending(self, decision: MarkPending) -> None:
            calls.append(decision.id)
            await super().mark_pending(decision)

    port = Counting(tuning=Tuning(batch_size=2, max_attempts=3))
    write(log, pending(0, 0, "a"), done(0, 1), pending(1, 0, "a"), done(1, 1))
    await drain(Actuator(log, port, topics=TOPICS))
    assert calls == ["c0-0", "c1-0"]


@dataclass
class SlowPort(CallingPort):
    """A :class:`CallingPort` whose calls take a few turns of the event loop (more for some
    workloads), recording each workload's calls in the order they finish and the calls in flight."""

    turns: dict[str, int] = field(default_factory=dict)
    done: dict[str, list[str]] = field(default_factory=dict)
    in_flight: int = 0
    most_in_flight: int = 0

    async def _call(self, name: str) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(self.turns.get(name, 1)):
                await asyncio.sleep(0)
            await super()._call(name)
        finally:
            self.in_flight -= 1

    async def start(self, decision: AdmitWorkload) -> Sequence[Staged]:
        out = await super().start(decision)
        self.done.setdefault(decision.name, []).append(decision.id)
        return out

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        out = await super().stop(decision)
        self.done.setdefault(decision.name, []).append(decision.id)
        return out


async def test_workloads_are_applied_at_once_each_in_log_order(log: SqliteLog) -> None:
    """The first decision of ``slow`` takes longest: the other workloads' go ahead meanwhile, but
    ``slow``'s later decisions wait for it; never more calls in flight than ``concurrency``."""
    names = ["slow", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
    records: list[AnyDecision] = [admit(0, i, n) for i, n in enumerate(names)]
    records += [done(0, len(names)), evict(1, 0, "slow"), evict(1, 1, "a"), admit(1, 2, "slow"), done(1, 3)]
    write(log, *records)
    port = SlowPort(tuning=Tuning(batch_size=100, max_attempts=3, concurrency=4), turns={"slow": 50})
    actuator = Actuator(log, port, topics=TOPICS)
    await drain(actuator)
    assert port.done["slow"] == ["c0-0", "c1-0", "c1-2"] and port.done["a"] == ["c0-1", "c1-1"]
    assert port.most_in_flight == 4
    # Reports in log order, each once, in one commit.
    assert [r[2] for r in reports(log)] == [f"c0-{i}" for i in range(len(names))] + ["c1-0", "c1-1", "c1-2"]
    assert (actuator.stats.started, actuator.stats.stopped) == (len(names) + 1, 2)
    assert log.position(GROUP, TOPICS.decisions) == log.end_offset(TOPICS.decisions)


async def test_a_failure_in_the_middle_of_a_concurrent_batch_cuts_it_there(log: SqliteLog, tmp_path: Path) -> None:
    """``flaky`` fails its first attempt while the workloads around it are applied: the commit
    takes only what comes before it in the log; what came after and was applied meanwhile is
    reported once, with the retry, in the next step; ``bad`` is reported failed and the line moves on."""
    write(log, admit(0, 0, "a"), admit(0, 1, "bad"), admit(0, 2, "flaky"), admit(0, 3, "b"), evict(0, 4, "a"),
          done(0, 5))
    port = SlowPort(tuning=CONCURRENT, turns={"a": 1, "bad": 1, "flaky": 5, "b": 1})
    actuator = Actuator(log, port, topics=TOPICS)
    assert await actuator.step() == 2 + 1  # two committed, a retry due
    assert log.position(GROUP, TOPICS.decisions) == 2
    assert [r[2] for r in reports(log)] == ["c0-0", "c0-1"]
    assert port.done["b"] == ["c0-3"] and port.done["a"] == ["c0-0", "c0-4"]  # applied, not committed
    assert (actuator.stats.started, actuator.stats.stopped, actuator.stats.failed) == (1, 0, 1)

    # A crash now: a restarted actuator applies the rest again (idempotent) and reports each once.
    restarted = Actuator(log, SlowPort(tuning=CONCURRENT), topics=TOPICS)
    await drain(restarted)
    assert reports(log) == [
        ("actuator:c1:c0-0", "DecisionApplied", "c0-0", "", None),
        ("actuator:c1:c0-1:failed", "ActuationFailed", "c0-1", "ns/bad: forbidden", False),
        ("actuator:c1:c0-2", "DecisionApplied", "c0-2", "", None),
        ("actuator:c1:c0-3", "DecisionApplied", "c0-3", "", None),
        ("actuator:c1:c0-4", "DecisionApplied", "c0-4", "", None),
    ]
    assert log.position(GROUP, TOPICS.decisions) == log.end_offset(TOPICS.decisions)

    # Without the crash, the same actuator goes on from the cut just as well.
    other = SqliteLog(tmp_path / "other")
    try:
        write(other, admit(0, 0, "a"), admit(0, 1, "bad"), admit(0, 2, "flaky"), admit(0, 3, "b"),
              evict(0, 4, "a"), done(0, 5))
        same = Actuator(other, SlowPort(tuning=CONCURRENT, turns={"flaky": 5}), topics=TOPICS)
        await drain(same)
        assert [r[2] for r in reports(other)] == ["c0-0", "c0-1", "c0-2", "c0-3", "c0-4"]
        assert (same.stats.started, same.stats.stopped, same.stats.failed, same.stats.retries) == (3, 1, 1, 1)
    finally:
        other.close()
