"""The Kubernetes actuator against a real kube-apiserver: decisions in the log become API writes.

The CRDs are kueuelog's own (deploy/crds) when they are there, else minimal ones that keep any
field. The test plays the job reconciler's part (a suspended Job and its Workload, owned by the
Job) and the scheduler's (decision records appended to the log); the actuator runs as it would
in production, through :func:`~services.actuator.runner.run_actuator` with the Kubernetes port.
Every wait is a deadline poll.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import jobs
from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION as ANN_DECISION
from events.cluster import EVICTED_ANNOTATION as ANN_EVICTED
from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION as ANN_ORIGINAL
from events.cluster import QUEUE_NAME_LABEL, EvictionReason
from events.codec import decode_envelope, encode
from events.envelope import Topics
from events.messages import (
    ActuationFailed,
    AdmitWorkload,
    CycleCompleted,
    DeactivateWorkload,
    DecisionApplied,
    EvictWorkload,
    MarkPending,
    PendingReason,
)
from services.actuator.kube_port import KUBE_TUNING, KubePort
from services.actuator.loop import GROUP, Actuator, Tuning
from services.actuator.runner import run_actuator
from services.runtime.sqlite import SqliteLog
from tests.integration.kube_deploy import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KUEUE, V = "kueue.x-k8s.io", "v1beta1"
CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
KINDS = {"workloads": ("Workload", "Namespaced"), "resourceflavors": ("ResourceFlavor", "Cluster"),
         "clusterqueues": ("ClusterQueue", "Cluster"), "localqueues": ("LocalQueue", "Namespaced")}
TOPICS = Topics()
OWN_TOLERATION = {"key": "own", "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}




def _minimal_crd(plural: str) -> dict[str, Any]:
    kind, scope = KINDS[plural]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{KUEUE}"},
        "spec": {"group": KUEUE, "scope": scope,
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                 "versions": [{"name": V, "served": True, "storage": True, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _crds() -> list[dict[str, Any]]:
    """deploy/crds when another engineer has written them, else minimal ones."""
    out = []
    for plural in KINDS:
        kind = KINDS[plural][0].lower()
        path = CRD_DIR / f"{kind}.yaml"
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d] if path.exists() else []
        out.append(docs[0] if docs else _minimal_crd(plural))
    return out


@pytest_asyncio.fixture(loop_scope="function")
async def kueue_crds(kube_api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(kube_api_client)
    co = client.CustomObjectsApi(kube_api_client)
    for crd in _crds():
        try:
            await ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:  # made by an earlier test of this session
                raise
    for plural in KINDS:
        name = f"{plural}.{KUEUE}"

        async def established(name: str = name) -> bool:
            crd = await ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

        await eventually(established, what=f"CRD {name} to be Established")

        async def servable(plural: str = plural) -> bool:
            try:
                await co.list_cluster_custom_object(KUEUE, V, plural, limit=1)
            except ApiException as exc:
                if exc.status in (404, 429, 503):  # the watch cache is still initialising
                    return False
                raise
            return True

        await eventually(servable, what=f"{plural} to be listable")


@contextlib.asynccontextmanager
async def running(log: SqliteLog, api: client.ApiClient,
                  tuning: Tuning = KUBE_TUNING) -> AsyncIterator[asyncio.Task[Actuator[KubePort]]]:
    stop = asyncio.Event()
    task = asyncio.create_task(run_actuator(log, stop, port=KubePort(api, cluster="test", tuning=tuning)))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


def status_counts(k: Cluster, plural: str, name: str, **want: int) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """The queue, once its status shows the counts ``want``."""

    async def check() -> dict[str, Any] | None:
        obj = await k.read(plural, name, namespaced=plural == "localqueues")
        status = obj.get("status") or {}
        return obj if all(status.get(key) == value for key, value in want.items()) else None

    return check


class Cluster:
    """The objects of one test: a flavor, a ClusterQueue, a LocalQueue, Jobs and their Workloads."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.co = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.flavor = f"spot-{namespace}"
        self.cq = f"cq-{namespace}"

    async def queues(self) -> None:
        await self.co.create_cluster_custom_object(KUEUE, V, "resourceflavors", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "ResourceFlavor", "metadata": {"name": self.flavor},
            "spec": {"nodeLabels": {"kueuelog.io/pool": "spot"}, "tolerations": [SPOT_TOLERATION]}})
        await self.co.create_cluster_custom_object(KUEUE, V, "clusterqueues", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "ClusterQueue", "metadata": {"name": self.cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": self.flavor, "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}})
        await self.co.create_namespaced_custom_object(KUEUE, V, self.ns, "localqueues", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": self.ns},
            "spec": {"clusterQueue": self.cq}})

    async def job(self, name: str) -> dict[str, Any]:
        body = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: "lq"}},
                "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": {
                    "restartPolicy": "Never", "nodeSelector": {"team": "a"}, "tolerations": [OWN_TOLERATION],
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                                    "resources": {"requests": {"cpu": "1"}}}]}}}}
        created = await self.batch.create_namespaced_job(self.ns, body)
        return {"name": name, "uid": created.metadata.uid}

    async def workload(self, job: dict[str, Any]) -> str:
        """The Workload as the job reconciler creates it: Kueue's name, owned by the Job."""
        name = jobs.workload_name_for_job(job["name"], job["uid"])
        await self.co.create_namespaced_custom_object(KUEUE, V, self.ns, "workloads", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "Workload",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"kueue.x-k8s.io/job-uid": job["uid"]},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["name"],
                                              "uid": job["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36",
                                "resources": {"requests": {"cpu": "1"}}}]}}}]}})
        return name

    async def read_job(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = await self.co.get_namespaced_custom_object("batch", "v1", self.ns, "jobs", name)
        return out

    async def read(self, plural: str, name: str, *, namespaced: bool = True) -> dict[str, Any]:
        if namespaced:
            out: dict[str, Any] = await self.co.get_namespaced_custom_object(KUEUE, V, self.ns, plural, name)
        else:
            out = await self.co.get_cluster_custom_object(KUEUE, V, plural, name)
        return out

    def admission(self, flavor: str | None = None) -> o.Admission:
        return o.Admission(cluster_queue=self.cq, pod_set_assignments=(o.PodSetAssignment(
            name="main", flavors=(("cpu", flavor or self.flavor),), resource_usage=(("cpu", 1000),), count=1),))


def write(log: SqliteLog, *records: object) -> None:
    log.append(TOPICS.decisions, [("k", encode(r)) for r in records])


def done(cycle: int, decisions: int) -> CycleCompleted:
    return CycleCompleted(cycle=cycle, input_offset=cycle, time=1_700_000_000_000 + cycle * 1000, decisions=decisions)


def reports(log: SqliteLog) -> list[DecisionApplied | ActuationFailed]:
    out = []
    for r in log.read(TOPICS.cluster_events, 0, 10_000):
        ev = decode_envelope(r.value).event
        assert isinstance(ev, DecisionApplied | ActuationFailed)
        out.append(ev)
    return out


def conditions(wl: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in (wl.get("status") or {}).get("conditions", [])}


def caught_up(log: SqliteLog) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return log.position(GROUP, TOPICS.decisions) == log.end_offset(TOPICS.decisions)
    return check


@pytest.fixture
def log(tmp_path: Path) -> SqliteLog:
    out = SqliteLog(tmp_path / "log")
    yield out  # type: ignore[misc]
    out.close()


async def test_pending_admit_duplicate_evict(kueue_crds: None, kube_namespace: str,
                                             kube_api_client: client.ApiClient, log: SqliteLog) -> None:
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    job = await k.job("sample")
    wl_name = await k.workload(job)
    t0 = 1_700_000_000_000
    common = {"namespace": kube_namespace, "name": wl_name, "cluster_queue": k.cq}

    async with running(log, kube_api_client) as task:
        # 1. pending: the condition and our reason, nothing else.
        message = f"couldn't assign flavors to pod set main: insufficient quota for cpu in flavor {k.flavor}"
        write(log, MarkPending(id="c1-0", cycle=1, time=t0 + 1000, reason=PendingReason.WAITING_FOR_QUOTA,
                               message=message, **common), done(1, 1))

        async def pending() -> dict[str, Any] | None:
            wl = await k.read("workloads", wl_name)
            return wl if "QuotaReserved" in conditions(wl) else None

        wl = await eventually(pending, what="the pending condition")
        assert conditions(wl) == {"QuotaReserved": ("False", "Pending", message)}
        assert wl["metadata"]["annotations"]["kueuelog.io/pending-reason"] == "WaitingForQuota"
        assert (await k.read_job("sample"))["spec"]["suspend"] is True

        # The next cycle finds the same reason: the Workload is not written again.
        wl_rv = wl["metadata"]["resourceVersion"]
        write(log, MarkPending(id="c2-0", cycle=2, time=t0 + 2000, reason=PendingReason.WAITING_FOR_QUOTA,
                               message=message, **common), done(2, 1))
        await eventually(caught_up(log), what="the repeated pending mark to be consumed")
        assert (await k.read("workloads", wl_name))["metadata"]["resourceVersion"] == wl_rv

        # 2. admit: the Job runs on the flavor, the Workload holds quota, the queues count it.
        write(log, AdmitWorkload(id="c3-0", cycle=3, time=t0 + 3000, admission=k.admission(), **common), done(3, 1))

        async def unsuspended() -> dict[str, Any] | None:
            j = await k.read_job("sample")
            return j if j["spec"].get("suspend") is False else None

        admitted_job = await eventually(unsuspended, what="the Job to be unsuspended")
        pod = admitted_job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"team": "a", "kueuelog.io/pool": "spot"}
        assert pod["tolerations"] == [OWN_TOLERATION, SPOT_TOLERATION]
        assert admitted_job["metadata"]["annotations"][ANN_DECISION] == "c3-0"
        assert ANN_ORIGINAL in admitted_job["metadata"]["annotations"]
        await eventually(caught_up(log), what="the actuator to commit cycle 3")
        wl = await k.read("workloads", wl_name)
        assert wl["status"]["admission"] == {"clusterQueue": k.cq, "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": k.flavor}, "resourceUsage": {"cpu": "1"}, "count": 1}]}
        assert conditions(wl) == {"QuotaReserved": ("True", "QuotaReserved", f"Quota reserved in ClusterQueue {k.cq}"),
                                  "Admitted": ("True", "Admitted", "The workload is admitted")}
        # A queue's status is written at most every few seconds (KubePort.queue_status_seconds).
        cq = await eventually(status_counts(k, "clusterqueues", k.cq, pendingWorkloads=0, reservingWorkloads=1,
                                            admittedWorkloads=1), what="the ClusterQueue to count the admission")
        assert cq["status"]["flavorsReservation"] == [
            {"name": k.flavor, "resources": [{"name": "cpu", "total": "1", "borrowed": "0"}]}]
        lq = await eventually(status_counts(k, "localqueues", "lq", pendingWorkloads=0, admittedWorkloads=1),
                              what="the LocalQueue to count the admission")
        # v1beta2's spelling, the storage version's, whatever version the object is read at (conversion None).
        assert lq["status"]["flavorsUsage"] == [{"name": k.flavor, "resources": [{"name": "cpu", "total": "1"}]}]
        assert "flavorUsage" not in lq["status"]

        # 3. the same decision delivered again changes nothing.
        job_rv, wl_rv = admitted_job["metadata"]["resourceVersion"], wl["metadata"]["resourceVersion"]
        write(log, AdmitWorkload(id="c3-0", cycle=3, time=t0 + 3000, admission=k.admission(), **common), done(3, 1))
        await eventually(caught_up(log), what="the duplicate to be consumed")
        assert (await k.read_job("sample"))["metadata"]["resourceVersion"] == job_rv
        assert (await k.read("workloads", wl_name))["metadata"]["resourceVersion"] == wl_rv

        # 4. evict: suspended, template restored, the Workload says why and holds no quota.
        write(log, EvictWorkload(id="c4-0", cycle=4, time=t0 + 4000, reason="Preempted",
                                 message="Preempted to accommodate a workload (UID: u1) due to prioritization in "
                                         "the ClusterQueue", preemption_reason="InClusterQueue",
                                 preemptor=f"{kube_namespace}/other", **common), done(4, 1))

        async def suspended() -> dict[str, Any] | None:
            j = await k.read_job("sample")
            return j if j["spec"].get("suspend") is True else None

        evicted_job = await eventually(suspended, what="the Job to be suspended again")
        await eventually(caught_up(log), what="the actuator to commit cycle 4")
        evicted_job = await k.read_job("sample")
        pod = evicted_job["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"team": "a"}
        assert pod["tolerations"] == [OWN_TOLERATION]
        ann = evicted_job["metadata"]["annotations"]
        assert (ann[ANN_DECISION], ann[ANN_EVICTED], ANN_ORIGINAL in ann) == ("c4-0", "c4-0", False)
        wl = await k.read("workloads", wl_name)
        assert "admission" not in wl["status"]
        got = conditions(wl)
        assert got["Evicted"][:2] == ("True", "Preempted")
        assert got["Preempted"][:2] == ("True", "InClusterQueue")
        assert got["QuotaReserved"][:2] == ("False", "Pending")
        assert got["Admitted"] == ("False", "NoReservation", "The workload has no reservation")
        assert got["Requeued"][:2] == ("True", "Preempted")
        cq = await eventually(status_counts(k, "clusterqueues", k.cq, pendingWorkloads=1, reservingWorkloads=0),
                              what="the ClusterQueue to count the eviction")
        assert cq["status"]["flavorsUsage"][0]["resources"][0]["total"] == "0"

    actuator = task.result()
    port = actuator.port
    assert (actuator.stats.duplicates, port.stats.pending_written, port.stats.pending_unchanged) == (1, 1, 1)
    assert port.stats.api.total > 0 and port.stats.api.seconds > 0
    assert [(r.decision_id, type(r).__name__) for r in reports(log)] == [
        ("c3-0", "DecisionApplied"), ("c4-0", "DecisionApplied")]


async def test_redo_after_a_lost_commit_writes_nothing(kueue_crds: None, kube_namespace: str,
                                                       kube_api_client: client.ApiClient, tmp_path: Path) -> None:
    """A crash between the API writes and the commit: the next actuator applies the decision
    again from the log; the objects already show it, so nothing is written, and it reports."""
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    job = await k.job("sample")
    wl_name = await k.workload(job)
    admit = AdmitWorkload(id="c5-0", cycle=5, time=1_700_000_005_000, namespace=kube_namespace, name=wl_name,
                          cluster_queue=k.cq, admission=k.admission())
    first, second = SqliteLog(tmp_path / "first"), SqliteLog(tmp_path / "second")
    try:
        write(first, admit, done(5, 1))
        write(second, admit, done(5, 1))
        a = Actuator(first, KubePort(kube_api_client, cluster="test"))
        a.recover()
        assert await a.step() == 2
        job_rv = (await k.read_job("sample"))["metadata"]["resourceVersion"]
        wl_rv = (await k.read("workloads", wl_name))["metadata"]["resourceVersion"]

        b = Actuator(second, KubePort(kube_api_client, cluster="test"))
        b.recover()
        assert await b.step() == 2
        assert b.port.stats.already_applied == 1
        assert (await k.read_job("sample"))["metadata"]["resourceVersion"] == job_rv
        assert (await k.read("workloads", wl_name))["metadata"]["resourceVersion"] == wl_rv
        assert [r.decision_id for r in reports(second)] == ["c5-0"]

        # An older cycle's decision, redone after the newer one was applied, is never applied.
        third = SqliteLog(tmp_path / "third")
        try:
            write(third, EvictWorkload(id="c4-0", cycle=4, time=1_700_000_004_000, namespace=kube_namespace,
                                       name=wl_name, cluster_queue=k.cq, reason="Preempted", message="old"), done(4, 1))
            c = Actuator(third, KubePort(kube_api_client, cluster="test"))
            c.recover()
            assert await c.step() == 2
            assert c.port.stats.stale == 1
            assert (await k.read_job("sample"))["metadata"]["resourceVersion"] == job_rv
            assert (await k.read("workloads", wl_name))["metadata"]["resourceVersion"] == wl_rv
        finally:
            third.close()
    finally:
        first.close()
        second.close()


async def test_unknown_flavor_is_reported_failed_and_the_line_moves_on(
        kueue_crds: None, kube_namespace: str, kube_api_client: client.ApiClient, log: SqliteLog) -> None:
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    bad_job, good_job = await k.job("bad"), await k.job("good")
    bad, good = await k.workload(bad_job), await k.workload(good_job)
    t = 1_700_000_010_000
    write(log,
          AdmitWorkload(id="c1-0", cycle=1, time=t, namespace=kube_namespace, name=bad, cluster_queue=k.cq,
                        admission=k.admission(flavor=f"missing-{kube_namespace}")),
          AdmitWorkload(id="c1-1", cycle=1, time=t, namespace=kube_namespace, name=good, cluster_queue=k.cq,
                        admission=k.admission()),
          done(1, 2))
    async with running(log, kube_api_client):
        await eventually(caught_up(log), what="both decisions to be consumed")
    got = reports(log)
    assert [(r.decision_id, type(r).__name__) for r in got] == [("c1-0", "ActuationFailed"),
                                                                  ("c1-1", "DecisionApplied")]
    failed = got[0]
    assert isinstance(failed, ActuationFailed)
    assert failed.retriable is False
    assert f"ResourceFlavor missing-{kube_namespace}" in failed.error and "404" in failed.error
    assert (await k.read_job("bad"))["spec"]["suspend"] is True
    assert (await k.read_job("good"))["spec"]["suspend"] is False


async def test_a_workload_created_late_is_retried_until_it_exists(
        kueue_crds: None, kube_namespace: str, kube_api_client: client.ApiClient, log: SqliteLog) -> None:
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    job = await k.job("late")
    wl_name = jobs.workload_name_for_job("late", job["uid"])
    write(log, AdmitWorkload(id="c1-0", cycle=1, time=1_700_000_020_000, namespace=kube_namespace, name=wl_name,
                             cluster_queue=k.cq, admission=k.admission()), done(1, 1))
    actuator = Actuator(log, KubePort(kube_api_client, cluster="test", tuning=replace(KUBE_TUNING, max_attempts=1000)))
    actuator.recover()
    for attempt in (1, 2):  # no Workload yet: a retriable 404, nothing consumed, a back-off to wait
        assert await actuator.step() == 1
        assert actuator.retry_after is not None
        assert (actuator.stats.retries, log.position(GROUP, TOPICS.decisions)) == (attempt, 0)
    assert reports(log) == []
    await k.workload(job)
    assert await actuator.step() == 2
    assert (await k.read_job("late"))["spec"]["suspend"] is False
    assert actuator.port.stats.api.errors.get("404", 0) >= 1
    assert [(r.decision_id, type(r).__name__) for r in reports(log)] == [("c1-0", "DecisionApplied")]


async def test_retries_run_out_into_a_retriable_failure(
        kueue_crds: None, kube_namespace: str, kube_api_client: client.ApiClient, log: SqliteLog) -> None:
    adm = o.Admission(cluster_queue="cq", pod_set_assignments=(o.PodSetAssignment(
        name="main", flavors=(("cpu", "f"),), resource_usage=(("cpu", 1000),), count=1),))
    write(log, AdmitWorkload(id="c1-0", cycle=1, time=1_700_000_030_000, namespace=kube_namespace, name="never",
                             cluster_queue="cq", admission=adm),
          EvictWorkload(id="c1-1", cycle=1, time=1_700_000_030_000, namespace=kube_namespace, name="gone",
                        cluster_queue="cq", reason="Preempted", message="m"), done(1, 2))
    tuning = Tuning(batch_size=KUBE_TUNING.batch_size, max_attempts=3, retry_base_seconds=0.01, retry_max_seconds=0.02)
    async with running(log, kube_api_client, tuning) as task:
        await eventually(caught_up(log), what="the decisions to be given up on")
    never, gone = reports(log)
    # A Workload that never appears: retried, then reported as a retriable failure.
    assert isinstance(never, ActuationFailed) and never.retriable is True
    assert never.error.startswith(f"get Workload {kube_namespace}/never: HTTP 404")
    # Evicting a Workload that is gone: nothing to stop, and no point in retrying.
    assert isinstance(gone, ActuationFailed) and gone.retriable is False
    assert task.result().stats.retries == 2


async def test_a_deactivating_eviction_suspends_the_job_and_sets_spec_active_false(
        kueue_crds: None, kube_namespace: str, kube_api_client: client.ApiClient, log: SqliteLog) -> None:
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    job = await k.job("stuck")
    wl_name = await k.workload(job)
    t0 = 1_700_000_000_000
    common = {"namespace": kube_namespace, "name": wl_name, "cluster_queue": k.cq}
    async with running(log, kube_api_client):
        write(log, AdmitWorkload(id="c1-0", cycle=1, time=t0 + 1000, admission=k.admission(), **common), done(1, 1))
        write(log, DeactivateWorkload(id="c2-0", cycle=2, time=t0 + 2000, reason=EvictionReason.DEACTIVATED,
                                      message="The workload is deactivated due to exceeding the maximum number of "
                                              "re-queuing retries", underlying_cause="RequeuingLimitExceeded",
                                      **common), done(2, 1))
        await eventually(caught_up(log), what="the actuator to commit cycle 2")
    assert (await k.read_job("stuck"))["spec"]["suspend"] is True
    wl = await k.read("workloads", wl_name)
    assert wl["spec"]["active"] is False
    assert conditions(wl)["Evicted"][:2] == ("True", "DeactivatedDueToRequeuingLimitExceeded")
    assert conditions(wl)["Requeued"][:2] == ("False", "DeactivatedDueToRequeuingLimitExceeded")
    assert "admission" not in wl["status"]


async def test_pending_marks_patch_from_the_last_copy_seen(kueue_crds: None, kube_namespace: str,
                                                           kube_api_client: client.ApiClient) -> None:
    """A pending mark reads the Workload only when it has no copy of it, writes the annotation only
    when the closed-set reason changed, and a copy made stale by another writer is refused (409)
    by the real API server, then read again: the write lands on the newest object."""
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    wl_name = await k.workload(await k.job("pend"))
    port = KubePort(kube_api_client, cluster="test")
    calls = port.stats.api.calls

    def mark(cycle: int, reason: PendingReason, message: str) -> MarkPending:
        return MarkPending(id=f"c{cycle}-0", cycle=cycle, time=1_700_000_000_000 + cycle * 1000, reason=reason,
                           message=message, namespace=kube_namespace, name=wl_name, cluster_queue=k.cq)

    # A mark is queued, not written; the next step writes each workload's newest one only.
    await port.mark_pending(mark(1, PendingReason.QUEUED, "zeroth"))
    await port.mark_pending(mark(1, PendingReason.WAITING_FOR_QUOTA, "first"))
    assert calls == {} and port.deferred_marks == 1 and port.stats.pending_superseded == 1
    await port.before_batch(1)
    assert calls == {"get Workload": 1, "patch Workload": 1, "patch Workload status": 1}
    assert port.deferred_marks == 0
    await port.mark_pending(mark(2, PendingReason.WAITING_FOR_QUOTA, "second"))
    await port.before_batch(1)
    assert calls == {"get Workload": 1, "patch Workload": 1, "patch Workload status": 2}
    wl = await k.read("workloads", wl_name)
    assert conditions(wl) == {"QuotaReserved": ("False", "Pending", "second")}

    # Another writer changes the Workload: the remembered resourceVersion is stale.
    await k.co.patch_namespaced_custom_object(KUEUE, V, kube_namespace, "workloads", wl_name,
                                              [{"op": "add", "path": "/metadata/labels/other", "value": "x"}])
    await port.mark_pending(mark(3, PendingReason.BLOCKED_BY_STRICT_FIFO, "third"))
    await port.before_batch(1)
    assert port.stats.conflicts == 1
    assert calls["get Workload"] == 2
    wl = await k.read("workloads", wl_name)
    assert conditions(wl) == {"QuotaReserved": ("False", "Pending", "third")}
    assert wl["metadata"]["annotations"]["kueuelog.io/pending-reason"] == "BlockedByStrictFIFO"
    assert wl["metadata"]["labels"]["other"] == "x"
    assert port.stats.pending_written == 3 and port.stats.pending_dropped == 0

    # A restarted port writes (or finds written) the last mark of each waiting workload again: a
    # mark behind the committed position may have been lost in a crash before it was written.
    restarted = KubePort(kube_api_client, cluster="test")
    restarted.recover(iter([mark(1, PendingReason.WAITING_FOR_QUOTA, "first"),
                            mark(3, PendingReason.BLOCKED_BY_STRICT_FIFO, "third")]))
    assert restarted.deferred_marks == 1
    await restarted.before_batch(1)
    assert restarted.stats.api.calls == {"get Workload": 1} and restarted.stats.pending_unchanged == 1


async def test_a_mark_waiting_for_its_workload_is_written_when_the_reconciler_creates_it(
        kueue_crds: None, kube_namespace: str, kube_api_client: client.ApiClient) -> None:
    """The mark of a workload whose Workload the job reconciler has not created yet waits (404);
    told of the creation (the reconciler in the same process), the port writes it at the next step
    from the created object, with no read."""
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    job = await k.job("late")
    name = jobs.workload_name_for_job(job["name"], job["uid"])
    port = KubePort(kube_api_client, cluster="test")
    await port.mark_pending(MarkPending(id="c1-0", cycle=1, time=1_700_000_001_000, namespace=kube_namespace,
                                       name=name, cluster_queue=k.cq, reason=PendingReason.WAITING_FOR_QUOTA,
                                       message="waiting"))
    await port.before_batch(1)
    assert port.stats.api.calls == {"get Workload": 1} and port.stats.api.errors == {"404": 1}

    assert await k.workload(job) == name
    port.workload_created(await k.read("workloads", name))  # what the reconciler's create returns
    await port.before_batch(1)
    assert port.stats.api.calls == {"get Workload": 1, "patch Workload": 1, "patch Workload status": 1}
    wl = await k.read("workloads", name)
    assert conditions(wl) == {"QuotaReserved": ("False", "Pending", "waiting")}
    assert wl["metadata"]["annotations"]["kueuelog.io/pending-reason"] == "WaitingForQuota"
