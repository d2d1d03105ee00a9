"""An ElasticQuotaTree's state in its own terms: per node min / max / used, and why, in tree words.

The tree's leaves are the ClusterQueues with ``reclaim_within_nominal`` (the translation of
``events.elasticquota``); the tree's inner nodes are their Cohorts. Per node and resource
(summed over flavors, as ACK's quotas have no flavors):

- ``min``: the subtree's nominal quota (what the node holds: its ``min``);
- ``max``: ``min`` + the node's borrowing limit (the root: its ``min``); ``None``: no limit;
- ``used``: what the admitted workloads of the node's leaves use.

This is what ``status`` reports for the tree (:func:`tree_status`, the shape of ACK's
``ElasticQuota`` status: ``min``, ``max``, ``used`` per node, as quantities), what ``simulate``
prints after its table and what the scheduler exports as metrics; :func:`pending_in_tree_terms`
and :func:`preempted_in_tree_terms` say why a workload waits or was preempted.
Pure: no I/O, iteration over sorted keys only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.cluster import ConditionStatus, ConditionType
from events.quantity import format_amount
from services.core.quota import Node
from services.core.state import State, WorkloadRecord


@dataclass
class TreeNode:
    name: str
    parent: str
    leaf: bool
    min: dict[str, int] = field(default_factory=dict)
    max: dict[str, int | None] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)


def _is_tree_leaf(state: State, cq_name: str) -> bool:
    cq = state.cluster_queues.get(cq_name)
    return cq is not None and cq.preemption.reclaim_within_nominal


def _leaves(node: Node) -> list[Node]:
    if node.is_cluster_queue:
        return [node]
    return [leaf for c in node.children for leaf in _leaves(c)]


def _summed(values: dict[tuple[str, str], int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for (_, resource), v in sorted(values.items()):
        out[resource] = out.get(resource, 0) + v
    return out


def _describe(node: Node) -> TreeNode:
    used: dict[str, int] = {}
    for leaf in _leaves(node):
        for resource, v in _summed(leaf.usage).items():
            used[resource] = used.get(resource, 0) + v
    low = _summed(node.subtree)
    high: dict[str, int | None] = {}
    for resource, amount in low.items():
        limits = [q.borrowing_limit for (_, r), q in sorted(node.quotas.items()) if r == resource]
        if node.parent is None:
            high[resource] = amount
        elif limits and all(x is not None for x in limits):
            high[resource] = amount + sum(x for x in limits if x is not None)
        else:
            high[resource] = None
    return TreeNode(name=node.name, parent=node.parent.name if node.parent else "", leaf=node.is_cluster_queue,
                    min=low, max=high, used=used)


def tree_nodes(state: State) -> list[TreeNode]:
    """Every node of every tree (parents first, then by name), empty without a translated tree."""
    state.ensure_indexed()
    roots: dict[str, Node] = {}
    for name in sorted(state.index.cluster_queue_nodes):
        if _is_tree_leaf(state, name):
            root = state.cq_node(name).root()
            roots.setdefault(root.name, root)
    out: list[TreeNode] = []
    for _, root in sorted(roots.items()):
        stack = [root]
        while stack:
            node = stack.pop()
            out.append(_describe(node))
            stack.extend(sorted(node.children, key=lambda n: n.name, reverse=True))
    return out


def _quantities(values: dict[str, int] | dict[str, int | None]) -> dict[str, str]:
    return {r: format_amount(r, v) for r, v in sorted(values.items()) if v is not None}


def tree_status(state: State) -> list[dict[str, object]]:
    """Per node: ``{name, parent, min, max, used}`` with quantities as Kubernetes writes them."""
    return [{"name": n.name, "parent": n.parent, "min": _quantities(n.min), "max": _quantities(n.max),
             "used": _quantities(n.used)} for n in tree_nodes(state)]


def _amount(resource: str, value: int) -> str:
    return f"{format_amount(resource, value)} {resource}"


def _request(rec: WorkloadRecord) -> dict[str, int]:
    out: dict[str, int] = {}
    for ps in rec.obj.pod_sets:
        for resource, v in ps.requests:
            out[resource] = out.get(resource, 0) + v * ps.count
    return out


def _queue_of(state: State, rec: WorkloadRecord) -> str | None:
    lq = state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}")
    return lq.cluster_queue if lq is not None else None


def pending_in_tree_terms(state: State, rec: WorkloadRecord) -> list[str]:
    """Why a pending workload of a tree leaf waits, as ACK would put it (empty when not in a tree)."""
    leaf_name = _queue_of(state, rec)
    if leaf_name is None or not _is_tree_leaf(state, leaf_name) or rec.admission is not None:
        return []
    state.ensure_indexed()
    nodes = {n.name: n for n in tree_nodes(state)}
    out: list[str] = []
    for resource, want in sorted(_request(rec).items()):
        node = nodes.get(leaf_name)
        leaf = node
        while node is not None:
            high = node.max.get(resource)
            used = node.used.get(resource, 0)
            if high is not None and used + want > high:
                at = "at" if used >= high else f"at {_amount(resource, used)} of"
                out.append(f"{node.name} is {at} max {_amount(resource, high)}: {_amount(resource, want)} more "
                           "does not fit")
                break
            node = nodes.get(node.parent)
        if leaf is not None and leaf.used.get(resource, 0) + want > leaf.min.get(resource, 0):
            out.append(f"{leaf.name} would go past its min {_amount(resource, leaf.min.get(resource, 0))} "
                       f"(uses {_amount(resource, leaf.used.get(resource, 0))}): beyond its min it only borrows idle "
                       "quota and reclaims nothing")
    return out


def preempted_in_tree_terms(state: State, rec: WorkloadRecord) -> str:
    """For a workload preempted to give a tree leaf back its min: what was reclaimed from whom."""
    cond = rec.conditions.get(ConditionType.PREEMPTED)
    victim_cq = rec.obj.queue_name and _queue_of(state, rec)
    if cond is None or cond.status != ConditionStatus.TRUE or not victim_cq or not _is_tree_leaf(state, victim_cq):
        return ""
    preemptor = next((r for _, r in sorted(state.workloads.items()) if r.obj.uid and f"UID: {r.obj.uid}," in
                      cond.message), None)
    if preemptor is None:
        return ""
    to = _queue_of(state, preemptor) or "?"
    amounts = ", ".join(_amount(r, v) for r, v in sorted(_request(rec).items()))
    return f"reclaimed {amounts} of {to}'s min from {victim_cq}"
