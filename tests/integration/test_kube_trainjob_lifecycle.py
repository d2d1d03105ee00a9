"""A TrainJob through the job integration on a real kube-apiserver (our minimal CRDs for TrainJob and
its runtimes): created running before its ClusterTrainingRuntime exists, the reconciler
(``TrainJobReconciler``) holds it and makes no Workload; once the runtime is there it creates the
Workload Kueue would (the runtime's replicated Jobs, numNodes, resourcesPerNode); the actuator
(``KubePort``) admits it, writing the flavor's node labels per podSet into Kueue's runtime patch and
releasing it; evicts it (held again, the patch emptied); admits it again; it completes and its
Workload is marked Finished (what frees its quota in the scheduler). The watcher (``--job-kinds
TrainJob`` watches the runtimes first) publishes it as that Workload, read with the runtime it
watched, once, and its end; a TrainJob naming a runtime that is not there is refused, then
published when the runtime arrives. No Trainer runs: the test plays its part."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION, EVICTED_ANNOTATION
from events.jobkinds import trainjob
from events.messages import AdmitWorkload, EvictWorkload, ObjectApplied
from services.actuator.kindplan import kind_admit_ops
from services.actuator.kube_port import KubePort
from services.actuator.kubeplan import FlavorScheduling
from services.actuator.trainjob_reconciler import TrainJobReconciler
from services.runtime.sqlite import SqliteLog
from services.watcher.kube import DEFAULT_KINDS, WatcherStats, job_kind_watches, run_kube_watcher
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.test_kube_job_kinds_watcher import MERGE
from tests.integration.test_kube_watcher import CLUSTER, Setup, envelopes, eventually, retrying, seen, what

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TJ = (trainjob.GROUP, trainjob.VERSION, "trainjobs")
CTR = (trainjob.GROUP, trainjob.VERSION, "clustertrainingruntimes")
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def a_runtime(name: str) -> dict[str, Any]:
    def job(job_name: str, container: str, cpu: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        template: dict[str, Any] = {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": container, "image": "registry.example/t:1",
                            "resources": {"requests": {"cpu": cpu}}}]}}}}
        if labels:
            template["metadata"] = {"labels": labels}
        return {"name": job_name, "template": template}

    return {"apiVersion": trainjob.API_VERSION, "kind": "ClusterTrainingRuntime", "metadata": {"name": name},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
                job("dataset-initializer", "dataset-initializer", "500m"),
                job("node", "node", "250m", {trainjob.ANCESTOR_LABEL: trainjob.TRAINER})]}}}}


def a_trainjob(name: str, queue: str, runtime: str) -> dict[str, Any]:
    return {"apiVersion": trainjob.API_VERSION, "kind": "TrainJob",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"runtimeRef": {"name": runtime}, "suspend": False,  # created running: it must be held
                     "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "1"}}}}}


async def served(co: Any) -> None:
    """TrainJob's and its runtimes' CRDs answer (a new CRD's storage may still be initialising)."""
    for plural in ("trainjobs", "clustertrainingruntimes", "trainingruntimes"):
        await retrying(lambda p=plural: co.list_cluster_custom_object(trainjob.GROUP, trainjob.VERSION, p),
                       what=f"{plural} to be served")


@contextlib.asynccontextmanager
async def reconciler(api: client.ApiClient) -> AsyncIterator[TrainJobReconciler]:
    stop = asyncio.Event()
    r = TrainJobReconciler(api, cluster="test")
    task = asyncio.create_task(r.run(stop))
    try:
        yield r
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


def admission(cq: str, flavor: str, *pod_sets: tuple[str, int]) -> o.Admission:
    return o.Admission(cluster_queue=cq, pod_set_assignments=tuple(
        o.PodSetAssignment(name=n, flavors=(("cpu", flavor),), resource_usage=(("cpu", 1000 * c),), count=c)
        for n, c in pod_sets))


def kueue_jobs(obj: dict[str, Any]) -> Any:
    patches = [p for p in obj["spec"].get("runtimePatches") or [] if p.get("manager") == trainjob.KUEUE_MANAGER]
    assert len(patches) == 1, obj["spec"].get("runtimePatches")
    return patches[0]["trainingRuntimeSpec"]["template"]["spec"].get("replicatedJobs")


async def test_trainjob_held_until_its_runtime_then_admitted_evicted_readmitted_finished(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s = Setup(api, ns)
    await s.queues()  # flavor s.rf has nodeLabels {zone: a}
    await ensure_job_kind_crds(api, "TrainJob")
    co = client.CustomObjectsApi(api)
    await served(co)
    runtime = f"torch-{ns}"  # cluster-scoped: one per test namespace
    try:
        async with reconciler(api) as r:
            await _lifecycle(api, co, s, ns, runtime)
        assert r.stats.suspended == 1 and r.stats.finished_written == 1 and r.stats.invalid >= 1
    finally:
        with contextlib.suppress(client.exceptions.ApiException):
            await co.delete_cluster_custom_object(*CTR, runtime)


async def _lifecycle(api: client.ApiClient, co: Any, s: Setup, ns: str, runtime: str) -> None:
    tj = await co.create_namespaced_custom_object(*TJ[:2], ns, TJ[2], a_trainjob("tj", s.lq, runtime))
    assert tj["spec"]["runtimeRef"] == {"name": runtime, "apiGroup": trainjob.GROUP, "kind": "ClusterTrainingRuntime"}
    wl_name = jobkinds.workload_name("TrainJob", trainjob.GROUP, "tj", tj["metadata"]["uid"])

    async def get_tj() -> dict[str, Any]:
        out: dict[str, Any] = await co.get_namespaced_custom_object(*TJ[:2], ns, TJ[2], "tj")
        return out

    async def held() -> bool:
        return (await get_tj())["spec"].get("suspend") is True

    await eventually(held, what="the running TrainJob to be held")

    async def invalid_event() -> bool:
        events = await client.CoreV1Api(api).list_namespaced_event(ns)
        return any(e.reason == "InvalidJob" and f"runtime '{runtime}' not found" in (e.message or "")
                   for e in events.items)

    await eventually(invalid_event, what="an InvalidJob Event naming the missing runtime")

    async def workload() -> dict[str, Any] | None:
        with contextlib.suppress(client.exceptions.ApiException):
            out: dict[str, Any] = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_name)
            return out
        return None

    assert await workload() is None  # no runtime, no Workload
    await co.create_cluster_custom_object(*CTR, a_runtime(runtime))
    wl = await eventually(workload, what="the TrainJob's Workload once its runtime is there")
    pod_sets = [(p["name"], p["count"], p["template"]["spec"]["containers"][0]["resources"]["requests"])
                for p in wl["spec"]["podSets"]]
    assert pod_sets == [("dataset-initializer", 1, {"cpu": "500m"}), ("node", 2, {"cpu": "1"})]
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert wl["spec"]["queueName"] == s.lq

    port = KubePort(api, cluster="test")
    assignment = admission(s.cq, s.rf, ("dataset-initializer", 1), ("node", 2))
    await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_name, cluster_queue=s.cq,
                                   admission=assignment))
    tj = await get_tj()
    assert tj["spec"]["suspend"] is False
    assert [(j["name"], j["template"]["spec"]["template"]["spec"]["nodeSelector"]) for j in kueue_jobs(tj)] == [
        ("dataset-initializer", {"zone": "a"}), ("node", {"zone": "a"})]
    assert tj["metadata"]["annotations"][DECISION_ID_ANNOTATION] == "c1-0"
    untouched = await co.get_cluster_custom_object(*CTR, runtime)
    assert untouched["spec"] == a_runtime(runtime)["spec"]  # the runtime is never written
    wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_name)
    assert wl["status"]["admission"]["clusterQueue"] == s.cq
    await asyncio.sleep(1)
    assert (await get_tj())["spec"]["suspend"] is False  # the reconciler leaves it running

    await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name=wl_name, cluster_queue=s.cq,
                                  reason="Preempted", message="to make room"))
    tj = await get_tj()
    assert tj["spec"]["suspend"] is True
    assert kueue_jobs(tj) is None
    assert tj["metadata"]["annotations"][EVICTED_ANNOTATION] == "c2-0"
    wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_name)
    assert {c["type"]: c["status"] for c in wl["status"]["conditions"]}["Evicted"] == "True"

    await port.start(AdmitWorkload(id="c3-0", cycle=3, namespace=ns, name=wl_name, cluster_queue=s.cq,
                                   admission=assignment))
    tj = await get_tj()
    assert tj["spec"]["suspend"] is False and len(kueue_jobs(tj)) == 2

    await co.patch_namespaced_custom_object_status(*TJ[:2], ns, TJ[2], "tj", {"status": {"conditions": [
        {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, _content_type=MERGE)

    async def finished() -> bool:
        wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_name)
        return any(c["type"] == "Finished" and c["status"] == "True"
                   for c in (wl.get("status") or {}).get("conditions") or [])

    await eventually(finished, what="the TrainJob's Workload to be Finished")


async def test_watcher_publishes_a_trainjob_read_with_the_runtime_it_watches(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s = Setup(api, ns)
    await s.queues()
    await ensure_job_kind_crds(api, "TrainJob")
    co = client.CustomObjectsApi(api)
    runtime = f"torch-{ns}"
    await served(co)
    await retrying(lambda: co.create_cluster_custom_object(*CTR, a_runtime(runtime)), what="ClusterTrainingRuntime")
    try:
        await _watched(api, co, s, ns, runtime, tmp_path)
    finally:
        for name in (runtime, f"late-{ns}"):
            with contextlib.suppress(client.exceptions.ApiException):
                await co.delete_cluster_custom_object(*CTR, name)


async def _watched(api: client.ApiClient, co: Any, s: Setup, ns: str, runtime: str, tmp_path: Path) -> None:
    held = a_trainjob("tj", s.lq, runtime)
    held["spec"]["suspend"] = True
    tj = await co.create_namespaced_custom_object(*TJ[:2], ns, TJ[2], held)
    early = a_trainjob("early", s.lq, f"late-{ns}")
    early["spec"]["suspend"] = True
    early = await co.create_namespaced_custom_object(*TJ[:2], ns, TJ[2], early)
    wl_name = jobkinds.workload_name("TrainJob", trainjob.GROUP, "tj", tj["metadata"]["uid"])
    wl_early = jobkinds.workload_name("TrainJob", trainjob.GROUP, "early", early["metadata"]["uid"])
    log = SqliteLog(tmp_path / "log")
    stats = WatcherStats()
    stop = asyncio.Event()
    kinds = (*DEFAULT_KINDS, *job_kind_watches(["TrainJob"]))
    assert [k.kind for k in kinds[-3:]] == ["ClusterTrainingRuntime", "TrainingRuntime", "TrainJob"]
    watcher = asyncio.create_task(run_kube_watcher(log, api, stop, cluster=CLUSTER, stats=stats, kinds=kinds,
                                                   backoff=(0.1, 1.0)))
    try:
        await eventually(lambda: seen(log, ("applied", "Workload", f"{ns}/{wl_name}")), what="the TrainJob's Workload")
        await eventually(lambda: stats.refused >= 1, what="the TrainJob without its runtime refused")
        assert not seen(log, ("applied", "Workload", f"{ns}/{wl_early}"))
        # Its runtime arrives (the TrainJob itself does not change): it is translated again and published.
        await co.create_cluster_custom_object(*CTR, a_runtime(f"late-{ns}"))
        await eventually(lambda: seen(log, ("applied", "Workload", f"{ns}/{wl_early}")),
                         what="the TrainJob published once its runtime is there")
        # Admitted by the actuator's patch (Kueue's runtime patch), run, then finished.
        d = AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_name, cluster_queue=s.cq,
                          admission=admission(s.cq, s.rf, ("dataset-initializer", 1), ("node", 2)))
        tj = await co.get_namespaced_custom_object(*TJ[:2], ns, TJ[2], "tj")
        flavor = FlavorScheduling(s.rf, (("zone", "a"),))
        ops = kind_admit_ops(trainjob.TRAINJOB, tj, d, {"dataset-initializer": [flavor], "node": [flavor]})
        await co.patch_namespaced_custom_object(*TJ[:2], ns, TJ[2], "tj", ops)
        await co.patch_namespaced_custom_object_status(*TJ[:2], ns, TJ[2], "tj", {"status": {"conditions": [
            {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, _content_type=MERGE)
        await eventually(lambda: seen(log, ("WorkloadFinished", "Workload", f"{ns}/{wl_name}")),
                         what="the TrainJob's Workload finished")
    finally:
        stop.set()
        await asyncio.wait_for(watcher, timeout=30)
    every = envelopes(log)
    mine = collections.Counter(what(e) for e in every if s.mine(e) and what(e)[1] == "Workload")
    assert mine == {("applied", "Workload", f"{ns}/{wl_name}"): 1,  # admitted and running: not published again
                    ("WorkloadFinished", "Workload", f"{ns}/{wl_name}"): 1,
                    ("applied", "Workload", f"{ns}/{wl_early}"): 1}
    applied = [e.event.object for e in every
               if isinstance(e.event, ObjectApplied) and isinstance(e.event.object, o.Workload)
               and e.event.object.name == wl_name]
    assert [(p.name, p.count, p.requests) for p in applied[0].pod_sets] == [
        ("dataset-initializer", 1, (("cpu", 500),)), ("node", 2, (("cpu", 1000),))]
    assert applied[0].owner is not None and applied[0].owner.kind == "TrainJob"
