"""The job reconciler against a real kube-apiserver: queued Jobs become Workloads, as with Kueue.

The CRDs are kueuelog's own (``deploy/crds/``). The control plane runs no controllers and no
kubelet: the tests play the job controller's and the actuator's parts by patching Jobs. Each
test runs its own reconciler over all namespaces and checks the Jobs of its own namespace.
"Handled once" is read from the Events the reconciler records on a Job (one per action taken),
after a *barrier*: a suspended Job created last whose Workload appearing proves that the
reconciler's single worker has processed everything queued before it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.cluster import DECISION_ID_ANNOTATION as DECISION_ANNOTATION
from events.cluster import REJECTED_LABEL, REJECTION_ANNOTATION
from events.jobs import workload_name_for_job
from services.actuator.job_reconciler import JobReconciler, ReconcilerStats
from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import open_api_client
from tests.integration.kube_deploy import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
STORED = "v1beta2"  # the reconciler creates Workloads at our CRDs' storage version
WPC = "kueuelog-test-high"




# --- CRDs ------------------------------------------------------------------------------------


async def _ensure_crds(api: client.ApiClient) -> None:
    """Create the Workload and WorkloadPriorityClass CRDs of deploy/crds (once per session) and
    wait until they serve: Established, then listable (429 while the watch cache starts)."""
    ext = client.ApiextensionsV1Api(api)
    co = client.CustomObjectsApi(api)
    for file, plural in (("workload.yaml", "workloads"), ("workloadpriorityclass.yaml", "workloadpriorityclasses")):
        body = yaml.safe_load((CRDS / file).read_text(encoding="utf-8"))
        try:
            await ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

        async def established(name: str = body["metadata"]["name"]) -> bool:
            crd = await ext.read_custom_resource_definition(name)
            conditions = (crd.status.conditions or []) if crd.status else []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        async def servable(plural: str = plural) -> bool:
            try:
                await co.list_cluster_custom_object(GROUP, VERSION, plural, limit=1)
            except ApiException as exc:
                if exc.status in (404, 429, 503):
                    return False
                raise
            return True

        await eventually(established, what=f"CRD {body['metadata']['name']} to be Established")
        await eventually(servable, what=f"{plural} to be listable")
    with contextlib.suppress(ApiException):  # 409: made by an earlier test
        await co.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": WPC}, "value": 1000})


@pytest_asyncio.fixture(loop_scope="function")  # the client's loop: the test's own
async def api(kube_api_client: client.ApiClient) -> client.ApiClient:
    await _ensure_crds(kube_api_client)
    return kube_api_client


# --- the reconciler under test ---------------------------------------------------------------


@dataclass
class Running:
    stats: ReconcilerStats | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def reconciler(api: client.ApiClient, policy: Any = "suspend") -> AsyncIterator[Running]:
    running = Running()
    task = asyncio.create_task(JobReconciler(api, cluster="test", policy=policy).run(running.stop))
    try:
        yield running
    finally:
        running.stop.set()
        running.stats = await asyncio.wait_for(task, timeout=30)


# --- Jobs, Workloads, Events -----------------------------------------------------------------


def a_job(name: str, *, suspend: bool, queue: str = "lq", labels: dict[str, str] | None = None,
          parallelism: int = 1, completions: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "suspend": suspend,
        "parallelism": parallelism,
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox:1.36", "command": ["true"],
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}]}},
    }
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue, **(labels or {})}},
            "spec": spec}


async def create_job(api: client.ApiClient, ns: str, body: dict[str, Any]) -> client.V1Job:
    return await client.BatchV1Api(api).create_namespaced_job(ns, body)


async def read_job(api: client.ApiClient, ns: str, name: str) -> client.V1Job:
    return await client.BatchV1Api(api).read_namespaced_job(name, ns)


async def get_workload(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        out: dict[str, Any] = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, STORED, ns, "workloads", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return out


async def workload_of(api: client.ApiClient, job: client.V1Job) -> dict[str, Any]:
    name = workload_name_for_job(job.metadata.name, job.metadata.uid)
    wl: dict[str, Any] = await eventually(lambda: get_workload(api, job.metadata.namespace, name),
                                          what=f"Workload {name} of Job {job.metadata.name}")
    return wl


async def suspended_job(api: client.ApiClient, ns: str, name: str) -> client.V1Job:
    async def check() -> client.V1Job | None:
        job = await read_job(api, ns, name)
        return job if job.spec.suspend is True else None

    job: client.V1Job = await eventually(check, what=f"Job {name} to be suspended")
    return job


async def event_reasons(api: client.ApiClient, ns: str, name: str) -> list[str]:
    events = await client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
    return sorted(e.reason for e in events.items)


async def barrier(api: client.ApiClient, ns: str, name: str = "zz-barrier") -> None:
    """Everything the reconciler was handed before this is done when this Job has its Workload."""
    await workload_of(api, await create_job(api, ns, a_job(name, suspend=True)))


# --- tests -----------------------------------------------------------------------------------


async def test_running_queued_job_is_suspended_and_gets_kueues_workload(api: client.ApiClient,
                                                                         kube_namespace: str) -> None:
    ns = kube_namespace
    async with reconciler(api) as running:
        created = await create_job(api, ns, a_job("train", suspend=False, parallelism=3, completions=2,
                                                  labels={"kueue.x-k8s.io/priority-class": WPC}))
        job = await suspended_job(api, ns, "train")
        wl = await workload_of(api, job)
        await barrier(api, ns)
    assert job.metadata.generation == created.metadata.generation + 1  # one spec change: the suspend
    assert wl["metadata"]["name"] == workload_name_for_job("train", created.metadata.uid)
    assert wl["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": created.metadata.uid,
        "controller": True, "blockOwnerDeletion": True}]
    assert wl["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": created.metadata.uid}
    spec = wl["spec"]
    assert spec["queueName"] == "lq"
    assert wl["apiVersion"] == f"{GROUP}/{STORED}"
    assert (spec["priorityClassRef"], spec["priority"]) == (
        {"group": GROUP, "kind": "WorkloadPriorityClass", "name": WPC}, 1000)
    [pod_set] = spec["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("main", 2)  # min(parallelism, completions)
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "64Mi"}
    assert await event_reasons(api, ns, "train") == ["CreatedWorkload", "Stopped"]
    assert running.stats is not None
    assert running.stats.suspended >= 1 and running.stats.workloads_created >= 2


async def test_policy_reject_leaves_a_running_job_alone_and_says_why(api: client.ApiClient,
                                                                      kube_namespace: str) -> None:
    ns = kube_namespace
    async with reconciler(api, policy="reject") as running:
        await create_job(api, ns, a_job("a-running", suspend=False))
        queued = await create_job(api, ns, a_job("b-suspended", suspend=True))
        await workload_of(api, queued)  # policy reject still queues Jobs created suspended

        async def rejected() -> client.V1Job | None:
            job = await read_job(api, ns, "a-running")
            return job if (job.metadata.labels or {}).get(REJECTED_LABEL) == "true" else None

        job = await eventually(rejected, what="Job a-running to be labelled rejected")
        await barrier(api, ns)
    assert job.spec.suspend is False  # left running: nothing can refuse it after creation
    assert "spec.suspend=true" in job.metadata.annotations[REJECTION_ANNOTATION]
    assert await get_workload(api, ns, workload_name_for_job("a-running", job.metadata.uid)) is None
    events = await client.CoreV1Api(api).list_namespaced_event(ns, field_selector="involvedObject.name=a-running")
    assert [(e.type, e.reason) for e in events.items] == [("Warning", "Rejected")]
    assert "no admission webhook" in events.items[0].message
    assert running.stats is not None and running.stats.rejected >= 1


async def test_finished_job_marks_its_workload_finished_once(api: client.ApiClient, kube_namespace: str) -> None:
    ns = kube_namespace
    batch = client.BatchV1Api(api)
    async with reconciler(api):
        job = await create_job(api, ns, a_job("done", suspend=True))
        await workload_of(api, job)
        # The actuator admits it, the job controller runs it to completion.
        await batch.patch_namespaced_job("done", ns, {"metadata": {"annotations": {DECISION_ANNOTATION: "5:0"}},
                                                      "spec": {"suspend": False}})
        now = "2025-01-01T00:00:00Z"
        status = {"startTime": now, "completionTime": now, "succeeded": 1, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]}
        await batch.patch_namespaced_job_status("done", ns, {"status": status})
        name = workload_name_for_job("done", job.metadata.uid)

        async def finished() -> dict[str, Any] | None:
            wl = await get_workload(api, ns, name)
            conds = {c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []}
            return conds.get("Finished")

        condition = await eventually(finished, what=f"Workload {name} to be Finished")
        # Another change to the finished Job must not write again.
        await batch.patch_namespaced_job("done", ns, {"metadata": {"labels": {"touched": "yes"}}})
        await barrier(api, ns)
        wl = await get_workload(api, ns, name)
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "Succeeded", "Reached expected number of succeeded pods")
    assert wl is not None
    assert [c for c in wl["status"]["conditions"] if c["type"] == "Finished"] == [condition]
    assert (await read_job(api, ns, "done")).spec.suspend is False  # admitted: never suspended again
    assert await event_reasons(api, ns, "done") == ["CreatedWorkload", "FinishedWorkload"]


async def test_a_workload_an_older_version_created_at_v1beta1_is_still_finished(
    api: client.ApiClient, kube_namespace: str,
) -> None:
    """Before Workloads were created at v1beta2 the reconciler wrote v1beta1 (priorityClassName +
    priorityClassSource); with conversion None such a Workload stays as written and is finished
    through the v1beta2 endpoint all the same, and no second one is created."""
    ns, batch = kube_namespace, client.BatchV1Api(api)
    job = await create_job(api, ns, a_job("old", suspend=True))
    name = workload_name_for_job("old", job.metadata.uid)
    await client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, "v1beta1", ns, "workloads", {
        "apiVersion": f"{GROUP}/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": job.metadata.uid},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "old",
                                          "uid": job.metadata.uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"queueName": "lq", "priority": 1000, "priorityClassName": WPC,
                 "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                 "podSets": [{"name": "main", "count": 1, "template": a_job("old", suspend=True)["spec"]["template"]}]},
    })
    async with reconciler(api):
        await batch.patch_namespaced_job("old", ns, {"metadata": {"annotations": {DECISION_ANNOTATION: "6:0"}},
                                                     "spec": {"suspend": False}})
        now = "2025-01-01T00:00:00Z"
        await batch.patch_namespaced_job_status("old", ns, {"status": {
            "startTime": now, "failed": 1, "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastTransitionTime": now}]}})

        async def finished() -> dict[str, Any] | None:
            wl = await get_workload(api, ns, name)
            conds = {c["type"]: c for c in ((wl or {}).get("status") or {}).get("conditions") or []}
            return conds.get("Finished")

        condition = await eventually(finished, what=f"Workload {name} to be Finished")
        await barrier(api, ns)
    assert (condition["status"], condition["reason"]) == ("True", "Failed")
    wl = await get_workload(api, ns, name)
    assert wl is not None and wl["spec"]["priorityClassName"] == WPC  # stored as the older version wrote it
    assert await event_reasons(api, ns, "old") == ["FinishedWorkload"]


@pytest.mark.parametrize("grace_s", [0.0, 10.0], ids=["crash", "graceful"])
async def test_apiserver_restart_mid_watch_each_job_is_handled_once(
    kube_control_plane: LocalControlPlane, api: client.ApiClient, kube_namespace: str, grace_s: float
) -> None:
    # Runs last in this file: it cuts every open connection of the shared apiserver.
    ns = kube_namespace
    handled = ["CreatedWorkload", "Stopped"]
    async with reconciler(api) as running:
        before = await create_job(api, ns, a_job("before", suspend=False))
        await workload_of(api, await suspended_job(api, ns, "before"))
        await eventually(lambda: _reasons_are(api, ns, "before", handled), what="the Events of Job before")

        await kube_control_plane.restart_apiserver_async(grace_s=grace_s)

        async with open_api_client(kube_control_plane) as fresh:
            after = await create_job(fresh, ns, a_job("after", suspend=False))
            await workload_of(fresh, await suspended_job(fresh, ns, "after"))
            await barrier(fresh, ns)
            reasons = {name: await event_reasons(fresh, ns, name) for name in ("before", "after")}
            generations = {j.metadata.name: j.metadata.generation
                           for j in [await read_job(fresh, ns, "before"), await read_job(fresh, ns, "after")]}
    assert reasons == {"before": handled, "after": handled}
    assert generations == {"before": before.metadata.generation + 1, "after": after.metadata.generation + 1}
    assert running.stats is not None
    if grace_s == 0:
        # A cut stream means a relist. A graceful end may also resume the watch from its
        # resourceVersion, which misses nothing either.
        assert running.stats.relists >= 1


async def _reasons_are(api: client.ApiClient, ns: str, name: str, want: list[str]) -> bool:
    return await event_reasons(api, ns, name) == want
