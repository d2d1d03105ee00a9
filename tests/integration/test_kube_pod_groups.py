"""A pod group and a StatefulSet through Kueue's pod integration on a real kube-apiserver: the pod
group reconciler (``services.actuator.podgroups``) makes their Workloads as Kueue would, the
actuator's port (``KubePort``) admits them by lifting the scheduling gate ``kueue.x-k8s.io/admission``
with the flavor's node labels, evicts them by deleting the running pods (Kueue's ``Stop``), and a
finished group's Workload gets ``Finished`` (what frees its quota in the scheduler; a Workload
whose pods are all gone is deleted, which frees it too).

The local control plane runs no kube-controller-manager, scheduler or kubelet (``tests/infra/kube.py``)
and no webhook here: the test creates the pods gated as the mutating webhook would leave them, plays
the StatefulSet controller (pods ``<name>-<ordinal>`` from the template, owned by the StatefulSet)
and plays the kubelet by patching the pods' ``status.phase``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import objects as o
from events.cluster import ADMISSION_GATE, QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.messages import AdmitWorkload, EvictWorkload
from services.actuator.kube_port import KubePort
from services.actuator.podgroups import PodGroupReconciler
from tests.integration.test_kube_watcher import Setup, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")


@contextlib.asynccontextmanager
async def reconciler(api: client.ApiClient) -> AsyncIterator[PodGroupReconciler]:
    stop = asyncio.Event()
    r = PodGroupReconciler(api, interval=0.2)
    task = asyncio.create_task(r.run(stop))
    try:
        yield r
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


def gated_pod(name: str, labels: dict[str, str], annotations: dict[str, str], cpu: str = "1",
              owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"restartPolicy": "Never", "schedulingGates": [{"name": ADMISSION_GATE}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu}}}]}}


def admission(cq: str, flavor: str, *pod_sets: tuple[str, int]) -> o.Admission:
    return o.Admission(cluster_queue=cq, pod_set_assignments=tuple(
        o.PodSetAssignment(name=n, flavors=(("cpu", flavor),), resource_usage=(("cpu", 1000 * c),), count=c)
        for n, c in pod_sets))


async def _workload(co: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    with contextlib.suppress(ApiException):
        out: dict[str, Any] = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], name)
        return out
    return None


def _gated(pod: Any) -> bool:
    return any(g.name == ADMISSION_GATE for g in pod.spec.scheduling_gates or [])


async def test_pod_group_gated_admitted_evicted_finished(kube_api_client: client.ApiClient,
                                                         kube_namespace: str) -> None:
    api, ns = kube_api_client, kube_namespace
    setup = Setup(api, ns)
    await setup.queues()  # flavor setup.rf has nodeLabels {zone: a}
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    group = {QUEUE_NAME_LABEL: setup.lq, p.GROUP_NAME: "trio"}
    count = {p.GROUP_TOTAL_COUNT: "3"}
    async with reconciler(api) as r:
        await core.create_namespaced_pod(ns, gated_pod("leader", group, count, cpu="2"))
        await core.create_namespaced_pod(ns, gated_pod("worker-0", group, count))
        await asyncio.sleep(1)
        assert await _workload(co, ns, "trio") is None  # 2 of 3 pods: Kueue waits for the group
        await core.create_namespaced_pod(ns, gated_pod("worker-1", group, count))
        wl = await eventually(lambda: _workload(co, ns, "trio"), what="the group's Workload")
        assert wl["metadata"]["annotations"][p.IS_GROUP_WORKLOAD] == "true"
        assert sorted(ref["name"] for ref in wl["metadata"]["ownerReferences"]) == ["leader", "worker-0", "worker-1"]
        leader = await core.read_namespaced_pod("leader", ns)
        worker = await core.read_namespaced_pod("worker-0", ns)
        roles = {p.role_hash(api.sanitize_for_serialization(x.spec)): n for x, n in ((leader, 1), (worker, 2))}
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == sorted(roles.items())
        assert wl["spec"]["queueName"] == setup.lq

        # A pod with another total count is refused, naming the pod and the annotation.
        odd = gated_pod("odd", {QUEUE_NAME_LABEL: setup.lq, p.GROUP_NAME: "pair"}, {p.GROUP_TOTAL_COUNT: "2"})
        await core.create_namespaced_pod(ns, odd)
        await core.create_namespaced_pod(ns, gated_pod("odd-2", {QUEUE_NAME_LABEL: setup.lq, p.GROUP_NAME: "pair"},
                                                       {p.GROUP_TOTAL_COUNT: "3"}))

        async def refused() -> bool:
            return r.stats.refused >= 1

        await eventually(refused, what="the mismatched group to be refused")
        assert await _workload(co, ns, "pair") is None

        port = KubePort(api, cluster="test")
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name="trio", cluster_queue=setup.cq,
                                       admission=admission(setup.cq, setup.rf, *sorted(roles.items()))))
        for name in ("leader", "worker-0", "worker-1"):
            pod = await core.read_namespaced_pod(name, ns)
            assert not _gated(pod) and pod.spec.node_selector == {"zone": "a"}
        wl = await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "trio")
        assert wl["status"]["admission"]["clusterQueue"] == setup.cq

        # The kubelet's part: worker-1 runs; the others succeed. Evicting stops (deletes) what runs.
        await core.patch_namespaced_pod_status("worker-1", ns, {"status": {"phase": "Running"}})
        for name in ("leader", "worker-0"):
            await core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Succeeded"}})
        await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name="trio", cluster_queue=setup.cq,
                                      reason="Preempted", message="to make room"))
        names = {x.metadata.name for x in (await core.list_namespaced_pod(ns)).items}
        assert "worker-1" not in names and {"leader", "worker-0"} <= names
        conditions = {c["type"]: c["status"] for c in
                      (await co.get_namespaced_custom_object(*KUEUE[:2], ns, KUEUE[2], "trio"))["status"]["conditions"]}
        assert conditions["Evicted"] == "True"

        # A replacement worker-1 comes back and succeeds: 3 of 3 succeeded, the group finished.
        replacement = gated_pod("worker-1", group, count)
        replacement["spec"].pop("schedulingGates")
        await core.create_namespaced_pod(ns, replacement)
        await core.patch_namespaced_pod_status("worker-1", ns, {"status": {"phase": "Succeeded"}})

        async def finished() -> dict[str, Any] | None:
            wl = await _workload(co, ns, "trio")
            for c in ((wl or {}).get("status") or {}).get("conditions") or []:
                if c["type"] == "Finished" and c["status"] == "True":
                    return dict(c)
            return None

        done = await eventually(finished, what="the group's Workload to be Finished")
        assert done["message"] == "Pods succeeded: 3/3." and done["reason"] == "Succeeded"

        # All its pods deleted: the Workload goes too (the garbage collector's part).
        for name in ("leader", "worker-0", "worker-1"):
            await core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

        async def gone() -> bool:
            return await _workload(co, ns, "trio") is None

        await eventually(gone, what="the group's Workload to be deleted with its pods")


async def test_statefulset_one_group_released_together_and_stopped(kube_api_client: client.ApiClient,
                                                                   kube_namespace: str) -> None:
    api, ns = kube_api_client, kube_namespace
    setup = Setup(api, ns)
    await setup.queues()
    core, apps, co = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    sts = await apps.create_namespaced_stateful_set(ns, {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "labels": {QUEUE_NAME_LABEL: setup.lq}},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx",
                                                       "resources": {"requests": {"cpu": "1"}}}]}}}})
    wl_name = s.statefulset_workload_name("web", sts.metadata.uid)
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": sts.metadata.uid,
             "controller": True}
    async with reconciler(api) as r:
        wl = await eventually(lambda: _workload(co, ns, wl_name), what="the StatefulSet's Workload")
        assert wl_name.startswith("statefulset-web-")
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 2)]
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
        # The StatefulSet controller's part: its pods from the template, gated at creation.
        for i in range(2):
            await core.create_namespaced_pod(ns, gated_pod(f"web-{i}", {"app": "web", QUEUE_NAME_LABEL: setup.lq},
                                                           {}, owner=owner))

        async def labelled() -> bool:
            pods = (await core.list_namespaced_pod(ns, label_selector=f"{p.GROUP_NAME}={wl_name}")).items
            return len(pods) == 2 and all(x.metadata.annotations.get(p.GROUP_TOTAL_COUNT) == "2"
                                          and x.metadata.annotations.get(p.SERVING) == "true" for x in pods)

        await eventually(labelled, what="the StatefulSet's pods to join its group")
        for i in range(2):
            assert _gated(await core.read_namespaced_pod(f"web-{i}", ns))

        port = KubePort(api, cluster="test")
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=wl_name, cluster_queue=setup.cq,
                                       admission=admission(setup.cq, setup.rf, ("main", 2))))
        for i in range(2):
            pod = await core.read_namespaced_pod(f"web-{i}", ns)
            assert not _gated(pod) and pod.spec.node_selector == {"zone": "a"}
            await core.patch_namespaced_pod_status(f"web-{i}", ns, {"status": {"phase": "Running"}})
        await asyncio.sleep(1)  # serving: running pods never finish it
        conditions = {c["type"] for c in ((await _workload(co, ns, wl_name)) or {}).get("status", {}).get(
            "conditions", [])}
        assert "Finished" not in conditions

        # Resized around Kueue's webhook (the scale subresource, which no webhook covers): the Workload
        # keeps its count, the pods their total count, and the pod past the admitted two stays gated.
        await apps.patch_namespaced_stateful_set_scale("web", ns, {"spec": {"replicas": 3}})
        await core.create_namespaced_pod(ns, gated_pod("web-2", {"app": "web", QUEUE_NAME_LABEL: setup.lq}, {},
                                                       owner=owner))

        async def joined() -> bool:
            pod = await core.read_namespaced_pod("web-2", ns)
            return (pod.metadata.labels or {}).get(p.GROUP_NAME) == wl_name

        await eventually(joined, what="the extra pod to join the group")
        seen = r.stats.passes
        await eventually(lambda: r.stats.passes >= seen + 2, what="two more reconciler passes")
        assert _gated(await core.read_namespaced_pod("web-2", ns))
        assert (await core.read_namespaced_pod("web-2", ns)).metadata.annotations[p.GROUP_TOTAL_COUNT] == "3"
        assert (await core.read_namespaced_pod("web-0", ns)).metadata.annotations[p.GROUP_TOTAL_COUNT] == "2"
        wl = await _workload(co, ns, wl_name)
        assert wl is not None and [ps["count"] for ps in wl["spec"]["podSets"]] == [2]
        await apps.patch_namespaced_stateful_set_scale("web", ns, {"spec": {"replicas": 2}})
        await core.delete_namespaced_pod("web-2", ns, grace_period_seconds=0)  # the controller's part

        await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name=wl_name, cluster_queue=setup.cq,
                                      reason="Preempted", message="to make room"))
        assert not (await core.list_namespaced_pod(ns, label_selector=f"{p.GROUP_NAME}={wl_name}")).items

        # Scaled to zero: its Workload goes, which frees its quota.
        await apps.patch_namespaced_stateful_set("web", ns, {"spec": {"replicas": 0}})

        async def gone() -> bool:
            return await _workload(co, ns, wl_name) is None

        await eventually(gone, what="the scaled-to-zero StatefulSet's Workload to be deleted")
