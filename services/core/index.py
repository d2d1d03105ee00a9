"""Rebuilding the derived indices (``state.index``) from the canonical state, as a recipe.

1. A node for every cohort named anywhere (declared, or named by a ClusterQueue
   or as a parent), with its own quota when it is declared.
2. Link each declared cohort to its parent, refusing a link that would close a
   cycle (the ClusterQueues of such a tree become inactive).
3. A leaf for every ClusterQueue, under its cohort.
4. Which ClusterQueues are inactive, and why.
5. Order every node's children (cohorts first, then by name).
6. The admitted workloads per ClusterQueue, and their usage in the leaves.
7. Subtree quota, cohort usage and heights, bottom-up from every root.
8. One queue per ClusterQueue with its pending workloads (active or parked).

Run after any configuration change and after a snapshot load; workload events
then keep the indices up to date incrementally (``state``). Everything is
visited in sorted order so that a rebuild is deterministic. Only the index and
each record's ``queued_in`` (itself an index) are written; the canonical state
is only read.
"""

from __future__ import annotations

from events import objects as o
from services.core import checks
from services.core.derived import ClusterQueueQueue, Index
from services.core.quota import FR, Node, NodeKey, cluster_queue_key, cohort_key, recompute_subtree
from services.core.state import State


def rebuild(state: State) -> None:
    index = Index()
    nodes = _cohort_nodes(state)  # 1
    cyclic = _link_cohorts(state, nodes)  # 2
    index.cluster_queue_nodes = _cluster_queue_nodes(state, nodes)  # 3
    index.inactive = _inactive(state, cyclic)  # 4
    _order_children(nodes)  # 5
    index.admitted = _admitted(state, index.cluster_queue_nodes)  # 6
    _recompute_roots(nodes)  # 7
    index.queues = _queues(state)  # 8
    index.nodes = nodes
    index.dirty = False
    state.index = index


def _quotas(groups: tuple[o.ResourceGroup, ...]) -> dict[FR, o.Quota]:
    out: dict[FR, o.Quota] = {}
    for group in groups:
        for fq in group.flavors:
            for res, q in fq.resources:
                out[(fq.name, res)] = q
    return out


def _cohort_names(state: State) -> list[str]:
    names = {cq.cohort for cq in state.cluster_queues.values() if cq.cohort}
    names.update(state.cohorts)
    names.update(c.parent for c in state.cohorts.values() if c.parent)
    return sorted(names)


def _cohort_nodes(state: State) -> dict[NodeKey, Node]:
    nodes: dict[NodeKey, Node] = {}
    for name in _cohort_names(state):
        node = Node(name, is_cluster_queue=False)
        spec = state.cohorts.get(name)
        if spec is not None:
            node.quotas = _quotas(spec.resource_groups)
        nodes[node.key] = node
    return nodes


def _link_cohorts(state: State, nodes: dict[NodeKey, Node]) -> set[str]:
    """Parent links between cohorts; returns the cohorts on or below a cycle, left unlinked."""
    cyclic: set[str] = set()
    for name in _cohort_names(state):
        spec = state.cohorts.get(name)
        if spec is None or not spec.parent:
            continue
        walk, seen = spec.parent, {name}
        while walk and walk not in seen:
            seen.add(walk)
            parent_spec = state.cohorts.get(walk)
            walk = parent_spec.parent if parent_spec else ""
        if walk:
            cyclic.update(seen)
            continue
        child, parent = nodes[cohort_key(name)], nodes[cohort_key(spec.parent)]
        child.parent = parent
        parent.children.append(child)
    return cyclic


def _cluster_queue_nodes(state: State, nodes: dict[NodeKey, Node]) -> dict[str, Node]:
    """A leaf per ClusterQueue, added to ``nodes`` and returned by name."""
    leaves: dict[str, Node] = {}
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        node = Node(name, is_cluster_queue=True)
        node.quotas = _quotas(cq.resource_groups)
        if cq.cohort:
            parent = nodes[cohort_key(cq.cohort)]
            node.parent = parent
            parent.children.append(node)
        nodes[cluster_queue_key(name)] = leaves[name] = node
    return leaves


def _inactive(state: State, cyclic: set[str]) -> dict[str, tuple[str, str]]:
    inactive: dict[str, tuple[str, str]] = {}
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        missing = sorted({fq.name for g in cq.resource_groups for fq in g.flavors if fq.name not in state.flavors})
        missing_checks, inactive_checks = checks.inactive_checks(state, cq)
        if missing:
            inactive[name] = (
                "FlavorNotFound", f"Can't admit new workloads: references missing ResourceFlavor(s): {missing}"
            )
        elif missing_checks:
            inactive[name] = (
                "AdmissionCheckNotFound",
                f"Can't admit new workloads: references missing AdmissionCheck(s): {missing_checks}",
            )
        elif inactive_checks:
            inactive[name] = (
                "AdmissionCheckInactive",
                f"Can't admit new workloads: references inactive AdmissionCheck(s): {inactive_checks}",
            )
        elif cq.stop_policy != o.StopPolicy.NONE:
            inactive[name] = ("Stopped", "Can't admit new workloads: is stopped")
        elif cq.cohort and _in_cycle(state, cq.cohort, cyclic):
            inactive[name] = ("CohortCycle", f"Can't admit new workloads: cohort {cq.cohort} is in a cycle")
    return inactive


def _in_cycle(state: State, cohort: str, cyclic: set[str]) -> bool:
    walk, seen = cohort, set()
    while walk and walk not in seen:
        if walk in cyclic:
            return True
        seen.add(walk)
        spec = state.cohorts.get(walk)
        walk = spec.parent if spec else ""
    return False


def _order_children(nodes: dict[NodeKey, Node]) -> None:
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.is_cluster_queue, n.name))


def _admitted(state: State, leaves: dict[str, Node]) -> dict[str, dict[str, None]]:
    """The workloads holding each ClusterQueue's quota, their usage added to its leaf."""
    admitted: dict[str, dict[str, None]] = {name: {} for name in sorted(state.cluster_queues)}
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        if rec.admission is None or rec.admission.cluster_queue not in state.cluster_queues:
            continue
        admitted[rec.admission.cluster_queue][key] = None
        leaf = leaves[rec.admission.cluster_queue]
        for fr, v in rec.usage.items():
            leaf.usage[fr] = leaf.usage.get(fr, 0) + v
    return admitted


def _recompute_roots(nodes: dict[NodeKey, Node]) -> None:
    for node in nodes.values():
        if node.parent is None:
            recompute_subtree(node)


def _queues(state: State) -> dict[str, ClusterQueueQueue]:
    """Every pending workload in its ClusterQueue's queue (``queued_in`` set on each record)."""
    queues = {name: ClusterQueueQueue() for name in sorted(state.cluster_queues)}
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        rec.queued_in = ""
        if not rec.pending or not rec.active or key in state.backing_off:
            continue
        cq_name, problem = state.cluster_queue_for(rec.obj)
        if problem:
            continue
        rec.queued_in = cq_name
        queue = queues[cq_name]
        if rec.inadmissible:
            queue.inadmissible[key] = None
        else:
            queue.push(rec)
    return queues
