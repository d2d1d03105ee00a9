"""An elastic Job (kueue.x-k8s.io/elastic-job) scaled down while it runs, on a real kube-apiserver:
the watcher republishes its Workload with the smaller count (services/watcher/elastic.py) and the
scheduler's fold releases the quota of the pods gone (services/core/slices.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from events import objects as o
from events.messages import ObjectApplied
from services.app.simulate import run
from services.core.state import fold
from services.runtime.sqlite import SqliteLog
from services.watcher.elastic import ELASTIC_JOB_ANNOTATION
from services.watcher.kube import WatcherStats, run_kube_watcher
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, build_state
from tests.integration.test_kube_watcher import Setup, envelopes, eventually, queued_job, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _counts(log: SqliteLog, ns: str) -> list[int]:
    """The count of each Workload the watcher published for the Job, in order."""
    return [e.event.object.pod_sets[0].count for e in envelopes(log)
            if isinstance(e.event, ObjectApplied) and isinstance(e.event.object, o.Workload)
            and e.event.object.namespace == ns]


async def test_a_running_elastic_job_scaled_down_releases_quota(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    body = queued_job("elastic", s.lq)
    body["metadata"]["annotations"] = {ELASTIC_JOB_ANNOTATION: "true"}
    body["spec"]["parallelism"] = body["spec"]["completions"] = 4
    await retrying(lambda: s.batch.create_namespaced_job(ns, body), what="Job elastic")
    log = SqliteLog(tmp_path / "log")
    stop = asyncio.Event()
    watcher = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster="east", stats=WatcherStats(),
                                                   backoff=(0.1, 1.0)))
    try:
        await eventually(lambda: _counts(log, ns) == [4], what="the Workload of 4 pods")
        # Admitted: the actuator unsuspends it, its 4 pods run; the spec is frozen from now on...
        await s.batch.patch_namespaced_job("elastic", ns, {"spec": {"suspend": False}})
        await s.patch_status("elastic", {"startTime": "2025-01-01T00:00:00Z", "active": 4, "ready": 4})
        await eventually(lambda: any(type(e.event).__name__ == "PodsReady" for e in envelopes(log)),
                         what="its pods ready")
        # ...but for an elastic Job's scale-down (a Job's completions follow parallelism down
        # only when it is an indexed Job: this one is not, so only parallelism changes).
        await s.batch.patch_namespaced_job("elastic", ns, {"spec": {"parallelism": 2}})
        await eventually(lambda: _counts(log, ns) == [4, 2], what="the Workload republished with 2 pods")

        # The scheduler's fold: admitted at 4 of 4 cpu, then scaled down, the next one fits.
        published = [e.event for e in envelopes(log) if isinstance(e.event, ObjectApplied)
                     and isinstance(e.event.object, o.Workload) and e.event.object.namespace == ns]
        nxt = a_workload(ns, "next").queue(s.lq).request(cpu="1").obj()
        nxt["spec"]["podSets"][0]["count"] = 2
        state = build_state(a_flavor("f"), a_cluster_queue(s.cq).flavor("f", cpu="4"), a_local_queue(ns, s.lq, s.cq))
        fold(state, published[0])
        state = run(state, None).state
        fold(state, ObjectApplied(time=published[0].time + 1, object=nxt and build_state(nxt).workloads[
            f"{ns}/next"].obj))
        state = run(state, None).state
        assert state.workloads[f"{ns}/next"].admission is None  # the elastic Job holds all 4 cpu
        fold(state, published[1])
        state = run(state, None).state
        assert sum(state.workloads[k].usage.get(("f", "cpu"), 0) for k in state.workloads
                   if state.workloads[k].obj.owner is not None) == 2000
        assert state.workloads[f"{ns}/next"].admission is not None
    finally:
        stop.set()
        await asyncio.wait_for(watcher, 30)
