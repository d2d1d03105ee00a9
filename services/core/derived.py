"""What the scheduler keeps beside the canonical state: the derived indices and the cycle's caches.

Neither is ever saved; both can be thrown away at any time without changing a
decision.

- :class:`Index` — the quota tree, one ordered queue per ClusterQueue, the
  admitted workloads per ClusterQueue, the inactive ClusterQueues. A function of
  the canonical state: ``index.rebuild`` builds it from scratch (after a
  configuration change or a snapshot load, marked by ``dirty``); in between,
  ``state``'s fold keeps it current incrementally on workload events, and the
  cycle (``cycle``, ``effects``, ``apply``) takes heads from the queues and puts
  them back. Preemption and fair-sharing simulations (``preemption``,
  ``fairsharing``, ``cycle``'s overlay) add and remove usage in the tree and
  restore it before they return.
- :class:`Cache` — owned by the cycle: the nominations it remembered, per cohort
  tree, and the version of each tree they are valid at. The fold and the
  cycle's effects only bump a tree's version (``state.touch_tree``) when
  something a nomination reads changes under it; ``cycle`` alone reads and
  fills the memo. ``memo_enabled`` switches remembering off (a fresh search for
  every nomination), which must decide exactly the same.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import TYPE_CHECKING

from services.core.quota import Node, NodeKey
from services.core.records import QueueKey, WorkloadRecord

if TYPE_CHECKING:
    from events.messages import PendingReason
    from services.core.flavors import Assignment
    from services.core.preemption import Target


class ClusterQueueQueue:
    """One ClusterQueue's pending workloads: the ordered active queue and the parked ones."""

    __slots__ = ("active", "inadmissible")

    def __init__(self) -> None:
        self.active: list[tuple[QueueKey, str]] = []
        self.inadmissible: dict[str, None] = {}

    def push(self, rec: WorkloadRecord) -> None:
        bisect.insort(self.active, (rec.queue_key(), rec.key))

    def remove(self, rec: WorkloadRecord) -> None:
        if self.active and self.active[0][1] == rec.key:
            del self.active[0]  # the head, as when a cycle's pops are replayed
            return
        entry = (rec.queue_key(), rec.key)
        i = bisect.bisect_left(self.active, entry)
        if i < len(self.active) and self.active[i] == entry:
            del self.active[i]
        self.inadmissible.pop(rec.key, None)

    def unpark_all(self, workloads: Mapping[str, WorkloadRecord]) -> None:
        """Every parked workload back into the ordered queue. Parked workloads were heads, taken
        from the front in order, so they usually all go before what is still queued: then the
        sorted batch is put in front, otherwise the two sorted runs are merged in one sort."""
        if not self.inadmissible:
            return
        back = []
        for key in self.inadmissible:
            rec = workloads[key]
            rec.inadmissible = False
            back.append((rec.queue_key(), key))
        self.inadmissible.clear()
        back.sort()
        active = self.active
        if not active or back[-1] < active[0]:
            active[:0] = back
        else:
            active.extend(back)
            active.sort()

    def __len__(self) -> int:
        return len(self.active) + len(self.inadmissible)


class Index:
    """The derived indices. ``dirty``: they no longer match the canonical state (configuration
    changed, or nothing was built yet) and ``index.rebuild`` must run before they are read."""

    __slots__ = ("admitted", "cluster_queue_nodes", "dirty", "inactive", "nodes", "queues", "tree_members",
                 "tree_queues")

    def __init__(self) -> None:
        self.dirty = True
        self.nodes: dict[NodeKey, Node] = {}  # the quota tree: every cohort and ClusterQueue
        self.cluster_queue_nodes: dict[str, Node] = {}  # the tree's leaves by ClusterQueue name
        self.queues: dict[str, ClusterQueueQueue] = {}
        self.admitted: dict[str, dict[str, None]] = {}  # cq -> workloads holding its quota
        self.tree_members: dict[NodeKey, list[str]] = {}  # root -> ClusterQueues under it (filled lazily)
        # root -> (len(queues) when filled, the queues of the ClusterQueues under it), filled lazily
        self.tree_queues: dict[NodeKey, tuple[int, list[ClusterQueueQueue]]] = {}
        self.inactive: dict[str, tuple[str, str]] = {}  # cq -> (reason, message)


Nomination = tuple["Assignment", tuple["Target", ...], "PendingReason", str]
"""A remembered nomination: its assignment, preemption targets, pending reason and message."""

Memo = dict[tuple[object, ...], Nomination]


class Cache:
    """The cycle's caches: remembered nominations per cohort tree (root), valid while the tree's
    version — the configuration epoch and a counter bumped by ``state.touch_tree`` — is unchanged."""

    __slots__ = ("hits", "memo_enabled", "nominations", "tree_versions")

    def __init__(self, *, memo_enabled: bool = True) -> None:
        self.memo_enabled = memo_enabled
        self.tree_versions: dict[NodeKey, int] = {}
        self.nominations: dict[NodeKey, tuple[tuple[int, int], Memo]] = {}
        self.hits = 0  # nominations answered from the memo (a statistic: nothing reads it to decide)

    @classmethod
    def disabled(cls) -> Cache:
        """Every nomination searched afresh: what the memo must be indistinguishable from."""
        return cls(memo_enabled=False)
