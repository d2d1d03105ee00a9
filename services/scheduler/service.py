"""The scheduler service: the single writer that folds cluster events into decisions.

Loop: read a batch of cluster events from the committed position (a live
service: every batch already waiting, up to ``BACKLOG_PER_STEP`` events), fold each
(malformed records go to the dead-letter topic with the reason; an unknown
event type stops the service, since skipping a fact would corrupt the state),
run scheduling cycles until nothing changes, then commit — decisions, one
``CycleCompleted`` record per cycle (with the input offset it was computed at)
and the new input position — in one transaction. A crash therefore never loses
or doubles a decision. A live service on Kafka lets that transaction commit on the
client's I/O thread while it reads and decides the next batch, and waits for it
before committing the next: one transaction in flight at most, in order, and a
failed one stops the next from committing (the service rebuilds from the log).

Start-up is replay: the newest snapshot (one in this version's format; without
one, the log from its start), then the recorded cycles after it are re-run at
their input offsets (they must reproduce the recorded decisions), then live
processing continues. ``replay --verify`` uses the same machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope, encode
from events.envelope import Topics
from events.messages import (
    ActuationFailed,
    AdmitWorkload,
    AnyDecision,
    CycleCompleted,
    DecisionApplied,
    EvictWorkload,
    PodsNotReady,
    PodsReady,
)
from events.shardmap import TreeReleased
from events.validation import event_problem
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.orbit import ScanOrbit
from services.core.placement import route
from services.core.snapshot import FORMAT as SNAPSHOT_FORMAT
from services.core.snapshot import READABLE_FORMATS, pack_state, unpack_state
from services.core.state import State
from services.runtime.log import Log, Outcome, Record, begin_transaction, read_backwards
from services.runtime.shards import hand_over_topic

GROUP = "scheduler"
# Events that cannot change what a cycle decides; readiness does too while waitForPodsReady is on
# (blockAdmission waits for it; a loss of readiness starts a recovery timeout).
NO_SCHEDULING_EFFECT = (DecisionApplied, ActuationFailed)
READINESS = (PodsReady, PodsNotReady)
MAX_CYCLES_PER_BATCH = 1000
# A step ends after this many heads, commits, and folds what arrived meanwhile: with saturated
# queues every release of quota sends a cohort's parked workloads back, and retrying them one head
# per ClusterQueue per cycle can take hundreds of cycles; a finish that arrives during them should
# not wait for the last one (Kueue's own loop sees new events between any two cycles).
MAX_HEADS_PER_STEP = 2000
# A sweep in which no cycle admits or evicts ends the step sooner, after this many heads: it only
# parks workloads that do not fit, and the finish that would let one in is likely waiting to be
# folded. Each quota release sends the cohort's parked workloads back, so a long sweep is mostly
# undone by the next step anyway; reading in between lets that release in within milliseconds.
MAX_IDLE_HEADS_PER_STEP = 100
# A live step folds every event already waiting (read ``batch_size`` at a time, up to this many)
# before its cycles. Kueue's informers bring its cache up to date between any two cycles; a
# scheduler that fell behind and ran cycles after every 1,000 events would decide on a state that
# is already stale, and spend a whole cycle over every ClusterQueue for each thousand (Kueue's
# large-scale scenario: 681 s through Kafka with a cycle per 1,000 events, 35 s folding the backlog).
BACKLOG_PER_STEP = 50_000
SNAPSHOT_EVENTS_PER_WORKLOAD = 4  # see Scheduler.snapshot_per_workload


class SchedulerStopped(RuntimeError):
    """The scheduler cannot go on without losing a fact (an unknown event type)."""


class ReplayMismatch(RuntimeError):
    pass


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    input_offset: int  # every cluster event below this offset is folded
    decisions_offset: int  # every decision record below this offset is reflected (later ones may be too:
    # replay skips recorded cycles numbered at or below ``cycles``)
    cycles: int
    state: msgspec.Raw
    format: int = 1  # how ``state`` is encoded (``snapshot.FORMAT``); snapshots before the field are 1


@dataclass(frozen=True, slots=True)
class RecordedCycle:
    record: CycleCompleted
    raw: list[bytes]  # its decisions as written
    decisions: list[AnyDecision]  # and decoded
    unreadable: list[str] = field(default_factory=list)  # "offset N: why" for records that did not decode


@dataclass
class Stats:
    events: int = 0
    dead_letters: int = 0
    cycles: int = 0
    decisions: int = 0
    batches: int = 0
    unreadable_decisions: int = 0  # decision records that did not decode; their cycles were re-run
    unreadable_snapshots: int = 0  # passed over: snapshots are only a cache


@dataclass
class Scheduler:
    """The scheduler's state machine over a log; no asyncio here, so tests can drive it step by step."""

    log: Log
    topics: Topics = field(default_factory=Topics)
    batch_size: int = 1000
    snapshot_every: int = 50_000  # cluster events between snapshots
    # ... and at least this many per workload the state holds (a live runner sets
    # SNAPSHOT_EVENTS_PER_WORKLOAD): a snapshot's cost grows with the state, so with 50,000 workloads
    # one every 50,000 events cost as much as folding those events; spacing them by the state's size
    # keeps that share bounded, and a restart replays at most that many events more.
    snapshot_per_workload: int = 0
    max_heads_per_step: int = MAX_HEADS_PER_STEP
    max_idle_heads_per_step: int = MAX_IDLE_HEADS_PER_STEP
    # Live services end a step early (head budget, or a sweep after admissions) to fold what
    # arrived meanwhile. A deterministic driver runs each batch's cycles until quiet instead, so
    # that its decisions do not depend on how a log backend happens to chunk its reads.
    cut_short_steps: bool = True
    # Events a step may fold before its cycles: more than ``batch_size`` only while more are
    # waiting (a live runner sets ``BACKLOG_PER_STEP``; tests drive one read per step).
    backlog_per_step: int = 0
    # A live runner's step commits in the background (a log that can: Kafka) while the next one
    # reads and decides; each step waits for the one before to commit before it begins its own.
    commit_in_background: bool = False
    last_events: int = 0  # cluster events the last step read (0 for a step that only went on)
    state: State = field(default_factory=State)
    next_input: int = 0
    stats: Stats = field(default_factory=Stats)
    # What the last live step wrote (for metrics; recovery and replay leave them alone).
    last_decisions: list[AnyDecision] = field(default_factory=list)
    last_cycles: list[CycleCompleted] = field(default_factory=list)
    _since_snapshot: int = 0
    _needs_cycle: bool = True  # until a cycle has been quiet (also after a restart: one cycle to be sure)
    _cut_short: bool = False  # the last step stopped its cycles at the head budget: go on without new events
    _ran: tuple[list[AnyDecision], list[CycleCompleted]] = field(default_factory=lambda: ([], []))
    _orbit: ScanOrbit = field(default_factory=ScanOrbit)  # flavor scans going round in a circle
    _unsettled: Outcome | None = None  # the last step's transaction, still committing

    # --- folding -----------------------------------------------------------------------

    def fold_record(self, rec: Record) -> tuple[str, bytes] | None:
        """Fold one cluster event; returns a dead letter for a malformed one."""
        return self.fold_value(rec.offset, rec.value, rec.key)

    def fold_value(self, offset: int, value: bytes, key: str = "") -> tuple[str, bytes] | None:
        try:
            env = decode_envelope(value)
        except UnknownEventType as e:
            raise SchedulerStopped(f"cluster-events offset {offset}: {e}") from e
        except MalformedRecord as e:
            return self._dead_letter(offset, value, key, str(e))
        # Held to the limits a manifest is held to, before it can touch the state.
        problem = event_problem(env.event, self.state.cohorts)
        if problem is not None:
            return self._dead_letter(offset, value, key, problem)
        route(self.state, env.cluster, env.event)  # a worker cluster's events fold into its view
        self.stats.events += 1
        if not isinstance(env.event, NO_SCHEDULING_EFFECT) and (
                self.state.config.wait_for_pods_ready or not isinstance(env.event, READINESS)):
            self._needs_cycle = True
            self._orbit.reset()
        return None

    def _dead_letter(self, offset: int, value: bytes, key: str, reason: str) -> tuple[str, bytes]:
        self.stats.dead_letters += 1
        return key, encode({"topic": self.topics.cluster_events, "offset": offset, "reason": reason,
                            "value": value.decode("utf-8", "replace")})

    def fold_until(self, offset: int) -> list[tuple[str, bytes]]:
        """Fold cluster events up to (not including) ``offset``; returns dead letters."""
        dead: list[tuple[str, bytes]] = []
        while self.next_input < offset:
            batch = self.log.read_values(self.topics.cluster_events, self.next_input,
                                         min(self.batch_size, offset - self.next_input))
            batch = [(off, value) for off, value in batch if off < offset]  # offsets may have gaps
            if not batch:
                if self.log.end_offset(self.topics.cluster_events) >= offset:
                    self.next_input = offset  # only control records (transaction markers) are left below it
                    break
                raise ReplayMismatch(f"cluster-events ends at {self.next_input}, expected records up to {offset}")
            for off, value in batch:
                letter = self.fold_value(off, value)
                if letter is not None:
                    dead.append(letter)
            self.next_input = batch[-1][0] + 1
        return dead

    # --- cycles ------------------------------------------------------------------------

    def cycle(self) -> tuple[list[AnyDecision], CycleCompleted, bool]:
        """One cycle at the current input offset: (decisions, its record, whether it changed anything)."""
        result = run_cycle(self.state)
        record = CycleCompleted(cycle=self.state.cycles, input_offset=self.next_input, time=self.state.now,
                                decisions=len(result.decisions), admitted_heads=tuple(result.admitted_heads),
                                heads=tuple(result.heads))
        self.stats.cycles += 1
        self.stats.decisions += len(result.decisions)
        return result.decisions, record, self._orbit.progressed(result)

    def cycles_until_quiet(self) -> list[tuple[str, bytes]]:
        """Cycles until one changes nothing, or until ``max_heads_per_step`` heads were nominated
        (the next step goes on); none at all when nothing that could change a decision happened
        since the last quiet cycle (a quiet cycle is a fixed point: running it again would decide
        the same, write nothing and change nothing). Each record comes with its key: the
        workload for a decision, ``cycle`` for a cycle's record."""
        out: list[tuple[str, bytes]] = []
        self._ran = ([], [])
        if not self._needs_cycle:
            return out
        heads = idle = 0  # heads nominated in this step; of them, since the last cycle that acted
        acted = False  # something was admitted or evicted in this step
        self._cut_short = True
        for _ in range(MAX_CYCLES_PER_BATCH):
            decisions, record, changed = self.cycle()
            out.extend((f"{d.namespace}/{d.name}", encode(d)) for d in decisions)
            out.append(("cycle", encode(record)))
            self._ran[0].extend(decisions)
            self._ran[1].append(record)
            if not changed:
                self._needs_cycle = self._cut_short = False
                break
            if not self.cut_short_steps:
                continue
            nominated = len(record.heads) + len(record.admitted_heads)
            heads += nominated
            if heads >= self.max_heads_per_step:
                break
            acts = any(isinstance(d, AdmitWorkload | EvictWorkload) for d in decisions)
            if acted and not acts:
                break
            idle = 0 if acts else idle + nominated
            if idle >= self.max_idle_heads_per_step:
                break
            acted = acted or acts
        return out

    # --- the live step -----------------------------------------------------------------

    def step(self) -> int:
        """Read one batch (and, up to ``backlog_per_step``, the backlog behind it), fold it, run
        cycles, commit everything at once. Returns the events read,
        or, when none arrived but the last step's cycles were cut short, the cycles run; 0 when
        there was nothing to do."""
        dead: list[tuple[str, bytes]] = []
        events = self._fold_waiting(dead)
        if not events and not self._cut_short:
            return 0
        self.last_events = events
        decisions = self.cycles_until_quiet()
        appends: dict[str, list[tuple[str, bytes]]] = {self.topics.decisions: decisions}
        if dead:
            appends[self.topics.dead_letters] = dead
        if self.state.released:  # trees handed over in this batch: their state, with the commit
            appends[hand_over_topic(self.topics)] = [
                (handover, encode(TreeReleased(handover=handover, state=msgspec.Raw(part))))
                for handover, part in self.state.released]
            self.state.released.clear()
        self._since_snapshot += events
        self.settle()  # the step before commits first (and the snapshot below reads where it ended)
        if self._since_snapshot >= max(self.snapshot_every, self.snapshot_per_workload * len(self.state.workloads)):
            # The snapshot reflects this batch's cycles too. Where they will land is not known before
            # the commit (a Kafka log puts control records between transactions), so the snapshot
            # records where they start at the earliest, and replay skips cycles it already holds.
            decisions_start = self.log.end_offset(self.topics.decisions)
            appends[self.topics.snapshots] = [("scheduler", self._snapshot(decisions_start))]
            self._since_snapshot = 0
        commits = {(GROUP, self.topics.cluster_events): self.next_input}
        if self.commit_in_background:
            self._unsettled = begin_transaction(self.log, appends, commits)
        else:
            self.log.transact(appends, commits)
        self.stats.batches += 1
        self.last_decisions, self.last_cycles = self._ran
        return events or len(self._ran[1])

    def settle(self) -> None:
        """Wait until the last step's transaction has committed; a LogError if it failed (the
        state is then ahead of the log, and the runner rebuilds it)."""
        outcome, self._unsettled = self._unsettled, None
        if outcome is not None:
            outcome()

    def _fold_waiting(self, dead: list[tuple[str, bytes]]) -> int:
        """Fold one read of cluster events and, while reads come back full (a backlog: at a steady
        trickle a read is short, and the step must not chase events as they arrive), more, up to
        ``backlog_per_step``; malformed ones become ``dead`` letters. Returns the events read."""
        events = 0
        while True:
            batch = self.log.read(self.topics.cluster_events, self.next_input, self.batch_size)
            for rec in batch:
                letter = self.fold_record(rec)
                if letter is not None:
                    dead.append(letter)
            if batch:
                self.next_input = batch[-1].offset + 1
            events += len(batch)
            if len(batch) < self.batch_size or events >= self.backlog_per_step:
                return events

    def _snapshot(self, decisions_offset: int) -> bytes:
        return encode(Snapshot(input_offset=self.next_input, decisions_offset=decisions_offset,
                               cycles=self.state.cycles, state=msgspec.Raw(pack_state(self.state)),
                               format=SNAPSHOT_FORMAT))

    def write_snapshot(self) -> None:
        """A snapshot of the state at the committed position (e.g. on a clean shutdown)."""
        end = self.log.end_offset(self.topics.decisions)
        self.log.append(self.topics.snapshots, [("scheduler", self._snapshot(end))])
        self._since_snapshot = 0

    # --- recovery / replay -------------------------------------------------------------

    def load_newest_snapshot(self, *, until_input: int | None = None) -> int:
        """Load the newest snapshot (at or before ``until_input``) in this version's format; returns
        the decisions offset to resume at, 0 when there is none (the log is then replayed from its start).
        A snapshot in another format is passed over: snapshots are only a cache of the log."""
        for rec in read_backwards(self.log, self.topics.snapshots, self.log.end_offset(self.topics.snapshots),
                                  chunk=4):
            try:
                snap = msgspec.json.decode(rec.value, type=Snapshot)
                if snap.format not in READABLE_FORMATS or (until_input is not None
                                                           and snap.input_offset > until_input):
                    continue
                state = unpack_state(bytes(snap.state), snap.format)
            except (msgspec.DecodeError, ValueError, RecursionError):
                self.stats.unreadable_snapshots += 1  # a damaged cache: the next older one, or the log
                continue
            self.state = state
            self.next_input = snap.input_offset
            return snap.decisions_offset
        return 0

    def apply_recorded(self, cycle: RecordedCycle) -> None:
        """Apply a recorded cycle (its decisions and head outcomes) instead of running it."""
        apply_cycle(self.state, cycle.decisions, cycle.record)
        self.stats.cycles += 1
        self.stats.decisions += len(cycle.decisions)

    def recorded_cycles(self, start: int) -> Iterator[RecordedCycle]:
        """Recorded cycles from decisions offset ``start``, each with its decisions (decoded, and as bytes)."""
        raw: list[bytes] = []
        decisions: list[AnyDecision] = []
        unreadable: list[str] = []
        offset = start
        while True:
            batch = self.log.read_values(self.topics.decisions, offset, 5000)
            if not batch:
                return
            for off, value in batch:
                try:
                    d = decode_decision(value)
                except (MalformedRecord, UnknownEventType) as e:
                    # Decisions are derived: the cycle this record belonged to is re-run, not applied.
                    unreadable.append(f"offset {off}: {e}")
                    continue
                if isinstance(d, CycleCompleted):
                    yield RecordedCycle(d, raw, decisions, unreadable)
                    raw, decisions, unreadable = [], [], []
                else:
                    raw.append(value)
                    decisions.append(d)
            offset = batch[-1][0] + 1

    def replay(self, start: int, *, verify: bool, until_input: int | None = None,
               on_cycle: Callable[[], None] | None = None) -> Iterator[tuple[int, str]]:
        """Apply (or with ``verify`` re-run and compare) the recorded cycles from decisions offset
        ``start``; yields (cycle, what differs) for every mismatch."""
        for recorded_cycle in self.recorded_cycles(start):
            record, recorded = recorded_cycle.record, recorded_cycle.raw
            if record.cycle <= self.state.cycles:
                continue  # already in the snapshot the state was loaded from
            if until_input is not None and record.input_offset > until_input:
                break
            self.fold_until(record.input_offset)
            if recorded_cycle.unreadable:
                self.stats.unreadable_decisions += len(recorded_cycle.unreadable)
                if verify:
                    yield record.cycle, f"unreadable decision record(s) {'; '.join(recorded_cycle.unreadable)}"
            if not verify and not recorded_cycle.unreadable:
                self.apply_recorded(recorded_cycle)
            elif not verify:
                self.cycle()  # what the damaged records said, the cycle decides again (same state, same input)
            else:
                decisions, again, _ = self.cycle()
                derived = [encode(d) for d in decisions]
                if derived != recorded:
                    yield record.cycle, first_difference(recorded, derived)
                elif again != record:
                    yield record.cycle, f"the cycle record differs: recorded {record} but re-derived {again}"
            if on_cycle is not None:
                on_cycle()

    def recover(self, *, verify: bool = False) -> None:
        """Start-up: newest snapshot, then the recorded tail (applied, or re-run and compared with
        ``verify``), then the committed input position."""
        with bulk_fold():
            start = self.load_newest_snapshot()
            for cycle, problem in self.replay(start, verify=verify):
                raise ReplayMismatch(f"cycle {cycle} does not reproduce its recorded decisions: {problem}")
            committed = self.log.position(GROUP, self.topics.cluster_events)
            self.fold_until(committed)
        self.state.released.clear()  # written with the commit of the batch that folded them

    # --- asyncio shell -----------------------------------------------------------------

    async def run(self, stop: asyncio.Event, *, idle_seconds: float = 0.02) -> None:
        while not stop.is_set():
            if self.step() == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), idle_seconds)


@contextlib.contextmanager
def bulk_fold() -> Iterator[None]:
    """Folding a long log builds a large, long-lived heap of acyclic objects; Python's cyclic
    collector would walk it again and again (a third of a replay's time). Pause it while folding;
    afterwards Python's own rule (a full collection only once the long-lived heap grew by a
    quarter) keeps it from walking the state often."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def first_difference(recorded: list[bytes], derived: list[bytes]) -> str:
    for i, (a, b) in enumerate(zip(recorded, derived, strict=False)):
        if a != b:
            return f"decision {i}: recorded {a.decode()[:300]} but derived {b.decode()[:300]}"
    return f"recorded {len(recorded)} decisions but derived {len(derived)}"
