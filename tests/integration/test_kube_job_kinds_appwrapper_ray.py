"""A RayJob and an AppWrapper through the job integration on a real kube-apiserver (our minimal
CRDs): created running, the reconciler holds each (``spec.suspend``) and creates its Workload as
Kueue would (RayJob: ``head``, the worker group, ``submitter``; AppWrapper: ``<name>-<n>`` from the
wrapped PyTorchJob's inferred pod sets); the actuator admits them: the RayJob with the flavor's
node labels in the head's and every worker group's template (and its default submitter template
written out), the AppWrapper with them in its component's ``podSetInfos``; both are evicted (held
again, templates restored, podSetInfos cleared), admitted again, and end (the RayJob's
``jobDeploymentStatus``, the AppWrapper's phase), their Workloads marked Finished (what frees their
quota in the scheduler). No operators run: the test plays their part in the objects' status."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from events.cluster import EVICTED_ANNOTATION
from events.cluster import QUEUE_NAME_LABEL as QUEUE_LABEL
from events.messages import AdmitWorkload, EvictWorkload
from services.actuator.kind_reconciler import KindReconciler
from services.actuator.kube_port import KubePort
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.test_kube_job_kinds_lifecycle import KUEUE, admission
from tests.integration.test_kube_job_kinds_watcher import MERGE, _pod, a_pytorchjob
from tests.integration.test_kube_watcher import Setup, eventually, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KINDS = ("RayJob", "AppWrapper")
RJ = ("ray.io", "v1", "rayjobs")
AW = ("workload.codeflare.dev", "v1beta2", "appwrappers")


@contextlib.asynccontextmanager
async def reconcilers(api: client.ApiClient) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(KindReconciler(api, k, cluster="test").run(stop))
             for k in jobkinds.OTHER_KINDS if k.kind in KINDS]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


def a_rayjob(name: str, queue: str) -> dict[str, Any]:
    head = _pod("1")
    head["spec"]["containers"][0]["image"] = "rayproject/ray:2.9.0"
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": False, "shutdownAfterJobFinishes": True, "entrypoint": "python -c 'print(1)'",
                     "rayClusterSpec": {"headGroupSpec": {"template": head},
                                        "workerGroupSpecs": [{"groupName": "small", "replicas": 2,
                                                              "template": _pod("500m")}]}}}


def an_appwrapper(name: str, queue: str) -> dict[str, Any]:
    wrapped = a_pytorchjob("wrapped", queue)
    del wrapped["metadata"]["labels"]
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": False, "components": [{"template": wrapped}]}}


async def test_rayjob_and_appwrapper_held_admitted_evicted_finished(
    kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    api, ns = kube_api_client, kube_namespace
    s = Setup(api, ns)
    await s.queues()  # flavor s.rf has nodeLabels {zone: a}
    await ensure_job_kind_crds(api, *KINDS)
    co = client.CustomObjectsApi(api)
    for g in (RJ, AW):
        await retrying(lambda g=g: co.list_cluster_custom_object(*g), what=f"{g[2]} to be served")  # type: ignore[misc]

    async def get(g: tuple[str, str, str], name: str) -> dict[str, Any]:
        out: dict[str, Any] = await co.get_namespaced_custom_object(g[0], g[1], ns, g[2], name)
        return out

    async def workload(name: str) -> dict[str, Any] | None:
        try:
            return await get(KUEUE, name)
        except client.exceptions.ApiException:
            return None

    async with reconcilers(api):
        rj = await co.create_namespaced_custom_object(RJ[0], RJ[1], ns, RJ[2], a_rayjob("rj", s.lq))
        aw = await co.create_namespaced_custom_object(AW[0], AW[1], ns, AW[2], an_appwrapper("aw", s.lq))
        wl_rj = jobkinds.workload_name("RayJob", RJ[0], "rj", rj["metadata"]["uid"])
        wl_aw = jobkinds.workload_name("AppWrapper", AW[0], "aw", aw["metadata"]["uid"])

        async def held() -> bool:
            return bool((await get(RJ, "rj"))["spec"].get("suspend")) and bool(
                (await get(AW, "aw"))["spec"].get("suspend"))

        await eventually(held, what="the running RayJob and AppWrapper to be held")
        w_rj = await eventually(lambda: workload(wl_rj), what="the RayJob's Workload")
        w_aw = await eventually(lambda: workload(wl_aw), what="the AppWrapper's Workload")
        assert [(p["name"], p["count"]) for p in w_rj["spec"]["podSets"]] == [
            ("head", 1), ("small", 2), ("submitter", 1)]
        assert [(p["name"], p["count"]) for p in w_aw["spec"]["podSets"]] == [("aw-0", 1), ("aw-1", 2)]
        assert w_aw["metadata"]["ownerReferences"][0]["kind"] == "AppWrapper"

        port = KubePort(api, cluster="test")
        admit_rj = AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_rj, cluster_queue=s.cq,
                                 admission=admission(s.cq, s.rf, ("head", 1), ("small", 2), ("submitter", 1)))
        admit_aw = AdmitWorkload(id="c1-1", cycle=1, namespace=ns, name=wl_aw, cluster_queue=s.cq,
                                 admission=admission(s.cq, s.rf, ("aw-0", 1), ("aw-1", 2)))
        await port.start(admit_rj)
        await port.start(admit_aw)
        rj, aw = await get(RJ, "rj"), await get(AW, "aw")
        assert rj["spec"]["suspend"] is False and aw["spec"]["suspend"] is False
        cluster = rj["spec"]["rayClusterSpec"]
        assert cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
        assert cluster["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
        assert rj["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"zone": "a"}
        component = aw["spec"]["components"][0]
        assert component["podSetInfos"] == [{"nodeSelector": {"zone": "a"}}] * 2
        assert "nodeSelector" not in component["template"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"][
            "spec"]

        for i, wl in enumerate((wl_rj, wl_aw)):
            await port.stop(EvictWorkload(id=f"c2-{i}", cycle=2, namespace=ns, name=wl, cluster_queue=s.cq,
                                          reason="Preempted", message="to make room"))
        rj, aw = await get(RJ, "rj"), await get(AW, "aw")
        assert rj["spec"]["suspend"] is True and aw["spec"]["suspend"] is True
        assert rj["metadata"]["annotations"][EVICTED_ANNOTATION] == "c2-0"
        assert rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {}
        assert "podSetInfos" not in aw["spec"]["components"][0]
        evicted = {c["type"]: c["status"] for c in (await get(KUEUE, wl_aw))["status"]["conditions"]}
        assert evicted["Evicted"] == "True"

        await port.start(AdmitWorkload(id="c3-0", cycle=3, namespace=ns, name=wl_rj, cluster_queue=s.cq,
                                       admission=admit_rj.admission))
        await port.start(AdmitWorkload(id="c3-1", cycle=3, namespace=ns, name=wl_aw, cluster_queue=s.cq,
                                       admission=admit_aw.admission))
        assert (await get(AW, "aw"))["spec"]["components"][0]["podSetInfos"] == [{"nodeSelector": {"zone": "a"}}] * 2
        assert (await get(RJ, "rj"))["spec"]["suspend"] is False

        await co.patch_namespaced_custom_object_status(RJ[0], RJ[1], ns, RJ[2], "rj", {"status": {
            "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"}}, _content_type=MERGE)
        await co.patch_namespaced_custom_object_status(AW[0], AW[1], ns, AW[2], "aw", {"status": {
            "phase": "Failed", "conditions": [{"type": "ResourcesDeployed", "status": "False", "reason": "Gone",
                                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
            _content_type=MERGE)

        async def finished() -> dict[str, str]:
            out: dict[str, str] = {}
            for wl in (wl_rj, wl_aw):
                for c in ((await get(KUEUE, wl)).get("status") or {}).get("conditions") or []:
                    if c["type"] == "Finished" and c["status"] == "True":
                        out[wl] = c["message"]
            return out if len(out) == 2 else {}

        ended = await eventually(finished, what="both Workloads to be Finished")
        assert ended == {wl_rj: "done", wl_aw: "AppWrapper failed"}
