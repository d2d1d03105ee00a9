"""What the web view shows, as plain JSON made from the folded state.

- :func:`overview`: the cohort trees (every node's quota and usage per flavor and resource),
  the ClusterQueues (nominal, used, borrowed from the cohort, unused quota it lends out) and
  the LocalQueues with their pending and admitted counts;
- :func:`workloads`: the workload list, filtered;
- :class:`UsageHistory`: usage per ClusterQueue and per flavor over simulated time, one sample
  per distinct time a cycle ran at, thinned by half whenever it grows past its bound.

Amounts are Kueue quantities as text ("4", "16Gi") beside a number for plots (cpu in cores,
memory in bytes: :func:`number`).
"""

from __future__ import annotations

from typing import Any

from events.manifests import format_time
from events.quantity import format_amount
from services.core import admissionfair
from services.core.answer import pending_order
from services.core.quota import FR, Node
from services.core.render import summary_row
from services.core.state import State, WorkloadRecord
from services.web.workers import worker_clusters

MILLI = frozenset({"cpu"})  # amounts kept in milli-units


def number(resource: str, amount: int) -> float:
    return amount / 1000 if resource in MILLI else float(amount)


def _amounts(resource: str, amount: int) -> dict[str, Any]:
    return {"text": format_amount(resource, amount), "value": number(resource, amount)}


def _frs(node: Node) -> list[FR]:
    return sorted(set(node.quotas) | set(node.usage) | set(node.subtree))


def _cluster_queue(state: State, node: Node) -> dict[str, Any]:
    resources = []
    for fr in _frs(node):
        flavor, res = fr
        q = node.quotas.get(fr)
        nominal = q.nominal if q else 0
        used = node.usage.get(fr, 0)
        lendable = nominal if q is None or q.lending_limit is None else min(nominal, q.lending_limit)
        resources.append({
            "flavor": flavor, "resource": res,
            "nominal": _amounts(res, nominal), "used": _amounts(res, used),
            "borrowed": _amounts(res, max(0, used - nominal)),
            "lendable": _amounts(res, max(0, min(lendable, nominal - used))),
            "borrowingLimit": None if q is None or q.borrowing_limit is None else format_amount(res, q.borrowing_limit),
            "lendingLimit": None if q is None or q.lending_limit is None else format_amount(res, q.lending_limit),
        })
    pending = len(pending_order(state, node.name))
    admitted = len(state.index.admitted.get(node.name, {}))
    cq = state.cluster_queues.get(node.name)
    inactive = state.index.inactive.get(node.name)
    return {"name": node.name, "cohort": node.parent.name if node.parent else "",
            "strategy": str(cq.queueing_strategy) if cq else "", "pending": pending, "admitted": admitted,
            "inactive": inactive[1] if inactive else "", "resources": resources}


def _tree(node: Node) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "kind": "ClusterQueue" if node.is_cluster_queue else "Cohort"}
    out["resources"] = [{"flavor": f, "resource": r, "subtree": _amounts(r, node.subtree.get((f, r), 0)),
                         "used": _amounts(r, node.usage.get((f, r), 0))} for f, r in _frs(node)]
    out["children"] = [_tree(c) for c in sorted(node.children, key=lambda n: (n.is_cluster_queue, n.name))]
    return out


def overview(state: State, input_offset: int) -> dict[str, Any]:
    state.ensure_indexed()
    nodes = state.index.cluster_queue_nodes
    roots: dict[str, Node] = {}
    for name in sorted(nodes):
        root = nodes[name].root()
        roots.setdefault(f"{root.key}", root)
    counts = _local_queue_counts(state)
    local_queues = [{"namespace": lq.namespace, "name": lq.name, "clusterQueue": lq.cluster_queue,
                     "pending": counts.get(key, (0, 0))[0], "admitted": counts.get(key, (0, 0))[1]}
                    for key, lq in sorted(state.local_queues.items())]
    for entry, key in zip(local_queues, sorted(state.local_queues), strict=True):
        afs = admissionfair.status(state, key)  # admission fair sharing: the LocalQueue's usage history
        if afs is not None:
            afs["lastUpdate"] = format_time(int(str(afs["lastUpdate"])))
            entry["admissionFairSharingStatus"] = {**afs, "usage": admissionfair.lq_usage(state, key)}
    return {"time": format_time(state.now), "now": state.now, "inputOffset": input_offset, "cycles": state.cycles,
            "cohorts": [_tree(roots[k]) for k in sorted(roots)],
            "clusterQueues": [_cluster_queue(state, nodes[n]) for n in sorted(nodes)],
            "localQueues": local_queues,
            "workerClusters": worker_clusters(state),  # MultiKueue (services.web.workers); [] without
            "workloads": _status_counts(state)}


def _local_queue_counts(state: State) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for rec in state.workloads.values():
        key = f"{rec.obj.namespace}/{rec.obj.queue_name}"
        pending, admitted = out.get(key, (0, 0))
        if rec.pending:
            pending += 1
        elif rec.admission is not None and not rec.finished:
            admitted += 1
        out[key] = (pending, admitted)
    return out


def status_of(rec: WorkloadRecord) -> str:
    if rec.finished:
        return "finished"
    if rec.evicting:
        return "evicting"
    if rec.admission is not None:
        return "admitted"
    return "pending"


def _status_counts(state: State) -> dict[str, int]:
    out = {"pending": 0, "admitted": 0, "evicting": 0, "finished": 0}
    for rec in state.workloads.values():
        out[status_of(rec)] += 1
    return out


def workloads(state: State, *, status: str = "", cluster_queue: str = "", local_queue: str = "",
              text: str = "", limit: int = 500) -> dict[str, Any]:
    """The workloads that pass every filter given (``local_queue`` is ``ns/name``), by key."""
    state.ensure_indexed()
    items: list[dict[str, Any]] = []
    total = 0
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        row = summary_row(state, rec)
        cq = row[2]
        if status and status_of(rec) != status:
            continue
        if cluster_queue and cq != cluster_queue:
            continue
        if local_queue and f"{rec.obj.namespace}/{rec.obj.queue_name}" != local_queue:
            continue
        if text and text not in key and text not in row[0]:
            continue
        total += 1
        if len(items) < limit:
            items.append({"key": key, "name": row[0], "localQueue": row[1], "clusterQueue": cq,
                          "status": status_of(rec), "flavors": row[4], "reason": row[5],
                          "priority": rec.priority,
                          "created": format_time(rec.obj.creation_time) if rec.obj.creation_time else None})
    return {"total": total, "items": items}


class UsageHistory:
    """Usage samples over simulated time: per ClusterQueue, per (flavor, resource)."""

    def __init__(self, limit: int = 2000) -> None:
        self.limit = limit
        self.samples: list[tuple[int, dict[str, dict[str, float]]]] = []

    def record(self, state: State) -> None:
        if state.index.dirty:
            return  # configuration changed and the tree is not rebuilt yet: the next cycle samples
        sample = {name: {f"{f}/{r}": number(r, v) for (f, r), v in sorted(node.usage.items())}
                  for name, node in sorted(state.index.cluster_queue_nodes.items())}
        if self.samples and self.samples[-1][0] == state.now:
            self.samples[-1] = (state.now, sample)
            return
        self.samples.append((state.now, sample))
        if len(self.samples) > self.limit:
            self.samples = self.samples[::2]

    def series(self) -> dict[str, Any]:
        """``{"times": [...], "clusterQueues": {cq: {flavor/resource: [...]}}, "flavors": {...}}``."""
        times = [format_time(t) for t, _ in self.samples]
        per_cq: dict[str, dict[str, list[float]]] = {}
        per_flavor: dict[str, list[float]] = {}
        for i, (_, sample) in enumerate(self.samples):
            for cq, usage in sample.items():
                for fr, v in usage.items():
                    per_cq.setdefault(cq, {}).setdefault(fr, [0.0] * len(self.samples))[i] = v
                    per_flavor.setdefault(fr, [0.0] * len(self.samples))[i] += v
        return {"times": times, "clusterQueues": per_cq, "flavors": dict(sorted(per_flavor.items()))}

