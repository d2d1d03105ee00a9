"""ACK's ElasticQuotaTree on a real kube-apiserver: the CRD of deploy/frontends/ack, a tree in
kube-system, and the reconciler that keeps the Kueue objects the tree stands for."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from services.actuator.tree_reconciler import TREE_LABEL, TreeReconciler
from tests.integration.kube_deploy import apply_crds, create_or_replace, eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "frontends" / "ack" / "elasticquotatree.yaml"
TREE = yaml.safe_load((ROOT / "examples" / "ack" / "elasticquotatree.yaml").read_text(encoding="utf-8"))
GROUP, VERSION, PLURAL = "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"
KUEUE, KV = "kueue.x-k8s.io", "v1beta1"


async def _install(api: client.ApiClient) -> None:
    await apply_crds(api)
    await create_or_replace(api, yaml.safe_load(CRD.read_text(encoding="utf-8")))
    custom = client.CustomObjectsApi(api)

    async def servable() -> bool:
        try:
            await custom.list_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, limit=1)
        except ApiException as exc:
            if exc.status in (404, 429, 503):
                return False
            raise
        return True

    await eventually(servable, what="elasticquotatrees to be listable")
    core = client.CoreV1Api(api)
    for ns in ("kube-system", "namespace1", "namespace2", "namespace3", "namespace4"):
        try:
            await core.create_namespace({"metadata": {"name": ns}})
        except ApiException as exc:
            if exc.status != 409:
                raise


async def _names(api: client.ApiClient, plural: str) -> dict[str, dict[str, Any]]:
    got = await client.CustomObjectsApi(api).list_cluster_custom_object(KUEUE, KV, plural, label_selector=TREE_LABEL)
    return {(i["metadata"].get("namespace", "") + "/" if i["metadata"].get("namespace") else "")
            + i["metadata"]["name"]: i for i in got["items"]}


async def test_the_tree_in_kube_system_is_kept_as_kueue_objects(kube_api_client: client.ApiClient) -> None:
    api = kube_api_client
    await _install(api)
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, copy.deepcopy(TREE))
    reconciler = TreeReconciler(api)
    try:
        await reconciler.reconcile()
        cqs = await _names(api, "clusterqueues")
        assert sorted(cqs) == ["root.a.1", "root.a.2", "root.b.1", "root.b.2"]
        a1 = cqs["root.a.1"]
        assert a1["metadata"]["annotations"]["kueuelog.io/reclaim-within"] == "NominalQuota"
        cpu = a1["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        assert (cpu["name"], str(cpu["nominalQuota"]), str(cpu["borrowingLimit"])) == ("cpu", "10", "10")
        cohorts = await _names(api, "cohorts")
        assert sorted(cohorts) == ["root", "root.a", "root.b"]
        assert cohorts["root.a"]["spec"]["parentName"] == "root"
        lqs = await _names(api, "localqueues")
        assert {k: v["spec"]["clusterQueue"] for k, v in lqs.items()} == {
            "namespace1/default": "root.a.1", "namespace2/default": "root.a.2",
            "namespace3/default": "root.b.1", "namespace4/default": "root.b.2"}
        assert sorted(await _names(api, "resourceflavors")) == ["default"]

        # The tree's status: per node min / max / used; a leaf's used is its ClusterQueue's usage.
        await custom.patch_cluster_custom_object_status(KUEUE, KV, "clusterqueues", "root.a.1", {"status": {
            "flavorsUsage": [{"name": "default", "resources": [{"name": "cpu", "total": "15"}]}]}},
            _content_type="application/merge-patch+json")
        await reconciler.reconcile()
        got = await custom.get_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree")
        assert "status" in got, (reconciler.stats, got)
        nodes = {n["name"]: n for n in got["status"]["nodes"]}
        assert nodes["root.a.1"] == {"name": "root.a.1", "parent": "root.a", "min": {"cpu": "10", "memory": "10Gi"},
                                     "max": {"cpu": "20", "memory": "20Gi"}, "used": {"cpu": "15"}}
        assert nodes["root"]["used"] == {"cpu": "15"} and nodes["root.b"]["used"] == {}
        writes = reconciler.stats.status_writes
        await reconciler.reconcile()
        assert reconciler.stats.status_writes == writes, "written only when it changed"

        # root.b.2 leaves the tree (root.b's min shrinks with it): its ClusterQueue and LocalQueue go.
        tree = await custom.get_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree")
        b = tree["spec"]["root"]["children"][1]
        b["children"] = b["children"][:1]
        await custom.replace_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree", tree)
        await reconciler.reconcile()
        assert sorted(await _names(api, "clusterqueues")) == ["root.a.1", "root.a.2", "root.b.1"]
        assert "namespace4/default" not in await _names(api, "localqueues")

        # A tree that breaks a rule changes nothing: the last good tree's objects stay.
        tree = await custom.get_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree")
        tree["spec"]["root"]["children"][0]["children"][0]["min"]["cpu"] = 30
        await custom.replace_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree", tree)
        await reconciler.reconcile()
        await reconciler.reconcile()
        assert reconciler.stats.invalid == 1, "reported once per version"
        assert sorted(await _names(api, "clusterqueues")) == ["root.a.1", "root.a.2", "root.b.1"]
    finally:
        # The tree is deleted: everything it stood for goes.
        await custom.delete_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree")
        await reconciler.reconcile()
    for plural in ("clusterqueues", "cohorts", "localqueues", "resourceflavors"):
        assert await _names(api, plural) == {}, plural


async def test_a_tree_outside_kube_system_is_not_in_effect(kube_api_client: client.ApiClient) -> None:
    api = kube_api_client
    await _install(api)
    custom = client.CustomObjectsApi(api)
    other = copy.deepcopy(TREE)
    other["metadata"]["namespace"] = "namespace1"
    await custom.create_namespaced_custom_object(GROUP, VERSION, "namespace1", PLURAL, other)
    try:
        reconciler = TreeReconciler(api)
        await reconciler.reconcile()
        assert await _names(api, "clusterqueues") == {}
        assert reconciler.stats.invalid == 0
    finally:
        await custom.delete_namespaced_custom_object(GROUP, VERSION, "namespace1", PLURAL, "elasticquotatree")


async def test_a_root_min_above_the_nodes_allocatable_is_refused(kube_api_client: client.ApiClient) -> None:
    """The seed's Root min = max <= the cluster's resources, where nodes say what they have."""
    api = kube_api_client
    await _install(api)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    await core.create_node({"metadata": {"name": "eqt-node"}})
    try:
        await core.patch_node_status("eqt-node", {"status": {"allocatable": {"cpu": "30", "memory": "224Gi"}}})
        await custom.create_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, copy.deepcopy(TREE))
        reconciler = TreeReconciler(api)
        await reconciler.reconcile()
        assert reconciler.stats.invalid == 1
        assert await _names(api, "clusterqueues") == {}
        # The seed's node (56 vCPU, 224 GiB) has room for the root's 40.
        await core.patch_node_status("eqt-node", {"status": {"allocatable": {"cpu": "56", "memory": "224Gi"}}})
        await reconciler.reconcile()
        assert sorted(await _names(api, "clusterqueues")) == ["root.a.1", "root.a.2", "root.b.1", "root.b.2"]
    finally:
        with contextlib.suppress(ApiException):
            await custom.delete_namespaced_custom_object(GROUP, VERSION, "kube-system", PLURAL, "elasticquotatree")
        await TreeReconciler(api).reconcile()
        await core.delete_node("eqt-node")
