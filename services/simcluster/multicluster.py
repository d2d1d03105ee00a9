"""Simulated worker clusters for MultiKueue: a manager and N workers, each with its own queues.

Used by ``kueuelog demo --clusters N``, the property tests and ``bench/multicluster.py``. Every
object comes with the cluster whose watcher publishes it ("" for the manager; a worker's name, as
its MultiKueueCluster names it, for a worker's objects), as manifests a batch admin would write,
validated by :func:`events.manifests.normalize` like any other input.

The manager holds ``queues`` ClusterQueues (``cq-0`` ... with the multikueue AdmissionCheck) and
their LocalQueues ``lq`` in namespaces ``team-0`` ...; each worker ``worker-1`` ... holds the same
LocalQueues and ClusterQueues with ``worker_cpu`` cpu each, on a flavor of its own whose node
labels say which worker ran a pod (``kueuelog.io/worker: worker-K``, ``SIM_WORKER_LABEL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from events import objects as o
from events.cluster import (
    CLUSTER_ANNOTATION,
    KUEUE_GROUP,
    MULTIKUEUE_CONTROLLER,
    PLACEMENT_POLICY_ANNOTATION,
    QUEUE_NAME_LABEL,
    SIM_DURATION_ANNOTATION,
    SIM_WORKER_LABEL,
)
from events.manifests import Document, format_time, normalize

API = f"{KUEUE_GROUP}/v1beta2"
CHECK = "multikueue"
CONFIG = "workers"


def worker_names(clusters: int) -> list[str]:
    return [f"worker-{i}" for i in range(1, clusters + 1)]


def _queues(flavor: str, queues: int, cpu: str, *, check: bool) -> Iterator[dict[str, Any]]:
    for q in range(queues):
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"],
                                "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}],
        }
        if check:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
        yield {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": f"cq-{q}"}, "spec": spec}
        yield {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": f"team-{q}"},
               "spec": {"clusterQueue": f"cq-{q}"}}


def manager_manifests(clusters: int, queues: int, manager_cpu: str, policy: str = "Ordered") -> list[dict[str, Any]]:
    names = worker_names(clusters)
    kubeconfig = {"locationType": "Secret"}
    out: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "MultiKueueConfig",
         "metadata": {"name": CONFIG, "annotations": {PLACEMENT_POLICY_ANNOTATION: policy}},
         "spec": {"clusters": names}},
        *({"apiVersion": API, "kind": "MultiKueueCluster", "metadata": {"name": n},
           "spec": {"clusterSource": {"kubeConfig": {**kubeconfig, "location": f"{n}-kubeconfig"}}}}
          for n in names),
        {"apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": MULTIKUEUE_CONTROLLER,
                  "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": CONFIG}}},
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    ]
    out.extend(_queues("default", queues, manager_cpu, check=True))
    return out


def worker_manifests(name: str, queues: int, worker_cpu: str) -> list[dict[str, Any]]:
    flavor = f"{name}-pool"
    out: list[dict[str, Any]] = [{"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
                                  "spec": {"nodeLabels": {SIM_WORKER_LABEL: name}}}]
    out.extend(_queues(flavor, queues, worker_cpu, check=False))
    return out


def job_manifest(name: str, queue: int, cpu: str, created: str, duration: str = "") -> dict[str, Any]:
    annotations = {SIM_DURATION_ANNOTATION: duration} if duration else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": f"team-{queue}", "labels": {QUEUE_NAME_LABEL: "lq"},
                         "annotations": annotations, "creationTimestamp": created},
            "spec": {"parallelism": 1, "suspend": True,
                     "template": {"spec": {"containers": [{"name": "c", "image": "x",
                                                           "resources": {"requests": {"cpu": cpu}}}]}}}}


def world(clusters: int, queues: int, *, manager_cpu: str = "1000", worker_cpu: str = "4",
          policy: str = "Ordered") -> list[tuple[str, o.AnyObject]]:
    """(cluster, object) for the manager's objects, then each worker's, normalised."""
    out: list[tuple[str, o.AnyObject]] = []
    docs = [("", m) for m in manager_manifests(clusters, queues, manager_cpu, policy)]
    for n in worker_names(clusters):
        docs.extend((n, m) for m in worker_manifests(n, queues, worker_cpu))
    for i, (cluster, body) in enumerate(docs, start=1):
        obj = normalize(Document(file="<multicluster>", index=i, body=body))
        if obj is not None:
            out.append((cluster, obj))
    return out


def job(name: str, queue: int, cpu: str, created: str) -> o.Workload:
    obj = normalize(Document(file="<multicluster>", index=0, body=job_manifest(name, queue, cpu, created)))
    assert isinstance(obj, o.Workload)
    return obj


# --- the demo's world: ``kueuelog demo --clusters N`` --------------------------------------------

DEMO_START = "2025-01-01T08:00:00Z"
DEMO_START_MS = 1_735_718_400_000


def as_worker(body: dict[str, Any], cluster: str) -> dict[str, Any]:
    """A worker's object as ``simulate`` and ``demo`` read it: annotated with its cluster's name."""
    meta = dict(body["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), CLUSTER_ANNOTATION: cluster}
    return {**body, "metadata": meta}


def demo_manifests(clusters: int, *, queues: int = 4, jobs: int = 160, worker_cpu: int = 4,
                   gap_s: int = 20) -> list[dict[str, Any]]:
    """The manager (``queues`` ClusterQueues with the multikueue check, as much cpu as all its
    workers together), ``clusters`` workers (each with the same queues, ``worker_cpu`` cpu each on
    its own flavor, annotated ``kueuelog.io/cluster``), then ``jobs`` Jobs of 1 to 3 cpu arriving
    every ``gap_s`` seconds round the queues, each running 2 to 10 minutes."""
    out = manager_manifests(clusters, queues, str(clusters * worker_cpu))
    for n in worker_names(clusters):
        out.extend(as_worker(m, n) for m in worker_manifests(n, queues, str(worker_cpu)))
    for i in range(jobs):
        created = format_time(DEMO_START_MS + i * gap_s * 1000)
        out.append(job_manifest(f"job-{i:03d}", i % queues, str(1 + (i * 7) % 3), created,
                                f"{2 + (i * 5) % 9}m"))
    return out
