"""The quota tree: ClusterQueues and Cohorts as resource nodes, with Kueue's arithmetic.

Each ClusterQueue is a leaf; each Cohort (named by a ClusterQueue's ``cohort``
or declared as an object, possibly with a ``parentName``) is an inner node. For
every (flavor, resource) a node keeps

- ``quotas``: its own nominal quota and borrowing / lending limits,
- ``subtree``: the quota it can offer upwards — its nominal for a ClusterQueue,
  its own nominal plus what each child lends for a Cohort,
- ``usage``: for a ClusterQueue what its admitted workloads use, for a Cohort
  the part of its children's usage that exceeds what they keep for themselves,
- ``over``: the children using more of a (flavor, resource) than their ``subtree``
  quota, kept current by every change of usage (``add_usage``, ``remove_usage``,
  ``recompute_subtree``), so that a preemption search visits only the children it can
  take from rather than every ClusterQueue of a cohort.

The formulas are those of Kueue's ``pkg/cache/scheduler/resource_node.go``
(``guaranteedQuota``, ``available``, ``potentialAvailable``, ``addUsage``,
``removeUsage``); all amounts are integers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import NamedTuple

from events.objects import Quota

FR = tuple[str, str]
"""A (flavor, resource) pair."""


class NodeKind(StrEnum):
    COHORT = "cohort"
    CLUSTER_QUEUE = "cq"


class NodeKey(NamedTuple):
    """A node of the quota tree: a ClusterQueue and a Cohort may share a name, their keys never.
    Keys sort as their old ``"kind/name"`` strings did (cohorts first, then by name)."""

    kind: NodeKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def cluster_queue_key(name: str) -> NodeKey:
    return NodeKey(NodeKind.CLUSTER_QUEUE, name)


def cohort_key(name: str) -> NodeKey:
    return NodeKey(NodeKind.COHORT, name)


class Node:
    __slots__ = ("children", "height", "is_cluster_queue", "key", "name", "over", "parent", "quotas", "subtree",
                 "usage")

    def __init__(self, name: str, *, is_cluster_queue: bool) -> None:
        self.name = name
        self.is_cluster_queue = is_cluster_queue
        self.key = cluster_queue_key(name) if is_cluster_queue else cohort_key(name)
        self.parent: Node | None = None
        self.children: list[Node] = []
        self.quotas: dict[FR, Quota] = {}
        self.subtree: dict[FR, int] = {}
        self.usage: dict[FR, int] = {}
        self.over: dict[FR, dict[Node, None]] = {}  # children using more than their subtree quota
        self.height = 0

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node({self.key.kind} {self.name})"

    # --- Kueue's resource node formulas ------------------------------------------------

    def guaranteed(self, fr: FR) -> int:
        """Quota this node keeps for itself: what it does not lend (0 without a lendingLimit)."""
        q = self.quotas.get(fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - q.lending_limit)

    def local_available(self, fr: FR) -> int:
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))

    def available(self, fr: FR) -> int:
        """How much more of ``fr`` this node may use now, borrowing where allowed."""
        parent = self.parent
        if parent is None:
            return self.subtree.get(fr, 0) - self.usage.get(fr, 0)
        local = self.local_available(fr)
        parent_available = parent.available(fr)
        q = self.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            stored_in_parent = self.subtree.get(fr, 0) - self.guaranteed(fr)
            used_in_parent = max(0, self.usage.get(fr, 0) - self.guaranteed(fr))
            parent_available = min(stored_in_parent - used_in_parent + q.borrowing_limit, parent_available)
        return local + parent_available

    def potential_available(self, fr: FR) -> int:
        """The most of ``fr`` this node could ever use if nothing else in its tree were used."""
        parent = self.parent
        if parent is None:
            return self.subtree.get(fr, 0)
        avail = self.guaranteed(fr) + parent.potential_available(fr)
        q = self.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            avail = min(self.subtree.get(fr, 0) + q.borrowing_limit, avail)
        return avail

    def add_usage(self, fr: FR, value: int) -> None:
        node: Node | None = self
        while node is not None and value:
            local = node.local_available(fr)
            used = node.usage[fr] = node.usage.get(fr, 0) + value
            parent = node.parent
            if parent is not None and used > node.subtree.get(fr, 0):  # usage only grows here
                over = parent.over.get(fr)
                if over is None:
                    over = parent.over[fr] = {}
                over[node] = None
            value = max(0, value - local)
            node = parent

    def remove_usage(self, fr: FR, value: int) -> None:
        node: Node | None = self
        while node is not None and value:
            stored_in_parent = node.usage.get(fr, 0) - node.guaranteed(fr)
            used = node.usage[fr] = node.usage.get(fr, 0) - value
            parent = node.parent
            if parent is not None and used <= node.subtree.get(fr, 0):  # usage only shrinks here
                over = parent.over.get(fr)
                if over:
                    over.pop(node, None)
            if stored_in_parent <= 0:
                return
            value = min(value, stored_in_parent)
            node = node.parent

    def children_over(self, frs: Iterable[FR]) -> list[Node]:
        """The children using more than their subtree quota of any of ``frs``, in children order."""
        found: dict[Node, None] = {}
        for fr in frs:
            over = self.over.get(fr)
            if over:
                found.update(over)
        if not found:
            return []
        return sorted(found, key=_child_order)

    # --- helpers for the scheduler ------------------------------------------------------

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def borrowing_with(self, fr: FR, value: int) -> bool:
        return self.subtree.get(fr, 0) < self.usage.get(fr, 0) + value

    def lowest_subtree_that_fits(self, fr: FR, value: int) -> tuple[int, bool]:
        """(borrowing level, may reclaim in hierarchy): 0 if ``value`` more of ``fr`` fits this
        ClusterQueue's own quota, else the height of the lowest cohort whose subtree covers it
        (Kueue's ``FindHeightOfLowestSubtreeThatFits``). Heads that borrow from nearer in the
        tree are ordered before those that borrow from further."""
        if not self.borrowing_with(fr, value) or self.parent is None:
            return 0, self.parent is not None
        remaining = value - self.local_available(fr)
        node: Node | None = self.parent
        last = self.parent
        while node is not None:
            if not node.borrowing_with(fr, remaining):
                return node.height, node.parent is not None
            remaining -= node.local_available(fr)
            last = node
            node = node.parent
        return last.height, False

    def fits(self, usage: Mapping[FR, int]) -> bool:
        return all(v <= self.available(fr) for fr, v in usage.items())

    def ancestors(self) -> Iterable[Node]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


def _child_order(node: Node) -> tuple[bool, str]:
    return node.is_cluster_queue, node.name


def recompute_subtree(root: Node) -> None:
    """Bottom-up SubtreeQuota, cohort usage and height, as Kueue's ``updateCohortTreeResources``.

    Children before parents, in an explicit order rather than by recursion: a tree's depth is
    bounded where Cohorts come in, but this walk does not depend on it."""
    order: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children)
    for node in reversed(order):
        _recompute_node(node)


def _recompute_node(node: Node) -> None:
    if node.is_cluster_queue:
        node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        node.height = 0
        node.over = {}
        return
    node.height = max([min(len(node.children), 1)] + [c.height + 1 for c in node.children if not c.is_cluster_queue])
    subtree = {fr: q.nominal for fr, q in node.quotas.items()}
    usage: dict[FR, int] = {}
    over_nominal: dict[FR, dict[Node, None]] = {}
    for child in node.children:
        for fr, v in child.subtree.items():
            subtree[fr] = subtree.get(fr, 0) + v - child.guaranteed(fr)
        for fr, u in child.usage.items():
            over = max(0, u - child.guaranteed(fr))
            if over:
                usage[fr] = usage.get(fr, 0) + over
            if u > child.subtree.get(fr, 0):
                over_nominal.setdefault(fr, {})[child] = None
    node.subtree = subtree
    node.usage = usage
    node.over = over_nominal
