"""T9k Queues through the whole loop on a real kube-apiserver: watcher --t9k -> scheduler ->
actuator --t9k (+ job reconciler), each as its ServiceAccount with deploy/base's and deploy/t9k's
RBAC, over an embedded log. A Job names its Queue as T9k's do (pod template label and
``schedulerName: t9k-scheduler``); it is created suspended (the webhook that would make it so is
tested in test_kube_webhook.py). There is no job controller: "admitted" is read on the Job.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from events import t9k
from events.cluster import DECISION_ID_ANNOTATION
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.kube_deploy import create_or_replace, eventually
from tests.integration.test_kube_e2e import deployed, kueuelog  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
T9K = {"t9k": True}  # watcher and actuator take T9k Queues and the Jobs on them


def _job(name: str, queue: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "suspend": True, "template": {
            "metadata": {"labels": {t9k.QUEUE_LABEL: queue}},
            "spec": {"schedulerName": t9k.SCHEDULER_NAME, "restartPolicy": "Never", "containers": [
                {"name": "main", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                 "resources": {"requests": {"cpu": cpu}}}]}}}}


async def test_jobs_on_a_t9k_queue_are_admitted_within_its_quota(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    kube_namespace: str, tmp_path: Path,
) -> None:
    api = kube_api_client
    co = client.CustomObjectsApi(api)
    for file in ("queue.yaml", "rbac.yaml", "capacity.yaml"):
        for doc in yaml.safe_load_all((DEPLOY / "t9k" / file).read_text(encoding="utf-8")):
            if doc["apiVersion"].startswith("kueue.x-k8s.io/"):  # the flavor and the cohort t9k
                group, _, version = doc["apiVersion"].partition("/")
                plural = {"ResourceFlavor": "resourceflavors", "Cohort": "cohorts"}[doc["kind"]]
                with contextlib.suppress(client.exceptions.ApiException):  # 409: an earlier test made it
                    await co.create_cluster_custom_object(group, version, plural, doc)
            else:
                await create_or_replace(api, doc)
    with contextlib.suppress(client.exceptions.ApiException):
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": t9k.NAMESPACE}})

    async def queues_servable() -> bool:
        try:
            await co.list_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues")
        except client.exceptions.ApiException:
            return False
        return True

    await eventually(queues_servable, what="the Queue CRD to serve")
    queue = f"q-{uuid.uuid4().hex[:8]}"
    await co.create_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", {
        "apiVersion": t9k.API_VERSION, "kind": "Queue", "metadata": {"name": queue},
        "spec": {"priority": 50, "quota": {"requests": {"cpu": 4}}}})
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(kube_namespace, _job("first", queue, "3"))
    await batch.create_namespaced_job(kube_namespace, _job("second", queue, "2"))
    log = SqliteLog(tmp_path / "log")

    async def admitted(name: str) -> bool:
        job = (await batch.read_namespaced_job(name, kube_namespace)).to_dict()
        return job["spec"]["suspend"] is False and DECISION_ID_ANNOTATION in (job["metadata"]["annotations"] or {})

    try:
        async with kueuelog(kube_control_plane, log, cluster="t9k-e2e", watcher_options=T9K,
                            actuator_options=T9K) as running:
            await eventually(lambda: admitted("first"), timeout=90, what="Job first to be admitted on the Queue")
            workload = await co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", kube_namespace,
                                                              "workloads")
            by_queue = {w["spec"]["queueName"]: w for w in workload["items"]}
            assert by_queue[queue]["spec"]["priority"] == 50  # the Queue's priority
            await asyncio.sleep(3)  # the scheduler has had every chance to admit "second"
            running.check()  # no service stopped
            assert not await admitted("second"), "3 + 2 CPUs would exceed the Queue's quota of 4"

            async def allocated() -> dict[str, Any] | None:
                obj = await co.get_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", queue)
                return (obj.get("status") or {}).get("allocated")

            # status.allocated is kept from admitted usage (what the webhook's quota check reads).
            assert await eventually(allocated, what="the Queue's status.allocated") == {"cpu": "3"}
    finally:
        log.close()
