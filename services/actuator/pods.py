"""Pods as workloads (Kueue's pod integration, used by the ElasticQuotaTree front end).

A pod in a namespace bound to a quota-tree leaf is one Workload; it is held by the scheduling
gate ``kueue.x-k8s.io/admission`` until admitted. Scheduling gates are the Kubernetes-native hold:
the kube-scheduler ignores a gated pod, a gate can only be removed (so nothing else can release
the pod), and while gated its node selector may still be narrowed to the admitted flavor's
nodes. The gate has to be on the pod at creation: the mutating webhook (``services/webhook``,
``mpod.kueuelog.io``) puts it there, as Kueue's does; without it, a Deployment's pod template
has to carry it.

- :class:`PodReconciler` (every ``interval`` seconds): in each bound namespace (a LocalQueue the
  tree reconciler keeps is there), a gated pod without a Workload gets one
  (:func:`events.elasticquota.pod_workload`, owned by the pod), and a pod-owned Workload whose pod
  is gone is deleted (what the garbage collector does in a full cluster), which frees its quota.
- a Job without a queue-name label there is labelled for LocalQueue ``default`` (Kueue's
  LocalQueueDefaulting; the webhook does it at creation, this catches Jobs created while it was not
  installed); the job reconciler then
  suspends it and queues it like any other.
- admission and eviction are the pod integration's (``services/actuator/podgroups.py``:
  ``release_pods``, ``stop_pods``): the admitted flavors' node labels and tolerations added to the
  pod and the gate removed, in one conditional merge patch; evicted, the pod is deleted (a
  Deployment's ReplicaSet makes a new, gated one, which queues again).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import structlog
from kubernetes_asyncio import client

from events.cluster import ADMISSION_GATE, ELASTIC_QUOTA_TREE_LABEL, KUEUE_GROUP, QUEUE_NAME_LABEL
from events.elasticquota import DEFAULT_LOCAL_QUEUE, pod_workload
from services.actuator.kubeapi import KubeApiError
from services.actuator.tree_reconciler import raw_call

_log = structlog.get_logger(__name__)
MERGE_PATCH: Final = "application/merge-patch+json"
WORKLOADS: Final = f"/apis/{KUEUE_GROUP}/v1beta1"

Json = dict[str, Any]


def gated(pod: Json) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates)


def pod_owner(workload: Json) -> tuple[str, str] | None:
    """(name, uid) of the pod that owns ``workload``, if one does."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return str(ref.get("name")), str(ref.get("uid") or "")
    return None


@dataclass
class PodStats:
    WHOSE: ClassVar[str] = "the pod reconciler's"
    passes: int = 0
    created: int = 0  # Workloads created for gated pods
    deleted: int = 0  # Workloads deleted: their pod is gone
    jobs_labelled: int = 0  # Jobs without a queue-name label sent to LocalQueue default
    errors: int = 0


class PodReconciler:
    """Workloads for gated pods in the tree's namespaces (see the module docstring)."""

    def __init__(self, api: client.ApiClient, *, interval: float = 1.0) -> None:
        self.api, self.interval = api, interval
        self.stats = PodStats()

    async def _bound(self) -> list[str]:
        data = await raw_call(self.api, "GET", f"{WORKLOADS}/localqueues",
                              query=[("labelSelector", ELASTIC_QUOTA_TREE_LABEL)])
        names = {str((i.get("metadata") or {}).get("namespace")) for i in (data or {}).get("items") or []
                 if (i.get("metadata") or {}).get("name") == DEFAULT_LOCAL_QUEUE}
        return sorted(names)

    async def reconcile(self) -> None:
        self.stats.passes += 1
        for namespace in await self._bound():
            await self._namespace(namespace)

    async def _label_jobs(self, namespace: str) -> None:
        """A Job without a queue-name label in a bound namespace goes to LocalQueue ``default`` (what
        Kueue's LocalQueueDefaulting does at creation); the job reconciler takes it from there."""
        jobs = (await raw_call(self.api, "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs") or {}).get("items") or []
        for job in jobs:
            meta = job.get("metadata") or {}
            if QUEUE_NAME_LABEL in (meta.get("labels") or {}) or meta.get("ownerReferences"):
                continue  # queued already, or made by another controller (a CronJob's is its own)
            patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                  "labels": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE}}}
            with contextlib.suppress(KubeApiError):  # 409: changed meanwhile, next pass
                await raw_call(self.api, "PATCH", f"/apis/batch/v1/namespaces/{namespace}/jobs/{meta.get('name')}",
                               body=patch, content_type=MERGE_PATCH)
                self.stats.jobs_labelled += 1

    async def _namespace(self, namespace: str) -> None:
        await self._label_jobs(namespace)
        pods = (await raw_call(self.api, "GET", f"/api/v1/namespaces/{namespace}/pods") or {}).get("items") or []
        workloads = (await raw_call(self.api, "GET", f"{WORKLOADS}/namespaces/{namespace}/workloads")
                     or {}).get("items") or []
        owned = {owner[1]: w for w in workloads if (owner := pod_owner(w)) is not None}
        uids = {str((p.get("metadata") or {}).get("uid")) for p in pods}
        for pod in pods:
            meta = pod.get("metadata") or {}
            if not gated(pod) or str(meta.get("uid")) in owned or meta.get("deletionTimestamp"):
                continue
            body = pod_workload(meta, pod.get("spec") or {}, namespace, DEFAULT_LOCAL_QUEUE)
            with contextlib.suppress(KubeApiError):  # 409: made already; others: next pass
                await raw_call(self.api, "POST", f"{WORKLOADS}/namespaces/{namespace}/workloads", body=body)
                self.stats.created += 1
        for uid, wl in owned.items():
            if uid not in uids:
                name = (wl.get("metadata") or {}).get("name")
                with contextlib.suppress(KubeApiError):
                    await raw_call(self.api, "DELETE", f"{WORKLOADS}/namespaces/{namespace}/workloads/{name}")
                    self.stats.deleted += 1

    async def run(self, stop: asyncio.Event) -> PodStats:
        while not stop.is_set():
            try:
                await self.reconcile()
            except KubeApiError as e:
                self.stats.errors += 1
                _log.warning("pod_reconciler.error", error=str(e), retriable=e.retriable)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
        return self.stats
