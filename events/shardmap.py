"""Scheduler shards: which shard decides each cohort tree, and where each cluster event goes.

Cohort trees are independent quota domains (nothing is borrowed, reclaimed or fair-shared across
two root cohorts), so each can be decided by a different scheduler: a *shard*. Every shard is a
log of its own (a Kafka partition of every kueuelog topic, or topics of its own in the embedded
log) with its own single writer, standbys, snapshots and decisions.

:class:`ShardMap` is the configuration: the number of shards and an explicit shard for some
*trees*, each named by its root: the root Cohort, or the ClusterQueue itself when it has no
cohort. A tree the map does not name goes to a stable hash of its root's name (the first eight
bytes of its SHA-256, modulo the number of shards: the same on every machine and every run, never
Python's ``hash()``).

:class:`ShardRouter` is the publishers' part (watcher, arrivals, ticker): it learns the tree from
the events themselves (ClusterQueue -> cohort, Cohort -> parent, LocalQueue -> ClusterQueue) and
sends

* a ClusterQueue, Cohort or LocalQueue to the shard of its tree;
* a Workload, and every event naming one (finished, pods ready, actuation outcomes, admission
  checks, ProvisioningRequests), to the shard of its LocalQueue's ClusterQueue's tree (or of the
  ClusterQueue it is admitted to, when it arrives admitted and its LocalQueue is not known);
* everything cluster-scoped (ResourceFlavors, Namespaces, priority classes, AdmissionChecks,
  Configuration, clock ticks, ...) to every shard.

Once an object has gone to a shard it stays there (it is *placed*), with one exception that is
always safe: an object placed before its tree was known is *provisional*. A workload whose
LocalQueue is not known waits on shard 0 (as unsharded, it waits with ``QueueNotFound``); a
LocalQueue whose ClusterQueue is not known waits on the shard its ClusterQueue would have
without a cohort, with its workloads. When the LocalQueue (or the ClusterQueue) comes and its
tree is on another shard, the router moves them there: their deletion on the shard they waited
on, then each as last seen on its tree's shard, right after the event that made the tree known
(:meth:`ShardRouter.take_extra`). Nothing of theirs can hold quota where they waited (that shard
never had their ClusterQueue), so no decision is lost or doubled.

Any other change that would put a placed object elsewhere (a ClusterQueue given a cohort on
another shard, a Cohort another parent, a LocalQueue another ClusterQueue) is recorded in
:attr:`ShardRouter.moves` and not carried out: the object keeps its shard. Publish Cohorts before
their ClusterQueues (the watcher lists them first), or a ClusterQueue placed by a parentless
cohort's name stays there when the parent comes.

**Hand-over.** A map that names another shard for a tree already placed moves the whole tree, in
a logged order that loses and doubles nothing (:class:`HandOver`, driven by
``services.runtime.shards.RoutingLog``):

1. the router writes a :class:`~events.messages.TreeHandOver` marker (id ``hand-over:ROOT:N``, N
   counting the tree's hand-overs) on the tree's old shard, and from then routes the tree's
   events to the new shard, *held*: appended to the new shard's ``hand-over-held`` topic, which no
   scheduler reads;
2. the old shard's scheduler, folding the marker, takes the tree out of its state (it cannot
   decide for it after that offset) and writes the tree's state at that offset as a
   :class:`TreeReleased` record on its ``hand-over`` topic, atomically with the commit of the
   batch that folded it (``services.core.handover``);
3. the router, finding that record, appends to the new shard's cluster-events, in one atomic
   append, a :class:`~events.messages.TreeAdopted` carrying that state followed by the held events
   in order; the new shard's scheduler folds the state first, so it never decides for the tree
   before it has it. From then the tree's events go to the new shard directly;
4. events about the tree's workloads that the old shard's own services (actuator, simulated
   cluster) append to the old shard after the marker are forwarded to the new shard (id
   ``ID:to-shard-N``); the old scheduler only notes them as about unknown workloads.

Every record has a deterministic id, and a router restarted at any point learns from the logs
where each hand-over stands (marker written? state released? adopted?) and finishes it: nothing
is written twice, nothing skipped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from events import objects as o
from events.envelope import Envelope
from events.messages import (
    ActuationFailed,
    AdmissionCheckUpdated,
    DecisionApplied,
    EvictionCompleted,
    ObjectApplied,
    ObjectDeleted,
    PodsNotReady,
    PodsReady,
    ProvisioningRequestObserved,
    TreeAdopted,
    TreeHandOver,
    WorkloadActivation,
    WorkloadFinished,
)

MAX_SHARDS: Final = 1024
DEFAULT_SHARD: Final = 0  # where a workload of an unknown LocalQueue goes

_WORKLOAD_EVENTS: Final = (WorkloadFinished, EvictionCompleted, PodsReady, PodsNotReady, WorkloadActivation,
                           DecisionApplied, ActuationFailed, AdmissionCheckUpdated)


class ShardMapError(ValueError):
    """A shard map that cannot be used; the message names the field."""


class ShardMap(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``shards`` schedulers; ``trees``: root Cohort (or cohort-less ClusterQueue) name -> shard."""

    shards: int = 1
    trees: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ShardMapError(f"shard map: shards must be 1..{MAX_SHARDS}, not {self.shards}")
        seen: list[str] = []
        for name, shard in self.trees:
            if not name:
                raise ShardMapError("shard map: trees: a tree has an empty name")
            if name in seen:
                raise ShardMapError(f"shard map: trees.{name}: named twice")
            if not 0 <= shard < self.shards:
                raise ShardMapError(f"shard map: trees.{name}: shard {shard} is outside 0..{self.shards - 1}")
            seen.append(name)

    def shard_of(self, root: str) -> int:
        """The shard of the tree whose root is ``root``: as the map says, else its stable hash."""
        for name, shard in self.trees:
            if name == root:
                return shard
        return stable_shard(root, self.shards)


def stable_shard(root: str, shards: int) -> int:
    """The default shard of a tree: the same for a name on every machine, run and Python version."""
    return int.from_bytes(hashlib.sha256(root.encode()).digest()[:8], "big") % shards


def parse_shard_map(data: Any, *, where: str = "shard map") -> ShardMap:
    """A map from its YAML/JSON form ``{shards: N, trees: {root: shard, ...}}``; a plain integer is
    ``shards`` alone (every tree by hash)."""
    if data is None:
        raise ShardMapError(f"{where}: empty: expected {{shards: N, trees: {{ROOT: SHARD}}}}")
    if isinstance(data, bool):
        raise ShardMapError(f"{where}: expected a number of shards or a mapping, not {data!r}")
    if isinstance(data, int):
        data = {"shards": data}
    if not isinstance(data, Mapping):
        raise ShardMapError(f"{where}: expected a mapping with shards and trees, not {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in ("shards", "trees"))
    if unknown:
        raise ShardMapError(f"{where}: unknown field {unknown[0]!r} (fields: shards, trees)")
    shards = data.get("shards", 1)
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise ShardMapError(f"{where}: shards must be an integer, not {shards!r}")
    trees = data.get("trees") or {}
    if not isinstance(trees, Mapping):
        raise ShardMapError(f"{where}: trees must map a root cohort or ClusterQueue name to a shard")
    pairs: list[tuple[str, int]] = []
    for name, shard in trees.items():
        if isinstance(shard, bool) or not isinstance(shard, int):
            raise ShardMapError(f"{where}: trees.{name}: the shard must be an integer, not {shard!r}")
        pairs.append((str(name), shard))
    try:
        return ShardMap(shards=shards, trees=tuple(sorted(pairs)))
    except ShardMapError as e:
        raise ShardMapError(str(e).replace("shard map", where, 1)) from None


@dataclass(frozen=True, slots=True)
class Move:
    """A change that would put an object already placed on one shard on another: not carried out."""

    what: str  # "ClusterQueue/x", "LocalQueue/ns/q", "Workload/ns/w", "Cohort/c"
    placed: int
    wanted: int


class TreeReleased(msgspec.Struct, frozen=True, kw_only=True):
    """A shard's ``hand-over`` record: the state of the tree it handed over with ``handover``, as
    it had it when it folded the marker (a partial scheduler state, snapshot encoding)."""

    handover: str
    state: msgspec.Raw = msgspec.Raw(b"{}")


@dataclass(slots=True)
class HandOver:
    """One tree's move from shard ``source`` to shard ``target`` (see the module docstring)."""

    id: str
    root: str
    source: int
    target: int
    time: int = 0
    adopted: bool = False


class _HandedRecord(msgspec.Struct):
    obj: o.Workload


class _Handed(msgspec.Struct):
    workloads: dict[str, _HandedRecord] = {}


def handed_workloads(state: msgspec.Raw | bytes) -> list[o.Workload]:
    """The Workloads in a handed-over tree's state (as their last applied object), by key."""
    handed = msgspec.json.decode(state, type=_Handed)
    return [handed.workloads[key].obj for key in sorted(handed.workloads)]


def hand_over_id(root: str, n: int) -> str:
    return f"hand-over:{root}:{n}"


def _hand_over_number(handover: str) -> int:
    return int(handover.rsplit(":", 1)[1])


class ShardRouter:
    """Where each cluster event goes (see the module docstring). Deterministic: the same events in
    the same order route the same way; :meth:`placed_on` teaches it where a recovered log put
    things."""

    def __init__(self, shard_map: ShardMap) -> None:
        self.map = shard_map
        self._parent: dict[str, str] = {}  # Cohort -> parent
        self._cohort: dict[str, str] = {}  # ClusterQueue -> cohort
        self._lq: dict[str, str] = {}  # "ns/name" -> ClusterQueue
        self._placed: dict[str, int] = {}  # "Kind/key" -> shard
        # Placed before their tree was known, so free to move once it is (see take_extra):
        self._provisional_lq: dict[str, o.LocalQueue] = {}  # "ns/name" -> LocalQueue of an unknown ClusterQueue
        self._provisional_wl: dict[str, dict[str, o.Workload]] = {}  # LocalQueue "ns/name" -> its waiting workloads
        self._extra: list[tuple[int, Envelope]] = []
        self._found: dict[str, dict[int, o.AnyObject]] = {}  # recovery: object -> {shard: last applied there}
        self.moves: list[Move] = []
        self._wl_home: dict[str, tuple[str, str]] = {}  # workload "ns/name" -> (its LocalQueue key, admitted to)
        self.hand_overs: dict[str, HandOver] = {}  # by id, in the order they started
        self._transit: dict[str, HandOver] = {}  # root -> its hand-over not adopted yet
        self._markers: list[tuple[int, TreeHandOver]] = []  # recovery: markers found, with their shard
        self._adopted: set[str] = set()  # recovery: hand-overs whose TreeAdopted was found
        self.now = 0  # the newest event time seen (a marker's time)

    @property
    def every(self) -> tuple[int, ...]:
        return tuple(range(self.map.shards))

    # --- the tree ---------------------------------------------------------------------------

    def root_of_cohort(self, cohort: str) -> str:
        seen: list[str] = []
        while (parent := self._parent.get(cohort, "")) and cohort not in seen:
            seen.append(cohort)  # a cycle (invalid, refused by the scheduler) ends the walk
            cohort = parent
        return cohort

    def shard_of_cluster_queue(self, cq: str) -> int:
        cohort = self._cohort.get(cq, "")
        return self.map.shard_of(self.root_of_cohort(cohort) if cohort else cq)

    def shard_of_local_queue(self, namespace: str, name: str) -> int | None:
        cq = self._lq.get(f"{namespace}/{name}")
        return None if cq is None else self._place(f"LocalQueue/{namespace}/{name}",
                                                   self.shard_of_cluster_queue(cq))

    # --- routing ----------------------------------------------------------------------------

    def route(self, env: Envelope) -> tuple[int, ...]:
        """The shards ``env`` goes to (learning what it says about the tree first). Envelopes the
        router adds to carry out a safe move follow it (:meth:`take_extra`). None (``()``) for an
        event of a tree being handed over: it is held for its new shard (:meth:`held`)."""
        self.now = max(self.now, env.event.time)
        shards = self._route(env)
        ho = self.held(env)
        return () if ho is not None and shards == (ho.target,) else shards

    def held(self, env: Envelope) -> HandOver | None:
        """The hand-over in progress of the tree ``env`` is about, if any (after it was routed; an
        event is held when its tree is in transit and it goes to the tree's new shard)."""
        if not self._transit:
            return None
        root = self._root_of_event(env)
        return None if root is None else self._transit.get(root)

    def _route(self, env: Envelope) -> tuple[int, ...]:
        ev = env.event
        if isinstance(ev, ObjectApplied):
            return self._applied(env, ev.object)
        if isinstance(ev, ObjectDeleted):
            return self._deleted(ev)
        if isinstance(ev, _WORKLOAD_EVENTS):
            return (self._workload(ev.namespace, ev.name),)
        if isinstance(ev, ProvisioningRequestObserved):
            return (self._workload(ev.namespace, ev.workload),)
        return self.every

    def take_extra(self) -> list[tuple[int, Envelope]]:
        """The envelopes (shard, envelope) the last routed one caused: a provisional LocalQueue or
        workload leaving the shard it waited on (its deletion there) for its tree's (it, as last
        seen). Nothing of theirs can hold quota where they waited, so the move loses nothing."""
        out, self._extra = self._extra, []
        return out

    def _applied(self, env: Envelope, obj: o.AnyObject) -> tuple[int, ...]:
        if isinstance(obj, o.Cohort):
            self._parent[obj.name] = obj.parent
            return (self._place(f"Cohort/{obj.name}", self.map.shard_of(self.root_of_cohort(obj.name))),)
        if isinstance(obj, o.ClusterQueue):
            self._cohort[obj.name] = obj.cohort
            shard = self._place(f"ClusterQueue/{obj.name}", self.shard_of_cluster_queue(obj.name))
            for key in sorted(k for k, lq in self._provisional_lq.items() if lq.cluster_queue == obj.name):
                self._settle_local_queue(env, self._provisional_lq.pop(key), shard)
            return (shard,)
        if isinstance(obj, o.LocalQueue):
            key = f"{obj.namespace}/{obj.name}"
            self._lq[key] = obj.cluster_queue
            wanted = self.shard_of_cluster_queue(obj.cluster_queue)
            placed = self._placed.get(f"LocalQueue/{key}")
            if placed is not None and placed != wanted and key in self._provisional_lq:
                self._extra.append((placed, self._moved(env, ObjectDeleted(time=env.event.time, kind="LocalQueue",
                                                                           namespace=obj.namespace, name=obj.name))))
                self._placed[f"LocalQueue/{key}"] = placed = wanted
            shard = self._place(f"LocalQueue/{key}", wanted)
            if obj.cluster_queue in self._cohort:
                self._provisional_lq.pop(key, None)
            else:
                self._provisional_lq[key] = obj
            self._move_workloads(env, key, shard)
            return (shard,)
        if isinstance(obj, o.Workload):
            return (self._workload(obj.namespace, obj.name, obj),)
        return self.every

    def _settle_local_queue(self, env: Envelope, lq: o.LocalQueue, shard: int) -> None:
        """A provisional LocalQueue's ClusterQueue is known now, on ``shard``: if it waited
        elsewhere, it and its workloads move there."""
        key = f"{lq.namespace}/{lq.name}"
        placed = self._placed.get(f"LocalQueue/{key}", shard)
        if placed != shard:
            time = env.event.time
            self._extra.append((placed, self._moved(env, ObjectDeleted(time=time, kind="LocalQueue",
                                                                       namespace=lq.namespace, name=lq.name))))
            self._extra.append((shard, self._moved(env, ObjectApplied(time=time, object=lq))))
            self._placed[f"LocalQueue/{key}"] = shard
        self._move_workloads(env, key, shard)

    def _move_workloads(self, env: Envelope, lq_key: str, shard: int) -> None:
        """Workloads that waited for LocalQueue ``lq_key`` (unknown, or provisional) go to its shard;
        they stay provisional while it is."""
        waiting = self._provisional_wl.get(lq_key, {})
        for key in sorted(waiting):
            wl = waiting[key]
            placed = self._placed.get(f"Workload/{key}", shard)
            if placed != shard:
                time = env.event.time
                self._extra.append((placed, self._moved(env, ObjectDeleted(time=time, kind="Workload",
                                                                           namespace=wl.namespace, name=wl.name))))
                self._extra.append((shard, self._moved(env, ObjectApplied(time=time, object=wl))))
                self._placed[f"Workload/{key}"] = shard
        if lq_key not in self._provisional_lq:
            self._provisional_wl.pop(lq_key, None)

    @staticmethod
    def _moved(cause: Envelope, event: ObjectApplied | ObjectDeleted) -> Envelope:
        what = event.object if isinstance(event, ObjectApplied) else event
        name = f"{type(what).__name__ if isinstance(event, ObjectApplied) else event.kind}/" \
               f"{getattr(what, 'namespace', '')}/{getattr(what, 'name', '')}"
        verb = "applied" if isinstance(event, ObjectApplied) else "deleted"
        return Envelope(id=f"{cause.id}:shard-move:{verb}:{name}", source="shard-router", cluster=cause.cluster,
                        event=event, correlation_id=cause.id)

    def _deleted(self, ev: ObjectDeleted) -> tuple[int, ...]:
        key = f"{ev.kind}/{ev.namespace}/{ev.name}" if ev.namespace else f"{ev.kind}/{ev.name}"
        if ev.kind == "Workload":
            for waiting in self._provisional_wl.values():
                waiting.pop(f"{ev.namespace}/{ev.name}", None)
            return (self._workload(ev.namespace, ev.name),)
        if ev.kind in ("Cohort", "ClusterQueue", "LocalQueue"):
            placed = self._placed.get(key)
            return self.every if placed is None else (placed,)
        return self.every

    def _workload(self, namespace: str, name: str, obj: o.Workload | None = None) -> int:
        key = f"Workload/{namespace}/{name}"
        placed = self._placed.get(key)
        if placed is not None and obj is None:
            return placed
        wanted: int | None = None
        if obj is not None:
            lq_key = f"{namespace}/{obj.queue_name}"
            self._wl_home[f"{namespace}/{name}"] = (lq_key, "" if obj.admission is None
                                                    else obj.admission.cluster_queue)
            wanted = self.shard_of_local_queue(namespace, obj.queue_name)
            if wanted is None and obj.admission is not None:
                wanted = self.shard_of_cluster_queue(obj.admission.cluster_queue)
            elif (wanted is None or lq_key in self._provisional_lq) and obj.admission is None:
                self._provisional_wl.setdefault(lq_key, {})[f"{namespace}/{name}"] = obj
        return self._place(key, DEFAULT_SHARD if wanted is None else wanted)

    def _place(self, key: str, wanted: int) -> int:
        placed = self._placed.setdefault(key, wanted)
        if placed != wanted and (not self.moves or self.moves[-1] != Move(key, placed, wanted)):
            self.moves.append(Move(key, placed, wanted))
        return placed

    # --- hand-over ----------------------------------------------------------------------------

    def root_of_cluster_queue(self, cq: str) -> str:
        cohort = self._cohort.get(cq, "")
        return self.root_of_cohort(cohort) if cohort else cq

    def _root_of_workload(self, key: str) -> str | None:
        home = self._wl_home.get(key)
        if home is None:
            return None
        cq = home[1] or self._lq.get(home[0], "")  # the ClusterQueue holding its quota, else its queue's
        return self.root_of_cluster_queue(cq) if cq in self._cohort else None

    def _root_of_key(self, key: str) -> str | None:
        kind, _, rest = key.partition("/")
        if kind == "Cohort":
            return self.root_of_cohort(rest)
        if kind == "ClusterQueue":
            return self.root_of_cluster_queue(rest)
        if kind == "LocalQueue":
            cq = self._lq.get(rest)
            return None if cq is None or cq not in self._cohort else self.root_of_cluster_queue(cq)
        if kind == "Workload":
            return self._root_of_workload(rest)
        return None

    def _root_of_event(self, env: Envelope) -> str | None:
        ev = env.event
        if isinstance(ev, ObjectApplied) and isinstance(ev.object, o.Cohort | o.ClusterQueue | o.LocalQueue
                                                        | o.Workload):
            return self._root_of_key(_key_of(ev.object))
        if isinstance(ev, ObjectDeleted):
            return self._root_of_key(f"{ev.kind}/{ev.namespace}/{ev.name}" if ev.namespace else f"{ev.kind}/{ev.name}")
        if isinstance(ev, _WORKLOAD_EVENTS):
            return self._root_of_workload(f"{ev.namespace}/{ev.name}")
        if isinstance(ev, ProvisioningRequestObserved):
            return self._root_of_workload(f"{ev.namespace}/{ev.workload}")
        return None

    def trees(self) -> dict[str, dict[str, int]]:
        """Every placed tree object and workload by the root of its tree: key -> shard."""
        out: dict[str, dict[str, int]] = {}
        for key, shard in self._placed.items():
            root = self._root_of_key(key)
            if root is not None:
                out.setdefault(root, {})[key] = shard
        return out

    def start_hand_overs(self) -> list[tuple[int, Envelope]]:
        """A hand-over for every placed tree the map puts on another shard (and none in progress):
        its marker, for the shard it leaves. The tree's objects are placed on the new shard at once;
        their events are held until it adopts the tree."""
        out: list[tuple[int, Envelope]] = []
        for root, keys in sorted(self.trees().items()):
            if root in self._transit:
                continue
            anchor = keys.get(f"Cohort/{root}", keys.get(f"ClusterQueue/{root}"))
            placed = anchor if anchor is not None else min(keys.values())
            wanted = self.map.shard_of(root)
            if placed == wanted:
                continue
            n = sum(1 for h in self.hand_overs.values() if h.root == root)
            ho = HandOver(id=hand_over_id(root, n), root=root, source=placed, target=wanted, time=self.now)
            self._begin(ho, keys)
            marker = TreeHandOver(time=ho.time, root=root, to_shard=wanted, handover=ho.id)
            out.append((placed, Envelope(id=f"{ho.id}:marker", source="shard-router", event=marker)))
        return out

    def _begin(self, ho: HandOver, keys: Mapping[str, int]) -> None:
        """The tree's objects on the shard it leaves are its new shard's from now. One placed on a
        third shard (a move not carried out, see :attr:`moves`) keeps it: its state is there."""
        self.hand_overs[ho.id] = ho
        self._transit[ho.root] = ho
        for key, shard in keys.items():
            if shard == ho.source:
                self._placed[key] = ho.target

    def adopt(self, handover: str, state: msgspec.Raw) -> Envelope:
        """The old shard released the tree: the event that gives it to the new shard (to be
        appended there before the held events). The tree's events go there directly from now."""
        ho = self.hand_overs[handover]
        ho.adopted = True
        self._transit.pop(ho.root, None)
        return Envelope(id=f"{ho.id}:adopted", source="shard-router",
                        event=TreeAdopted(time=ho.time, root=ho.root, from_shard=ho.source, handover=ho.id,
                                          state=state))

    def in_transit(self) -> list[HandOver]:
        return sorted(self._transit.values(), key=lambda h: h.id)

    @staticmethod
    def forwarded(env: Envelope, target: int) -> Envelope:
        """``env``, appended on a tree's old shard after its hand-over by a service of that shard,
        as forwarded to the new one."""
        return Envelope(id=f"{env.id}:to-shard-{target}", source=env.source, cluster=env.cluster,
                        event=env.event, correlation_id=env.correlation_id or env.id)

    @staticmethod
    def about_workload(env: Envelope) -> str | None:
        """The workload (``ns/name``) a workload event is about, for forwarding; None otherwise."""
        ev = env.event
        if isinstance(ev, _WORKLOAD_EVENTS):
            return f"{ev.namespace}/{ev.name}"
        if isinstance(ev, ProvisioningRequestObserved):
            return f"{ev.namespace}/{ev.workload}"
        return None

    # --- recovery ---------------------------------------------------------------------------

    def placed_on(self, env: Envelope, shard: int) -> None:
        """``env`` was found on ``shard``'s log (read shard after shard): learn from it where each
        object lives. :meth:`settle` then makes it the router that routed those logs."""
        ev = env.event
        self.now = max(self.now, ev.time)
        if isinstance(ev, TreeHandOver):
            self._markers.append((shard, ev))
        elif isinstance(ev, TreeAdopted):
            self._adopted.add(ev.handover)
        elif isinstance(ev, ObjectApplied) and isinstance(ev.object, o.Cohort | o.ClusterQueue | o.LocalQueue
                                                          | o.Workload):
            self._found.setdefault(_key_of(ev.object), {})[shard] = ev.object
        elif isinstance(ev, ObjectDeleted) and ev.kind in ("Cohort", "ClusterQueue", "LocalQueue", "Workload"):
            key = f"{ev.kind}/{ev.namespace}/{ev.name}" if ev.namespace else f"{ev.kind}/{ev.name}"
            self._found.get(key, {}).pop(shard, None)

    def settle(self) -> list[tuple[int, Envelope]]:
        """After :meth:`placed_on` saw every shard: each object is where it was last applied and not
        deleted since (a safe move leaves it deleted on the shard it left), and what was provisional
        is again. An object found on two shards is a move cut short (its deletion on the shard it
        left was not written): the deletions that finish it are returned, to be appended."""
        found, self._found = self._found, {}
        workloads: list[o.Workload] = []
        for copies in found.values():
            for obj in copies.values():
                self._learn(obj)
        self._settle_hand_overs(found)
        repairs: list[tuple[int, Envelope]] = []
        for key in sorted(found):
            copies = found[key]
            if not copies:
                continue
            shard = self._keep(copies)
            obj = copies[shard]
            self._placed[key] = shard
            repairs += [(other, _repair(obj, other)) for other in sorted(copies) if other != shard]
            self._learn(obj)
            if isinstance(obj, o.Workload):
                workloads.append(obj)
        for key, cq in self._lq.items():
            if cq not in self._cohort:
                lq = found[f"LocalQueue/{key}"]
                self._provisional_lq[key] = lq[min(lq)]  # type: ignore[assignment]
        for wl in workloads:
            lq_key = f"{wl.namespace}/{wl.queue_name}"
            if wl.admission is None and (lq_key not in self._lq or lq_key in self._provisional_lq):
                self._provisional_wl.setdefault(lq_key, {})[f"{wl.namespace}/{wl.name}"] = wl
        return repairs

    def _settle_hand_overs(self, found: dict[str, dict[int, o.AnyObject]]) -> None:
        """Each hand-over found (in the order of each tree's hand-overs): the tree's objects as
        last applied on the shard it left are its new shard's (where the TreeAdopted put them, or
        will), so they are neither a move cut short nor placed on the old shard."""
        markers, self._markers = self._markers, []
        for shard, marker in sorted(markers, key=lambda m: (m[1].root, _hand_over_number(m[1].handover))):
            ho = HandOver(id=marker.handover, root=marker.root, source=shard, target=marker.to_shard,
                          time=marker.time, adopted=marker.handover in self._adopted)
            for key in sorted(found):
                copies = found[key]
                if shard in copies and self._root_of_key(key) == ho.root:
                    copies.setdefault(ho.target, copies.pop(shard))
            self.hand_overs[ho.id] = ho
            if ho.adopted:
                self._transit.pop(ho.root, None)
            else:
                self._transit[ho.root] = ho
        self._adopted = set()

    def _learn(self, obj: o.AnyObject) -> None:
        if isinstance(obj, o.Cohort):
            self._parent[obj.name] = obj.parent
        elif isinstance(obj, o.ClusterQueue):
            self._cohort[obj.name] = obj.cohort
        elif isinstance(obj, o.LocalQueue):
            self._lq[f"{obj.namespace}/{obj.name}"] = obj.cluster_queue
        elif isinstance(obj, o.Workload):
            self._wl_home[f"{obj.namespace}/{obj.name}"] = (
                f"{obj.namespace}/{obj.queue_name}", "" if obj.admission is None else obj.admission.cluster_queue)

    def _keep(self, copies: dict[int, o.AnyObject]) -> int:
        """Of the shards an object is found on, the one it belongs to: its tree's (where a move
        goes), else the lowest."""
        obj = copies[min(copies)]
        wanted: int | None = None
        if isinstance(obj, o.LocalQueue) and obj.cluster_queue in self._cohort:
            wanted = self.shard_of_cluster_queue(obj.cluster_queue)
        elif isinstance(obj, o.Workload):
            cq = self._lq.get(f"{obj.namespace}/{obj.queue_name}")
            wanted = None if cq is None or cq not in self._cohort else self.shard_of_cluster_queue(cq)
        return wanted if wanted in copies else min(copies)

    @staticmethod
    def everywhere(env: Envelope) -> bool:
        """Does ``env`` go to every shard whatever the tree (a cluster-scoped fact)?"""
        ev = env.event
        if isinstance(ev, ObjectApplied):
            return not isinstance(ev.object, o.Cohort | o.ClusterQueue | o.LocalQueue | o.Workload)
        if isinstance(ev, ObjectDeleted):
            return ev.kind not in ("Cohort", "ClusterQueue", "LocalQueue", "Workload")
        return not isinstance(ev, (*_WORKLOAD_EVENTS, ProvisioningRequestObserved, TreeHandOver, TreeAdopted))

    def placement(self) -> dict[str, int]:
        """Where each tree object and workload was placed (a copy, sorted by key)."""
        return dict(sorted(self._placed.items()))


def _key_of(obj: o.Cohort | o.ClusterQueue | o.LocalQueue | o.Workload) -> str:
    if isinstance(obj, o.LocalQueue | o.Workload):
        return f"{type(obj).__name__}/{obj.namespace}/{obj.name}"
    return f"{type(obj).__name__}/{obj.name}"


def _repair(obj: o.AnyObject, shard: int) -> Envelope:
    namespace = getattr(obj, "namespace", "")
    name = getattr(obj, "name", "")
    return Envelope(id=f"shard-repair:{type(obj).__name__}/{namespace}/{name}:{shard}", source="shard-router",
                    event=ObjectDeleted(kind=type(obj).__name__, namespace=namespace, name=name))
