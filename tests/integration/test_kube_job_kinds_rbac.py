"""``deploy/jobkinds/rbac.yaml`` on a real kube-apiserver: the watcher's service account, with
``deploy/base`` and this file applied, lists and watches every workload kind of the registry
(our minimal CRDs) and can write none of them; the actuator's account reads and patches them and
can neither create nor delete one. TrainJob's runtimes: the watcher lists and watches them, the
actuator reads them, neither writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from events.jobkinds import trainjob
from tests.infra.kube import LocalControlPlane
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.kube_deploy import as_service_account, base_documents, create_or_replace, rbac_applied
from tests.integration.test_kube_rbac import allowed, forbidden, status_of
from tests.integration.test_kube_watcher import retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "jobkinds" / "rbac.yaml"
MERGE = "application/merge-patch+json"


async def test_watcher_lists_every_job_kind_and_writes_none(
    kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    for obj in base_documents("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        await create_or_replace(kube_api_client, obj)
    async with rbac_applied(kube_api_client, RBAC):  # removed after: the control plane is shared
        await _watcher_and_actuator_rights(kube_control_plane, kube_api_client, kube_namespace)
        await _training_runtime_rights(kube_control_plane, kube_api_client, kube_namespace)


async def _training_runtime_rights(kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,
                                   kube_namespace: str) -> None:
    """TrainJob's runtimes: the watcher lists and watches them, the actuator reads one; neither writes."""
    group, version = trainjob.GROUP, trainjob.VERSION
    admin = client.CustomObjectsApi(kube_api_client)
    name = f"rt-{kube_namespace}"
    body = {"apiVersion": trainjob.API_VERSION, "kind": "ClusterTrainingRuntime", "metadata": {"name": name},
            "spec": {"template": {"spec": {"replicatedJobs": []}}}}
    for plural in ("clustertrainingruntimes", "trainingruntimes"):
        await retrying(lambda p=plural: admin.list_cluster_custom_object(group, version, p),  # type: ignore[misc]
                       what=f"{plural} to be served")
    await retrying(lambda: admin.create_cluster_custom_object(group, version, "clustertrainingruntimes", body),
                   what="a ClusterTrainingRuntime")
    try:
        async with as_service_account(kube_control_plane, "kueuelog-watcher") as api:
            co = client.CustomObjectsApi(api)
            for plural in ("clustertrainingruntimes", "trainingruntimes"):
                await allowed(lambda p=plural: co.list_cluster_custom_object(group, version, p),  # type: ignore[misc]
                              f"watcher: list {plural}")
                assert await status_of(co.list_cluster_custom_object(group, version, plural, watch=True,
                                                                     timeout_seconds=1)) == 200
            await forbidden(co.delete_cluster_custom_object(group, version, "clustertrainingruntimes", name),
                            "watcher: delete a ClusterTrainingRuntime")
        async with as_service_account(kube_control_plane, "kueuelog-actuator") as api:
            co = client.CustomObjectsApi(api)
            await allowed(lambda: co.get_cluster_custom_object(group, version, "clustertrainingruntimes", name),
                          "actuator: get a ClusterTrainingRuntime")
            assert await status_of(co.get_namespaced_custom_object(group, version, kube_namespace,
                                                                   "trainingruntimes", "none")) == 404
            await forbidden(co.patch_cluster_custom_object(group, version, "clustertrainingruntimes", name,
                                                           {"metadata": {"labels": {"a": "b"}}}),
                            "actuator: patch a ClusterTrainingRuntime")
    finally:
        await admin.delete_cluster_custom_object(group, version, "clustertrainingruntimes", name)


async def _watcher_and_actuator_rights(kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,
                                       kube_namespace: str) -> None:
    await ensure_job_kind_crds(kube_api_client, *(k.kind for k in jobkinds.OTHER_KINDS))
    admin = client.CustomObjectsApi(kube_api_client)
    for kind in jobkinds.OTHER_KINDS:
        await retrying(lambda k=kind: admin.list_cluster_custom_object(k.group, k.version, k.plural),  # type: ignore[misc]
                       what=f"{kind.plural} to be served")
    async with as_service_account(kube_control_plane, "kueuelog-watcher") as api:
        co = client.CustomObjectsApi(api)
        for kind in jobkinds.OTHER_KINDS:
            await allowed(lambda k=kind: co.list_cluster_custom_object(k.group, k.version, k.plural),  # type: ignore[misc]
                          f"watcher: list {kind.plural}")
            assert await status_of(co.list_cluster_custom_object(kind.group, kind.version, kind.plural,
                                                                 watch=True, timeout_seconds=1)) == 200
            await forbidden(co.create_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural, {
                "apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "x"}}),
                f"watcher: create a {kind.kind}")
            await forbidden(co.patch_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural,
                                                              "x", {"spec": {}}, _content_type=MERGE),
                            f"watcher: patch a {kind.kind}")
    for kind in jobkinds.OTHER_KINDS:  # one object of each kind, for the actuator to read and patch
        await admin.create_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural, {
            "apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "y"}})
    async with as_service_account(kube_control_plane, "kueuelog-actuator") as api:
        co = client.CustomObjectsApi(api)
        for kind in jobkinds.OTHER_KINDS:
            await allowed(lambda k=kind: co.list_cluster_custom_object(k.group, k.version, k.plural),  # type: ignore[misc]
                          f"actuator: list {kind.plural}")
            await co.get_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural, "y")
            await co.patch_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural, "y",
                                                    {"metadata": {"annotations": {"a": "b"}}}, _content_type=MERGE)
            await forbidden(co.create_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural, {
                "apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "z"}}),
                f"actuator: create a {kind.kind}")
            await forbidden(co.delete_namespaced_custom_object(kind.group, kind.version, kube_namespace, kind.plural,
                                                               "y"), f"actuator: delete a {kind.kind}")
