"""The actuator's one consume loop: decisions in, a port's actuations and their reports out, exactly once.

It consumes the decisions topic (consumer group ``actuator``) and hands ``AdmitWorkload`` to
its port's ``start``, ``EvictWorkload`` to ``stop``, ``UpdateWorkloadStatus`` and
``UpdateLocalQueueFairSharing`` (a LocalQueue's admission fair sharing status) to ``write_status``
and — when the port writes them — ``MarkPending`` to ``mark_pending``; ``CycleCompleted`` only moves the watermark. Each
outcome goes back to cluster-events as ``DecisionApplied``, or ``ActuationFailed`` (with
``retriable``) when the port refuses, so the scheduler learns of it the same way as of
everything else. Pending marks are status, not orders: they are not reported.

The port (:class:`ActuationPort`) is where the cluster is; it is asynchronous because a real
API server is. It returns the log records that carry an actuation, and the loop commits them
together with its reports and its consumer position in ONE ``Log.transact``: for the
simulated cluster (:mod:`services.actuator.sim_port`), whose API server is a log topic, that
makes each decision applied exactly once, whatever crashes when. A port for a real API
server (:mod:`services.actuator.kube_port`) performs its idempotent calls and returns no
records; a crash between the call and the commit then repeats the call, which changes
nothing. A port also gets a hook before and after every batch (deferred writes, status
flushes) and the decisions before the committed position at recovery (to rebuild caches).

Dedup by decision id. Decisions arrive in log order and a decision id belongs to one cycle;
cycles only grow. So "already applied" is decided by a small :class:`Watermark` — the newest
cycle seen, whether its ``CycleCompleted`` was seen, and the ids applied in it — rather than
an ever-growing set, and the watermark is recovered from the records just before the
committed position.

A retriable failure of an admit or evict stops the batch before it (what came before is
committed); the decision is tried again after an exponential back-off (``retry_after``), up
to the port's ``max_attempts``, then reported as ``ActuationFailed(retriable=True)`` and the
line moves on. A non-retriable one is reported at once.

Workloads at once. A port whose calls wait on a server (``Tuning.concurrency`` above 1) gets the
decisions of up to that many workloads at once; each workload's (an elastic Job's slices count as
one) are applied in log order, one after another. The batch is committed only when every decision
in it is done, and only up to the first that must be tried again: a decision after that point that
was applied meanwhile is neither reported nor noted, and is applied again (an idempotent redo, as
after a crash) and reported in a later step. So reports stay exactly once and in log order.

:meth:`Actuator.step` is a coroutine. A port whose calls never suspend (the simulated
cluster's) lets :meth:`Actuator.step_now` run a step to its end in the calling thread,
without an event loop: how the deterministic driver and the demo step it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

import structlog

from events.codec import DecisionPeek, MalformedRecord, UnknownEventType, decode_decision, encode, peek_decision
from events.envelope import Envelope, Topics, event_key
from events.messages import (
    ActuationFailed,
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    CycleCompleted,
    DecisionApplied,
    DecisionRecord,
    EvictWorkload,
    MarkPending,
    PlacementWaiting,
    PlaceWorkload,
    RemovePlacement,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from services.runtime.log import Log, Record, read_backwards

_PLACEMENTS: Final = (PlaceWorkload, PlacementWaiting, RemovePlacement)  # MultiKueue (services.core.placement)
GROUP: Final = "actuator"
SOURCE: Final = "actuator"

_log = structlog.get_logger(__name__)

Staged = tuple[str, str, bytes]
"""(topic, key, value): a record a port wants committed with the decision it carries out."""

T = TypeVar("T")


class ActuationError(Exception):
    """The port could not apply a decision; ``retriable`` says whether trying again may help."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


@dataclass(frozen=True)
class Tuning:
    """How the loop paces a port: decisions per commit, attempts of a retriable failure, the
    back-off between them (doubling from ``retry_base_seconds`` up to ``retry_max_seconds``), and
    how many workloads' decisions are applied at once (``concurrency``; a port whose calls never
    suspend keeps 1)."""

    batch_size: int = 100
    max_attempts: int = 10
    retry_base_seconds: float = 0.2
    retry_max_seconds: float = 10.0
    concurrency: int = 1  # workloads whose decisions are applied at once (1: one decision after another)

    def backoff(self, attempts: int) -> float:
        """The wait after the ``attempts``-th failure (counting from 1)."""
        return min(self.retry_base_seconds * 2.0 ** (attempts - 1), self.retry_max_seconds)


class Placer(Protocol):
    """Applies MultiKueue placement decisions to the worker clusters (``services.actuator.multikueue``);
    raises :class:`ActuationError` when it cannot."""

    async def apply(self, decision: PlaceWorkload | RemovePlacement) -> Sequence[Staged]: ...

    async def nominate(self, decision: PlacementWaiting) -> None:
        """Status news of a waiting workload (``status.nominatedClusterNames``): no report."""


class ActuationPort(Protocol):
    """Where decisions take effect. ``start`` / ``stop`` either return the records that carry the
    actuation (committed atomically with the loop's position), or perform idempotent calls
    themselves and return none; they raise :class:`ActuationError` when they cannot."""

    @property
    def cluster(self) -> str: ...

    @property
    def tuning(self) -> Tuning: ...

    @property
    def takes_pending_marks(self) -> bool:
        """Whether ``mark_pending`` writes anything; when not, pending marks are not even decoded."""
        ...

    def recover(self, history: Iterator[AnyDecision]) -> None:
        """The loop resumes: ``history`` yields (lazily) every decision before its committed
        position, for a port that rebuilds state from them; a port that needs none ignores it."""
        ...

    async def before_batch(self, batch: int) -> None:
        """Work the port deferred that is due now, before a batch of ``batch`` decisions (0: the
        loop found none; a port may pace its deferred work by how far behind the loop is); never
        raises :class:`ActuationError`."""
        ...

    @property
    def deferred(self) -> int:
        """Work the port queued for later steps (the Kubernetes port's pending marks and queue
        statuses): while there is any, the loop's driver keeps stepping."""
        ...

    async def start(self, decision: AdmitWorkload | AdmitChecked) -> Sequence[Staged]:
        """Quota reserved (``AdmitWorkload``): start the workload unless it waits for admission
        checks (``admission_checks``); those start on ``AdmitChecked``."""
        ...

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]: ...

    async def mark_pending(self, decision: MarkPending) -> None:
        """Write a pending mark, or defer it; never raises :class:`ActuationError`."""
        ...

    async def write_status(self, decision: UpdateWorkloadStatus | UpdateLocalQueueFairSharing) -> None:
        """Status only (admission checks, requeueState): write it idempotently, or do nothing where
        no status is kept; raises :class:`ActuationError` when it cannot (retried like an order,
        never reported: it is not one)."""
        ...

    async def after_batch(self) -> None:
        """Before the batch is committed: flush what the batch changed (never raises :class:`ActuationError`)."""
        ...


P = TypeVar("P", bound=ActuationPort)


@dataclass
class Watermark:
    """Which decisions are already applied, given that they arrive in (cycle, log) order."""

    cycle: int = -1
    closed: bool = False  # the cycle's CycleCompleted was seen: all of it is behind us
    ids: set[str] = field(default_factory=set)

    def applied(self, d: AnyDecision) -> bool:
        return d.cycle < self.cycle or (d.cycle == self.cycle and (self.closed or d.id in self.ids))

    def note(self, d: AnyDecision) -> None:
        if d.cycle > self.cycle:
            self.cycle, self.closed, self.ids = d.cycle, False, set()
        self.ids.add(d.id)

    def close(self, c: CycleCompleted) -> None:
        self.close_cycle(c.cycle)

    def close_cycle(self, cycle: int) -> None:
        if cycle >= self.cycle:
            self.cycle, self.closed, self.ids = cycle, True, set()

    def copy(self) -> Watermark:
        return Watermark(self.cycle, self.closed, set(self.ids))

    @classmethod
    def recovered(cls, records: Iterator[Record], decode: Callable[[Record], DecisionRecord | None]) -> Watermark:
        """The watermark of a consumer whose committed position ``records`` walks back from
        (newest first): over the tail of the last cycle before it (a batch may end mid-cycle)."""
        mark = cls()
        tail: list[AnyDecision] = []
        for rec in records:
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
    started: int = 0  # admissions applied
    stopped: int = 0  # evictions applied
    ignored: int = 0  # pending marks, for a port that does not write them
    duplicates: int = 0  # deduplicated by the watermark
    failed: int = 0
    retries: int = 0
    skipped: int = 0  # undecodable decision records
    statuses: int = 0  # status-only decisions (UpdateWorkloadStatus) written
    coalesced: int = 0  # pending marks not written: a later one of the same workload is in the batch


def _superseded_marks(batch: Sequence[Record], peeks: Sequence[DecisionPeek]) -> frozenset[int]:
    """The offsets of pending marks that a later pending mark of the same workload in ``batch``
    (each record's ``peeks``) makes moot: only a workload's last word on why it waits is written (a
    behind actuator would otherwise write every message a waiting workload had, one API round
    trip each)."""
    later: set[tuple[str, str]] = set()
    out: set[int] = set()
    for rec, peek in zip(reversed(batch), reversed(peeks), strict=True):
        if peek.type != "pending" or not peek.name:
            continue
        key = (peek.namespace, peek.name)
        if key in later:
            out.add(rec.offset)
        later.add(key)
    return frozenset(out)


@dataclass(frozen=True)
class _Planned:
    """One record of a batch as planned in log order: a decision to apply, or nothing to apply and
    the :class:`Stats` counter it adds to when committed; ``closes`` a cycle."""

    decision: AnyDecision | None
    counter: str
    closes: int | None

    def mark(self, watermark: Watermark) -> None:
        if self.closes is not None:
            watermark.close_cycle(self.closes)
        if self.decision is not None:
            watermark.note(self.decision)

    def marked(self, watermark: Watermark) -> _Planned:
        self.mark(watermark)
        return self


@dataclass
class _Outcome:
    """A decision carried out: ``ok`` False when it must be tried again (the batch is cut before
    it); its reports; the :class:`Stats` counter it adds to once committed."""

    ok: bool
    appends: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    counter: str = ""


def complete(coro: Coroutine[object, None, T]) -> T:
    """Run a coroutine that never suspends to its end, here, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coro.close()
    raise RuntimeError("the coroutine suspended: only a port that never waits can be stepped synchronously")


class Actuator(Generic[P]):
    """The consume loop over one port; ``await step()`` until stopped (see
    :mod:`services.actuator.runner`). ``retry_after`` says how long to wait after a step that
    hit a retriable failure."""

    def __init__(self, log: Log, port: P, *, topics: Topics | None = None, placer: Placer | None = None) -> None:
        """``placer``: applies MultiKueue placements to the worker clusters (a manager's actuator)."""
        self.log = log
        self.port = port
        self.placer = placer
        self.topics = topics or Topics()
        self.tuning = port.tuning
        self.next_offset = 0
        self.watermark = Watermark()
        self.stats = Stats()
        self.retry_after: float | None = None
        self._attempts: dict[str, int] = {}
        self._aliases: dict[str, str] = {}  # an elastic Job's slice -> the first slice of its Workload object
        self._stale = True

    def recover(self) -> None:
        """Resume at the committed position: the watermark from the records just before it, the
        port's state from all of them."""
        topic = self.topics.decisions
        self.next_offset = self.log.position(GROUP, topic)
        self.watermark = Watermark.recovered(read_backwards(self.log, topic, self.next_offset), self._decode)
        self._attempts = {}
        self._aliases = {}
        self.port.recover(self._learning_aliases(self._history(self.next_offset)))
        self._stale = False

    def _learning_aliases(self, history: Iterator[AnyDecision]) -> Iterator[AnyDecision]:
        for d in history:
            self._learn_alias(d)
            yield d

    def _history(self, end: int) -> Iterator[AnyDecision]:
        offset = 0
        while offset < end:
            batch = [r for r in self.log.read(self.topics.decisions, offset, 1000) if r.offset < end]
            if not batch:
                return
            for rec in batch:
                d = self._decode(rec)
                if d is not None and not isinstance(d, CycleCompleted):
                    yield d
            offset = batch[-1].offset + 1

    async def step(self) -> int:
        """Apply one batch of decisions and commit the port's records, the reports and the
        position. Returns the records consumed, plus one when a retry is due or the port has
        work queued for the next steps (so a driver waiting for quiet keeps stepping).

        Decisions about different workloads may be applied at once (``tuning.concurrency``), each
        workload's in log order. A retriable failure cuts the batch there: what comes before it in
        the log is committed (with its reports); anything after it that was applied meanwhile is
        neither reported nor noted, and is applied again (idempotently) and reported next step."""
        if self._stale:
            self.recover()  # at start, and after a failed commit left the watermark ahead of the log
        self.retry_after = None
        batch = self.log.read(self.topics.decisions, self.next_offset, self.tuning.batch_size)
        await self.port.before_batch(len(batch))
        # Most records are cycle records and pending marks: their tag, cycle and workload are often
        # all that matters, so every record is peeked at once and decoded in full only when needed.
        peeks = [peek_decision(rec.value) for rec in batch]
        superseded = _superseded_marks(batch, peeks) if self.port.takes_pending_marks else frozenset()
        before = self.watermark.copy()
        plan = [_Planned(None, "coalesced", None) if rec.offset in superseded else self._plan(rec, peek)
                for rec, peek in zip(batch, peeks, strict=True)]
        outcomes = await self._run(plan)
        consumed = next((i for i, out in enumerate(outcomes) if out is not None and not out.ok), len(batch))
        appends: dict[str, list[tuple[str, bytes]]] = {}
        for planned, out in zip(plan[:consumed], outcomes[:consumed], strict=True):
            counter = out.counter if out is not None else planned.counter
            if counter:
                setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            for topic, items in (out.appends if out is not None else {}).items():
                appends.setdefault(topic, []).extend(items)
        if consumed < len(batch):  # the watermark as of the cut: only what is committed is noted
            self.watermark = before
            for planned in plan[:consumed]:
                planned.mark(self.watermark)
        await self.port.after_batch()
        if consumed:
            position = batch[consumed - 1].offset + 1  # offsets may have gaps: never assume +1
            try:
                self.log.transact(appends, {(GROUP, self.topics.decisions): position})
            except BaseException:
                self._stale = True
                raise
            self.next_offset = position
        # A port that queued work of its own for the next steps keeps the driver stepping until it is done.
        busy = self.retry_after is not None or self.port.deferred > 0
        return consumed + (1 if busy else 0)

    def step_now(self) -> int:
        """:meth:`step` run to its end in the calling thread, for a port whose calls never
        suspend (the simulated cluster's): deterministic, no event loop, no threads."""
        return complete(self.step())

    async def _run(self, plan: Sequence[_Planned]) -> list[_Outcome | None]:
        """Apply the planned decisions: one after another, stopping at the first that must be
        tried again; or, with ``concurrency`` above 1, each workload's in order and up to
        ``concurrency`` workloads at once, none started past a failure already seen."""
        outcomes: list[_Outcome | None] = [None] * len(plan)
        chains: dict[str, list[int]] = {}
        for i, planned in enumerate(plan):
            if planned.decision is not None:
                chains.setdefault(self._chain_key(planned.decision), []).append(i)
        if self.tuning.concurrency <= 1 or len(chains) <= 1:
            for i, planned in enumerate(plan):
                if planned.decision is not None:
                    out = outcomes[i] = await self._execute(planned.decision)
                    if not out.ok:
                        break
            return outcomes
        cut = [len(plan)]
        gate = asyncio.Semaphore(self.tuning.concurrency)

        async def chain(indices: list[int]) -> None:
            async with gate:
                for i in indices:
                    if i > cut[0]:
                        return
                    decision = plan[i].decision
                    assert decision is not None
                    out = outcomes[i] = await self._execute(decision)
                    if not out.ok:
                        cut[0] = min(cut[0], i)
                        return

        async with asyncio.TaskGroup() as group:
            for indices in chains.values():
                group.create_task(chain(indices))
        return outcomes

    def _chain_key(self, d: AnyDecision) -> str:
        """Decisions with the same key are applied in log order: a workload's, and an elastic Job's
        slices' (they are written to one Workload object)."""
        key = f"{d.namespace}/{d.name}"
        return self._aliases.get(key, key)

    def _learn_alias(self, d: AnyDecision) -> None:
        if isinstance(d, AdmitWorkload) and d.replaced_slice:
            self._aliases[f"{d.namespace}/{d.name}"] = self._aliases.get(d.replaced_slice, d.replaced_slice)

    def _plan(self, rec: Record, peek: DecisionPeek) -> _Planned:
        """What one decision record (``peek``: its tag, cycle and workload) asks for, in log order:
        a decision to apply, or nothing (with the counter it adds to); the watermark moves as it will
        once the record is applied."""
        if peek.type == "cycle" and peek.cycle >= 0:
            return _Planned(None, "", peek.cycle).marked(self.watermark)
        pending_wanted = self.port.takes_pending_marks
        if peek.type == "pending" and not pending_wanted:
            return _Planned(None, "ignored", None)
        d = self._decode(rec, count=False)
        if d is None:
            return _Planned(None, "skipped", None)
        if isinstance(d, CycleCompleted):
            return _Planned(None, "", d.cycle).marked(self.watermark)
        if isinstance(d, MarkPending) and not pending_wanted:
            return _Planned(None, "ignored", None)
        if isinstance(d, _PLACEMENTS) and self.placer is None:
            return _Planned(None, "ignored", None)  # no worker clusters to reach from here
        if self.watermark.applied(d):
            return _Planned(None, "duplicates", None)
        self._learn_alias(d)
        return _Planned(d, "", None).marked(self.watermark)

    async def _execute(self, d: AnyDecision) -> _Outcome:
        """Carry out one decision: its reports, and whether the line may move past it."""
        if isinstance(d, MarkPending):
            await self.port.mark_pending(d)
            return _Outcome(True)
        if isinstance(d, UpdateWorkloadStatus | UpdateLocalQueueFairSharing | PlacementWaiting):
            return await self._write_status(d)
        assert not isinstance(d, CycleCompleted)
        appends: dict[str, list[tuple[str, bytes]]] = {}
        try:
            if isinstance(d, PlaceWorkload | RemovePlacement):
                assert self.placer is not None
                staged = await self.placer.apply(d)  # MultiKueue: the copy on the worker (services.actuator.multikueue)
            else:
                staged = await (self.port.start(d) if isinstance(d, AdmitWorkload | AdmitChecked)
                                else self.port.stop(d))
        except ActuationError as e:
            return self._failed(d, e)
        self._attempts.pop(d.id, None)
        for topic, key, value in staged:
            appends.setdefault(topic, []).append((key, value))
        self._report(appends, DecisionApplied(time=d.time, decision_id=d.id, namespace=d.namespace, name=d.name,
                                              cluster=self.port.cluster), d.id)
        started = isinstance(d, AdmitWorkload | AdmitChecked | PlaceWorkload)
        return _Outcome(True, appends, "started" if started else "stopped")

    async def _write_status(self, d: UpdateWorkloadStatus | UpdateLocalQueueFairSharing | PlacementWaiting
                            ) -> _Outcome:
        """Status news: retried like an order (in line, so a later write never lands first), given up
        after the port's attempts with a warning; no report (the scheduler waits for nothing)."""
        try:
            if isinstance(d, PlacementWaiting):
                assert self.placer is not None
                await self.placer.nominate(d)  # MultiKueue: the worker clusters it is tried on
            else:
                await self.port.write_status(d)
        except ActuationError as e:
            attempts = self._attempts.get(d.id, 0) + 1
            if e.retriable and attempts < self.tuning.max_attempts:
                self._attempts[d.id] = attempts
                self.stats.retries += 1
                self.retry_after = self.tuning.backoff(attempts)
                return _Outcome(False)
            self._attempts.pop(d.id, None)
            _log.warning("status not written", decision=d.id, object=f"{d.namespace}/{d.name}",
                         error=str(e), attempts=attempts)
            return _Outcome(True, counter="failed")
        self._attempts.pop(d.id, None)
        return _Outcome(True, counter="statuses")

    def _failed(self, d: AdmitWorkload | AdmitChecked | EvictWorkload | PlaceWorkload | RemovePlacement,
                e: ActuationError) -> _Outcome:
        """Retry later (not ok: the batch stops before it) or report the failure and move on."""
        workload = f"{d.namespace}/{d.name}"
        attempts = self._attempts.get(d.id, 0) + 1
        if e.retriable and attempts < self.tuning.max_attempts:
            self._attempts[d.id] = attempts
            self.stats.retries += 1
            after = self.tuning.backoff(attempts)
            self.retry_after = after if self.retry_after is None else min(self.retry_after, after)
            _log.info("actuation will be retried", decision=d.id, workload=workload, error=str(e),
                      attempts=attempts, after=after)
            return _Outcome(False)
        self._attempts.pop(d.id, None)
        _log.warning("actuation failed", decision=d.id, workload=workload, error=str(e), retriable=e.retriable,
                     attempts=attempts)
        appends: dict[str, list[tuple[str, bytes]]] = {}
        self._report(appends, ActuationFailed(time=d.time, decision_id=d.id, namespace=d.namespace, name=d.name,
                                              error=str(e), retriable=e.retriable, cluster=self.port.cluster),
                     f"{d.id}:failed")
        return _Outcome(True, appends, "failed")

    def _report(self, appends: dict[str, list[tuple[str, bytes]]], event: DecisionApplied | ActuationFailed,
                suffix: str) -> None:
        env = Envelope(id=f"actuator:{self.port.cluster}:{suffix}", source=SOURCE, cluster=self.port.cluster,
                       event=event)
        appends.setdefault(self.topics.cluster_events, []).append((event_key(env), encode(env)))

    def _decode(self, rec: Record, *, count: bool = True) -> DecisionRecord | None:
        try:
            d: DecisionRecord = decode_decision(rec.value)
        except (MalformedRecord, UnknownEventType) as e:
            # Only the scheduler must stop on an unknown type; any other consumer skips with a warning.
            self.stats.skipped += int(count)
            _log.warning("decision record skipped", offset=rec.offset, error=str(e))
            return None
        return d
