"""The manager's actuator for MultiKueue: a placed Job runs on its worker, once.

The scheduler decides where a workload runs (``services.core.placement``); this applies it, the
way Kueue's MultiKueue reaches its workers (``pkg/controller/admissionchecks/multikueue``): each
worker's kubeconfig is named by its MultiKueueCluster (``spec.clusterSource.kubeConfig``: a Secret
in the actuator's namespace, key ``kubeconfig``, or a path in the actuator's container).

- ``PlaceWorkload``: read the manager's Workload and its Job; create the Job's copy on the worker
  (:func:`remote_job`: same namespace and name, unsuspended, not ``managedBy`` anyone, the worker
  flavors' node selector and tolerations merged into the pod template, labelled with the manager's
  Workload name as Kueue's prebuilt workload so the worker's watcher reports under that name, and
  with ``kueue.x-k8s.io/multikueue-origin``); write ``status.clusterName`` on the manager's
  Workload. A copy that exists already is left as it is (the decision was applied before a crash).
- ``RemovePlacement``: when the workload finished there, copy the worker Job's status to the
  manager's Job (which, ``managedBy: kueue.x-k8s.io/multikueue``, no job controller on the
  manager touches); then delete the copy (background propagation): garbage collection. A worker
  that cannot be reached is retried by the loop; a copy that is gone already is fine.

No copy is made before the scheduler's decision and none survives its removal, so a workload
never runs in two clusters through this path (the manager's own Job must carry
``spec.managedBy: kueue.x-k8s.io/multikueue``, as with Kueue, so that the manager runs no pods).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from events.cluster import (
    ACTUATION_ANNOTATIONS,
    KUEUE_GROUP,
    MULTIKUEUE_ORIGIN_LABEL,
    PREBUILT_WORKLOAD_LABEL,
)
from events.messages import PlacementEnd, PlaceWorkload, RemovePlacement
from services.actuator.kubeapi import ApiStats, KubeApiError, KubeCalls, Ref, classify
from services.actuator.kubeplan import workload_ref

Json = dict[str, Any]
SECRET_KEY: Final = "kubeconfig"
_JOB_CONTROLLER_LABELS: Final = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                                 "batch.kubernetes.io/job-name")


def job_ref(namespace: str, name: str) -> Ref:
    return Ref("Job", "batch", "v1", "jobs", name, namespace)


def cluster_ref(name: str) -> Ref:
    return Ref("MultiKueueCluster", KUEUE_GROUP, "v1beta2", "multikueueclusters", name)


def remote_job(job: Mapping[str, Any], d: PlaceWorkload, origin: str) -> Json:
    """The copy of the manager's Job that runs on the worker (pure)."""
    meta = job.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _JOB_CONTROLLER_LABELS}
    labels[PREBUILT_WORKLOAD_LABEL] = d.name
    labels[MULTIKUEUE_ORIGIN_LABEL] = origin
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in ACTUATION_ANNOTATIONS}
    spec: Json = copy.deepcopy(dict(job.get("spec") or {}))
    for generated in ("selector", "manualSelector", "managedBy"):
        spec.pop(generated, None)
    spec["suspend"] = False
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tlabels = {k: v for k, v in (tmeta.get("labels") or {}).items() if k not in _JOB_CONTROLLER_LABELS}
    if tlabels:
        tmeta["labels"] = tlabels
    else:
        tmeta.pop("labels", None)
    pod = template.setdefault("spec", {})
    for update in d.pod_set_updates:  # a Job has one podSet, "main"
        if update.node_selector:
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **dict(update.node_selector)}
        if update.tolerations:
            given = list(pod.get("tolerations") or [])
            for t in update.tolerations:
                tol = {k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value),
                                         ("effect", t.effect)) if v}
                if tol not in given:
                    given.append(tol)
            pod["tolerations"] = given
    out_meta: Json = {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": labels}
    if annotations:
        out_meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": out_meta, "spec": spec}


def job_owner(wl: Mapping[str, Any]) -> str:
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Job" and str(ref.get("apiVersion", "")) == "batch/v1":
            return str(ref.get("name") or "")
    return ""


class WorkerPlacer:
    """Applies placement decisions to the workers (see the module docstring)."""

    def __init__(self, manager: client.ApiClient, *, origin: str, namespace: str, qps: float = 20, burst: int = 40,
                 request_timeout: float = 10.0) -> None:
        self.origin, self.namespace = origin, namespace
        self.stats = ApiStats()
        self._qps, self._burst, self._timeout = qps, burst, request_timeout
        self.manager = KubeCalls(manager, qps=qps, burst=burst, request_timeout=request_timeout, stats=self.stats)
        self._core = client.CoreV1Api(manager)
        self._workers: dict[str, tuple[client.ApiClient, KubeCalls]] = {}
        self.placed = self.removed = 0

    async def apply(self, d: PlaceWorkload | RemovePlacement) -> Sequence[tuple[str, str, bytes]]:
        if isinstance(d, PlaceWorkload):
            await self._place(d)
            self.placed += 1
        else:
            await self._remove(d)
            self.removed += 1
        return ()

    async def close(self) -> None:
        for api, _ in self._workers.values():
            await api.close()
        self._workers.clear()

    async def _worker(self, name: str) -> KubeCalls:
        known = self._workers.get(name)
        if known is not None:
            return known[1]
        mkc = await self.manager.get(cluster_ref(name), not_found_retriable=True)
        kc = ((mkc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        location, kind = str(kc.get("location") or ""), str(kc.get("locationType") or "Secret")
        text = await self._kubeconfig_text(name, kind, location)
        try:
            cfg = yaml.safe_load(text)
            api = await config.new_client_from_config_dict(config_dict=cfg)
        except (yaml.YAMLError, config.ConfigException, TypeError, ValueError, KeyError) as e:
            raise KubeApiError(f"MultiKueueCluster {name}: kubeconfig from {kind} {location}: {e}",
                               retriable=False) from e
        calls = KubeCalls(api, qps=self._qps, burst=self._burst, request_timeout=self._timeout, stats=self.stats)
        self._workers[name] = (api, calls)
        return calls

    async def _kubeconfig_text(self, name: str, kind: str, location: str) -> str:
        if kind == "Path":
            try:
                return Path(location).read_text()
            except OSError as e:
                raise KubeApiError(f"MultiKueueCluster {name}: kubeconfig path {location}: {e}", retriable=True) from e
        what = f"get Secret {self.namespace}/{location}"
        try:
            secret = await self._core.read_namespaced_secret(location, self.namespace)
        except (ApiException, OSError, TimeoutError) as e:
            err = classify(e, call=what, not_found_retriable=True)
            if err is None:
                raise
            raise err from e
        data = (secret.data or {}).get(SECRET_KEY)
        if not data:
            raise KubeApiError(f"MultiKueueCluster {name}: Secret {self.namespace}/{location} has no key "
                               f"{SECRET_KEY}", retriable=True)
        return base64.b64decode(data).decode()

    async def _place(self, d: PlaceWorkload) -> None:
        wl = await self.manager.get(workload_ref(d.namespace, d.name), not_found_retriable=True)
        owner = job_owner(wl)
        if not owner:
            raise KubeApiError(f"Workload {d.namespace}/{d.name}: no batch/v1 Job owns it; kueuelog places Jobs "
                               "on workers", retriable=False)
        job = await self.manager.get(job_ref(d.namespace, owner), not_found_retriable=True)
        worker = await self._worker(d.cluster)
        await worker.create(job_ref(d.namespace, owner), remote_job(job, d, self.origin))
        await self.manager.patch(workload_ref(d.namespace, d.name), {"status": {"clusterName": d.cluster}},
                                 status=True, not_found_retriable=True)

    async def _remove(self, d: RemovePlacement) -> None:
        worker = await self._worker(d.cluster)
        selector = f"{PREBUILT_WORKLOAD_LABEL}={d.name},{MULTIKUEUE_ORIGIN_LABEL}={self.origin}"
        copies = await worker.list_objects(job_ref(d.namespace, ""), label_selector=selector)
        for remote in sorted(copies, key=lambda j: str((j.get("metadata") or {}).get("name"))):
            name = str((remote.get("metadata") or {}).get("name"))
            if d.reason == PlacementEnd.WORKLOAD_FINISHED and remote.get("status"):
                await self._copy_status(d, name, remote["status"])
            await worker.delete(job_ref(d.namespace, name), propagation="Background")

    async def _copy_status(self, d: RemovePlacement, name: str, status: Mapping[str, Any]) -> None:
        try:
            await self.manager.patch(job_ref(d.namespace, name), {"status": dict(status)}, status=True)
        except KubeApiError as e:
            if e.status != 404:  # the manager's Job is gone: nothing to report to
                raise
