"""``kueue.x-k8s.io/prebuilt-workload-name`` on a real kube-apiserver: the job reconciler adopts the
Workload a Job names (controller owner, ``job-uid`` label) instead of creating one; a Job naming a
Workload that does not match it marks that Workload Finished (OutOfSync); a Job naming one that does
not exist yet waits for it and adopts it once it is there. The actuator admits a prebuilt Workload
not adopted yet by starting the Job that names it (found by its label); a Job created after its
prebuilt Workload was admitted is started once its reconciler adopts the Workload, as Kueue does."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import objects as o
from events.cluster import JOB_UID_LABEL, PREBUILT_WORKLOAD_LABEL, EvictionReason
from events.messages import AdmitWorkload, EvictWorkload
from services.actuator.job_reconciler import JobReconciler
from services.actuator.kube_port import KubePort
from tests.integration.test_kube_watcher import Setup, eventually, queued_job, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KUEUE = ("kueue.x-k8s.io", "v1beta2", "workloads")


def prebuilt_workload(name: str, queue: str, pods: int = 1) -> dict[str, Any]:
    template = copy.deepcopy(queued_job("x", queue)["spec"]["template"])
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": pods, "template": template}]}}


async def queues_and_clients(api: client.ApiClient, ns: str) -> tuple[Setup, Any, Any]:
    """The test's flavor, ClusterQueue and LocalQueue (``Setup.queues``), and the custom-objects and
    batch clients."""
    s = Setup(api, ns)
    await s.queues()
    return s, client.CustomObjectsApi(api), client.BatchV1Api(api)


async def create_prebuilt(co: Any, ns: str, queue: str, *names: str) -> None:
    """A prebuilt Workload (``prebuilt_workload``) of each name, in ``ns`` on LocalQueue ``queue``."""
    for name in names:
        body = prebuilt_workload(name, queue)
        await retrying(lambda b=body: co.create_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], b),
                       what=f"Workload {name}")


def one_cpu_admission(s: Setup) -> o.Admission:
    """One pod of 1 cpu admitted to the test's ClusterQueue, on its flavor."""
    return o.Admission(cluster_queue=s.cq, pod_set_assignments=(o.PodSetAssignment(
        name="main", flavors=(("cpu", s.rf),), resource_usage=(("cpu", 1000),), count=1),))


def job_naming(name: str, queue: str, workload: str, pods: int = 1) -> dict[str, Any]:
    body = queued_job(name, queue)
    body["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] = workload
    body["spec"]["parallelism"] = body["spec"]["completions"] = pods
    return body


@contextlib.asynccontextmanager
async def reconciler(api: client.ApiClient, port: KubePort | None = None) -> AsyncIterator[None]:
    """The job reconciler, telling ``port`` of the Workloads it adopts (as the actuator's process wires them)."""
    stop = asyncio.Event()
    r = JobReconciler(api, cluster="test")
    if port is not None:
        r.on_workload_adopted = port.workload_adopted
    task = asyncio.create_task(r.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


async def test_prebuilt_workloads_adopted_out_of_sync_and_waited_for(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s, co, batch = await queues_and_clients(api, ns)

    async def workload(name: str) -> dict[str, Any]:
        out: dict[str, Any] = await co.get_namespaced_custom_object(KUEUE[0], KUEUE[1], ns, KUEUE[2], name)
        return out

    await create_prebuilt(co, ns, s.lq, "pre-a", "pre-b")  # pre-b: 1 pod (its Job below asks for 2)
    # Admitted before any reconciler adopts it: the actuator starts the Job that names it.
    a = await batch.create_namespaced_job(ns, job_naming("a", s.lq, "pre-a"))
    port = KubePort(api, cluster="test")
    admission = one_cpu_admission(s)
    await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name="pre-a", cluster_queue=s.cq,
                                   admission=admission))
    started = await batch.read_namespaced_job("a", ns)
    assert started.spec.suspend is False and started.spec.template.spec.node_selector == {"zone": "a"}

    b = await batch.create_namespaced_job(ns, job_naming("b", s.lq, "pre-b", pods=2))  # 2 pods, the Workload 1
    await batch.create_namespaced_job(ns, job_naming("c", s.lq, "pre-c"))  # its Workload comes later
    async with reconciler(api):
        async def adopted(name: str, uid: str) -> dict[str, Any] | None:
            wl = await workload(name)
            refs = wl["metadata"].get("ownerReferences") or []
            return wl if any(r.get("uid") == uid and r.get("controller") for r in refs) else None

        wl_a = await eventually(lambda: adopted("pre-a", a.metadata.uid), what="pre-a adopted by Job a")
        assert wl_a["metadata"]["labels"][JOB_UID_LABEL] == a.metadata.uid

        async def out_of_sync() -> dict[str, Any] | None:
            wl = await adopted("pre-b", b.metadata.uid)
            conditions = ((wl or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Finished" and c["status"] == "True"), None)

        finished = await eventually(out_of_sync, what="pre-b marked Finished (OutOfSync)")
        assert finished["reason"] == "OutOfSync"

        await asyncio.sleep(1)
        with pytest.raises(client.exceptions.ApiException):
            await workload("pre-c")  # none created for Job c: it waits for its prebuilt one
        await create_prebuilt(co, ns, s.lq, "pre-c")
        c = await batch.read_namespaced_job("c", ns)
        await eventually(lambda: adopted("pre-c", c.metadata.uid), what="pre-c adopted once it exists")
    listed = await co.list_namespaced_custom_object(KUEUE[0], KUEUE[1], ns, KUEUE[2])
    assert sorted(w["metadata"]["name"] for w in listed["items"]) == ["pre-a", "pre-b", "pre-c"]


async def test_job_created_after_its_prebuilt_workload_was_admitted_is_started(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s, co, batch = await queues_and_clients(api, ns)
    await create_prebuilt(co, ns, s.lq, "late", "gone", "early")
    port = KubePort(api, cluster="test")
    admission = one_cpu_admission(s)
    # Both admitted while no job names them: written to the Workloads alone.
    await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name="late", cluster_queue=s.cq,
                                   admission=admission))
    await port.start(AdmitWorkload(id="c1-1", cycle=1, namespace=ns, name="gone", cluster_queue=s.cq,
                                   admission=admission))
    wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "late")
    assert wl["status"]["admission"]["clusterQueue"] == s.cq and not wl["metadata"].get("ownerReferences")
    # "early"'s job exists when it is admitted: started then (found by its label), nothing kept for later.
    await batch.create_namespaced_job(ns, job_naming("early-job", s.lq, "early"))
    await port.start(AdmitWorkload(id="c1-2", cycle=1, namespace=ns, name="early", cluster_queue=s.cq,
                                   admission=admission))
    assert (await batch.read_namespaced_job("early-job", ns)).spec.suspend is False
    # "gone" is evicted before its job comes: the job must stay suspended.
    await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name="gone", cluster_queue=s.cq,
                                  reason=EvictionReason.PREEMPTED, message="preempted"))
    late = await batch.create_namespaced_job(ns, job_naming("late-job", s.lq, "late"))
    await batch.create_namespaced_job(ns, job_naming("gone-job", s.lq, "gone"))
    assert late.spec.suspend is True
    async with reconciler(api, port):
        async def started() -> Any:
            await port.before_batch(0)
            job = await batch.read_namespaced_job("late-job", ns)
            return job if job.spec.suspend is False else None

        job = await eventually(started, what="late-job started once it claimed its admitted Workload")
        assert job.spec.template.spec.node_selector == {"zone": "a"}  # the admission's flavor
        assert port.stats.adopted_reapplied == 1

        async def adopted(name: str) -> dict[str, Any] | None:
            wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], name)
            return wl if wl["metadata"].get("ownerReferences") else None

        await eventually(lambda: adopted("gone"), what="gone adopted by gone-job")
        await eventually(lambda: adopted("early"), what="early adopted by early-job")
        await port.before_batch(0)
        assert (await batch.read_namespaced_job("gone-job", ns)).spec.suspend is True
        # Nothing left to apply for an adopted Workload (queue statuses may still wait for their turn).
        assert port.deferred == port.deferred_marks + port.deferred_queues
        assert port.stats.adopted_reapplied == 1
