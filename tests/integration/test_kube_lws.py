"""A LeaderWorkerSet through Kueue's pod integration on a real kube-apiserver (our minimal CRD,
``tests/integration/lws_crd.py``): the pod group reconciler (``services.actuator.podgroups`` with
``services.actuator.lws``) makes a Workload per replica as Kueue names it and labels the set's pods
into their replica's group; the actuator's port (``KubePort``) admits one replica by lifting the
scheduling gate from exactly its pods, with the flavor's node labels (a pod made after the admission
is released by the reconciler), and evicts it by deleting its running pods; a scale-down deletes the
Workloads past the new count, a deleted set all of them.

No LWS controller runs on the local control plane (nor a kubelet or a webhook): the test plays the
LWS controller as ``test_kube_pod_groups`` plays the StatefulSet's, creating each replica's pods
(leader ``<set>-<i>``, workers ``<set>-<i>-<j>``) with the labels and annotations the LWS controller
gives them (the set's name, the group index, a worker's leader name), owned by the set's
StatefulSets, and left by the webhook as it would (queued from the template, gated); and it plays
the kubelet by patching ``status.phase``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.cluster import QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.messages import AdmitWorkload, EvictWorkload
from services.actuator.kube_port import KubePort
from tests.integration.lws_crd import GROUP, PLURAL, VERSION, ensure_lws_crd
from tests.integration.test_kube_pod_groups import _gated, _workload, admission, gated_pod, reconciler
from tests.integration.test_kube_watcher import Setup, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _template(cpu: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "srv"}},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}}


def _lws_pod(name: str, index: int, leader: str | None, queue: str) -> dict[str, Any]:
    """One of the set's pods as the LWS controller makes it (``leader``: a worker's leader)."""
    labels = {"app": "srv", QUEUE_NAME_LABEL: queue, s.LWS_NAME_LABEL: "srv",
              s.LWS_GROUP_INDEX_LABEL: str(index)}
    annotations = {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK, p.SERVING: "true"}
    sts = "srv"
    if leader is not None:
        annotations[s.LWS_LEADER_NAME_ANNOTATION] = leader
        sts = leader
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "controller": True,
             "uid": f"00000000-0000-0000-0000-{index:012d}"}
    return gated_pod(name, labels, annotations, cpu="1", owner=owner)


async def test_leaderworkerset_a_group_per_replica_admitted_evicted_scaled_deleted(
        kube_api_client: client.ApiClient, kube_namespace: str) -> None:
    api, ns = kube_api_client, kube_namespace
    await ensure_lws_crd(api)
    setup = Setup(api, ns)
    await setup.queues()  # flavor setup.rf has nodeLabels {zone: a}
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    lws = await co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LeaderWorkerSet",
        "metadata": {"name": "srv", "labels": {QUEUE_NAME_LABEL: setup.lq}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": _template("1"),
                                                         "workerTemplate": _template("1")}}})
    uid = lws["metadata"]["uid"]
    names = [s.lws_workload_name("srv", uid, i) for i in range(2)]
    async with reconciler(api):
        for i, name in enumerate(names):
            wl = await eventually(lambda name=name: _workload(co, ns, name), what=f"replica {i}'s Workload")
            assert name.startswith(f"leaderworkerset-srv-{i}-")
            assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("leader", 1), ("worker", 1)]
            assert wl["metadata"]["ownerReferences"][0]["uid"] == uid
            assert wl["metadata"]["annotations"][p.IS_GROUP_WORKLOAD] == "true"
            assert wl["spec"]["queueName"] == setup.lq

        # The LWS controller's part: each replica's leader and worker, gated at creation (replica 1's
        # worker only later, after its Workload is admitted).
        for i in range(2):
            await core.create_namespaced_pod(ns, _lws_pod(f"srv-{i}", i, None, setup.lq))
        await core.create_namespaced_pod(ns, _lws_pod("srv-0-1", 0, "srv-0", setup.lq))

        async def labelled() -> bool:
            for i, name in enumerate(names):
                pods = (await core.list_namespaced_pod(ns, label_selector=f"{p.GROUP_NAME}={name}")).items
                roles = sorted((x.metadata.name, x.metadata.annotations.get(p.ROLE_HASH),
                                x.metadata.annotations.get(p.GROUP_TOTAL_COUNT)) for x in pods)
                want = [(f"srv-{i}", "leader", "2"), (f"srv-{i}-1", "worker", "2")]
                if roles != (want if i == 0 else want[:1]):
                    return False
            return True

        await eventually(labelled, what="each replica's pods to join its group")

        port = KubePort(api, cluster="test")
        await port.start(AdmitWorkload(id="c1-0", cycle=1, namespace=ns, name=names[0], cluster_queue=setup.cq,
                                       admission=admission(setup.cq, setup.rf, ("leader", 1), ("worker", 1))))
        for name in ("srv-0", "srv-0-1"):
            pod = await core.read_namespaced_pod(name, ns)
            assert not _gated(pod) and pod.spec.node_selector == {"zone": "a"}
            await core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running"}})
        assert _gated(await core.read_namespaced_pod("srv-1", ns))  # the other replica is its own Workload
        wl = await _workload(co, ns, names[0])
        assert wl is not None and wl["status"]["admission"]["clusterQueue"] == setup.cq

        # Replica 1 admitted with only its leader there; its worker, made after, is released too.
        await port.start(AdmitWorkload(id="c1-1", cycle=1, namespace=ns, name=names[1], cluster_queue=setup.cq,
                                       admission=admission(setup.cq, setup.rf, ("leader", 1), ("worker", 1))))
        assert not _gated(await core.read_namespaced_pod("srv-1", ns))
        await core.create_namespaced_pod(ns, _lws_pod("srv-1-1", 1, "srv-1", setup.lq))

        async def late_released() -> bool:
            pod = await core.read_namespaced_pod("srv-1-1", ns)
            return not _gated(pod) and pod.spec.node_selector == {"zone": "a"} and \
                pod.metadata.labels.get(p.GROUP_NAME) == names[1]

        await eventually(late_released, what="the worker made after its replica's admission to be released")

        await asyncio.sleep(1)  # serving: its running (or even succeeded) pods never finish it
        await core.patch_namespaced_pod_status("srv-0-1", ns, {"status": {"phase": "Succeeded"}})
        await asyncio.sleep(1)
        conditions = {c["type"] for c in ((await _workload(co, ns, names[0])) or {}).get("status", {}).get(
            "conditions", [])}
        assert "Finished" not in conditions

        await port.stop(EvictWorkload(id="c2-0", cycle=2, namespace=ns, name=names[0], cluster_queue=setup.cq,
                                      reason="Preempted", message="to make room"))
        left = {x.metadata.name for x in (await core.list_namespaced_pod(ns)).items}
        assert "srv-0" not in left and "srv-0-1" in left  # the running leader stopped; a finished pod is left
        assert {"srv-1", "srv-1-1"} <= left

        # Scaled down to one replica: replica 1's Workload goes (its quota freed), replica 0's stays.
        await co.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv", {"spec": {"replicas": 1}},
                                               _content_type="application/merge-patch+json")

        async def scaled_down() -> bool:
            return await _workload(co, ns, names[1]) is None

        await eventually(scaled_down, what="the scaled-down replica's Workload to be deleted")
        assert await _workload(co, ns, names[0]) is not None

        # The set deleted: its last Workload goes too (the garbage collector's part).
        await co.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv")

        async def gone() -> bool:
            return await _workload(co, ns, names[0]) is None

        await eventually(gone, what="the deleted set's Workload to be deleted")
