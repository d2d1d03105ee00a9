"""A read-only follower of the scheduler's log: the state the scheduler had after its last
recorded cycle, kept current as new cycles are committed.

Any number of followers may run beside the scheduler (on the embedded log or Kafka, on any
replica): they write nothing. A follower starts from the newest snapshot, then applies each
recorded cycle to the state folded up to the input offset that cycle ran at (as replay does);
it never folds past the last recorded cycle, so the state is always one the scheduler really
had. A cycle whose decision records cannot be read is decided again, as replay does.
"""

from __future__ import annotations

from collections.abc import Callable

from events.codec import MalformedRecord, UnknownEventType, decode_decision
from events.envelope import Topics
from events.messages import AnyDecision, CycleCompleted
from services.core.state import State
from services.runtime.log import Log
from services.scheduler.service import RecordedCycle, Scheduler, bulk_fold


class Follower:
    def __init__(self, log: Log, topics: Topics | None = None, *, until_input: int | None = None) -> None:
        """``until_input``: stop before the first cycle computed after that input offset."""
        self.log = log
        self.until_input = until_input
        self.topics = topics or Topics()
        self._sched = Scheduler(log, self.topics, batch_size=20_000)
        self._started = False
        self.decisions_offset = 0  # the next decision record to read: after the last whole cycle

    @property
    def state(self) -> State:
        return self._sched.state

    @property
    def input_offset(self) -> int:
        return self._sched.next_input

    def advance(self, on_cycle: Callable[[State], None] | None = None,
                max_records: int = 50_000) -> list[AnyDecision]:
        """Apply the cycles committed since the last call (at most about ``max_records`` decision
        records); returns their decisions, in order."""
        if not self._started:
            self._started = True
            with bulk_fold():
                self.decisions_offset = self._sched.load_newest_snapshot(until_input=self.until_input)
        out: list[AnyDecision] = []
        pending: list[AnyDecision] = []
        raw: list[bytes] = []
        unreadable: list[str] = []
        offset = self.decisions_offset
        read = 0
        while read < max_records and (batch := self.log.read_values(self.topics.decisions, offset, 5000)):
            for off, value in batch:
                read += 1
                try:
                    d = decode_decision(value)
                except (MalformedRecord, UnknownEventType) as e:
                    unreadable.append(f"offset {off}: {e}")
                    continue
                if not isinstance(d, CycleCompleted):
                    pending.append(d)
                    raw.append(value)
                    continue
                if self.until_input is not None and d.input_offset > self.until_input:
                    return out
                if d.cycle > self.state.cycles:
                    self._apply(RecordedCycle(d, raw, pending, unreadable))
                    out.extend(pending)
                    if on_cycle is not None:
                        on_cycle(self.state)
                pending, raw, unreadable = [], [], []
                self.decisions_offset = off + 1
            offset = batch[-1][0] + 1
        return out

    def catch_up(self) -> None:
        """Apply every cycle recorded so far."""
        while True:
            before = self.decisions_offset
            self.advance()
            if self.decisions_offset == before:
                return

    def _apply(self, cycle: RecordedCycle) -> None:
        self._sched.fold_until(cycle.record.input_offset)
        if cycle.unreadable:
            self._sched.cycle()  # the same state and input decide the same again
        else:
            self._sched.apply_recorded(cycle)
