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
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from events import t9k
from events.cluster import DECISION_ID_ANNOTATION
from events.envelope import Topics
from services.actuator.kube_port import KUBE_TUNING
from services.actuator.service import ActuatorService
from services.runtime.kubeclient import api_client
from services.runtime.sqlite import SqliteLog
from services.runtime.supervise import ServiceStatus
from services.scheduler.runner import run_scheduler
from services.watcher.service import WatcherService
from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import load_configuration
from tests.integration.kube_deploy import create_or_replace, eventually, service_account
from tests.integration.test_kube_e2e import deployed  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@contextlib.asynccontextmanager
async def _kueuelog(plane: LocalControlPlane, log: SqliteLog) -> AsyncIterator[list[asyncio.Task[Any]]]:
    cfg = await load_configuration(plane)
    watcher_api = api_client(cfg, impersonate=service_account("kueuelog-watcher"))
    actuator_api = api_client(cfg, impersonate=service_account("kueuelog-actuator"))
    topics = Topics()
    stop = asyncio.Event()
    watcher = WatcherService(log, watcher_api, cluster="t9k-e2e", topics=topics, backoff=(0.1, 1.0), t9k=True)
    actuator = ActuatorService(log, actuator_api, cluster="t9k-e2e", topics=topics, t9k=True,
                               tuning=replace(KUBE_TUNING, retry_base_seconds=0.1, retry_max_seconds=2.0))
    tasks = [asyncio.create_task(watcher.run(stop), name="watcher"),
             asyncio.create_task(run_scheduler(log, stop, topics=topics, status=ServiceStatus("scheduler")),
                                 name="scheduler"),
             asyncio.create_task(actuator.run(stop), name="actuator")]
    try:
        yield tasks
    finally:
        stop.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=60)
        await watcher_api.close()
        await actuator_api.close()
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"services stopped with {failures!r}"


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
        async with _kueuelog(kube_control_plane, log) as tasks:
            await eventually(lambda: admitted("first"), timeout=90, what="Job first to be admitted on the Queue")
            workload = await co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", kube_namespace,
                                                              "workloads")
            by_queue = {w["spec"]["queueName"]: w for w in workload["items"]}
            assert by_queue[queue]["spec"]["priority"] == 50  # the Queue's priority
            await asyncio.sleep(3)  # the scheduler has had every chance to admit "second"
            assert not [t for t in tasks if t.done()]
            assert not await admitted("second"), "3 + 2 CPUs would exceed the Queue's quota of 4"

            async def allocated() -> dict[str, Any] | None:
                obj = await co.get_namespaced_custom_object(t9k.GROUP, "v1beta1", t9k.NAMESPACE, "queues", queue)
                return (obj.get("status") or {}).get("allocated")

            # status.allocated is kept from admitted usage (what the webhook's quota check reads).
            assert await eventually(allocated, what="the Queue's status.allocated") == {"cpu": "3"}
    finally:
        log.close()
