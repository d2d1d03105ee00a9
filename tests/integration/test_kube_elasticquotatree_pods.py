"""Pods held by ACK's ElasticQuotaTree on a real kube-apiserver: the whole loop (watcher ->
scheduler -> actuator with the tree and pod reconcilers), each service as its ServiceAccount with
deploy/base's and deploy/frontends/ack's RBAC.

A Deployment in a namespace bound to a leaf is scaled past the leaf's max; there is no
controller manager, so the test plays the ReplicaSet controller (pods from the Deployment's
template, gated as the template says) and nothing binds pods to nodes. Released = the scheduling
gate ``kueue.x-k8s.io/admission`` removed by the actuator; held = still gated."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.cluster import ADMISSION_GATE
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.kube_deploy import as_service_account, create_or_replace, revoke_rbac
from tests.integration.test_kube_e2e import Running, deployed, eventually, kueuelog  # noqa: F401  (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
ACK = ROOT / "deploy" / "frontends" / "ack"
NS = "eqt-pods"
WITH_TREE = {"elastic_quota_tree": True}  # the actuator keeps the tree's Kueue objects and its pods
TREE = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
    "spec": {"root": {"name": "root", "min": {"cpu": 20}, "max": {"cpu": 20}, "children": [
        {"name": "eqt.team-a", "min": {"cpu": 10}, "max": {"cpu": 15}, "namespaces": [NS]},
        {"name": "eqt.team-b", "min": {"cpu": 10}, "max": {"cpu": 20}, "namespaces": ["eqt-idle"]}]}},
}
DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx", "namespace": NS},
    "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "nginx"}}, "template": {
        "metadata": {"labels": {"app": "nginx"}},
        "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
                 "containers": [{"name": "nginx", "image": "nginx", "resources": {"requests": {"cpu": "5"}}}]}}},
}


async def _frontend(api: client.ApiClient, plane: LocalControlPlane) -> None:
    for path in (ACK / "elasticquotatree.yaml", ACK / "rbac.yaml"):
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            await create_or_replace(api, obj)
    core = client.CoreV1Api(api)
    for ns in (NS, "eqt-idle"):
        with contextlib.suppress(ApiException):
            await core.create_namespace({"metadata": {"name": ns}})
    custom = client.CustomObjectsApi(api)
    async with as_service_account(plane, "kueuelog-actuator") as actuator:
        deadline = time.monotonic() + 60
        while True:  # the CRD serving and the new RBAC in the authorizer's cache
            try:
                await client.CustomObjectsApi(actuator).list_namespaced_custom_object(
                    "scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees", limit=1)
                await client.CoreV1Api(actuator).list_namespaced_pod(NS, limit=1)
                break
            except ApiException as e:
                if e.status not in (403, 404, 429, 503) or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
    with contextlib.suppress(ApiException):
        await custom.delete_namespaced_custom_object("scheduling.sigs.k8s.io", "v1beta1", "kube-system",
                                                     "elasticquotatrees", "elasticquotatree")
    await custom.create_namespaced_custom_object("scheduling.sigs.k8s.io", "v1beta1", "kube-system",
                                                 "elasticquotatrees", TREE)


async def _drop_frontend_rbac(api: client.ApiClient, plane: LocalControlPlane) -> None:
    """Take deploy/frontends/ack's extra rights away again (other tests check deploy/base's alone)
    and check that the authorizer has seen it."""
    await revoke_rbac(api, [("ClusterRoleBinding", "kueuelog-actuator-elasticquotatree"),
                            ("ClusterRole", "kueuelog-actuator-elasticquotatree")])
    async with as_service_account(plane, "kueuelog-actuator") as actuator:
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(actuator).list_namespaced_pod(NS, limit=1)
    assert denied.value.status == 403, "the actuator can still list pods after the front end's RBAC was deleted"


def _replica(deployment: dict[str, Any], i: int) -> dict[str, Any]:
    """The pod the ReplicaSet controller would make (no controller runs here)."""
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"nginx-{i}", "namespace": NS, "labels": template["metadata"]["labels"],
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx",
                                              "uid": deployment["metadata"]["uid"], "controller": True}]},
            "spec": template["spec"]}


async def test_a_deployment_past_the_leafs_max_is_held_then_released_when_quota_frees(
    deployed: None, kube_api_client: client.ApiClient, kube_control_plane: LocalControlPlane,  # noqa: F811
    tmp_path: Path,
) -> None:
    api = kube_api_client
    await _frontend(api, kube_control_plane)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    log = SqliteLog(tmp_path / "log")

    async def split() -> tuple[list[str], list[str]]:
        pods = (await core.list_namespaced_pod(NS)).items
        released = sorted(p.metadata.name for p in pods if not p.spec.scheduling_gates)
        held = sorted(p.metadata.name for p in pods if p.spec.scheduling_gates)
        return released, held

    try:
        async with kueuelog(kube_control_plane, log, cluster="eqt", actuator_options=WITH_TREE) as running:
            deployment = (await apps.create_namespaced_deployment(NS, DEPLOYMENT)).to_dict()
            deployment = {"metadata": {"uid": deployment["metadata"]["uid"]}, "spec": DEPLOYMENT["spec"]}
            for i in range(5):
                await core.create_namespaced_pod(NS, _replica(deployment, i))

            async def three_released() -> tuple[list[str], list[str]] | None:
                released, held = await split()
                return (released, held) if len(released) == 3 and len(held) == 2 else None

            # The leaf's max is 15 CPUs: 3 pods of 5 run (2 borrowed from idle eqt.team-b), 2 are held.
            released, held = await eventually(running, three_released, what="3 pods released, 2 held")
            await asyncio.sleep(3)  # and it stays so
            assert await split() == (released, held)

            # Scaled down by one running pod: its quota frees and one held pod is released.
            await apps.patch_namespaced_deployment_scale("nginx", NS, {"spec": {"replicas": 4}})
            await core.delete_namespaced_pod(released[0], NS, grace_period_seconds=0)

            async def one_more() -> bool:
                now_released, now_held = await split()
                return len(now_released) == 3 and len(now_held) == 1 and released[0] not in now_released

            await eventually(running, one_more, what="a held pod to be released once quota freed")
    finally:
        log.close()
        custom = client.CustomObjectsApi(api)
        with contextlib.suppress(ApiException):
            await custom.delete_namespaced_custom_object("scheduling.sigs.k8s.io", "v1beta1", "kube-system",
                                                         "elasticquotatrees", "elasticquotatree")
        with contextlib.suppress(ApiException):
            await core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            await apps.delete_namespaced_deployment("nginx", NS)
        await _drop_frontend_rbac(api, kube_control_plane)


async def test_a_job_without_a_queue_label_in_a_bound_namespace_is_queued_and_admitted(
    deployed: None, kube_api_client: client.ApiClient, kube_control_plane: LocalControlPlane,  # noqa: F811
    tmp_path: Path,
) -> None:
    from events.cluster import DECISION_ID_ANNOTATION, QUEUE_NAME_LABEL

    api = kube_api_client
    await _frontend(api, kube_control_plane)
    batch = client.BatchV1Api(api)
    log = SqliteLog(tmp_path / "log")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NS},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "4"}}}]}}}}
    try:
        async with kueuelog(kube_control_plane, log, cluster="eqt", actuator_options=WITH_TREE) as running:
            await batch.create_namespaced_job(NS, job)

            async def admitted() -> dict[str, Any] | None:
                got = (await batch.read_namespaced_job("train", NS)).to_dict()
                meta = got["metadata"]
                ok = ((meta.get("labels") or {}).get(QUEUE_NAME_LABEL) == "default"
                      and DECISION_ID_ANNOTATION in (meta.get("annotations") or {})
                      and got["spec"]["suspend"] is False)
                return got if ok else None

            await eventually(running, admitted, what="the unlabelled Job to be queued to 'default' and admitted")
    finally:
        log.close()
        with contextlib.suppress(ApiException):
            await batch.delete_namespaced_job("train", NS, propagation_policy="Background")
        with contextlib.suppress(ApiException):
            await client.CustomObjectsApi(api).delete_namespaced_custom_object(
                "scheduling.sigs.k8s.io", "v1beta1", "kube-system", "elasticquotatrees", "elasticquotatree")
        await _drop_frontend_rbac(api, kube_control_plane)
