"""The job reconciler for one workload kind besides Job (``events.jobkinds``: a JobSet, a
PyTorchJob, ...): :class:`services.actuator.job_reconciler.JobReconciler`'s list+watch, worker and
calls, with the kind's own plan (``services.actuator.kindplan.plan_kind``), suspend flag and API
path. A queued object running without admission is held (policy ``suspend``; there is no
``reject`` for these kinds), its Workload created once it is held, ``Finished`` written when it ends."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from events import jobkinds
from services.actuator.job_reconciler import MERGE_PATCH, JobPlan, JobReconciler, JobRef
from services.actuator.kindplan import plan_kind, suspend_merge_patch
from services.runtime.clock import wall_clock_ms


class KindReconciler(JobReconciler):
    def __init__(self, api: client.ApiClient, kind: jobkinds.JobKind, *, cluster: str,
                 clock: Callable[[], int] = wall_clock_ms, watch_timeout_s: int = 300) -> None:
        super().__init__(api, cluster=cluster, policy="suspend", clock=clock, watch_timeout_s=watch_timeout_s)
        self.kind = kind
        self.what, self.kind_key = kind.plural, (kind.api_version, kind.kind)
        self._log = self._log.bind(kind=kind.kind)

    def _list(self, **kwargs: Any) -> Any:
        k = self.kind
        return self._custom.list_cluster_custom_object(k.group, k.version, k.plural, **kwargs)

    def _as_obj(self, item: Any) -> dict[str, Any]:
        if not isinstance(item, dict):
            return {}
        return {"apiVersion": self.kind.api_version, "kind": self.kind.kind, **item}

    def _plan(self, job: Mapping[str, Any]) -> JobPlan:
        return plan_kind(self.kind, job, cluster=self.cluster)

    def _suspend_patch(self, ref: JobRef) -> dict[str, Any]:
        return suspend_merge_patch(self.kind, ref)

    def _patch_call(self, ref: JobRef, patch: dict[str, Any]) -> Any:
        k = self.kind
        return self._custom.patch_namespaced_custom_object(k.group, k.version, ref.namespace, k.plural, ref.name,
                                                           patch, _content_type=MERGE_PATCH, _preload_content=False)

    def _read_call(self, ref: JobRef) -> Any:
        k = self.kind
        return self._custom.get_namespaced_custom_object(k.group, k.version, ref.namespace, k.plural, ref.name,
                                                         _preload_content=False)
