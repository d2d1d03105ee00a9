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
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.test_kube_e2e import (
    Cluster,
    admitted_job,
    conditions,
    decisions,
    deployed,  # noqa: F401 - the fixture
    eventually,
    kueuelog,
    stamp,
    suspended_job,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WALL_CLOCK = {"wall_clock": wall_clock_ms, "cluster": "ready"}  # wakes at its own deadlines
CONFIG = o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=3_000,
                         requeuing_backoff_base_seconds=1, requeuing_backoff_max_seconds=1)


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
        async with kueuelog(kube_control_plane, log, cluster="ready", topics=topics,
                            scheduler_options=WALL_CLOCK) as running:
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
        async with kueuelog(kube_control_plane, log, cluster="ready", topics=topics,
                            scheduler_options=WALL_CLOCK) as running:
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
