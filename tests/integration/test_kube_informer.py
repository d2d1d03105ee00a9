"""The actuator's watched copies on a real kube-apiserver (``services/actuator/informer.py``).

The informer keeps what it watches (created, changed, deleted; label-selected and indexed by the
prebuilt Workload a Job names) and reports a kind that is not served as absent. The Kubernetes port
admits from the copies without reading: a standalone Workload costs one call (its status), a
prebuilt Workload's claiming Job is found without a list. A stale copy is refused with 409 Conflict,
then the port reads the Workload and writes again. A queue's status is written from its watched
copy, without a read, and so is a queued Job started for its Workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.cluster import PREBUILT_WORKLOAD_LABEL
from events.messages import AdmitWorkload
from services.actuator.informer import Informer
from services.actuator.job_reconciler import JobReconciler
from services.actuator.kube_port import KubePort
from services.actuator.kubeapi import Ref
from services.actuator.kubeplan import workload_ref
from tests.integration.test_kube_prebuilt_workload import (
    KUEUE,
    create_prebuilt,
    job_naming,
    one_cpu_admission,
    prebuilt_workload,
    queues_and_clients,
)
from tests.integration.test_kube_watcher import eventually, queued_job, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MERGE = "application/merge-patch+json"


@contextlib.asynccontextmanager
async def running(*informers: Informer) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(i.run(stop)) for i in informers]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


def labels(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


async def test_the_informer_keeps_what_it_watches_and_reports_a_kind_not_served(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s, co, batch = await queues_and_clients(api, ns)
    workloads = Informer(api, workload_ref("", ""))
    jobs = Informer(api, Ref("Job", "batch", "v1", "jobs", ""), label_selector=PREBUILT_WORKLOAD_LABEL,
                    index=lambda j: labels(j).get(PREBUILT_WORKLOAD_LABEL, ""))
    nothing = Informer(api, Ref("Nothing", "nothing.kueuelog.test", "v1", "nothings", ""), absent_retry_s=0.2)
    await retrying(lambda: co.create_namespaced_custom_object(
        *KUEUE[:2], ns, KUEUE[2], prebuilt_workload("before", s.lq)), what="Workload before")
    async with running(workloads, jobs, nothing):
        await eventually(lambda: workloads.synced and jobs.synced and nothing.synced, what="the first lists")
        listed = workloads.get(ns, "before")
        assert listed is not None, "listed"
        assert listed["kind"] == "Workload" and listed["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert "managedFields" not in listed["metadata"]

        await co.create_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], prebuilt_workload("after", s.lq))
        await eventually(lambda: workloads.get(ns, "after"), what="a created Workload watched")
        await co.patch_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "after",
                                                {"metadata": {"labels": {"seen": "yes"}}}, _content_type=MERGE)
        await eventually(lambda: labels(workloads.get(ns, "after")).get("seen") == "yes", what="a change watched")
        await co.delete_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "after")
        await eventually(lambda: workloads.get(ns, "after") is None, what="a deletion watched")

        await batch.create_namespaced_job(ns, job_naming("claims", s.lq, "pre-x"))
        await batch.create_namespaced_job(ns, queued_job("plain", s.lq))
        claimant = await eventually(lambda: jobs.find(ns, "pre-x"), what="the Job naming pre-x, by that name")
        assert claimant["metadata"]["name"] == "claims" and claimant["kind"] == "Job"
        await batch.delete_namespaced_job("claims", ns, propagation_policy="Background")
        await eventually(lambda: jobs.find(ns, "pre-x") is None, what="the claimant's deletion")
        assert jobs.get(ns, "plain") is None, "the label selector keeps out a Job naming no Workload"

        assert nothing.absent and len(nothing) == 0 and nothing.find(ns, "x") is None
        await eventually(lambda: nothing.stats.absent >= 2, what="an absent kind tried again")
    assert workloads.stats.lists == 1 and workloads.stats.events >= 3


async def test_the_port_admits_from_watched_copies_and_reads_after_a_conflict(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s, co, batch = await queues_and_clients(api, ns)
    await create_prebuilt(co, ns, s.lq, "solo", "pre-a", "stale")
    await batch.create_namespaced_job(ns, job_naming("a", s.lq, "pre-a"))
    # A queued Job and the Workload it owns (as the job reconciler creates it).
    owner = await batch.create_namespaced_job(ns, queued_job("owner", s.lq))
    owned = prebuilt_workload("owned", s.lq)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "owner",
                                             "uid": owner.metadata.uid, "controller": True}]
    await co.create_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], owned)
    admission = one_cpu_admission(s)

    def admit(name: str, cycle: int) -> AdmitWorkload:
        return AdmitWorkload(id=f"c{cycle}-0", cycle=cycle, namespace=ns, name=name, cluster_queue=s.cq,
                             admission=admission)

    async def read(name: str) -> dict[str, Any]:
        out: dict[str, Any] = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], name)
        return out

    def admitted(wl: dict[str, Any]) -> bool:
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in wl["status"].get("conditions") or [])

    port = KubePort(api, cluster="test")
    calls = port.stats.api.calls
    stop = asyncio.Event()
    watching = asyncio.create_task(port.watch(stop))
    try:
        await eventually(lambda: port.workloads.get(ns, "owned") and port.claimants["Job"].find(ns, "pre-a")
                         and port.jobs.get(ns, "owner")
                         and all(i.synced for i in (*port.claimants.values(), *port.queues.values())),
                         what="the port's copies")
        await port.start(admit("solo", 1))
        assert admitted(await read("solo"))
        assert calls == {"patch Workload status": 1}, "a standalone Workload: its status only, from the copy"

        await port.start(admit("pre-a", 2))
        job = await batch.read_namespaced_job("a", ns)
        assert job.spec.suspend is False, "the Job naming the prebuilt Workload was started"
        assert "list Job" not in calls and "get Workload" not in calls, calls

        # A queued Job's Workload: the Job is started from its watched copy, no read.
        await port.start(admit("owned", 3))
        assert (await batch.read_namespaced_job("owner", ns)).spec.suspend is False
        assert "get Job" not in calls and calls["patch Job"] == 2, calls

        # The queues' statuses, written from their watched copies: no read first.
        await port.after_batch()
        assert calls["patch ClusterQueue status"] == 1 and calls["patch LocalQueue status"] == 1, calls
        assert "get ClusterQueue" not in calls and "get LocalQueue" not in calls, calls
    finally:
        stop.set()
        await asyncio.wait_for(watching, timeout=30)

    # A copy the Workload has moved on from (the watch behind): refused, read, written again.
    old = await read("stale")
    await co.patch_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "stale",
                                            {"metadata": {"labels": {"moved": "on"}}}, _content_type=MERGE)
    port.workloads.synced = True  # (stopped: the copy stays as it is)
    port.workloads._put(copy.deepcopy(old))
    before = dict(calls)
    await port.start(admit("stale", 4))
    wl = await read("stale")
    assert admitted(wl) and labels(wl)["moved"] == "on"
    assert port.stats.conflicts == 1
    assert calls["get Workload"] == before.get("get Workload", 0) + 1, "read once, after the conflict"


async def test_the_port_reads_the_job_reconcilers_copies_of_queued_jobs(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    """In the actuator's process the queued Jobs are watched once, by the job reconciler: the port
    starts a Job from the reconciler's copy, with no watch of its own and no read."""
    api, ns = kube_api_client, kube_namespace
    s, co, batch = await queues_and_clients(api, ns)
    reconciler = JobReconciler(api, cluster="test")
    port = KubePort(api, cluster="test")
    port.use_job_copies(reconciler)
    assert "jobs" not in port.informers
    stop = asyncio.Event()
    tasks = [asyncio.create_task(reconciler.run(stop)), asyncio.create_task(port.watch(stop))]
    try:
        job = await batch.create_namespaced_job(ns, queued_job("queued", s.lq))

        async def its_workload() -> str | None:
            listed = await co.list_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2])
            names = [w["metadata"]["name"] for w in listed["items"]
                     if any(r.get("uid") == job.metadata.uid for r in w["metadata"].get("ownerReferences") or [])]
            return names[0] if names and port.workloads.get(ns, names[0]) and reconciler.get(ns, "queued") else None

        name = await eventually(its_workload, what="the reconciler's Workload for Job queued, in both copies")
        admission = one_cpu_admission(s)
        calls = port.stats.api.calls
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=name, cluster_queue=s.cq,
                                       admission=admission))
        assert (await batch.read_namespaced_job("queued", ns)).spec.suspend is False
        assert "get Job" not in calls and calls["patch Job"] == 1, calls
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
