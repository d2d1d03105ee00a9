"""The actuator process on Kubernetes, as ``kueuelog run actuator --kube`` runs it.

The actuator — the one loop (:mod:`services.actuator.loop`) over the Kubernetes port
(:mod:`services.actuator.kube_port`) — and the job reconciler
(:mod:`services.actuator.job_reconciler`) run side by side in one process: without an
admission webhook, a queued Job waits for quota only because the reconciler suspends it, so
the two run and stop together. If either fails for good, the process ends (a supervisor
restarts it). Leadership is the caller's; the actuator checks after every step that it
still leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kubernetes_asyncio import client

from events import jobkinds
from events.envelope import Topics
from events.jobkinds.trainjob import TRAINJOB
from services.actuator.job_reconciler import JobReconciler, Policy
from services.actuator.kind_reconciler import KindReconciler
from services.actuator.kube_port import KUBE_TUNING, KubePort
from services.actuator.loop import Actuator, Tuning
from services.actuator.multikueue import WorkerPlacer
from services.actuator.podgroups import PodGroupReconciler
from services.actuator.pods import PodReconciler
from services.actuator.runner import run_loop
from services.actuator.trainjob_reconciler import TrainJobReconciler
from services.actuator.tree_reconciler import TreeReconciler
from services.runtime.log import Log
from services.runtime.metrics import StatsCollector
from services.runtime.supervise import POLL_SECONDS, ServiceStatus


class ActuatorService:
    """Decisions applied to one cluster (an :class:`Actuator` over a :class:`KubePort`) and its
    queued Jobs kept waiting for them (:class:`JobReconciler`), in one process."""

    # Many arguments: keyword-only options, each with a default; the settings are typed in services/app/assembly.py.
    def __init__(self, log: Log, api: client.ApiClient, *, cluster: str, topics: Topics | None = None,  # noqa: PLR0913
                 policy: Policy = "suspend", qps: float = 20, burst: int = 40, status: ServiceStatus | None = None,
                 role: str = "actuator", poll_seconds: float = POLL_SECONDS,
                 reconciler_api: client.ApiClient | None = None, tuning: Tuning = KUBE_TUNING,
                 elastic_quota_tree: bool = False, t9k: bool = False, job_kinds: Sequence[str] = (),
                 multikueue_namespace: str = "kueuelog-system") -> None:
        """``role`` is the leadership the caller acquired (checked on every step); ``reconciler_api``
        another client for the reconciler (default: the actuator's, which then shares its connections);
        ``job_kinds``: the workload kinds besides Job to reconcile too (``events.jobkinds``; their CRDs
        must exist), one :class:`KindReconciler` each. ``multikueue_namespace``: where the Secrets
        named by MultiKueueClusters are (services.actuator.multikueue)."""
        self.role, self.poll_seconds = role, poll_seconds
        self.status = status or ServiceStatus("actuator", leading=True)
        self.port = KubePort(api, cluster=cluster, qps=qps, burst=burst, tuning=tuning, t9k=t9k)
        # MultiKueue: placed Jobs are copied to their workers (nothing happens without placements).
        self.placer = WorkerPlacer(api, origin=cluster, namespace=multikueue_namespace, qps=qps, burst=burst)
        self.actuator = Actuator(log, self.port, topics=topics, placer=self.placer)
        self.reconciler = JobReconciler(reconciler_api or api, cluster=cluster, policy=policy, t9k=t9k)
        self.reconciler.on_workload_created = self.port.workload_created
        self.reconciler.on_workload_adopted = self.port.workload_adopted
        self.port.use_job_copies(self.reconciler)  # the queued Jobs, watched once in this process
        # ACK's ElasticQuotaTree kept as Kueue objects (deploy/frontends/ack), when asked for.
        self.trees = TreeReconciler(reconciler_api or api) if elastic_quota_tree else None
        self.pods = PodReconciler(reconciler_api or api) if elastic_quota_tree else None
        self.kinds = [TrainJobReconciler(reconciler_api or api, cluster=cluster) if k is TRAINJOB
                      else KindReconciler(reconciler_api or api, k, cluster=cluster) for k in jobkinds.OTHER_KINDS
                      if k.kind in job_kinds]
        for r in self.kinds:  # their jobs claim prebuilt Workloads too
            r.on_workload_adopted = self.port.workload_adopted
        # Kueue's pod integration in any namespace: pods, pod groups, StatefulSets (--job-kinds Pod).
        self.pod_groups = (PodGroupReconciler(reconciler_api or api, elastic_quota_tree=elastic_quota_tree)
                           if "Pod" in job_kinds else None)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``; raises what stopped either task for good (the other is stopped too)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(run_loop(self.actuator, stop, poll_seconds=self.poll_seconds, status=self.status,
                                           role=self.role), name="actuator")
                group.create_task(self.reconciler.run(stop), name="job reconciler")
                group.create_task(self.port.watch(stop), name="actuator's watched copies")
                if self.trees is not None:
                    group.create_task(self.trees.run(stop), name="elasticquotatree reconciler")
                if self.pods is not None:
                    group.create_task(self.pods.run(stop), name="pod reconciler")
                for r in self.kinds:
                    group.create_task(r.run(stop), name=f"{r.kind.kind} reconciler")
                if self.pod_groups is not None:
                    group.create_task(self.pod_groups.run(stop), name="pod group reconciler")
        except BaseExceptionGroup as eg:
            if len(eg.exceptions) == 1:
                raise eg.exceptions[0] from None  # say which failed, not "unhandled errors in a TaskGroup"
            raise
        finally:
            await self.placer.close()

    def collector(self) -> StatsCollector:
        sources = {"": lambda: (self.actuator.stats, self.port.stats), "job_reconciler_": lambda: self.reconciler.stats}
        for name, informer in self.port.informers.items():  # kueuelog_actuator_watched_<name>_lists_total, ...
            sources[f"watched_{name}_"] = lambda i=informer: i.stats  # type: ignore[misc]
        if self.trees is not None:
            trees = self.trees
            sources["elasticquotatree_"] = lambda: trees.stats
        if self.pods is not None:
            pods = self.pods
            sources["pod_reconciler_"] = lambda: pods.stats
        for r in self.kinds:
            sources[f"{r.kind.kind.lower()}_reconciler_"] = lambda r=r: r.stats  # type: ignore[misc]
        return StatsCollector("actuator", sources)
