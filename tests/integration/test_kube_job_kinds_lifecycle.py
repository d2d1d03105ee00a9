"""A JobSet and a PyTorchJob through the job integration on a real kube-apiserver (our minimal
CRDs): the reconciler (``KindReconciler``) holds the one created running and creates both
Workloads as Kueue would; the actuator (``KubePort``) admits them, releasing each with the flavor's
node labels in every podSet's template; it evicts the JobSet, which is held again with its
templates' own scheduling back; the PyTorchJob ends and its Workload is marked Finished (what frees
its quota in the scheduler). No operators run: the test plays their part in the objects' status."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION, EVICTED_ANNOTATION, ORIGINAL_POD_SCHEDULING_ANNOTATION
from events.messages import AdmitWorkload, EvictWorkload
from services.actuator.kind_reconciler import KindReconciler
from services.actuator.kube_port import KubePort
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.test_kube_job_kinds_watcher import MERGE, a_jobset, a_pytorchjob
from tests.integration.test_kube_watcher import Setup, eventually, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KINDS = ("JobSet", "PyTorchJob")
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PT = ("kubeflow.org", "v1", "pytorchjobs")
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")


@contextlib.asynccontextmanager
async def reconcilers(api: client.ApiClient) -> AsyncIterator[list[KindReconciler]]:
    stop = asyncio.Event()
    running = [KindReconciler(api, k, cluster="test") for k in jobkinds.OTHER_KINDS if k.kind in KINDS]
    tasks = [asyncio.create_task(r.run(stop)) for r in running]
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


def admission(cq: str, flavor: str, *pod_sets: tuple[str, int]) -> o.Admission:
    return o.Admission(cluster_queue=cq, pod_set_assignments=tuple(
        o.PodSetAssignment(name=n, flavors=(("cpu", flavor),), resource_usage=(("cpu", 1000 * c),), count=c)
        for n, c in pod_sets))


async def test_jobset_and_pytorchjob_held_admitted_evicted_finished(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s = Setup(api, ns)
    await s.queues()  # flavor s.rf has nodeLabels {zone: a}
    await ensure_job_kind_crds(api, *KINDS)
    co = client.CustomObjectsApi(api)
    await retrying(lambda: co.list_cluster_custom_object(*JS), what="jobsets to be served")
    await retrying(lambda: co.list_cluster_custom_object(*PT), what="pytorchjobs to be served")

    running_pt = a_pytorchjob("pt", s.lq)
    running_pt["spec"]["runPolicy"]["suspend"] = False  # created running: the reconciler must hold it
    async with reconcilers(api) as rs:
        js = await co.create_namespaced_custom_object(JS[0], JS[1], ns, JS[2], a_jobset("js", s.lq))
        pt = await co.create_namespaced_custom_object(PT[0], PT[1], ns, PT[2], running_pt)
        wl_js = jobkinds.workload_name("JobSet", JS[0], "js", js["metadata"]["uid"])
        wl_pt = jobkinds.workload_name("PyTorchJob", PT[0], "pt", pt["metadata"]["uid"])

        async def held_pt() -> bool:
            obj = await co.get_namespaced_custom_object(PT[0], PT[1], ns, PT[2], "pt")
            return bool(obj["spec"]["runPolicy"].get("suspend"))

        await eventually(held_pt, what="the running PyTorchJob to be held")

        async def workload(name: str) -> dict[str, Any] | None:
            with contextlib.suppress(client.exceptions.ApiException):
                out: dict[str, Any] = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], name)
                return out
            return None

        w_js = await eventually(lambda: workload(wl_js), what="the JobSet's Workload")
        w_pt = await eventually(lambda: workload(wl_pt), what="the PyTorchJob's Workload")
        assert [(p["name"], p["count"]) for p in w_js["spec"]["podSets"]] == [("workers", 4), ("driver", 1)]
        assert [(p["name"], p["count"]) for p in w_pt["spec"]["podSets"]] == [("master", 1), ("worker", 2)]
        assert w_pt["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
        assert w_js["spec"]["queueName"] == s.lq

        port = KubePort(api, cluster="test")
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_js, cluster_queue=s.cq,
                                       admission=admission(s.cq, s.rf, ("workers", 4), ("driver", 1))))
        await port.start(AdmitWorkload(id="c1-1", cycle=1, namespace=ns, name=wl_pt, cluster_queue=s.cq,
                                       admission=admission(s.cq, s.rf, ("master", 1), ("worker", 2))))
        js = await co.get_namespaced_custom_object(JS[0], JS[1], ns, JS[2], "js")
        pt = await co.get_namespaced_custom_object(PT[0], PT[1], ns, PT[2], "pt")
        assert js["spec"]["suspend"] is False and pt["spec"]["runPolicy"]["suspend"] is False
        for rj in js["spec"]["replicatedJobs"]:
            assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
        for replica in pt["spec"]["pytorchReplicaSpecs"].values():
            assert replica["template"]["spec"]["nodeSelector"] == {"zone": "a"}
        assert js["metadata"]["annotations"][DECISION_ID_ANNOTATION] == "c1-0"
        w_js = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_js)
        assert w_js["status"]["admission"]["clusterQueue"] == s.cq
        # The reconciler leaves admitted, running objects alone.
        await asyncio.sleep(1)
        assert (await co.get_namespaced_custom_object(PT[0], PT[1], ns, PT[2], "pt"))["spec"]["runPolicy"][
            "suspend"] is False

        await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name=wl_js, cluster_queue=s.cq,
                                      reason="Preempted", message="to make room"))
        js = await co.get_namespaced_custom_object(JS[0], JS[1], ns, JS[2], "js")
        assert js["spec"]["suspend"] is True
        assert js["metadata"]["annotations"][EVICTED_ANNOTATION] == "c2-0"
        assert ORIGINAL_POD_SCHEDULING_ANNOTATION not in js["metadata"]["annotations"]
        for rj in js["spec"]["replicatedJobs"]:
            assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == {}
        conditions = {c["type"]: c["status"] for c in
                      (await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_js))["status"]["conditions"]}
        assert conditions["Evicted"] == "True"
        # A stale decision (an older cycle's admission) changes nothing.
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_js, cluster_queue=s.cq,
                                       admission=admission(s.cq, s.rf, ("workers", 4), ("driver", 1))))
        assert (await co.get_namespaced_custom_object(JS[0], JS[1], ns, JS[2], "js"))["spec"]["suspend"] is True

        await co.patch_namespaced_custom_object_status(PT[0], PT[1], ns, PT[2], "pt", {"status": {"conditions": [
            {"type": "Succeeded", "status": "True", "message": "done"}]}}, _content_type=MERGE)

        async def finished() -> bool:
            wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], wl_pt)
            return any(c["type"] == "Finished" and c["status"] == "True"
                       for c in (wl.get("status") or {}).get("conditions") or [])

        await eventually(finished, what="the PyTorchJob's Workload to be Finished")
    stats = {r.kind.kind: r.stats for r in rs}
    assert stats["PyTorchJob"].suspended == 1 and stats["JobSet"].suspended == 0
    assert stats["PyTorchJob"].finished_written == 1
    assert json.dumps(port.stats.as_dict())  # the port's counters serialise (metrics)
