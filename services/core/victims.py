"""The workloads a cycle has chosen to preempt so far, and the fit check that counts them as gone.

Kueue checks each later head of a cycle against the quota tree with every victim of the cycle
so far removed (``fits`` in ``pkg/scheduler/scheduler.go``). Removing and restoring them costs
one walk up the tree per victim and head: with a thousand preemptors of a dozen victims each,
as when large workloads arrive in every ClusterQueue of Kueue's large-scale scenario, that is
millions of walks per cycle. :class:`Victims` keeps instead, per (flavor, resource), the usage
of the victims summed per ClusterQueue node and, per Cohort, the children with victims below
them. A check then computes what each node on the head's path would use without them — a
ClusterQueue its usage less its victims', a Cohort the part of its children's usage above what
they keep for themselves (``Node.guaranteed``), as ``Node.remove_usage`` would leave it — and
what the head's ClusterQueue may use then, by Kueue's ``available`` (``Node.available``'s
formula over those usages). Nothing in the tree moves; the amounts are the ones the removals
would give, exactly (``tests/property/test_scale_properties.py`` compares both on random
histories).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.core.quota import FR, Node
from services.core.state import State, WorkloadRecord


class _Removed:
    """Victims' usage per (flavor, resource): summed per ClusterQueue node, and per Cohort the
    children with some of it below them."""

    __slots__ = ("below", "own")

    def __init__(self) -> None:
        self.own: dict[FR, dict[Node, int]] = {}
        self.below: dict[FR, dict[Node, dict[Node, None]]] = {}

    def add(self, node: Node, rec: WorkloadRecord) -> None:
        for fr, v in rec.usage.items():
            own = self.own.get(fr)
            if own is None:
                own = self.own[fr] = {}
            own[node] = own.get(node, 0) + v
            below = self.below.get(fr)
            if below is None:
                below = self.below[fr] = {}
            child, parent = node, node.parent
            while parent is not None:
                kids = below.get(parent)
                if kids is None:
                    kids = below[parent] = {}
                kids[child] = None
                child, parent = parent, parent.parent


class Victims(dict[str, WorkloadRecord]):
    """Key -> record of the workloads preempted so far in a cycle (a dict, as the cycle reads it),
    with their usage summed for :meth:`fits`. Only ``victims[key] = rec`` adds one."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self._state = state
        self._removed = _Removed()
        self._by_root: dict[Node, list[WorkloadRecord]] = {}

    def __setitem__(self, key: str, rec: WorkloadRecord) -> None:
        if key not in self and rec.admission is not None:
            node = self._state.cq_node(rec.admission.cluster_queue)
            self._removed.add(node, rec)
            self._by_root.setdefault(node.root(), []).append(rec)
        super().__setitem__(key, rec)

    def in_tree(self, node: Node) -> list[WorkloadRecord]:
        """The victims so far that were admitted in ``node``'s cohort tree, in the order chosen."""
        return self._by_root.get(node.root(), [])

    def fits(self, node: Node, usage: dict[FR, int], targets: Sequence[WorkloadRecord]) -> bool:
        """Whether ``usage`` fits ``node`` (a ClusterQueue) once every victim so far and ``targets``
        (the head's own, none of them a victim yet) are gone."""
        if not targets and node.root() not in self._by_root:
            # Nothing leaves this tree: the fit as the tree stands (most heads of a cycle).
            return all(v <= max(0, node.available(fr)) for fr, v in usage.items())
        extra = _Removed()
        for rec in targets:
            if rec.admission is not None:
                extra.add(self._state.cq_node(rec.admission.cluster_queue), rec)
        for fr, v in usage.items():
            layers = [(r.own.get(fr, {}), r.below.get(fr, {})) for r in (self._removed, extra)]
            if v > max(0, _available(node, fr, _UsageAfter(fr, layers))):
                return False
        return True


class _UsageAfter:
    """A node's usage of one (flavor, resource) with the victims gone (memoised per check)."""

    __slots__ = ("fr", "layers", "memo")

    def __init__(self, fr: FR, layers: list[tuple[dict[Node, int], dict[Node, dict[Node, None]]]]) -> None:
        self.fr = fr
        self.layers = layers
        self.memo: dict[Node, int] = {}

    def __call__(self, node: Node) -> int:
        known = self.memo.get(node)
        if known is not None:
            return known
        fr = self.fr
        used = node.usage.get(fr, 0)
        if node.is_cluster_queue:
            for own, _ in self.layers:
                used -= own.get(node, 0)
        else:
            kids: dict[Node, None] = {}
            for _, below in self.layers:
                kids.update(below.get(node, {}))
            for child in kids:
                kept = child.guaranteed(fr)
                before = child.usage.get(fr, 0)
                used -= max(0, before - kept) - max(0, self(child) - kept)
        self.memo[node] = used
        return used


def _available(node: Node, fr: FR, used: _UsageAfter) -> int:
    """``Node.available`` with each node's usage given by ``used``."""
    parent = node.parent
    u = used(node)
    if parent is None:
        return node.subtree.get(fr, 0) - u
    kept = node.guaranteed(fr)
    local = max(0, kept - u)
    parent_available = _available(parent, fr, used)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        stored_in_parent = node.subtree.get(fr, 0) - kept
        used_in_parent = max(0, u - kept)
        parent_available = min(stored_in_parent - used_in_parent + q.borrowing_limit, parent_available)
    return local + parent_available
