"""The manager's actuator for MultiKueue: a placed job runs on its worker, once.

The scheduler decides where a workload runs (``services.core.placement``); this applies it, the
way Kueue's MultiKueue reaches its workers (``pkg/controller/admissionchecks/multikueue``): each
worker's kubeconfig is named by its MultiKueueCluster (``spec.clusterSource.kubeConfig``: a Secret
in the actuator's namespace, key ``kubeconfig``, or a path in the actuator's container).

- ``PlaceWorkload``: read the manager's Workload and the job that owns it (a ``batch/v1`` Job or
  any kind Kueue's MultiKueue places: :data:`PLACED_KINDS`); create its copy on the worker
  (:func:`remote_object`: same namespace and name, unsuspended, not ``managedBy`` anyone, the
  worker flavors' node selector and tolerations merged into each podSet's pod template, labelled
  with the manager's Workload name as Kueue's prebuilt workload so the worker's watcher reports
  under that name, and with ``kueue.x-k8s.io/multikueue-origin``); write ``status.clusterName`` on
  the manager's Workload (clearing ``nominatedClusterNames``). A copy that exists already is left as
  it is (the decision was applied before a crash). A Workload owned by a kind Kueue does not place
  (SparkApplication, pods) is refused, naming the kind.
- ``PlacementWaiting``: ``status.nominatedClusterNames`` on the manager's Workload, the workers it is
  being tried on, as Kueue shows them while it dispatches.
- ``RemovePlacement``: when the workload finished there, copy the worker copy's status to the
  manager's object (which, ``managedBy: kueue.x-k8s.io/multikueue``, no controller on the
  manager runs); then delete the copy (background propagation): garbage collection. A worker
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

from events import jobkinds
from events.cluster import (
    ACTUATION_ANNOTATIONS,
    KUEUE_GROUP,
    MULTIKUEUE_ORIGIN_LABEL,
    PREBUILT_WORKLOAD_LABEL,
)
from events.jobkinds import managedby
from events.messages import PlacementEnd, PlacementWaiting, PlaceWorkload, RemovePlacement
from services.actuator.kindplan import kind_released
from services.actuator.kubeapi import ApiStats, KubeApiError, KubeCalls, Ref, classify
from services.actuator.kubeplan import workload_ref

Json = dict[str, Any]
SECRET_KEY: Final = "kubeconfig"
_JOB_CONTROLLER_LABELS: Final = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
                                 "batch.kubernetes.io/job-name")


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
    """The name of the ``batch/v1`` Job that owns the Workload ("" when none does)."""
    owner = placed_owner(wl)
    return owner[1] if owner is not None and owner[0] is jobkinds.JOB else ""


PLACED_KINDS: Final = managedby.PATHS
"""The kinds Kueue's MultiKueue places on workers (its ``*_multikueue_adapter.go``), each with where
it keeps ``managedBy`` (cleared on the copy, so the worker's own controller runs it)."""


def kind_ref(kind: jobkinds.JobKind, namespace: str, name: str) -> Ref:
    return Ref(kind.kind, kind.group, kind.version, kind.plural, name, namespace)


def _owners(wl: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    refs = (wl.get("metadata") or {}).get("ownerReferences") or []
    return [(str(r.get("apiVersion", "")), str(r.get("kind", "")), str(r.get("name") or ""))
            for r in refs if isinstance(r, Mapping)]


def placed_owner(wl: Mapping[str, Any]) -> tuple[jobkinds.JobKind, str] | None:
    """The job kind and name that own the Workload, when it is a kind MultiKueue places."""
    for api_version, kind, name in _owners(wl):
        found = PLACED_KINDS.get((api_version, kind))
        if found is not None and name:
            return found[0], name
    return None


def remote_object(kind: jobkinds.JobKind, obj: Mapping[str, Any], d: PlaceWorkload, origin: str) -> Json:
    """The copy of the manager's job that runs on the worker (pure): a Job by :func:`remote_job`; any
    other kind released with the worker flavors' scheduling per podSet (``kind_released``), its
    ``managedBy`` cleared and its actuation bookkeeping left behind."""
    if kind is jobkinds.JOB:
        return remote_job(obj, d, origin)
    meta = obj.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels[PREBUILT_WORKLOAD_LABEL] = d.name
    labels[MULTIKUEUE_ORIGIN_LABEL] = origin
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in ACTUATION_ANNOTATIONS}
    body: Json = {"apiVersion": kind.api_version, "kind": kind.kind,
                  "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                  "spec": copy.deepcopy(dict(obj.get("spec") or {}))}
    released = kind_released(kind, body, d.pod_set_updates)
    managedby.clear(kind, released)
    released["metadata"]["labels"] = labels
    if annotations:
        released["metadata"]["annotations"] = annotations
    return released


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
        owner = placed_owner(wl)
        if owner is None:
            owned = ", ".join(f"{k} {n}" for _, k, n in _owners(wl)) or "nothing"
            raise KubeApiError(f"Workload {d.namespace}/{d.name}: owned by {owned}; MultiKueue places "
                               f"{', '.join(k for _, k in PLACED_KINDS)} on workers", retriable=False)
        kind, name = owner
        obj = await self.manager.get(kind_ref(kind, d.namespace, name), not_found_retriable=True)
        worker = await self._worker(d.cluster)
        await worker.create(kind_ref(kind, d.namespace, name), remote_object(kind, obj, d, self.origin))
        await self.manager.patch(workload_ref(d.namespace, d.name),
                                 {"status": {"clusterName": d.cluster, "nominatedClusterNames": None}},
                                 status=True, not_found_retriable=True)

    async def nominate(self, d: PlacementWaiting) -> None:
        """``status.nominatedClusterNames`` of a workload waiting for a worker (Kueue shows the workers
        it dispatches to; none once placed). A Workload that is gone has nothing to show."""
        try:
            await self.manager.patch(workload_ref(d.namespace, d.name),
                                     {"status": {"nominatedClusterNames": list(d.nominated) or None}}, status=True)
        except KubeApiError as e:
            if e.status != 404:
                raise

    async def _kinds_of(self, d: RemovePlacement) -> list[jobkinds.JobKind]:
        """Where the copy may be: the manager's Workload's owner's kind, or every placed kind when
        the Workload is gone."""
        try:
            wl = await self.manager.get(workload_ref(d.namespace, d.name))
        except KubeApiError as e:
            if e.status != 404:
                raise
            return [k for k, _ in PLACED_KINDS.values()]
        owner = placed_owner(wl)
        return [owner[0]] if owner is not None else [k for k, _ in PLACED_KINDS.values()]

    async def _remove(self, d: RemovePlacement) -> None:
        worker = await self._worker(d.cluster)
        selector = f"{PREBUILT_WORKLOAD_LABEL}={d.name},{MULTIKUEUE_ORIGIN_LABEL}={self.origin}"
        for kind in await self._kinds_of(d):
            try:
                copies = await worker.list_objects(kind_ref(kind, d.namespace, ""), label_selector=selector)
            except KubeApiError as e:
                if e.status == 404:  # the kind is not served on that worker: no copy of it there
                    continue
                raise
            for remote in sorted(copies, key=lambda j: str((j.get("metadata") or {}).get("name"))):
                name = str((remote.get("metadata") or {}).get("name"))
                if d.reason == PlacementEnd.WORKLOAD_FINISHED and remote.get("status"):
                    await self._copy_status(kind, d, name, remote["status"])
                await worker.delete(kind_ref(kind, d.namespace, name), propagation="Background")

    async def _copy_status(self, kind: jobkinds.JobKind, d: RemovePlacement, name: str,
                           status: Mapping[str, Any]) -> None:
        try:
            await self.manager.patch(kind_ref(kind, d.namespace, name), {"status": dict(status)}, status=True)
        except KubeApiError as e:
            if e.status != 404:  # the manager's object is gone: nothing to report to
                raise
