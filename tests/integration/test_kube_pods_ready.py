"""waitForPodsReady on a real kube-apiserver: a Job whose pods never become ready is suspended again
at the timeout, and admitted again once its back-off has passed; past the back-off limit it is
deactivated, and a user setting its Workload's spec.active back to true starts it over.

The stack is the one of ``test_kube_e2e`` (watcher, scheduler, actuator with the job reconciler,
each as its ServiceAccount), with the scheduler on the wall clock so that it wakes at its own
deadlines (``services.scheduler.deadlines``). The Configuration is appended to the log as an
operator's seed would (kueuelog reads no Kueue ConfigMap from the cluster). The test plays the
kubelet: the Job's pod is active but never ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from events import objects as o
from events.cluster import KUEUE_GROUP
from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import AdmitWorkload, EvictWorkload, ObjectApplied
from services.actuator.kube_port import KUBE_TUNING
from services.actuator.service import ActuatorService
from services.runtime.clock import wall_clock_ms
from services.runtime.kubeclient import api_client
from services.runtime.log import Log
from services.runtime.sqlite import SqliteLog
from services.runtime.supervise import ServiceStatus
from services.scheduler.runner import run_scheduler
from services.watcher.service import WatcherService
from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import load_configuration
from tests.integration.kube_deploy import service_account
from tests.integration.test_kube_e2e import (
    Cluster,
    Running,
    admitted_job,
    conditions,
    decisions,
    deployed,  # noqa: F401 - the fixture
    eventually,
    stamp,
    suspended_job,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CONFIG = o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=3_000,
                         requeuing_backoff_base_seconds=1, requeuing_backoff_max_seconds=1)


@contextlib.asynccontextmanager
async def kueuelog(plane: LocalControlPlane, log: Log, *, cluster: str, topics: Topics) -> AsyncIterator[Running]:
    cfg = await load_configuration(plane)
    watcher_api = api_client(cfg, impersonate=service_account("kueuelog-watcher"))
    actuator_api = api_client(cfg, impersonate=service_account("kueuelog-actuator"))
    scheduler = ServiceStatus("scheduler")
    watcher = WatcherService(log, watcher_api, cluster=cluster, topics=topics, backoff=(0.1, 1.0))
    actuator = ActuatorService(log, actuator_api, cluster=cluster, topics=topics, policy="suspend",
                               tuning=replace(KUBE_TUNING, retry_base_seconds=0.1, retry_max_seconds=2.0))
    stop = asyncio.Event()
    tasks = [asyncio.create_task(watcher.run(stop), name="watcher"),
             asyncio.create_task(run_scheduler(log, stop, topics=topics, status=scheduler, wall_clock=wall_clock_ms,
                                               cluster=cluster), name="scheduler"),
             asyncio.create_task(actuator.run(stop), name="actuator")]
    running = Running(tasks, scheduler, watcher, actuator, stop)
    try:
        yield running
        running.check()
    finally:
        stop.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=60)
        await watcher_api.close()
        await actuator_api.close()
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, f"services stopped with {failures!r}"


def _seed_configuration(log: Log, topics: Topics, config: o.Configuration = CONFIG) -> None:
    env = Envelope(id="seed:configuration", source="test", event=ObjectApplied(time=wall_clock_ms(), object=config))
    log.append(topics.cluster_events, [(event_key(env), encode(env))])


async def test_a_job_whose_pods_never_become_ready_is_suspended_at_the_timeout_and_retried(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    c = Cluster(kube_api_client)
    await c.create(cpu="3")
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    _seed_configuration(log, topics)
    try:
        async with kueuelog(kube_control_plane, log, cluster="ready", topics=topics) as running:
            await c.job("gang", "1")
            await eventually(running, admitted_job(c, "gang"), what="Job gang to be admitted")
            # The kubelet's part: the pod runs but never becomes ready.
            await c.job_status("gang", {"startTime": stamp(), "active": 1, "ready": 0})

            async def timed_out() -> dict[str, Any] | None:
                wl = await c.workload("gang")
                evicted = conditions(wl).get("Evicted", {})
                return wl if evicted.get("reason") == "PodsReadyTimeout" and await suspended_job(c, "gang")() else None

            wl = await eventually(running, timed_out, what="the PodsReady timeout to suspend Job gang again")
            assert "Exceeded the PodsReady timeout" in conditions(wl)["Evicted"]["message"]
            # The job controller's part: the pods are gone. After the 1 s back-off it is admitted again.
            await c.job_status("gang", {"startTime": None, "active": 0, "ready": 0})
            await eventually(running, admitted_job(c, "gang"), what="Job gang to be admitted again after its back-off")
        ds = [d for d in decisions(log, topics)
              if isinstance(d, AdmitWorkload | EvictWorkload) and d.name.startswith("job-gang-")]
        kinds = [(type(d).__name__, getattr(d, "reason", "")) for d in ds]
        assert kinds[:3] == [("AdmitWorkload", ""), ("EvictWorkload", "PodsReadyTimeout"), ("AdmitWorkload", "")]
        evict, readmit = ds[1], ds[2]
        assert readmit.time - evict.time >= 1_000, "not before the back-off has passed"
    finally:
        log.close()
        await c.delete(kube_api_client)


async def test_a_job_deactivated_at_the_limit_starts_over_when_its_workload_is_set_active(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    c = Cluster(kube_api_client)
    await c.create(cpu="3")
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    _seed_configuration(log, topics, msgspec.structs.replace(CONFIG, requeuing_backoff_limit_count=0))
    try:
        async with kueuelog(kube_control_plane, log, cluster="ready", topics=topics) as running:
            await c.job("gang", "1")
            await eventually(running, admitted_job(c, "gang"), what="Job gang to be admitted")
            await c.job_status("gang", {"startTime": stamp(), "active": 1, "ready": 0})

            async def deactivated() -> dict[str, Any] | None:
                wl = await c.workload("gang")
                inactive = wl is not None and wl["spec"].get("active") is False
                return wl if inactive and await suspended_job(c, "gang")() else None

            wl = await eventually(running, deactivated, what="Job gang deactivated at the back-off limit")
            assert conditions(wl)["Evicted"]["reason"] == "DeactivatedDueToRequeuingLimitExceeded"
            await c.job_status("gang", {"startTime": None, "active": 0, "ready": 0})
            # The user's part (kubectl patch workload ... spec.active=true): it starts over.
            await c.co.patch_namespaced_custom_object(KUEUE_GROUP, "v1beta2", c.ns_in, "workloads",
                                                      wl["metadata"]["name"], {"spec": {"active": True}},
                                                      _content_type="application/merge-patch+json")
            await eventually(running, admitted_job(c, "gang"), what="Job gang admitted again once re-activated")
        kinds = [(type(d).__name__, getattr(d, "reason", "")) for d in decisions(log, topics)
                 if isinstance(d, AdmitWorkload | EvictWorkload) and d.name.startswith("job-gang-")]
        assert kinds[:3] == [("AdmitWorkload", ""), ("DeactivateWorkload", "Deactivated"), ("AdmitWorkload", "")]
    finally:
        log.close()
        await c.delete(kube_api_client)
