"""The whole loop on a real kube-apiserver: watcher -> scheduler -> actuator (+ job reconciler).

deploy/crds and deploy/base's RBAC are applied; the watcher's API client impersonates the
watcher's ServiceAccount and the actuator's (which the job reconciler shares) the actuator's,
so the shipped roles are proven sufficient for the whole loop. The services run as asyncio
tasks of the test over one log (embedded, or Kafka), exactly as ``kueuelog run`` composes them
(:mod:`services.watcher.service`, :mod:`services.actuator.service`, :func:`services.scheduler.runner.run_scheduler`).

A user only creates queued Jobs, *not* suspended (there is no admission webhook: the job
reconciler suspends them). There is no kubelet or job controller: the test plays their part by
patching Job status (pods active and ready, pods gone after an eviction, Complete). Everything
asserted is an API object, except the last check, which counts the admissions in the log.
Every wait is a deadline poll that also fails at once when a service task died.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import jobs
from events.cluster import QUEUE_NAME_LABEL
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import AdmitWorkload, EvictWorkload, ObjectApplied, ObjectDeleted
from services.actuator.job_reconciler import Policy
from services.actuator.kube_port import KUBE_TUNING
from services.actuator.service import ActuatorService
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.runtime.kubeclient import api_client
from services.runtime.log import Log, LogError
from services.runtime.sqlite import SqliteLog
from services.runtime.supervise import ServiceStatus
from services.scheduler.runner import run_scheduler
from services.watcher.service import WatcherService
from tests.infra.kafka import LocalKafka
from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import empty_namespace, load_configuration, open_api_client
from tests.integration.kube_deploy import (
    KUEUE_GROUP,
    apply_crds,
    as_service_account,
    base_documents,
    create_or_replace,
    service_account,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

V = "v1beta1"
MERGE = "application/merge-patch+json"
ROOT = Path(__file__).resolve().parents[2]
SPOT_TOLERATION = {"key": "kueuelog.io/spot", "operator": "Exists", "effect": "NoSchedule"}
OWN_TOLERATION = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
WAIT_S = 90.0
EMPTY: Mapping[str, Any] = {}  # no further options (read only)


# --- the stack under test ----------------------------------------------------------------------


@dataclass
class Running:
    tasks: list[asyncio.Task[Any]]
    scheduler: ServiceStatus
    watcher: WatcherService
    actuator: ActuatorService
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def check(self) -> None:
        """Raise what a service task died of (they only end on ``stop``)."""
        for t in self.tasks:
            if t.done():
                exc = t.exception()
                raise AssertionError(f"service task {t.get_name()} ended early") from exc


@contextlib.asynccontextmanager
async def kueuelog(plane: LocalControlPlane, log: Log, *, cluster: str, topics: Topics | None = None,
                   role: str = "actuator", policy: Policy = "suspend", watcher_options: Mapping[str, Any] = EMPTY,
                   actuator_options: Mapping[str, Any] = EMPTY, scheduler_options: Mapping[str, Any] = EMPTY,
                   ) -> AsyncIterator[Running]:
    """Watcher, scheduler and actuator with the job reconciler, each as its ServiceAccount; ``role``
    is the leadership the actuator checks it holds (on Kafka). The ``*_options`` are further keyword
    arguments of each service (front ends, workload kinds, the scheduler's wall clock, ...)."""
    topics = topics or Topics()
    cfg = await load_configuration(plane)
    watcher_api = api_client(cfg, impersonate=service_account("kueuelog-watcher"))
    actuator_api = api_client(cfg, impersonate=service_account("kueuelog-actuator"))
    scheduler = ServiceStatus("scheduler")
    watcher = WatcherService(log, watcher_api, cluster=cluster, topics=topics, backoff=(0.1, 1.0), **watcher_options)
    actuator = ActuatorService(log, actuator_api, cluster=cluster, topics=topics, role=role, policy=policy,
                               tuning=replace(KUBE_TUNING, retry_base_seconds=0.1, retry_max_seconds=2.0),
                               **actuator_options)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(watcher.run(stop), name="watcher"),
             asyncio.create_task(run_scheduler(log, stop, topics=topics, status=scheduler, **scheduler_options),
                                 name="scheduler"),
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


async def eventually(running: Running, check: Callable[[], Awaitable[Any]], *, what: str,
                     timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        running.check()
        try:
            last = await check()
        except (TimeoutError, ApiException, OSError) as e:  # the apiserver restarting
            last = e
        else:
            if last:
                return last
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@pytest_asyncio.fixture(loop_scope="function")
async def deployed(kube_api_client: client.ApiClient, kube_control_plane: LocalControlPlane) -> None:
    """deploy/crds, and deploy/base's namespace, ServiceAccounts and RBAC, in effect."""
    await apply_crds(kube_api_client)
    for obj in base_documents("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        await create_or_replace(kube_api_client, obj)
    # New RBAC objects reach the authorizer's cache a moment later: wait until both roles work.
    for name, call in (("kueuelog-watcher", lambda api: client.CoreV1Api(api).list_namespace(limit=1)),
                       ("kueuelog-actuator", lambda api: client.BatchV1Api(api).list_job_for_all_namespaces(limit=1)),
                       ("kueuelog-actuator", lambda api: client.SchedulingV1Api(api).list_priority_class(limit=1))):
        async with as_service_account(kube_control_plane, name) as api:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await call(api)
                    break
                except ApiException as e:
                    if e.status != 403 or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)


# --- the cluster's objects -----------------------------------------------------------------------


class Cluster:
    """One test's objects: namespaces in and out of the ClusterQueue's selector, a flavor with node
    labels and a toleration, ClusterQueues, LocalQueues, priority classes, and Jobs."""

    def __init__(self, api: client.ApiClient) -> None:
        tag = uuid.uuid4().hex[:8]
        self.api, self.tag = api, tag
        self.co, self.batch, self.core = client.CustomObjectsApi(api), client.BatchV1Api(api), client.CoreV1Api(api)
        self.ns_in, self.ns_out = f"e2e-in-{tag}", f"e2e-out-{tag}"
        self.rf, self.cq, self.cq2 = f"spot-{tag}", f"cq-{tag}", f"cq2-{tag}"
        self.low, self.high = f"low-{tag}", f"high-{tag}"
        self.uids: dict[tuple[str, str], str] = {}

    async def create(self, *, cpu: str = "3") -> None:
        await self.core.create_namespace({"metadata": {"name": self.ns_in, "labels": {"kueuelog.io/e2e": self.tag}}})
        await self.core.create_namespace({"metadata": {"name": self.ns_out}})
        await self._cluster_object("resourceflavors", self.rf, {"spec": {
            "nodeLabels": {"kueuelog.io/pool": "spot"}, "tolerations": [SPOT_TOLERATION]}})
        for name, quota in ((self.cq, cpu), (self.cq2, "1")):
            await self._cluster_object("clusterqueues", name, {"spec": {
                "namespaceSelector": {"matchLabels": {"kueuelog.io/e2e": self.tag}},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                    {"name": self.rf, "resources": [{"name": "cpu", "nominalQuota": quota}]}]}]}})
        await self._cluster_object("workloadpriorityclasses", self.low, {"value": 100})
        await self._cluster_object("workloadpriorityclasses", self.high, {"value": 1000})
        for ns, lq, cq in ((self.ns_in, "lq", self.cq), (self.ns_in, "lq2", self.cq2), (self.ns_out, "lq", self.cq)):
            await self.co.create_namespaced_custom_object(KUEUE_GROUP, V, ns, "localqueues", {
                "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "LocalQueue", "metadata": {"name": lq},
                "spec": {"clusterQueue": cq}})

    async def _cluster_object(self, plural: str, name: str, body: dict[str, Any]) -> None:
        kind = {"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue",
                "workloadpriorityclasses": "WorkloadPriorityClass"}[plural]
        await self.co.create_cluster_custom_object(KUEUE_GROUP, V, plural, {
            "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": kind, "metadata": {"name": name}, **body})

    async def delete(self, api: client.ApiClient) -> None:
        co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        for plural, name in (("clusterqueues", self.cq), ("clusterqueues", self.cq2), ("resourceflavors", self.rf),
                             ("workloadpriorityclasses", self.low), ("workloadpriorityclasses", self.high)):
            with contextlib.suppress(ApiException):
                await co.delete_cluster_custom_object(KUEUE_GROUP, V, plural, name)
        for ns in (self.ns_in, self.ns_out):  # Terminating forever without a namespace controller: unique names
            await empty_namespace(api, ns)  # so its objects go (later tests' services watch the whole cluster)
            with contextlib.suppress(ApiException):
                await core.delete_namespace(ns)

    async def job(self, name: str, cpu: str, *, ns: str | None = None, queue: str = "lq",
                  priority: str | None = None, suspend: bool = False) -> str:
        """A queued Job as a user creates it (not suspended: there is no webhook to make it so).
        Returns its Workload's name."""
        ns = ns or self.ns_in
        labels = {QUEUE_NAME_LABEL: queue}
        if priority:
            labels["kueue.x-k8s.io/priority-class"] = priority
        created = await self.batch.create_namespaced_job(ns, {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels},
            "spec": {"suspend": suspend, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": {"team": "a"}, "tolerations": [OWN_TOLERATION],
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                                "resources": {"requests": {"cpu": cpu}}}]}}}})
        self.uids[(ns, name)] = created.metadata.uid
        return jobs.workload_name_for_job(name, created.metadata.uid)

    async def read_job(self, name: str, ns: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = await self.co.get_namespaced_custom_object("batch", "v1", ns or self.ns_in, "jobs", name)
        return out

    async def workload(self, job: str, ns: str | None = None) -> dict[str, Any] | None:
        ns = ns or self.ns_in
        name = jobs.workload_name_for_job(job, self.uids[(ns, job)])
        try:
            out: dict[str, Any] = await self.co.get_namespaced_custom_object(KUEUE_GROUP, V, ns, "workloads", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return out

    async def job_status(self, name: str, status: dict[str, Any], ns: str | None = None) -> None:
        """The kubelet's and the job controller's part."""
        await self.batch.patch_namespaced_job_status(name, ns or self.ns_in, {"status": status},
                                                     _content_type=MERGE)


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def stamp(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def admitted_job(c: Cluster, name: str, ns: str | None = None) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """The Job, once it runs admitted: unsuspended by the actuator (its decision on it), with its
    Workload holding quota."""

    async def check() -> dict[str, Any] | None:
        job = await c.read_job(name, ns)
        wl = await c.workload(name, ns)
        admitted = conditions(wl).get("Admitted", {}).get("status") == "True"
        annotated = "kueuelog.io/decision-id" in job["metadata"].get("annotations", {})
        if job["spec"].get("suspend") is False and annotated and admitted:
            return job
        return None

    return check


def suspended_job(c: Cluster, name: str, ns: str | None = None) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool((await c.read_job(name, ns))["spec"].get("suspend") is True)

    return check


def pending_because(c: Cluster, name: str, text: str, ns: str | None = None
                    ) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """The Workload, once QuotaReserved=False says ``text``."""

    async def check() -> dict[str, Any] | None:
        wl = await c.workload(name, ns)
        reserved = conditions(wl).get("QuotaReserved", {})
        return wl if reserved.get("status") == "False" and text in reserved.get("message", "") else None

    return check


def decisions(log: Log, topics: Topics) -> list[Any]:
    out: list[Any] = []
    offset = 0
    while batch := log.read(topics.decisions, offset, 5000):
        out.extend(decode_decision(r.value) for r in batch)
        offset = batch[-1].offset + 1
    return out


def assert_no_duplicate_admission(log: Log, topics: Topics) -> Counter[str]:
    """At most one admission per admission episode: a workload is admitted again only after an eviction."""
    ds = decisions(log, topics)
    admits = Counter(f"{d.namespace}/{d.name}" for d in ds if isinstance(d, AdmitWorkload))
    evicts = Counter(f"{d.namespace}/{d.name}" for d in ds if isinstance(d, EvictWorkload))
    for key, n in admits.items():
        assert n <= 1 + evicts[key], f"{key} admitted {n} times with {evicts[key]} eviction(s) between"
    return admits


# --- the tests -------------------------------------------------------------------------------------


async def test_queued_jobs_are_admitted_pending_preempted_and_survive_an_apiserver_restart(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    c = Cluster(kube_api_client)
    await c.create(cpu="3")
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    try:
        async with kueuelog(kube_control_plane, log, cluster="e2e") as running:
            # 1. Admitted: unsuspended on the flavor's nodes, its own scheduling kept.
            wl_a = await c.job("a", "2", priority=c.low)
            job_a = await eventually(running, admitted_job(c, "a"), what="Job a to be admitted")
            pod = job_a["spec"]["template"]["spec"]
            assert pod["nodeSelector"] == {"team": "a", "kueuelog.io/pool": "spot"}
            assert pod["tolerations"] == [OWN_TOLERATION, SPOT_TOLERATION]
            wl = await c.workload("a")
            assert wl is not None and wl["metadata"]["name"] == wl_a
            assert wl["status"]["admission"]["clusterQueue"] == c.cq
            assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": c.rf}
            assert running.scheduler.ready and running.watcher.status.ready and running.actuator.status.ready
            await c.job_status("a", {"startTime": stamp(), "active": 1, "ready": 1})  # the pod runs

            # 2. Over quota: stays suspended, and its Workload says why.
            await c.job("b", "2", priority=c.low)
            wl_b = await eventually(running, pending_because(c, "b", "insufficient unused quota for cpu in flavor "
                                                                        f"{c.rf}"), what="Job b to be pending")
            assert conditions(wl_b)["QuotaReserved"]["reason"] == "WaitingForQuota"  # Kueue 0.19's granular reason
            assert "admission" not in wl_b["status"]
            assert await suspended_job(c, "b")()

            # 3. Outside the ClusterQueue's namespaceSelector: never admitted.
            await c.job("out", "1", ns=c.ns_out)
            await eventually(running, pending_because(c, "out", "doesn't match ClusterQueue selector", c.ns_out),
                             what="Job out to be pending for its namespace")

            # 4. A higher priority Job preempts a (withinClusterQueue: LowerPriority).
            await c.job("c", "3", priority=c.high)

            async def a_evicted() -> dict[str, Any] | None:
                wl = await c.workload("a")
                evicted = conditions(wl).get("Evicted", {})
                return wl if evicted.get("status") == "True" and await suspended_job(c, "a")() else None

            wl = await eventually(running, a_evicted, what="Job a to be preempted")
            conds = conditions(wl)
            assert conds["Evicted"]["reason"] == "Preempted"
            assert conds["Preempted"]["status"] == "True"
            assert conds["QuotaReserved"]["status"] == "False"
            assert "admission" not in wl["status"]
            # Its pods are gone (the job controller's part): the eviction completes, c gets the quota.
            await c.job_status("a", {"startTime": None, "active": 0, "ready": 0})
            job_c = await eventually(running, admitted_job(c, "c"), what="Job c to be admitted after a's eviction")
            assert job_c["spec"]["template"]["spec"]["nodeSelector"]["kueuelog.io/pool"] == "spot"

            async def a_restored() -> bool:
                pod = (await c.read_job("a"))["spec"]["template"]["spec"]
                return pod.get("nodeSelector") == {"team": "a"} and pod.get("tolerations") == [OWN_TOLERATION]

            await eventually(running, a_restored, what="Job a's own scheduling to be restored")

            # 5. c finishes: its Workload is Finished, and the freed quota goes to a low one.
            await c.job_status("c", {"startTime": stamp(), "active": 1, "ready": 1})
            now = stamp()
            await c.job_status("c", {"active": 0, "ready": 0, "succeeded": 1, "completionTime": now, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]})

            async def c_finished() -> bool:
                return conditions(await c.workload("c")).get("Finished", {}).get("status") == "True"

            await eventually(running, c_finished, what="Job c's Workload to be Finished")

            async def one_low_admitted() -> list[str]:
                return [n for n in ("a", "b") if conditions(await c.workload(n)).get("Admitted", {}).get(
                    "status") == "True"]

            assert len(await eventually(running, one_low_admitted, what="a or b to take the freed quota")) == 1

            # 6. The API server restarts under the running services; a Job created afterwards is
            # admitted, once.
            await kube_control_plane.restart_apiserver_async(grace_s=0.0)
            async with open_api_client(kube_control_plane) as fresh:
                c.api, c.co, c.batch, c.core = (fresh, client.CustomObjectsApi(fresh), client.BatchV1Api(fresh),
                                                client.CoreV1Api(fresh))
                wl_d = await c.job("d", "1", queue="lq2")
                await eventually(running, admitted_job(c, "d"), what="Job d to be admitted after the restart")
                # Settle: the services caught up with everything there is.
                await eventually(running, lambda: _caught_up(log, topics), what="the services to catch up")
                assert await suspended_job(c, "out", c.ns_out)()
            assert running.watcher.stats.errors >= 1, "the restart cut the watches"

        admits = assert_no_duplicate_admission(log, topics)
        assert admits[f"{c.ns_in}/{wl_d}"] == 1
        assert admits[f"{c.ns_in}/{jobs.workload_name_for_job('c', c.uids[(c.ns_in, 'c')])}"] == 1
        assert admits[f"{c.ns_in}/{wl_a}"] in (1, 2)
        out = jobs.workload_name_for_job("out", c.uids[(c.ns_out, "out")])
        assert admits[f"{c.ns_out}/{out}"] == 0
    finally:
        log.close()
        async with open_api_client(kube_control_plane) as admin:
            await c.delete(admin)


async def test_a_job_the_reconciler_rejects_is_never_admitted_and_holds_no_quota(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    """Policy reject: a queued Job created running is labelled, left running outside quota, and
    whatever the watcher published for it before the label is taken back."""
    c = Cluster(kube_api_client)
    await c.create(cpu="2")
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    try:
        async with kueuelog(kube_control_plane, log, cluster="e2e-reject", policy="reject") as running:
            rogue = await c.job("rogue", "2")

            async def rejected() -> dict[str, Any] | None:
                job = await c.read_job("rogue")
                return job if job["metadata"]["labels"].get("kueuelog.io/rejected") == "true" else None

            job = await eventually(running, rejected, what="Job rogue to be rejected")
            assert job["spec"]["suspend"] is False, "left running"
            assert "kueuelog.io/rejection" in job["metadata"]["annotations"]
            # A well-behaved Job (created suspended) takes the whole quota: the rejected one holds none.
            await c.job("good", "2", suspend=True)
            await eventually(running, admitted_job(c, "good"), what="Job good to be admitted")
            await eventually(running, lambda: _caught_up(log, topics), what="the services to catch up")
            assert await c.workload("rogue") is None, "the reconciler creates no Workload for it"
        published = [decode_envelope(r.value).event for r in log.read(topics.cluster_events, 0, 100_000)]
        about = [type(e).__name__ for e in published if isinstance(e, ObjectApplied | ObjectDeleted)
                 and getattr(e, "name", getattr(getattr(e, "object", None), "name", "")) == rogue]
        assert about in ([], ["ObjectApplied", "ObjectDeleted"]), about
        assert assert_no_duplicate_admission(log, topics)[f"{c.ns_in}/{rogue}"] == 0
    finally:
        log.close()
        await c.delete(kube_api_client)


async def _caught_up(log: Log, topics: Topics) -> bool:
    """The scheduler has read every cluster event and the actuator every decision."""
    return (log.position("scheduler", topics.cluster_events) >= log.end_offset(topics.cluster_events)
            and log.position("actuator", topics.decisions) >= log.end_offset(topics.decisions))


async def test_queued_job_is_admitted_with_the_log_on_kafka(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,
    kafka_broker: LocalKafka, kafka_topic_prefix: str,
) -> None:
    c = Cluster(kube_api_client)
    await c.create(cpu="2")
    prefix = kafka_topic_prefix.rstrip("-")
    topics = Topics(prefix=prefix)
    # One log for every service of this process: it writes as the leader of "scheduler" (as run_all).
    log = KafkaLog(KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers), prefix=prefix, role="all")
    try:
        assert await asyncio.wait_for(log.acquire("scheduler", asyncio.Event()), timeout=60)
        async with kueuelog(kube_control_plane, log, cluster="e2e-kafka", topics=topics,
                            role="scheduler") as running:
            wl_a = await c.job("a", "2", priority=c.low)
            job_a = await eventually(running, admitted_job(c, "a"), what="Job a to be admitted")
            assert job_a["spec"]["template"]["spec"]["nodeSelector"]["kueuelog.io/pool"] == "spot"
            await c.job("b", "1", priority=c.low)
            await eventually(running, pending_because(c, "b", "insufficient unused quota for cpu"),
                             what="Job b to be pending")
        admits = assert_no_duplicate_admission(log, topics)
        # (Objects other tests left in the shared API server are this log's business too: only ours count.)
        assert {k: n for k, n in admits.items() if k.startswith(f"{c.ns_in}/")} == {f"{c.ns_in}/{wl_a}": 1}
    finally:
        log.close()
        await c.delete(kube_api_client)


# --- the command line --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


async def test_kueuelog_run_watcher_publishes_events_and_answers_health_probes(
    kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    port = _free_port()
    log_dir = tmp_path / "log"
    out = (tmp_path / "watcher.out").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUEUELOG_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.app.cli", "run", "watcher", "--kubeconfig",
         str(kube_control_plane.kubeconfig_path), "--log", str(log_dir), "--cluster", "smoke",
         "--http-port", str(port), "--http-host", "127.0.0.1"],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"

        async def probe(path: str, want: int) -> tuple[int, str] | None:
            if proc.poll() is not None:
                pytest.fail(f"kueuelog run watcher exited with {proc.returncode}: "
                            f"{(tmp_path / 'watcher.out').read_text()[-2000:]}")
            try:
                got = await asyncio.to_thread(_get, base + path)
            except OSError:
                return None
            return got if got[0] == want else None

        async def poll(check: Callable[[], Awaitable[Any]], what: str) -> Any:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                got = await check()
                if got:
                    return got
                await asyncio.sleep(0.2)
            pytest.fail(f"timed out waiting for {what}")

        assert (await poll(lambda: probe("/healthz", 200), "/healthz"))[1].strip() == "ok"
        ready = await poll(lambda: probe("/readyz", 200), "/readyz")
        assert ready[1].strip() == "watcher: ready"

        def namespace_published() -> bool:
            try:
                log = SqliteLog(log_dir, create=False)
            except LogError:
                return False
            try:
                for rec in log.read(Topics().cluster_events, 0, 100_000):
                    env = decode_envelope(rec.value)
                    if (env.cluster == "smoke" and isinstance(env.event, ObjectApplied)
                            and getattr(env.event.object, "name", "") == kube_namespace):
                        return True
            finally:
                log.close()
            return False

        await poll(lambda: asyncio.to_thread(namespace_published), f"Namespace {kube_namespace} in the log")
        metrics = (await poll(lambda: probe("/metrics", 200), "/metrics"))[1]
        published = [line for line in metrics.splitlines() if line.startswith("kueuelog_watcher_published_total ")]
        assert published and float(published[0].split()[1]) >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            out.close()
    assert code == 0, (tmp_path / "watcher.out").read_text()[-2000:]
