"""T9k Scheduler's ``Queue`` (seed 002) for ``kueuelog convert``: its closest Kueue equivalent.

The engine reads Queues itself (``events.t9k``), so ``simulate`` runs them natively; this front end
only prints what a Kueue-only cluster would need instead, and says what has no equivalent:

- a Queue -> a ClusterQueue of the same name in cohort ``t9k`` on flavor ``t9k`` (nominal 0, the
  quota as borrowing limit, reclaim and borrow within the cohort from lower priorities), a
  WorkloadPriorityClass ``t9k-queue-<name>`` with the queue's priority, ``stopPolicy: Hold``
  when closed, and its ``namespaceSelector``;
- once: the ResourceFlavor ``t9k`` and the Cohort ``t9k`` with room for every queue's quota (the
  cluster's capacity: edit it);
- a Job on a Queue -> the same Job with Kueue's queue-name and priority-class labels, after a
  LocalQueue of the queue's name in its namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from events import objects as o
from events import t9k
from events.cluster import KUEUE_API_VERSION, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from events.manifests import Document, normalize
from events.quantity import format_amount
from services.app.convert import Conversion, register

PRIORITY_CLASS_PREFIX = "t9k-queue-"

NOTES = (
    "T9k Queue spec.users / spec.groups: no Kueue equivalent (grant who may create Jobs with Kubernetes RBAC; "
    "kueuelog's validating webhook enforces them)",
    "T9k Queue spec.namespaceSelector: becomes the ClusterQueue's namespaceSelector, which in Kueue selects the "
    "namespaces whose LocalQueues may use it rather than refusing a workload at creation",
    "T9k Queue spec.quota: Kueue does not refuse a workload that would exceed it at creation; it waits pending",
    "T9k Queue status.allocated: no equivalent; Kueue computes usage from admitted Workloads",
    "T9k Queue spec.priority: a WorkloadPriorityClass per queue; Kueue orders and preempts by workload "
    "priority, and a workload must name the class (the Jobs below do)",
    "T9k Queue spec.preemptible: false: no Kueue equivalent (any lower-priority workload may be reclaimed)",
    "T9k Queue spec.closed: true: stopPolicy Hold, under which new workloads wait instead of being refused",
    "T9k Queue spec.maxDuration: no per-queue equivalent (Kueue's per-workload maximumExecutionTimeSeconds "
    "deactivates the workload; T9k deletes the pod)",
    "T9k Queue spec.nodeSelector: no equivalent for a label selector (a ResourceFlavor's nodeLabels match "
    "single values only)",
    "T9k Queue spec.resourceShapeProfile: no Kueue equivalent",
    "Cohort t9k (room for every queue's whole quota) stands for the cluster's capacity the queues share: edit "
    "it to your nodes; a Cohort t9k declared after the Queues replaces it",
)


def _amounts(pairs: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"name": r, "nominalQuota": "0", "borrowingLimit": format_amount(r, q)} for r, q in pairs]


def _selector(sel: o.LabelSelector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if sel.match_labels:
        out["matchLabels"] = dict(sel.match_labels)
    if sel.match_expressions:
        out["matchExpressions"] = [{"key": r.key, "operator": r.operator, **({"values": list(r.values)}
                                                                               if r.values else {})}
                                   for r in sel.match_expressions]
    return out


def cluster_queue(cq: o.ClusterQueue) -> dict[str, Any]:
    assert cq.t9k is not None
    spec: dict[str, Any] = {
        "cohort": t9k.COHORT,
        "namespaceSelector": _selector(cq.t9k.namespace_selector) if cq.t9k.namespace_selector else {},
        "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "LowerPriority",
                       "borrowWithinCohort": {"policy": "LowerPriority"}},
        "resourceGroups": [{"coveredResources": [r for r, _ in cq.t9k.quota], "flavors": [
            {"name": t9k.FLAVOR, "resources": _amounts(cq.t9k.quota)}]}] if cq.t9k.quota else [],
    }
    if cq.t9k.closed:
        spec["stopPolicy"] = "Hold"
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cq.name}, "spec": spec}


def _pool(queues: list[o.ClusterQueue]) -> dict[str, Any]:
    pool = t9k.default_pool(queues)
    groups = [{"coveredResources": list(g.covered_resources), "flavors": [
        {"name": f.name, "resources": [{"name": r, "nominalQuota": format_amount(r, q.nominal)}
                                       for r, q in f.resources]} for f in g.flavors]} for g in pool.resource_groups]
    return {"apiVersion": KUEUE_API_VERSION, "kind": "Cohort", "metadata": {"name": t9k.COHORT},
            "spec": {"resourceGroups": groups}}


def _route(doc: Document) -> list[Document] | None:
    """A Job on a T9k Queue: a LocalQueue of the queue's name in its namespace, then the Job with
    Kueue's labels (the pod template keeps T9k's)."""
    body = doc.body
    if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) != ("batch/v1", "Job"):
        return None
    template = (body.get("spec") or {}).get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if (template.get("spec") or {}).get("schedulerName") != t9k.SCHEDULER_NAME or t9k.QUEUE_LABEL not in labels:
        return None
    queue = str(labels[t9k.QUEUE_LABEL])
    meta = dict(body.get("metadata") or {})
    namespace = meta.get("namespace") or "default"
    meta["labels"] = {**(meta.get("labels") or {}), QUEUE_NAME_LABEL: queue,
                      PRIORITY_CLASS_LABEL: f"{PRIORITY_CLASS_PREFIX}{queue}"}
    local_queue = {"apiVersion": KUEUE_API_VERSION, "kind": "LocalQueue",
                   "metadata": {"name": queue, "namespace": namespace}, "spec": {"clusterQueue": queue}}
    return [Document(doc.file, doc.index, local_queue), Document(doc.file, doc.index, {**body, "metadata": meta})]


def _convert(docs: Sequence[Document]) -> Conversion:
    manifests: list[tuple[Document, Any]] = []
    queues: list[o.ClusterQueue] = []
    pool: dict[str, Any] = {"apiVersion": KUEUE_API_VERSION, "kind": "Cohort", "metadata": {"name": t9k.COHORT}}
    for doc in docs:
        cq = normalize(doc)  # refuses an invalid Queue as simulate does
        assert isinstance(cq, o.ClusterQueue) and cq.t9k is not None
        queues.append(cq)
        if len(queues) == 1:
            manifests.append((doc, {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
                                    "metadata": {"name": t9k.FLAVOR}, "spec": {}}))
            manifests.append((doc, pool))
        manifests.append((doc, {"apiVersion": KUEUE_API_VERSION, "kind": "WorkloadPriorityClass",
                                "metadata": {"name": f"{PRIORITY_CLASS_PREFIX}{cq.name}"},
                                "value": cq.t9k.priority}))
        manifests.append((doc, cluster_queue(cq)))
    if queues:
        pool.update(_pool(queues))  # room for every queue's quota, known once all are read
    return Conversion(manifests=manifests, notes=list(NOTES), rewrite=_route)


register(t9k.API_VERSION, "Queue", _convert, native=True)
