"""The whole loop on a real kube-apiserver for Kueue's pod integration: watcher, scheduler and
actuator with ``--job-kinds Pod``, each as its ServiceAccount with ``deploy/base`` and
``deploy/jobkinds``'s RBAC (so the shipped roles are proven sufficient). Two pod groups of 3 CPUs
each arrive at a ClusterQueue of 4: the first is admitted and its pods released (gate lifted, the
flavor's node labels and toleration), the second stays gated; the first group's pods succeed, its
Workload is Finished, its quota is freed and the second group is released. And a LeaderWorkerSet:
a replica admitted and released, a scaled-up replica queued for quota, deleted again on a scale-down.

No kube-controller-manager, scheduler, kubelet or webhook runs here (``tests/infra/kube.py``): the
test creates the pods gated as the mutating webhook would leave them and plays the kubelet by
patching the pods' ``status.phase``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.cluster import ADMISSION_GATE, QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.kube_deploy import rbac_applied
from tests.integration.test_kube_e2e import (
    SPOT_TOLERATION,
    Cluster,
    conditions,
    deployed,  # noqa: F401  (the fixture)
    eventually,
    kueuelog,
)
from tests.integration.test_kube_pod_groups import gated_pod

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "jobkinds" / "rbac.yaml"


def _released(pods: list[Any]) -> bool:
    return all(not any(g.name == ADMISSION_GATE for g in x.spec.scheduling_gates or []) for x in pods)


async def test_a_pod_group_finishes_and_frees_quota_for_the_next(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    api = kube_api_client
    rbac = contextlib.AsyncExitStack()  # the shipped roles, removed again at the end
    await rbac.enter_async_context(rbac_applied(api, RBAC))
    c = Cluster(api)
    await c.create(cpu="4")
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = c.ns_in
    log = SqliteLog(tmp_path / "log")

    async def members(group: str) -> list[Any]:
        return list((await core.list_namespaced_pod(ns, label_selector=f"{p.GROUP_NAME}={group}")).items)

    async def workload(name: str) -> dict[str, Any] | None:
        with contextlib.suppress(client.exceptions.ApiException):
            out: dict[str, Any] = await co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns,
                                                                       "workloads", name)
            return out
        return None

    try:
        async with kueuelog(kube_control_plane, log, cluster="pods", actuator_options={"job_kinds": ("Pod",)}) \
                as running:
            for group in ("first", "second"):
                for i in range(2):  # 2 pods of 1500m: 3 CPUs a group
                    await core.create_namespaced_pod(ns, gated_pod(
                        f"{group}-{i}", {QUEUE_NAME_LABEL: "lq", p.GROUP_NAME: group}, {p.GROUP_TOTAL_COUNT: "2"},
                        cpu="1500m"))
                if group == "first":
                    async def first_released() -> list[Any] | None:
                        pods = await members("first")
                        return pods if len(pods) == 2 and _released(pods) else None

                    pods = await eventually(running, first_released, what="the first group admitted and released")
                    for x in pods:
                        assert x.spec.node_selector == {"kueuelog.io/pool": "spot"}
                        # beside the API server's default not-ready / unreachable tolerations
                        assert {**SPOT_TOLERATION, "toleration_seconds": None, "value": None} in [
                            t.to_dict() for t in x.spec.tolerations or []]

            async def second_pending() -> bool:
                reserved = conditions(await workload("second")).get("QuotaReserved", {})
                return reserved.get("status") == "False" and "insufficient unused quota for cpu" in reserved.get(
                    "message", "")

            await eventually(running, second_pending, what="the second group pending for quota")
            assert not _released(await members("second"))

            for i in range(2):  # the kubelet's part: the first group's pods run to success
                await core.patch_namespaced_pod_status(f"first-{i}", ns, {"status": {"phase": "Succeeded"}})

            async def second_released() -> bool:
                pods = await members("second")
                return len(pods) == 2 and _released(pods)

            await eventually(running, second_released, what="the second group released once the first finished")
            finished = conditions(await workload("first")).get("Finished", {})
            assert finished.get("status") == "True" and finished.get("message") == "Pods succeeded: 2/2."
    finally:
        log.close()
        with contextlib.suppress(client.exceptions.ApiException):
            await core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        await c.delete(api)
        await rbac.aclose()


async def test_a_leaderworkerset_replica_admitted_a_scaled_up_one_queued_then_scaled_down(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The whole loop for a LeaderWorkerSet, with the shipped roles: one replica of 3 CPUs (a leader
    and a worker of 1500m) on a ClusterQueue of 4 is admitted and its pods released with the flavor's
    node labels; scaled up, the new replica's Workload waits for quota; scaled down again, it is
    deleted; the set deleted, the last Workload goes too. The test plays the LWS controller (the
    replica's pods, with its labels, as the webhook leaves them) and there is no kubelet."""
    from events.jobkinds import serving as s
    from tests.integration.lws_crd import GROUP, PLURAL, VERSION, ensure_lws_crd

    api = kube_api_client
    await ensure_lws_crd(api)
    rbac = contextlib.AsyncExitStack()
    await rbac.enter_async_context(rbac_applied(api, RBAC))
    c = Cluster(api)
    await c.create(cpu="4")
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = c.ns_in
    log = SqliteLog(tmp_path / "log")
    merge = "application/merge-patch+json"
    container = {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "1500m"}}}
    template = {"spec": {"containers": [container]}}

    async def workload(name: str) -> dict[str, Any] | None:
        with contextlib.suppress(client.exceptions.ApiException):
            out: dict[str, Any] = await co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns,
                                                                       "workloads", name)
            return out
        return None

    try:
        async with kueuelog(kube_control_plane, log, cluster="lws", actuator_options={"job_kinds": ("Pod",)}) \
                as running:
            made = await co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "LeaderWorkerSet",
                "metadata": {"name": "srv", "labels": {QUEUE_NAME_LABEL: "lq"}},
                "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template,
                                                                 "workerTemplate": template}}})
            names = [s.lws_workload_name("srv", made["metadata"]["uid"], i) for i in range(2)]
            for pod, leader in (("srv-0", None), ("srv-0-1", "srv-0")):
                labels = {QUEUE_NAME_LABEL: "lq", s.LWS_NAME_LABEL: "srv", s.LWS_GROUP_INDEX_LABEL: "0"}
                annotations = {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK, p.SERVING: "true",
                               **({s.LWS_LEADER_NAME_ANNOTATION: leader} if leader else {})}
                owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": leader or "srv", "controller": True,
                         "uid": "00000000-0000-0000-0000-000000000001"}
                await core.create_namespaced_pod(ns, gated_pod(pod, labels, annotations, cpu="1500m", owner=owner))

            async def replica_released() -> list[Any] | None:
                pods = list((await core.list_namespaced_pod(ns, label_selector=f"{p.GROUP_NAME}={names[0]}")).items)
                return pods if len(pods) == 2 and _released(pods) else None

            pods = await eventually(running, replica_released, what="replica 0 admitted and its pods released")
            assert all(x.spec.node_selector == {"kueuelog.io/pool": "spot"} for x in pods)

            await co.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv", {"spec": {"replicas": 2}},
                                                    _content_type=merge)

            async def scaled_up_pending() -> bool:
                reserved = conditions(await workload(names[1])).get("QuotaReserved", {})
                return reserved.get("status") == "False" and "insufficient unused quota for cpu" in reserved.get(
                    "message", "")

            await eventually(running, scaled_up_pending, what="the scaled-up replica's Workload pending for quota")

            await co.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv", {"spec": {"replicas": 1}},
                                                    _content_type=merge)

            async def scaled_down() -> bool:
                return await workload(names[1]) is None and await workload(names[0]) is not None

            await eventually(running, scaled_down, what="the scaled-down replica's Workload deleted")

            await co.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "srv")

            async def all_gone() -> bool:
                return await workload(names[0]) is None

            await eventually(running, all_gone, what="the deleted set's Workload deleted")
    finally:
        log.close()
        with contextlib.suppress(client.exceptions.ApiException):
            await core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        await c.delete(api)
        await rbac.aclose()
