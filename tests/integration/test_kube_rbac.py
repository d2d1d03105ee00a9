"""deploy/base's RBAC in a real kube-apiserver: each ServiceAccount can do its job and nothing more.

The admin (system:masters) impersonates each ServiceAccount
(``Impersonate-User: system:serviceaccount:kueuelog-system:<name>``) and makes real
calls: the ones the service needs succeed, the ones it must not make get 403.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Awaitable
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.infra.kube import LocalControlPlane
from tests.integration.kube_deploy import (
    KUEUE_GROUP,
    NAMESPACE,
    apply_crds,
    as_service_account,
    base_documents,
    create_or_replace,
    eventually,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

V = "v1beta1"
MERGE = "application/merge-patch+json"


async def status_of(call: Awaitable[Any]) -> int:
    """The HTTP status a call ends with: 200 for success, else the error's."""
    try:
        await call
    except ApiException as exc:
        return int(exc.status)
    return 200


async def allowed(call_factory: Any, what: str) -> None:
    """A call the service needs: it succeeds (once the new RBAC objects reached the authorizer)."""

    async def ok() -> bool:
        status = await status_of(call_factory())
        assert status in (200, 403), f"{what}: unexpected {status}"
        return status == 200

    await eventually(ok, what=f"{what} to be allowed")


async def forbidden(call: Awaitable[Any], what: str) -> None:
    assert await status_of(call) == 403, f"{what} must be forbidden"


@pytest_asyncio.fixture(loop_scope="function")
async def deployed(kube_api_client: client.ApiClient) -> None:
    await apply_crds(kube_api_client)
    for obj in base_documents("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        await create_or_replace(kube_api_client, obj)


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"}}}]}}},
    }


def workload(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "Workload", "metadata": {"name": name},
        "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}}}]},
    }


def cluster_queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]},
    }


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_watcher_reads_everything_it_watches_and_writes_nothing(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    await client.BatchV1Api(kube_api_client).create_namespaced_job(kube_namespace, job("sample"))
    async with as_service_account(kube_control_plane, "kueuelog-watcher") as api:
        batch, core, co = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
        await allowed(batch.list_job_for_all_namespaces, "watcher: list jobs")
        listed = await batch.list_job_for_all_namespaces(label_selector="kueue.x-k8s.io/queue-name")
        assert (kube_namespace, "sample") in {(j.metadata.namespace, j.metadata.name) for j in listed.items}
        await batch.read_namespaced_job("sample", kube_namespace)
        await co.list_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues")
        for plural in ("resourceflavors", "localqueues", "cohorts", "workloads", "workloadpriorityclasses",
                       "admissionchecks", "provisioningrequestconfigs"):
            await co.list_cluster_custom_object(KUEUE_GROUP, V, plural)
        namespaces = await core.list_namespace()
        assert kube_namespace in {n.metadata.name for n in namespaces.items}
        await client.SchedulingV1Api(api).list_priority_class()

        await forbidden(batch.patch_namespaced_job("sample", kube_namespace, {"spec": {"suspend": False}}),
                        "watcher: patch a job")
        await forbidden(co.create_namespaced_custom_object(KUEUE_GROUP, V, kube_namespace, "workloads",
                                                           workload("w")), "watcher: create a workload")
        await forbidden(co.patch_cluster_custom_object_status(KUEUE_GROUP, V, "clusterqueues", "any", [
            {"op": "add", "path": "/status", "value": {"pendingWorkloads": 1}}]), "watcher: write status")
        await forbidden(batch.delete_namespaced_job("sample", kube_namespace), "watcher: delete a job")
        await forbidden(core.list_pod_for_all_namespaces(), "watcher: list pods (readiness comes from the Job)")
        await forbidden(core.list_secret_for_all_namespaces(), "watcher: list secrets")
        await forbidden(core.list_config_map_for_all_namespaces(), "watcher: list config maps")
        await forbidden(core.create_namespaced_event(kube_namespace, {
            "metadata": {"name": "e"}, "involvedObject": {"kind": "Job", "name": "sample"}}), "watcher: create events")


async def watch_status(call: Awaitable[Any]) -> int:
    """The HTTP status a watch request is answered with (the stream is closed at once)."""
    resp = await call
    try:
        return int(resp.status)
    finally:
        resp.close()


async def test_actuator_applies_decisions_and_can_do_nothing_else(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    """Every call services/actuator/kube_port.py and the job reconciler (services/actuator/job_reconciler.py)
    make, as the actuator's ServiceAccount; and the calls next to them it must not make."""
    ns = kube_namespace
    admin_co = client.CustomObjectsApi(kube_api_client)
    await client.BatchV1Api(kube_api_client).create_namespaced_job(ns, job("sample"))
    name = ns  # cluster-scoped objects: unique per test
    await admin_co.create_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues", cluster_queue(name))
    await admin_co.create_cluster_custom_object(KUEUE_GROUP, V, "resourceflavors", {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "ResourceFlavor", "metadata": {"name": name},
        "spec": {"nodeLabels": {"pool": "spot"}}})
    await admin_co.create_cluster_custom_object(KUEUE_GROUP, V, "workloadpriorityclasses", {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "WorkloadPriorityClass", "metadata": {"name": name},
        "value": 100})
    await admin_co.create_namespaced_custom_object(KUEUE_GROUP, V, ns, "localqueues", {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "LocalQueue", "metadata": {"name": "default"},
        "spec": {"clusterQueue": name}})
    admin_scheduling = client.SchedulingV1Api(kube_api_client)
    await admin_scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                  "metadata": {"name": name}, "value": 10})
    try:
        async with as_service_account(kube_control_plane, "kueuelog-actuator") as api:
            batch, core, co = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
            scheduling = client.SchedulingV1Api(api)
            # The job reconciler: list + watch the queued Jobs, suspend one, read it after a conflict.
            await allowed(lambda: batch.list_job_for_all_namespaces(label_selector="kueue.x-k8s.io/queue-name"),
                          "actuator: list jobs")
            assert await watch_status(batch.list_job_for_all_namespaces(
                label_selector="kueue.x-k8s.io/queue-name", watch=True, timeout_seconds=1,
                _preload_content=False)) == 200
            await batch.read_namespaced_job("sample", ns)
            # The actuator: unsuspend the Job and inject the flavor's node labels (a JSON merge patch).
            patched = await batch.patch_namespaced_job("sample", ns, {"spec": {
                "suspend": False, "template": {"spec": {"nodeSelector": {"node.kubernetes.io/lifecycle": "spot"}}}}},
                _content_type=MERGE)
            assert patched.spec.suspend is False
            # The reconciler resolves the priority and creates the Workload.
            assert (await co.get_cluster_custom_object(KUEUE_GROUP, V, "workloadpriorityclasses", name))["value"] == 100
            assert (await scheduling.read_priority_class(name)).value == 10
            await scheduling.list_priority_class()
            created = await co.create_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads",
                                                               workload("job-sample"))
            assert created["metadata"]["uid"]
            await core.create_namespaced_event(ns, {
                "metadata": {"generateName": "sample."}, "type": "Normal", "reason": "CreatedWorkload",
                "message": f"Created Workload: {ns}/job-sample",
                "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "sample", "namespace": ns}})
            # The actuator reads the Workload and its flavor, marks the pending reason, writes the admission.
            wl = await co.get_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads", "job-sample")
            assert (await co.get_cluster_custom_object(KUEUE_GROUP, V, "resourceflavors", name))["spec"]["nodeLabels"]
            await co.patch_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads", "job-sample", {
                "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"],
                             "annotations": {"kueuelog.io/pending-reason": "QuotaExhausted"}}},
                _content_type=MERGE)
            admitted_at = now()
            await co.patch_namespaced_custom_object_status(KUEUE_GROUP, V, ns, "workloads", "job-sample", {
                "status": {
                    "admission": {"clusterQueue": name, "podSetAssignments": [
                        {"name": "main", "flavors": {"cpu": name}, "resourceUsage": {"cpu": "1"}, "count": 1}]},
                    "conditions": [
                        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                         "message": f"Quota reserved in ClusterQueue {name}", "lastTransitionTime": admitted_at},
                        {"type": "Admitted", "status": "True", "reason": "Admitted",
                         "message": "The workload is admitted", "lastTransitionTime": admitted_at}]}},
                _content_type=MERGE)
            # Its watched copies of Workloads and queues (services/actuator/informer.py): list, then watch.
            for plural in ("workloads", "clusterqueues", "localqueues"):
                assert (await co.list_cluster_custom_object(KUEUE_GROUP, V, plural))["items"], plural
                assert await watch_status(co.list_cluster_custom_object(
                    KUEUE_GROUP, V, plural, watch=True, timeout_seconds=1, _preload_content=False)) == 200, \
                    f"actuator: watch {plural}"
            # Queue status: read the queue (its quotas), patch its status.
            await co.get_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues", name)
            await co.patch_cluster_custom_object_status(KUEUE_GROUP, V, "clusterqueues", name, {
                "status": {"pendingWorkloads": 0, "admittedWorkloads": 1}}, _content_type=MERGE)
            await co.get_namespaced_custom_object(KUEUE_GROUP, V, ns, "localqueues", "default")
            await co.patch_namespaced_custom_object_status(KUEUE_GROUP, V, ns, "localqueues", "default", {
                "status": {"pendingWorkloads": 0, "admittedWorkloads": 1}}, _content_type=MERGE)

            # Least privilege: not even the verbs next to the ones above.
            await forbidden(batch.replace_namespaced_job("sample", ns, await batch.read_namespaced_job("sample", ns)),
                            "actuator: update (PUT) a job")
            await forbidden(batch.delete_namespaced_job("sample", ns), "actuator: delete a job")
            await forbidden(batch.create_namespaced_job(ns, job("other")), "actuator: create a job")
            await forbidden(co.delete_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads", "job-sample"),
                            "actuator: delete a workload")
            await forbidden(co.get_namespaced_custom_object_status(KUEUE_GROUP, V, ns, "workloads", "job-sample"),
                            "actuator: read workloads/status")
            await forbidden(co.list_cluster_custom_object(KUEUE_GROUP, V, "resourceflavors"),
                            "actuator: list ResourceFlavors")
            await forbidden(co.list_cluster_custom_object(KUEUE_GROUP, V, "workloadpriorityclasses"),
                            "actuator: list WorkloadPriorityClasses")
            await forbidden(co.create_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues", cluster_queue("x")),
                            "actuator: create a ClusterQueue")
            await forbidden(co.patch_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues", name, [
                {"op": "replace", "path": "/spec/stopPolicy", "value": "Hold"}]), "actuator: change a ClusterQueue")
            await forbidden(co.create_cluster_custom_object(KUEUE_GROUP, V, "resourceflavors", {
                "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "ResourceFlavor", "metadata": {"name": "x"}}),
                "actuator: create a ResourceFlavor")
            await forbidden(scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1",
                                                              "kind": "PriorityClass", "metadata": {"name": "x"},
                                                              "value": 1}), "actuator: create a PriorityClass")
            await forbidden(core.list_namespaced_event(ns), "actuator: list events")
            await forbidden(core.list_pod_for_all_namespaces(), "actuator: list pods")
            await forbidden(core.list_secret_for_all_namespaces(), "actuator: list secrets")
            await forbidden(core.list_namespace(), "actuator: list namespaces")

        # What the actuator wrote is there, for everyone to read.
        cq = await admin_co.get_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues", name)
        assert cq["status"] == {"pendingWorkloads": 0, "admittedWorkloads": 1}
        assert cq["spec"]["stopPolicy"] == "None"
        got = await admin_co.get_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads", "job-sample")
        assert got["status"]["admission"]["clusterQueue"] == name
        assert [c["type"] for c in got["status"]["conditions"]] == ["QuotaReserved", "Admitted"]
        assert got["metadata"]["annotations"] == {"kueuelog.io/pending-reason": "QuotaExhausted"}
    finally:
        for plural in ("clusterqueues", "resourceflavors", "workloadpriorityclasses"):
            with contextlib.suppress(ApiException):
                await admin_co.delete_cluster_custom_object(KUEUE_GROUP, V, plural, name)
        with contextlib.suppress(ApiException):
            await admin_scheduling.delete_priority_class(name)


async def test_scheduler_cannot_touch_the_api_at_all(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str,
) -> None:
    # Prove the impersonation itself works (a granted identity gets through) before trusting 403s.
    async with as_service_account(kube_control_plane, "kueuelog-watcher") as api:
        await allowed(lambda: client.CoreV1Api(api).list_namespace(), "watcher: list namespaces")
    async with as_service_account(kube_control_plane, "kueuelog-scheduler") as api:
        batch, core, co = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
        await forbidden(core.list_namespace(), "scheduler: list namespaces")
        await forbidden(batch.list_job_for_all_namespaces(), "scheduler: list jobs")
        await forbidden(batch.list_namespaced_job(kube_namespace), "scheduler: list jobs in a namespace")
        await forbidden(co.list_cluster_custom_object(KUEUE_GROUP, V, "clusterqueues"), "scheduler: list queues")
        await forbidden(co.list_cluster_custom_object(KUEUE_GROUP, V, "workloads"), "scheduler: list workloads")
        await forbidden(core.list_namespaced_config_map(NAMESPACE), "scheduler: read its own namespace")
        await forbidden(core.list_namespaced_secret(NAMESPACE), "scheduler: read secrets")


async def test_the_rest_of_deploy_base_is_accepted_by_the_apiserver(
    deployed: None, kube_api_client: client.ApiClient,
) -> None:
    """The Deployments, the web view's Service and the ConfigMap validate server-side (dry run:
    nothing is kept)."""
    core, apps = client.CoreV1Api(kube_api_client), client.AppsV1Api(kube_api_client)
    kinds = []
    for obj in base_documents("ConfigMap", "Deployment", "Service"):
        kinds.append(obj["kind"])
        if obj["kind"] == "ConfigMap":
            await core.create_namespaced_config_map(NAMESPACE, obj, dry_run="All")
        elif obj["kind"] == "Service":
            await core.create_namespaced_service(NAMESPACE, obj, dry_run="All")
        else:
            stored = await apps.create_namespaced_deployment(NAMESPACE, obj, dry_run="All")
            assert stored.spec.template.spec.containers[0].image == "ghcr.io/kueuelog/kueuelog:0.1.0"
    assert sorted(kinds) == ["ConfigMap", "Deployment", "Deployment", "Deployment", "Deployment", "Service"]
