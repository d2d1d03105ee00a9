"""The job reconciler for Kubeflow Trainer's TrainJob: :class:`KindReconciler` with the runtime the
TrainJob names read from the cluster before each plan (``events.jobkinds.trainjob``: a TrainJob's
podSets are its runtime's JobSet template with the TrainJob's changes).

A queued TrainJob whose runtime is not there is held and reported (its plan is invalid: Kueue's
reconciler fails the same way, ``runtime '<name>' not found``), and looked at again with a growing
back-off until the runtime appears or the TrainJob goes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from events.cluster import QUEUE_NAME_LABEL
from events.jobkinds import trainjob
from services.actuator.job_reconciler import JobPlan, _request
from services.actuator.kind_reconciler import KindReconciler
from services.actuator.kindplan import plan_kind
from services.actuator.kubeapi import KubeApiError
from services.runtime.clock import wall_clock_ms

RuntimeKey = tuple[str, str, str]


class TrainJobReconciler(KindReconciler):
    def __init__(self, api: client.ApiClient, *, cluster: str, clock: Callable[[], int] = wall_clock_ms,
                 watch_timeout_s: int = 300) -> None:
        super().__init__(api, trainjob.TRAINJOB, cluster=cluster, clock=clock, watch_timeout_s=watch_timeout_s)
        self._runtimes: dict[RuntimeKey, Mapping[str, Any]] = {}

    async def _fetch_runtime(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        plural = trainjob.RUNTIME_PLURALS[kind]
        what = f"GET {kind} {namespace + '/' if namespace else ''}{name}"
        if namespace:
            call = self._custom.get_namespaced_custom_object(trainjob.GROUP, trainjob.VERSION, namespace, plural, name,
                                                             _preload_content=False)
        else:
            call = self._custom.get_cluster_custom_object(trainjob.GROUP, trainjob.VERSION, plural, name,
                                                          _preload_content=False)
        try:
            found = await _request(what, call)
        except KubeApiError as e:
            if e.not_found:
                return None
            raise
        spec = found.get("spec") if isinstance(found, dict) else None
        return spec if isinstance(spec, dict) else {}

    async def _reconcile(self, key: tuple[str, str]) -> None:
        job = self._jobs.get(key)
        self._runtimes.clear()
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        queued = isinstance(labels, Mapping) and QUEUE_NAME_LABEL in labels
        named = trainjob.runtime_key(job) if job is not None and queued else None  # not queued: not Kueue's
        wanted = [named] if named is not None else []
        for k in wanted:
            spec = await self._fetch_runtime(*k)
            if spec is not None:
                self._runtimes[k] = spec
        await super()._reconcile(key)
        missing = [k for k in wanted if k not in self._runtimes]
        if missing and job is not None and self.kind.finished(job) is None:  # an ended one needs none
            kind, namespace, name = missing[0]
            raise KubeApiError(f"TrainJob {key[0]}/{key[1]}: runtime '{name}' not found (no {kind} "
                               f"{namespace + '/' if namespace else ''}{name}); looked at again later", retriable=True)

    def _plan(self, job: Mapping[str, Any]) -> JobPlan:
        return plan_kind(self.kind, trainjob.embed(job, lambda k, ns, n: self._runtimes.get((k, ns, n))),
                         cluster=self.cluster)
