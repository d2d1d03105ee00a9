"""An elastic Job (kueue.x-k8s.io/elastic-job) scaled while it runs, on a real kube-apiserver.

Scaled down: the watcher republishes its Workload with the smaller count (services/watcher/elastic.py)
and the scheduler's fold releases the quota of the pods gone (services/core/slices.py). Scaled up:
the watcher republishes it with the larger count, the fold makes a new workload slice
(services/core/scaleup.py) that the scheduler admits in place of the old one, and the actuator
writes that admission to the Job's Workload object and records it on the running Job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION
from events.jobs import workload_name_for_job
from events.messages import AdmitWorkload, ObjectApplied
from services.app.simulate import run
from services.core.cycle import run_cycle
from services.core.state import fold
from services.runtime.sqlite import SqliteLog
from services.watcher.elastic import ELASTIC_JOB_ANNOTATION
from services.watcher.kube import WatcherStats, run_kube_watcher
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, build_state
from tests.integration.test_kube_actuator import done, kueue_crds, running, write  # noqa: F401 (kueue_crds: the fixture)
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


def _published(log: SqliteLog, ns: str) -> list[ObjectApplied]:
    return [e.event for e in envelopes(log) if isinstance(e.event, ObjectApplied)
            and isinstance(e.event.object, o.Workload) and e.event.object.namespace == ns]


@pytest.mark.usefixtures("kueue_crds")
async def test_a_running_elastic_job_scaled_up_runs_on_a_new_slice_that_replaces_the_old(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    body = queued_job("elastic", s.lq)
    body["metadata"]["annotations"] = {ELASTIC_JOB_ANNOTATION: "true"}
    body["spec"]["parallelism"], body["spec"]["completions"] = 2, 10
    created = await retrying(lambda: s.batch.create_namespaced_job(ns, body), what="Job elastic")
    name = workload_name_for_job("elastic", created.metadata.uid)
    # The job reconciler's part: the Job's Workload object, owned by the Job.
    await s.co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "elastic",
                                                        "uid": created.metadata.uid, "controller": True}]},
        "spec": {"queueName": s.lq, "podSets": [{"name": "main", "count": 2, "template": body["spec"]["template"]}]}})
    events, decisions = SqliteLog(tmp_path / "events"), SqliteLog(tmp_path / "decisions")
    # The scheduler's part: the core folds what the watcher publishes and decides.
    state = build_state(a_flavor(s.rf), a_cluster_queue(s.cq).flavor(s.rf, cpu="3"), a_local_queue(ns, s.lq, s.cq))
    stop = asyncio.Event()
    watcher = asyncio.create_task(run_kube_watcher(events, kube_api_client, stop, cluster="east",
                                                   stats=WatcherStats(), backoff=(0.1, 1.0)))

    def decide(event: ObjectApplied) -> AdmitWorkload:
        fold(state, event)
        admits = [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]
        assert len(admits) == 1
        write(decisions, *admits, done(state.cycles, 1))
        return admits[0]

    async def job_records(decision_id: str) -> bool:
        job = await s.batch.read_namespaced_job("elastic", ns)
        return (job.metadata.annotations or {}).get(DECISION_ID_ANNOTATION) == decision_id

    async def admitted_count() -> int | None:
        wl = await s.co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", name)
        adm = (wl.get("status") or {}).get("admission")
        return adm["podSetAssignments"][0]["count"] if adm else None

    try:
        async with running(decisions, kube_api_client):
            await eventually(lambda: _counts(events, ns) == [2], what="the Workload of 2 pods")
            first = decide(_published(events, ns)[0])
            assert first.name == name and not first.replaced_slice
            await eventually(lambda: job_records(first.id), what="the Job started by the first admission")
            assert await admitted_count() == 2
            await s.patch_status("elastic", {"startTime": "2025-01-01T00:00:00Z", "active": 2, "ready": 2})
            # Scaled up from 2 to 3 pods: 1 more cpu, and 1 is free of 3.
            await s.batch.patch_namespaced_job("elastic", ns, {"spec": {"parallelism": 3}})
            await eventually(lambda: _counts(events, ns) == [2, 3], what="the Workload republished with 3 pods")
            second = decide(_published(events, ns)[1])
            assert (second.name, second.replaced_slice) == (f"{name}-slice-2", f"{ns}/{name}")
            assert state.workloads[f"{ns}/{name}"].conditions["Finished"].reason == "WorkloadSliceReplaced"
            assert state.cq_node(s.cq).usage == {(s.rf, "cpu"): 3000}  # never 5: the old slice's 2 are the new one's
            await eventually(lambda: job_records(second.id), what="the Job recording the new slice's admission")

            async def three() -> bool:
                return await admitted_count() == 3

            await eventually(three, what="the Job's Workload showing the new slice's admission of 3 pods")
            job = await s.batch.read_namespaced_job("elastic", ns)
            assert job.spec.suspend is False and job.spec.parallelism == 3
    finally:
        stop.set()
        await asyncio.wait_for(watcher, 30)
