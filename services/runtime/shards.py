"""Scheduler shards on the log: one log view per shard, and the router publishers write through.

A shard is a log of its own, with its own single writer (scheduler, actuator), snapshots and
decisions, exactly as an unsharded log:

* on Kafka it is partition ``shard`` of every kueuelog topic (:class:`~services.runtime.kafka.KafkaLog`
  opened with ``shard=N`` is that view already);
* in the embedded log, shard 0 is the log as it always was, and shard N > 0 is
  :class:`ShardView`: the same SQLite file, its topics named ``<topic>.shard-N`` and its roles
  (the writer locks) ``<role>.shard-N``, so each shard has its own scheduler lock.

:class:`RoutingLog` is what the publishers of cluster events (watcher, arrivals, ticker, seeding)
are given instead of one shard's log: an append to cluster-events is decoded, routed by a
:class:`~events.shardmap.ShardRouter` and appended to the shard(s) that need each event, in
order; other topics (dead letters) go to shard 0. Every shard's log records the shard map on
``<prefix>.shard-map`` when it is first used or changed, so a replay knows how the log was cut.
It rebuilds its router from every shard's cluster-events when it is built (a restarted watcher
routes each object's later events where its earlier ones went), and reads of cluster-events
(the watcher's memory) see every shard's records, each at offset ``offset * shards + shard``.

Built with a map that puts a placed tree on another shard, it hands the tree over
(``events.shardmap`` has the protocol): the marker on the old shard at once, the tree's events
held on the new shard's ``<prefix>.hand-over-held`` topic, and :meth:`RoutingLog.pump` (called by
every append, and by the watcher's loop when idle) adopting the tree on the new shard once the old
one wrote its state on ``<prefix>.hand-over``, and forwarding to the new shard what the old
shard's own services report about the tree's workloads after the marker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec
import structlog

from events.codec import MalformedRecord, UnknownEventType, decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ObjectDeleted, TreeAdopted, TreeHandOver
from events.shardmap import (
    HandOver,
    ShardMap,
    ShardMapError,
    ShardRouter,
    TreeReleased,
    handed_workloads,
    parse_shard_map,
)
from services.runtime.log import Leadership, Log, LogError, Record, RecordWaiter

_log = structlog.get_logger(__name__)
SHARD_MAP_KEY: Final = "shard-map"


def shard_topic(topic: str, shard: int) -> str:
    """The embedded log's name of ``topic`` on ``shard`` (shard 0 keeps the plain name)."""
    return topic if shard == 0 else f"{topic}.shard-{shard}"


def shard_map_topic(topics: Topics) -> str:
    return f"{topics.prefix}.shard-map"


def hand_over_topic(topics: Topics) -> str:
    """Where a shard's scheduler writes the state of each tree it hands over (TreeReleased)."""
    return f"{topics.prefix}.hand-over"


def held_topic(topics: Topics) -> str:
    """Where a tree's events wait on its new shard until the tree is adopted there."""
    return f"{topics.prefix}.hand-over-held"


@dataclass
class _Forward:
    """An adopted hand-over's forwarding: the old shard's cluster-events from ``next``."""

    ho: HandOver
    workloads: frozenset[str]
    next: int


class _ShardLeadership:
    def __init__(self, inner: Leadership, shard: int) -> None:
        self._inner, self._shard = inner, shard

    async def acquire(self, role: str, stop: asyncio.Event | None = None) -> bool:
        return await self._inner.acquire(shard_topic(role, self._shard), stop)

    def holds(self, role: str) -> bool:
        return self._inner.holds(shard_topic(role, self._shard))

    def release(self, role: str) -> None:
        self._inner.release(shard_topic(role, self._shard))


class _ShardWaiter:
    def __init__(self, inner: RecordWaiter, shard: int) -> None:
        self._inner, self._shard = inner, shard

    async def wait_for_records(self, topic: str, start: int, timeout: float) -> bool:
        return await self._inner.wait_for_records(shard_topic(topic, self._shard), start, timeout)


class ShardView:
    """Shard ``shard`` (> 0) of an embedded log: the port with every topic and role renamed."""

    def __init__(self, log: Log, shard: int, *, owns: bool = False) -> None:
        """``owns``: closing the view closes ``log`` (else it is shared with the other shards)."""
        if shard < 1:
            raise ValueError(f"a shard view is for shards 1 and up, not {shard} (shard 0 is the log itself)")
        self.inner, self.shard, self._owns = log, shard, owns
        self._leadership = _ShardLeadership(log.leadership, shard)
        waiter = log.waiter
        self._waiter = None if waiter is None else _ShardWaiter(waiter, shard)

    def _t(self, topic: str) -> str:
        return shard_topic(topic, self.shard)

    @property
    def leadership(self) -> Leadership:
        return self._leadership

    @property
    def waiter(self) -> RecordWaiter | None:
        return self._waiter

    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]:
        return self.inner.append(self._t(topic), records)

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]:
        return [Record(topic, r.offset, r.key, r.value) for r in self.inner.read(self._t(topic), start, limit)]

    def end_offset(self, topic: str) -> int:
        return self.inner.end_offset(self._t(topic))

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        return self.inner.read_values(self._t(topic), start, limit)

    def position(self, group: str, topic: str) -> int:
        return self.inner.position(group, self._t(topic))

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        out = self.inner.transact({self._t(t): r for t, r in appends.items()},
                                  {(g, self._t(t)): off for (g, t), off in commits.items()})
        return {t: out[self._t(t)] for t in appends}

    def commit(self, group: str, topic: str, next_offset: int) -> None:
        self.transact({}, {(group, topic): next_offset})

    def close(self) -> None:
        if self._owns:
            self.inner.close()


def embedded_shards(log: Log, shards: int) -> list[Log]:
    """Every shard's view of one embedded log: the log itself for shard 0, :class:`ShardView` after."""
    return [log if s == 0 else ShardView(log, s) for s in range(shards)]


class RoutingLog:
    """The publishers' log over every shard (see the module docstring)."""

    def __init__(self, shards: Sequence[Log], shard_map: ShardMap, *, topics: Topics | None = None) -> None:
        if len(shards) != shard_map.shards:
            raise ValueError(f"shard map: shards is {shard_map.shards} but the log has {len(shards)} shards")
        self.shards = list(shards)
        self.topics = topics or Topics()
        self.router = ShardRouter(shard_map)
        self._reported_moves = 0
        self._markers: dict[str, int] = {}  # hand-over id -> its marker's offset on the old shard
        self._ids: list[set[str]] = [set() for _ in self.shards]  # forwarded envelope ids on each shard
        self._released: list[int] = [0 for _ in self.shards]  # how far each shard's hand-over topic was read
        self._forwards: dict[str, _Forward] = {}
        self._recover()
        self._record_map(shard_map)
        self._start_hand_overs()
        self.pump()

    # --- what the publishers use ------------------------------------------------------------

    @property
    def leadership(self) -> Leadership:
        return self.shards[0].leadership

    @property
    def waiter(self) -> RecordWaiter | None:
        return None

    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]:
        if topic != self.topics.cluster_events:
            return self.shards[0].append(topic, records)
        batches: list[list[tuple[str, bytes]]] = [[] for _ in self.shards]
        leaving: list[list[tuple[str, bytes]]] = [[] for _ in self.shards]
        held: list[list[tuple[str, bytes]]] = [[] for _ in self.shards]
        for key, value in records:
            shards = self.route(value)
            ho = None if shards else self.router.held(decode_envelope(value))
            if ho is not None:  # its tree is being handed over: held on the new shard
                held[ho.target].append((ho.id, value))
            for shard in shards:
                batches[shard].append((key, value))
            for shard, moved in self.router.take_extra():
                into = leaving if isinstance(moved.event, ObjectDeleted) else batches
                into[shard].append((event_key(moved), encode(moved)))
        # A moved object's deletion on the shard it leaves is written last: cut short, a move leaves
        # the object on both shards (finished at the next start, see _recover), never on neither.
        out: list[int] = []
        for shard, batch in [*enumerate(batches), *enumerate(leaving)]:
            if batch:
                out += self.shards[shard].append(topic, batch)
        for shard, batch in enumerate(held):
            if batch:
                self.shards[shard].append(held_topic(self.topics), batch)
        self._report_moves()
        self.pump()
        return out

    def route(self, value: bytes) -> tuple[int, ...]:
        """The shards a cluster-events record goes to; one that does not decode goes to shard 0,
        whose scheduler dead-letters it as an unsharded one would."""
        try:
            env = decode_envelope(value)
        except (MalformedRecord, UnknownEventType):
            return (0,)
        return self.router.route(env)

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]:
        """Shard 0's records of ``topic``, except cluster-events: every shard's, interleaved (each
        record at ``offset * shards + shard``)."""
        if topic != self.topics.cluster_events:
            return self.shards[0].read(topic, start, limit)
        n = len(self.shards)
        merged: list[Record] = []
        for shard, log in enumerate(self.shards):
            first = max(0, (start - shard + n - 1) // n)
            merged += [Record(r.topic, r.offset * n + shard, r.key, r.value) for r in log.read(topic, first, limit)]
        merged.sort(key=lambda r: r.offset)
        return merged[:limit]

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        return [(r.offset, r.value) for r in self.read(topic, start, limit)]

    def end_offset(self, topic: str) -> int:
        if topic != self.topics.cluster_events:
            return self.shards[0].end_offset(topic)
        n = len(self.shards)
        return max((log.end_offset(topic) * n + shard for shard, log in enumerate(self.shards)), default=0)

    def position(self, group: str, topic: str) -> int:
        return self.shards[0].position(group, topic)

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        if commits:
            raise ValueError("a routing log only appends; consumer positions belong to one shard's services")
        return {topic: self.append(topic, records) for topic, records in appends.items()}

    def close(self) -> None:
        for log in self.shards:
            log.close()

    # --- hand-over ------------------------------------------------------------------------------

    def _start_hand_overs(self) -> None:
        for shard, marker in self.router.start_hand_overs():
            assert isinstance(marker.event, TreeHandOver)
            _log.info("shards.hand_over_started", tree=marker.event.root, source=shard,
                      target=marker.event.to_shard, handover=marker.event.handover)
            [offset] = self.shards[shard].append(self.topics.cluster_events, [(event_key(marker), encode(marker))])
            self._markers[marker.event.handover] = offset

    def pump(self) -> int:
        """Move every hand-over on as far as the logs allow: adopt a tree whose old shard released
        it, forward what the old shards' services said since about handed-over workloads. Returns
        the records written. Safe to call at any time, and again after a crash at any point."""
        written = 0
        if self.router.in_transit():
            released = self._read_released()
            for ho in self.router.in_transit():
                state = released.get(ho.id)
                if state is not None:
                    written += self._adopt(ho, state)
        for fwd in self._forwards.values():
            written += self._forward(fwd)
        return written

    async def pump_until(self, stop: asyncio.Event, interval_s: float = 0.5) -> None:
        """:meth:`pump` every ``interval_s`` until ``stop``: a hand-over goes on while nothing is
        published (a log that fails is tried again at the next turn)."""
        while not stop.is_set():
            try:
                self.pump()
            except LogError as e:
                _log.warning("shards.pump_failed", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    def _read_released(self) -> dict[str, msgspec.Raw]:
        """TreeReleased records written since the last look, by hand-over id."""
        out: dict[str, msgspec.Raw] = {}
        topic = hand_over_topic(self.topics)
        for shard, log in enumerate(self.shards):
            while batch := log.read_values(topic, self._released[shard], 1000):
                for _, value in batch:
                    try:
                        rec = msgspec.json.decode(value, type=TreeReleased)
                    except msgspec.DecodeError:
                        continue
                    out.setdefault(rec.handover, rec.state)
                self._released[shard] = batch[-1][0] + 1
        return out

    def _adopt(self, ho: HandOver, state: msgspec.Raw) -> int:
        """The tree's state, then its held events, on the new shard, in one atomic append."""
        adopted = self.router.adopt(ho.id, state)
        records = [(event_key(adopted), encode(adopted))]
        seen: set[str] = set()  # a watcher restarted mid-transit may have published an object again
        for key, value in self._read_all(self.shards[ho.target], held_topic(self.topics)):
            env = decode_envelope(value)
            if key == ho.id and env.id not in seen:
                seen.add(env.id)
                records.append((event_key(env), value))
        self.shards[ho.target].append(self.topics.cluster_events, records)
        _log.info("shards.hand_over_adopted", tree=ho.root, source=ho.source, target=ho.target,
                  handover=ho.id, held=len(records) - 1)
        self._watch(ho, state)
        return len(records)

    def _watch(self, ho: HandOver, state: msgspec.Raw) -> None:
        workloads = frozenset(wl.key for wl in handed_workloads(state))
        self._forwards[ho.id] = _Forward(ho, workloads, self._markers.get(ho.id, 0))

    def _forward(self, fwd: _Forward) -> int:
        """What the old shard's services appended about the tree's workloads after the marker."""
        source, target = self.shards[fwd.ho.source], fwd.ho.target
        records: list[tuple[str, bytes]] = []
        while batch := source.read_values(self.topics.cluster_events, fwd.next, 1000):
            for _, value in batch:
                try:
                    env = decode_envelope(value)
                except (MalformedRecord, UnknownEventType):
                    continue
                if env.source == "shard-router" or ShardRouter.about_workload(env) not in fwd.workloads:
                    continue
                moved = ShardRouter.forwarded(env, target)
                if moved.id not in self._ids[target]:
                    self._ids[target].add(moved.id)
                    records.append((event_key(moved), encode(moved)))
            fwd.next = batch[-1][0] + 1
        if records:
            self.shards[target].append(self.topics.cluster_events, records)
        return len(records)

    @staticmethod
    def _read_all(log: Log, topic: str) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        offset = 0
        while batch := log.read(topic, offset, 1000):
            out += [(r.key, r.value) for r in batch]
            offset = batch[-1].offset + 1
        return out

    # --- recovery and the recorded map --------------------------------------------------------

    def _recover(self) -> None:
        """Learn where everything went, and finish what a publisher that died mid-append left
        half done: a cluster-scoped envelope written to some shards but not all is written to the
        rest, a move cut short gets its deletion (:meth:`ShardRouter.settle`)."""
        everywhere: dict[str, tuple[bytes, list[int]]] = {}  # envelope id -> (record, shards it is on)
        adopted: dict[str, msgspec.Raw] = {}
        for shard, log in enumerate(self.shards):
            self._learn_held(log, shard)
            offset = 0
            while batch := log.read_values(self.topics.cluster_events, offset, 5000):
                for off, value in batch:
                    try:
                        env = decode_envelope(value)
                    except (MalformedRecord, UnknownEventType):
                        continue
                    self._learn(env, shard, off, adopted)
                    if ShardRouter.everywhere(env):
                        everywhere.setdefault(env.id, (value, []))[1].append(shard)
                offset = batch[-1][0] + 1
        missing: list[list[tuple[str, bytes]]] = [[] for _ in self.shards]
        for value, on in everywhere.values():
            if len(set(on)) < len(self.shards):
                env = decode_envelope(value)
                for shard in range(len(self.shards)):
                    if shard not in on:
                        missing[shard].append((event_key(env), value))
        for shard, env in self.router.settle():
            missing[shard].append((event_key(env), encode(env)))
        for handover, state in adopted.items():
            ho = self.router.hand_overs.get(handover)
            if ho is not None:
                self._watch(ho, state)
        for shard, records in enumerate(missing):
            if records:
                _log.warning("shards.repaired", shard=shard, records=len(records),
                             detail="a publisher stopped half way through an append: finished now")
                self.shards[shard].append(self.topics.cluster_events, records)

    def _learn_held(self, log: Log, shard: int) -> None:
        """Held events first: a tree in transit has them only there, and once it is adopted they are
        older than everything its new shard's cluster-events say about it."""
        for _, value in self._read_all(log, held_topic(self.topics)):
            self.router.placed_on(decode_envelope(value), shard)

    def _learn(self, env: Envelope, shard: int, offset: int, adopted: dict[str, msgspec.Raw]) -> None:
        self.router.placed_on(env, shard)
        self._ids[shard].add(env.id)
        if isinstance(env.event, TreeHandOver):
            self._markers[env.event.handover] = offset
        elif isinstance(env.event, TreeAdopted):
            adopted[env.event.handover] = env.event.state

    def _record_map(self, shard_map: ShardMap) -> None:
        value = encode(shard_map)
        topic = shard_map_topic(self.topics)
        for log in self.shards:
            if recorded_map_value(log, topic) != value:
                log.append(topic, [(SHARD_MAP_KEY, value)])

    def _report_moves(self) -> None:
        for move in self.router.moves[self._reported_moves:]:
            _log.warning("shards.move_not_carried_out", object=move.what, placed=move.placed, wanted=move.wanted,
                         detail="the object stays on its shard (a map naming another shard for a "
                                "whole tree hands the tree over)")
        self._reported_moves = len(self.router.moves)


def recorded_map_value(log: Log, topic: str) -> bytes | None:
    last: bytes | None = None
    offset = 0
    while batch := log.read_values(topic, offset, 1000):
        last = batch[-1][1]
        offset = batch[-1][0] + 1
    return last


def recorded_map(log: Log, topics: Topics) -> ShardMap | None:
    """The newest shard map recorded on this shard's log; None when it was never sharded."""
    value = recorded_map_value(log, shard_map_topic(topics))
    return None if value is None else msgspec.json.decode(value, type=ShardMap)



def load_shard_map(path: str) -> ShardMap:
    """A shard map from a YAML or JSON file (``{shards: N, trees: {root: shard}}``); ShardMapError
    names the file and the field."""
    import yaml

    from services.runtime.manifestfiles import read_manifests

    try:
        text = next(iter(read_manifests([path]).values()))
        data = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ShardMapError(f"{path}: cannot read the shard map: {str(e).splitlines()[0]}") from None
    return parse_shard_map(data, where=path)
