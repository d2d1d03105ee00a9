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

Once an object has gone to a shard it stays there (it is *placed*): a later change of the tree
(a ClusterQueue given another cohort, a Cohort another parent, a LocalQueue another ClusterQueue,
a map that names another shard) that would put it elsewhere is recorded in :attr:`ShardRouter.moves`
and the object keeps its shard. Moving a tree that holds quota needs the old shard's state at the
moment of the move (a hand-over, not implemented yet); until then a tree is moved by draining it.

A workload whose LocalQueue is not known goes to shard 0 (where, as unsharded, it waits with
``QueueNotFound``); a LocalQueue whose ClusterQueue is not known goes to the shard its
ClusterQueue would have without a cohort. Publish the queues before the workloads (the watcher
lists them first; arrivals release every non-Workload object first) and neither happens.
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
        self.moves: list[Move] = []

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
        """The shards ``env`` goes to (learning what it says about the tree first)."""
        ev = env.event
        if isinstance(ev, ObjectApplied):
            return self._applied(ev.object)
        if isinstance(ev, ObjectDeleted):
            return self._deleted(ev)
        if isinstance(ev, _WORKLOAD_EVENTS):
            return (self._workload(ev.namespace, ev.name),)
        if isinstance(ev, ProvisioningRequestObserved):
            return (self._workload(ev.namespace, ev.workload),)
        return self.every

    def _applied(self, obj: o.AnyObject) -> tuple[int, ...]:
        if isinstance(obj, o.Cohort):
            self._parent[obj.name] = obj.parent
            return (self._place(f"Cohort/{obj.name}", self.map.shard_of(self.root_of_cohort(obj.name))),)
        if isinstance(obj, o.ClusterQueue):
            self._cohort[obj.name] = obj.cohort
            return (self._place(f"ClusterQueue/{obj.name}", self.shard_of_cluster_queue(obj.name)),)
        if isinstance(obj, o.LocalQueue):
            self._lq[f"{obj.namespace}/{obj.name}"] = obj.cluster_queue
            return (self._place(f"LocalQueue/{obj.namespace}/{obj.name}",
                                self.shard_of_cluster_queue(obj.cluster_queue)),)
        if isinstance(obj, o.Workload):
            return (self._workload(obj.namespace, obj.name, obj),)
        return self.every

    def _deleted(self, ev: ObjectDeleted) -> tuple[int, ...]:
        key = f"{ev.kind}/{ev.namespace}/{ev.name}" if ev.namespace else f"{ev.kind}/{ev.name}"
        if ev.kind == "Workload":
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
            wanted = self.shard_of_local_queue(namespace, obj.queue_name)
            if wanted is None and obj.admission is not None:
                wanted = self.shard_of_cluster_queue(obj.admission.cluster_queue)
        return self._place(key, DEFAULT_SHARD if wanted is None else wanted)

    def _place(self, key: str, wanted: int) -> int:
        placed = self._placed.setdefault(key, wanted)
        if placed != wanted and (not self.moves or self.moves[-1] != Move(key, placed, wanted)):
            self.moves.append(Move(key, placed, wanted))
        return placed

    # --- recovery ---------------------------------------------------------------------------

    def placed_on(self, env: Envelope, shard: int) -> None:
        """``env`` was found on ``shard``'s log: learn the tree from it, and place what it is about
        there (a restarted publisher routes the rest of each object's events the same way)."""
        ev = env.event
        key: str | None = None
        if isinstance(ev, ObjectApplied):
            obj = ev.object
            if isinstance(obj, o.Cohort):
                self._parent[obj.name] = obj.parent
                key = f"Cohort/{obj.name}"
            elif isinstance(obj, o.ClusterQueue):
                self._cohort[obj.name] = obj.cohort
                key = f"ClusterQueue/{obj.name}"
            elif isinstance(obj, o.LocalQueue):
                self._lq[f"{obj.namespace}/{obj.name}"] = obj.cluster_queue
                key = f"LocalQueue/{obj.namespace}/{obj.name}"
            elif isinstance(obj, o.Workload):
                key = f"Workload/{obj.namespace}/{obj.name}"
        if key is not None:
            self._placed[key] = shard

    def placement(self) -> dict[str, int]:
        """Where each tree object and workload was placed (a copy, sorted by key)."""
        return dict(sorted(self._placed.items()))
