"""Rebuilding the derived indices (quota tree, queues, inactive ClusterQueues) from state.

Run after any configuration change; workload events then keep the indices up
to date incrementally. Everything is visited in sorted order so that a rebuild
is deterministic.
"""

from __future__ import annotations

from events import objects as o
from services.core.quota import FR, Node, recompute_subtree
from services.core.state import ClusterQueueQueue, State


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


def rebuild(state: State) -> None:
    nodes: dict[str, Node] = {}
    cyclic: set[str] = set()
    for name in _cohort_names(state):
        node = Node(name, is_cluster_queue=False)
        spec = state.cohorts.get(name)
        if spec is not None:
            node.quotas = _quotas(spec.resource_groups)
        nodes["cohort/" + name] = node
    for name in _cohort_names(state):
        spec = state.cohorts.get(name)
        if spec is None or not spec.parent:
            continue
        # Refuse a parent link that would close a cycle; CQs in such a tree are inactive.
        walk, seen = spec.parent, {name}
        while walk and walk not in seen:
            seen.add(walk)
            parent_spec = state.cohorts.get(walk)
            walk = parent_spec.parent if parent_spec else ""
        if walk:
            cyclic.update(seen)
            continue
        child, parent = nodes["cohort/" + name], nodes["cohort/" + spec.parent]
        child.parent = parent
        parent.children.append(child)
    state.inactive = {}
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        node = Node(name, is_cluster_queue=True)
        node.quotas = _quotas(cq.resource_groups)
        if cq.cohort:
            parent = nodes["cohort/" + cq.cohort]
            node.parent = parent
            parent.children.append(node)
        nodes["cq/" + name] = node
        state.inactive.pop(name, None)
        missing = sorted({fq.name for g in cq.resource_groups for fq in g.flavors if fq.name not in state.flavors})
        missing_checks = sorted({c for c in cq.admission_checks if c not in state.admission_checks})
        if missing:
            state.inactive[name] = (
                "FlavorNotFound", f"Can't admit new workloads: references missing ResourceFlavor(s): {missing}"
            )
        elif missing_checks:
            state.inactive[name] = (
                "AdmissionCheckNotFound",
                f"Can't admit new workloads: references missing AdmissionCheck(s): {missing_checks}",
            )
        elif cq.stop_policy != o.StopPolicy.NONE:
            state.inactive[name] = ("Stopped", "Can't admit new workloads: is stopped")
        elif cq.cohort and _in_cycle(state, cq.cohort, cyclic):
            state.inactive[name] = ("CohortCycle", f"Can't admit new workloads: cohort {cq.cohort} is in a cycle")
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.is_cluster_queue, n.name))
    state.admitted = {name: {} for name in sorted(state.cluster_queues)}
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        if rec.admission is None or rec.admission.cluster_queue not in state.cluster_queues:
            continue
        state.admitted[rec.admission.cluster_queue][key] = None
        cq_node = nodes["cq/" + rec.admission.cluster_queue]
        for fr, v in rec.usage.items():
            cq_node.usage[fr] = cq_node.usage.get(fr, 0) + v
    for node in nodes.values():
        if node.parent is None:
            recompute_subtree(node)
    state.nodes = nodes
    state.tree_members = {}
    state.queues = {name: ClusterQueueQueue() for name in sorted(state.cluster_queues)}
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        rec.queued_in = ""
        if not rec.pending:
            continue
        cq_name, problem = state.cluster_queue_for(rec.obj)
        if problem:
            continue
        rec.queued_in = cq_name
        queue = state.queues[cq_name]
        if rec.inadmissible:
            queue.inadmissible[key] = None
        else:
            queue.push(rec)


def _in_cycle(state: State, cohort: str, cyclic: set[str]) -> bool:
    walk, seen = cohort, set()
    while walk and walk not in seen:
        if walk in cyclic:
            return True
        seen.add(walk)
        spec = state.cohorts.get(walk)
        walk = spec.parent if spec else ""
    return False
