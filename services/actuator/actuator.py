"""The actuator: applies the scheduler's decisions to a cluster, each exactly once.

It consumes the decisions topic (consumer group ``actuator``), ignores what is
not an order for a cluster (``MarkPending``, ``CycleCompleted``), and hands
``AdmitWorkload`` to its port's ``start`` and ``EvictWorkload`` to ``stop``.
The outcome goes back to cluster-events as ``DecisionApplied`` — or
``ActuationFailed`` (with ``retriable``) when the port refuses — so the
scheduler learns of it the same way as of everything else.

The port (:class:`ActuationPort`) is where the cluster is. It returns the log
records that carry the actuation, and the actuator commits them together with
its reports and its consumer position in ONE ``Log.transact``: for the
simulated cluster, whose API server is a log topic, that makes each decision
applied exactly once, whatever crashes when. A port for a real API server
performs its (idempotent) calls and returns no records; a crash between the
call and the commit then repeats the call, which changes nothing.

Dedup by decision id. Decisions arrive in log order and a decision id belongs
to one cycle; cycles only grow. So "already applied" is decided by a small
watermark — the newest cycle seen, whether its ``CycleCompleted`` was seen, and
the ids applied in it — rather than an ever-growing set, and the watermark is
recovered from the records just before the committed position.

Durations are not the actuator's business: how long a workload runs is a
property of the cluster that runs it, so the simulated cluster looks it up
(``services.simcluster.durations``); the actuator passes on what the decision
says (namespace/name and admission).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import structlog

from events.codec import MalformedRecord, UnknownEventType, decode_decision, encode, peek_decision
from events.envelope import Envelope, Topics, event_key
from events.messages import (
    ActuationFailed,
    AdmitWorkload,
    CycleCompleted,
    DecisionApplied,
    EvictWorkload,
    MarkPending,
)
from events.simcluster import StartWorkload, StopWorkload, sim_cluster_topic
from services.runtime.log import Log, Record, read_backwards

GROUP: Final = "actuator"
SOURCE: Final = "actuator"

_log = structlog.get_logger(__name__)

Staged = tuple[str, str, bytes]
"""(topic, key, value): a record a port wants committed with the decision it carries out."""


class ActuationError(Exception):
    """The port could not apply a decision; ``retriable`` says whether trying again may help."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class ActuationPort(Protocol):
    """Where decisions take effect. Each method either returns the records that carry the
    actuation (committed atomically with the actuator's position), or performs an idempotent
    call itself and returns none; it raises :class:`ActuationError` when it cannot."""

    @property
    def cluster(self) -> str: ...

    def start(self, decision: AdmitWorkload) -> Sequence[Staged]: ...

    def stop(self, decision: EvictWorkload) -> Sequence[Staged]: ...


@dataclass(frozen=True)
class SimClusterPort:
    """The simulated cluster's port: a command record on the sim-cluster topic."""

    topics: Topics = field(default_factory=Topics)
    cluster_name: str = "sim"

    @property
    def cluster(self) -> str:
        return self.cluster_name

    def start(self, decision: AdmitWorkload) -> Sequence[Staged]:
        cmd = StartWorkload(time=decision.time, cluster=self.cluster_name, decision_id=decision.id,
                            namespace=decision.namespace, name=decision.name, admission=decision.admission)
        return [(sim_cluster_topic(self.topics), f"{decision.namespace}/{decision.name}", encode(cmd))]

    def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        cmd = StopWorkload(time=decision.time, cluster=self.cluster_name, decision_id=decision.id,
                           namespace=decision.namespace, name=decision.name, reason=decision.reason)
        return [(sim_cluster_topic(self.topics), f"{decision.namespace}/{decision.name}", encode(cmd))]


@dataclass
class Watermark:
    """Which decisions are already applied, given that they arrive in (cycle, log) order."""

    cycle: int = -1
    closed: bool = False  # the cycle's CycleCompleted was seen: all of it is behind us
    ids: set[str] = field(default_factory=set)

    def applied(self, d: AdmitWorkload | EvictWorkload | MarkPending) -> bool:
        return d.cycle < self.cycle or (d.cycle == self.cycle and (self.closed or d.id in self.ids))

    def note(self, d: AdmitWorkload | EvictWorkload | MarkPending) -> None:
        if d.cycle > self.cycle:
            self.cycle, self.closed, self.ids = d.cycle, False, set()
        self.ids.add(d.id)

    def close(self, c: CycleCompleted) -> None:
        self.close_cycle(c.cycle)

    def close_cycle(self, cycle: int) -> None:
        if cycle >= self.cycle:
            self.cycle, self.closed, self.ids = cycle, True, set()

    @classmethod
    def recovered(cls, log: Log, topic: str, position: int,
                  decode: Callable[[Record], AdmitWorkload | EvictWorkload | MarkPending | CycleCompleted | None],
                  ) -> Watermark:
        """The watermark of a consumer committed at ``position``: walk back over the tail of the
        last cycle before it (a batch may end mid-cycle)."""
        mark = cls()
        tail: list[AdmitWorkload | EvictWorkload | MarkPending] = []
        for rec in read_backwards(log, topic, position):
            d = decode(rec)
            if isinstance(d, CycleCompleted):
                mark.close(d)
                break
            if d is not None:
                if tail and d.cycle != tail[-1].cycle:
                    break
                tail.append(d)
        for d in reversed(tail):
            if d.cycle >= mark.cycle:
                mark.note(d)
        return mark


@dataclass
class Stats:
    started: int = 0
    stopped: int = 0
    ignored: int = 0
    duplicates: int = 0
    failed: int = 0
    retries: int = 0
    skipped: int = 0  # undecodable decision records


@dataclass
class _Batch:
    appends: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)

    def add(self, topic: str, key: str, value: bytes) -> None:
        self.appends.setdefault(topic, []).append((key, value))


class Actuator:
    """The actuator's state machine over a log; synchronous so it can be stepped deterministically."""

    def __init__(self, log: Log, port: ActuationPort, *, topics: Topics | None = None, batch_size: int = 5000,
                 max_attempts: int = 5) -> None:
        self.log = log
        self.port = port
        self.topics = topics or Topics()
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.next_offset = 0
        self.watermark = Watermark()
        self.stats = Stats()
        self._attempts: dict[str, int] = {}
        self._stale = True

    def recover(self) -> None:
        """Resume at the committed position; rebuild the watermark from the records before it."""
        self.next_offset = self.log.position(GROUP, self.topics.decisions)
        self.watermark = Watermark.recovered(self.log, self.topics.decisions, self.next_offset, self._decode)
        self._attempts = {}
        self._stale = False

    def step(self) -> int:
        """Apply one batch of decisions and commit it; returns the number of records consumed."""
        if self._stale:
            self.recover()
        batch = self.log.read(self.topics.decisions, self.next_offset, self.batch_size)
        if not batch:
            return 0
        out = _Batch()
        consumed, retry = 0, 0
        for rec in batch:
            if not self._apply(rec, out):
                retry = 1  # a retriable failure: commit what came before, try this one again next step
                break
            consumed += 1
        if consumed:
            self.next_offset = batch[consumed - 1].offset + 1  # offsets may have gaps
            try:
                self.log.transact(out.appends, {(GROUP, self.topics.decisions): self.next_offset})
            except BaseException:
                self._stale = True  # the watermark got ahead of the log: rebuild it
                raise
        # A pending retry is work still to do, so a driver waiting for quiet keeps stepping.
        return consumed + retry

    def _apply(self, rec: Record, out: _Batch) -> bool:
        """Carry out one decision record into ``out``; False to stop the batch before it."""
        # Most records are cycle records and pending notes, which order nothing: their tag and
        # cycle are enough, so they are not decoded in full.
        peek = peek_decision(rec.value)
        if peek.type == "cycle" and peek.cycle >= 0:
            self.watermark.close_cycle(peek.cycle)
            return True
        if peek.type == "pending":
            self.stats.ignored += 1
            return True
        d = self._decode(rec)
        if d is None:
            return True
        if isinstance(d, CycleCompleted):
            self.watermark.close(d)
            return True
        if isinstance(d, MarkPending):
            self.stats.ignored += 1
            return True
        if self.watermark.applied(d):
            self.stats.duplicates += 1
            return True
        try:
            staged = self.port.start(d) if isinstance(d, AdmitWorkload) else self.port.stop(d)
        except ActuationError as e:
            attempts = self._attempts.get(d.id, 0) + 1
            if e.retriable and attempts < self.max_attempts:
                self._attempts[d.id] = attempts
                self.stats.retries += 1
                return False
            self._attempts.pop(d.id, None)
            self.stats.failed += 1
            _log.warning("actuation failed", decision=d.id, workload=f"{d.namespace}/{d.name}", error=str(e),
                         retriable=e.retriable, attempts=attempts)
            self._report(out, ActuationFailed(time=d.time, decision_id=d.id, namespace=d.namespace, name=d.name,
                                              error=str(e), retriable=e.retriable, cluster=self.port.cluster),
                         f"{d.id}:failed")
            self.watermark.note(d)
            return True
        self._attempts.pop(d.id, None)
        for topic, key, value in staged:
            out.add(topic, key, value)
        self._report(out, DecisionApplied(time=d.time, decision_id=d.id, namespace=d.namespace, name=d.name,
                                          cluster=self.port.cluster), d.id)
        self.watermark.note(d)
        if isinstance(d, AdmitWorkload):
            self.stats.started += 1
        else:
            self.stats.stopped += 1
        return True

    def _report(self, out: _Batch, event: DecisionApplied | ActuationFailed, suffix: str) -> None:
        env = Envelope(id=f"actuator:{self.port.cluster}:{suffix}", source=SOURCE, cluster=self.port.cluster,
                       event=event)
        out.add(self.topics.cluster_events, event_key(env), encode(env))

    def _decode(self, rec: Record) -> AdmitWorkload | EvictWorkload | MarkPending | CycleCompleted | None:
        try:
            d: AdmitWorkload | EvictWorkload | MarkPending | CycleCompleted = decode_decision(rec.value)
        except (MalformedRecord, UnknownEventType) as e:
            # Only the scheduler must stop on an unknown type; any other consumer skips with a warning.
            self.stats.skipped += 1
            _log.warning("decision record skipped", offset=rec.offset, error=str(e))
            return None
        return d
