"""The Kubernetes watcher against a real kube-apiserver: changes land in the log once each.

The tests create Kueue objects and queued Jobs, run ``run_kube_watcher`` into an embedded
log, and play the kubelet's and the actuator's parts by patching Jobs (there are no
controllers). They cut every watch by crashing the apiserver, and restart the watcher
itself, and check that nothing that would change the scheduler's state is published twice.

The CRDs are kueuelog's own (``deploy/crds/``) where a file for the kind is there, else minimal
ones (any object accepted, ``x-kubernetes-preserve-unknown-fields``): see :func:`ensure_kueue_crds`.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec
import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import objects as o
from events.cluster import QUEUE_NAME_LABEL as QUEUE_LABEL
from events.cluster import WORKLOAD_PRIORITY_CLASS_SOURCE
from events.codec import decode_envelope
from events.envelope import Envelope, Topics
from events.jobs import workload_name_for_job
from events.messages import ObjectApplied, ObjectDeleted, PodsReady, WorkloadFinished
from services.runtime.sqlite import SqliteLog
from services.watcher.kube import DEFAULT_KINDS, WatcherStats, run_kube_watcher
from tests.infra.kube import LocalControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta1"
CLUSTER = "east"
T = TypeVar("T")
KUEUE_CRDS = [
    ("ResourceFlavor", "resourceflavors", "Cluster"),
    ("Cohort", "cohorts", "Cluster"),
    ("ClusterQueue", "clusterqueues", "Cluster"),
    ("LocalQueue", "localqueues", "Namespaced"),
    ("WorkloadPriorityClass", "workloadpriorityclasses", "Cluster"),
    ("AdmissionCheck", "admissionchecks", "Cluster"),
    ("ProvisioningRequestConfig", "provisioningrequestconfigs", "Cluster"),
    ("Workload", "workloads", "Namespaced"),
]


async def eventually(check: Callable[[], Any], *, timeout: float = 60.0, what: str) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


async def retrying(call: Callable[[], Awaitable[T]], *, what: str, timeout: float = 60.0) -> T:
    """An API call retried while the apiserver is (re)starting or a new CRD is not served yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except ApiException as e:
            if e.status not in (404, 429, 500, 503) or time.monotonic() > deadline:
                raise
        except (aiohttp.ClientError, OSError):
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def _crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    path = CRD_DIR / f"{kind.lower()}.yaml"
    if path.exists():
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
        if docs:
            return dict(docs[0])
    return _minimal_crd(kind, plural, scope)


def _minimal_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                "subresources": {"status": {}},
            }],
        },
    }


async def ensure_kueue_crds(api: client.ApiClient) -> None:
    """Kueue's kinds served at kueue.x-k8s.io/v1beta1 (unless an earlier test installed them)."""
    ext = client.ApiextensionsV1Api(api)
    for kind, plural, scope in KUEUE_CRDS:
        try:
            await ext.create_custom_resource_definition(_crd(kind, plural, scope))
        except ApiException as e:
            if e.status != 409:  # made already (by an earlier test, or the real CRDs)
                raise
    co = client.CustomObjectsApi(api)
    for _, plural, _ in KUEUE_CRDS:
        # Established is not enough: until the watch cache is ready the apiserver answers 429.
        await retrying(lambda p=plural: co.list_cluster_custom_object(GROUP, VERSION, p, limit=1),  # type: ignore[misc]
                       what=f"{plural}.{GROUP} to be served")


def queued_job(name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox:1.36", "command": ["true"],
                "resources": {"requests": {"cpu": "1"}},
            }]}},
        },
    }


class Setup:
    """A ResourceFlavor, ClusterQueue and LocalQueue for one test (cluster-scoped names made unique)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.ns = api, namespace
        self.rf, self.cq, self.lq = f"rf-{namespace}", f"cq-{namespace}", "lq"
        self.batch = client.BatchV1Api(api)
        self.co = client.CustomObjectsApi(api)

    async def queues(self) -> None:
        await ensure_kueue_crds(self.api)
        co = self.co
        await retrying(lambda: co.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": self.rf},
            "spec": {"nodeLabels": {"zone": "a"}}}), what="ResourceFlavor")
        await retrying(lambda: co.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": self.cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": self.rf, "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}), what="ClusterQueue")
        await retrying(lambda: co.create_namespaced_custom_object(GROUP, VERSION, self.ns, "localqueues", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": self.lq},
            "spec": {"clusterQueue": self.cq}}), what="LocalQueue")

    async def job(self, name: str) -> str:
        """Create a queued (suspended) Job; returns its Workload's name."""
        created = await retrying(lambda: self.batch.create_namespaced_job(self.ns, queued_job(name, self.lq)),
                                 what=f"Job {name}")
        return workload_name_for_job(name, created.metadata.uid)

    async def patch_status(self, name: str, status: dict[str, Any]) -> None:
        await retrying(lambda: self.batch.patch_namespaced_job_status(name, self.ns, {"status": status}),
                       what=f"status of Job {name}")

    def mine(self, env: Envelope) -> bool:
        ev = env.event
        obj = ev.object if isinstance(ev, ObjectApplied) else None
        if obj is not None:
            return getattr(obj, "namespace", "") == self.ns or obj.name in (self.rf, self.cq, self.ns)
        return getattr(ev, "namespace", "") == self.ns


def envelopes(log: SqliteLog, start: int = 0) -> list[Envelope]:
    out: list[Envelope] = []
    offset = start
    topic = Topics().cluster_events
    while batch := log.read(topic, offset, 1000):
        out.extend(decode_envelope(r.value) for r in batch)
        offset = batch[-1].offset + 1
    return out


def what(env: Envelope) -> tuple[str, str, str]:
    """(event type, kind, namespace/name) of an envelope, for counting."""
    ev = env.event
    if isinstance(ev, ObjectApplied):
        obj = ev.object
        return ("applied", type(obj).__name__, f"{getattr(obj, 'namespace', '')}/{getattr(obj, 'name', '')}")
    if isinstance(ev, ObjectDeleted):
        return ("deleted", ev.kind, f"{ev.namespace}/{ev.name}")
    return (type(ev).__name__, "Workload", f"{getattr(ev, 'namespace', '')}/{getattr(ev, 'name', '')}")


def seen(log: SqliteLog, *wanted: tuple[str, str, str]) -> bool:
    got = {what(e) for e in envelopes(log)}
    return all(w in got for w in wanted)


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


async def test_watcher_publishes_changes_once_across_an_apiserver_crash(
    kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    wl1 = await s.job("j1")
    log = SqliteLog(tmp_path / "log")
    stats = WatcherStats()
    stop = asyncio.Event()
    watcher = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster=CLUSTER, stats=stats,
                                                   backoff=(0.1, 1.0)))
    try:
        await eventually(lambda: seen(log, ("applied", "ResourceFlavor", f"/{s.rf}"),
                                      ("applied", "ClusterQueue", f"/{s.cq}"),
                                      ("applied", "LocalQueue", f"{ns}/lq"),
                                      ("applied", "Namespace", f"/{ns}"),
                                      ("applied", "Workload", f"{ns}/{wl1}")),
                         what="the queues, the namespace and j1's Workload")

        # Admitted (the actuator unsuspends), then the kubelet reports the pod ready.
        await s.batch.patch_namespaced_job("j1", ns, {"spec": {"suspend": False}})
        started = time.time()
        await s.patch_status("j1", {"startTime": stamp(started), "active": 1, "ready": 1})
        await eventually(lambda: seen(log, ("PodsReady", "Workload", f"{ns}/{wl1}")), what="j1 pods ready")

        await s.patch_status("j1", {
            "active": 0, "ready": 0, "succeeded": 1, "completionTime": stamp(started + 1),
            "uncountedTerminatedPods": {},
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods",
                 "lastTransitionTime": stamp(started + 1), "lastProbeTime": stamp(started + 1)},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods",
                 "lastTransitionTime": stamp(started + 1), "lastProbeTime": stamp(started + 1)},
            ],
        })
        await eventually(lambda: seen(log, ("WorkloadFinished", "Workload", f"{ns}/{wl1}")), what="j1 finished")

        await s.batch.delete_namespaced_job("j1", ns, propagation_policy="Background")
        await eventually(lambda: seen(log, ("deleted", "Workload", f"{ns}/{wl1}")), what="j1's Workload deleted")

        # Crash the apiserver: every watch is cut mid-stream; each kind relists.
        relists, errors = stats.relists, stats.errors
        await kube_control_plane.restart_apiserver_async(grace_s=0)
        wl2 = await s.job("j2")
        await eventually(lambda: seen(log, ("applied", "Workload", f"{ns}/{wl2}")), what="j2's Workload")
        await eventually(lambda: stats.relists >= relists + len(DEFAULT_KINDS), what="every kind to relist")
        assert stats.errors > errors
    finally:
        stop.set()
        result = await asyncio.wait_for(watcher, timeout=30)
    assert result is stats

    every = envelopes(log)
    assert all(e.source == "watcher" and e.cluster == CLUSTER for e in every)
    ids = collections.Counter(e.id for e in every)
    assert [i for i, n in ids.items() if n > 1] == [], "an envelope was published twice"

    counts = collections.Counter(what(e) for e in every if s.mine(e))
    assert counts == {
        ("applied", "ResourceFlavor", f"/{s.rf}"): 1,
        ("applied", "ClusterQueue", f"/{s.cq}"): 1,
        ("applied", "LocalQueue", f"{ns}/lq"): 1,
        ("applied", "Namespace", f"/{ns}"): 1,
        ("applied", "Workload", f"{ns}/{wl1}"): 1,
        ("PodsReady", "Workload", f"{ns}/{wl1}"): 1,
        ("WorkloadFinished", "Workload", f"{ns}/{wl1}"): 1,
        ("deleted", "Workload", f"{ns}/{wl1}"): 1,
        ("applied", "Workload", f"{ns}/{wl2}"): 1,
    }
    finished = [e.event for e in every if isinstance(e.event, WorkloadFinished) and e.event.namespace == ns]
    assert finished[0] == WorkloadFinished(time=finished[0].time, namespace=ns, name=wl1, succeeded=True,
                                           message="Reached expected number of succeeded pods")
    workload = next(e.event.object for e in every
                    if isinstance(e.event, ObjectApplied) and getattr(e.event.object, "name", "") == wl2)
    assert (workload.queue_name, workload.pod_sets[0].requests) == ("lq", (("cpu", 1000),))  # type: ignore[union-attr]
    assert not any(isinstance(e.event, PodsReady) and e.event.name == wl2 for e in every)


async def test_restarted_watcher_repeats_nothing_and_publishes_deletes_it_missed(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    # An object the watcher must refuse (Kueue's job webhook would; the API server cannot): it goes to
    # dead letters, and the rest flows.
    bad = queued_job("j-bad", s.lq)
    bad["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "abc"}
    await retrying(lambda: s.batch.create_namespaced_job(ns, bad), what="Job j-bad")
    wl1, wl2 = await s.job("j1"), await s.job("j2")
    log = SqliteLog(tmp_path / "log")

    async def run_until(*wanted: tuple[str, str, str]) -> WatcherStats:
        stop = asyncio.Event()
        task = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster=CLUSTER,
                                                    backoff=(0.1, 1.0)))
        try:
            await eventually(lambda: seen(log, *wanted), what=f"{wanted}")
        finally:
            stop.set()
        return await asyncio.wait_for(task, timeout=30)

    first = await run_until(("applied", "LocalQueue", f"{ns}/lq"), ("applied", "Workload", f"{ns}/{wl1}"),
                            ("applied", "Workload", f"{ns}/{wl2}"))
    assert first.recovered == 0
    before = envelopes(log)
    workloads = [e.event.object for e in before
                 if isinstance(e.event, ObjectApplied) and isinstance(e.event.object, o.Workload)]
    assert sorted(w.owner.name for w in workloads if w.namespace == ns and w.owner) == ["j1", "j2"]
    letters = [msgspec.json.decode(r.value) for r in log.read(Topics().dead_letters, 0, 1000)]
    assert [(d["kind"], d["namespace"], d["name"], d["reason"]) for d in letters if d["namespace"] == ns] == [(
        "Job", ns, "j-bad", f"cluster:{CLUSTER}: document 0 (Job {ns}/j-bad): "
        "metadata.annotations.kueue.x-k8s.io/job-min-parallelism: must be an integer, got 'abc'")]

    # While the watcher is down: j1 is deleted, j3 is created.
    await s.batch.delete_namespaced_job("j1", ns, propagation_policy="Background")
    wl3 = await s.job("j3")
    second = await run_until(("deleted", "Workload", f"{ns}/{wl1}"), ("applied", "Workload", f"{ns}/{wl3}"))
    assert second.recovered == len(before)

    new = envelopes(log, len(before))
    assert sorted(what(e) for e in new if s.mine(e)) == [
        ("applied", "Workload", f"{ns}/{wl3}"),
        ("deleted", "Workload", f"{ns}/{wl1}"),
    ]
    # Nothing the first run published is published again unchanged (the whole cluster, not just ours).
    published = {(what(e), e.event.object) for e in before if isinstance(e.event, ObjectApplied)}
    assert [what(e) for e in new if isinstance(e.event, ObjectApplied) and (what(e), e.event.object) in published] == []


async def test_watcher_reads_objects_written_at_any_version_in_their_meaning(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    """Our CRDs convert nothing (strategy None): an object read at v1beta2 keeps the spelling it was
    written with. The watcher respells it, so v1alpha1 ``parent``, v1beta1 ``cohort``,
    ``admissionChecks``, ``Borrow`` and ``priorityClassName`` mean what they meant."""
    ns = kube_namespace
    await ensure_kueue_crds(kube_api_client)
    co = client.CustomObjectsApi(kube_api_client)
    root, child, cq1, cq2, wpc = (f"{what}-{ns}" for what in ("root", "child", "cq-b1", "cq-b2", "wpc"))

    def at(version: str, kind: str, name: str, spec: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": {"name": name},
                **({"spec": spec} if spec is not None else {}), **rest}

    quota = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]}
    cluster_scoped = [
        ("v1alpha1", "cohorts", at("v1alpha1", "Cohort", root)),
        ("v1alpha1", "cohorts", at("v1alpha1", "Cohort", child, {"parent": root})),
        ("v1beta1", "clusterqueues", at("v1beta1", "ClusterQueue", cq1, {
            **quota, "cohort": child, "admissionChecks": ["prov"],
            "flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}})),
        ("v1beta2", "clusterqueues", at("v1beta2", "ClusterQueue", cq2, {**quota, "cohortName": root})),
        ("v1beta1", "workloadpriorityclasses", at("v1beta1", "WorkloadPriorityClass", wpc, value=7)),
    ]
    template = {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
    workloads = [
        at("v1beta1", "Workload", "wl-b1", {"queueName": "lq", "priorityClassName": wpc, "priority": 7,
                                            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
                                            "podSets": [{"name": "main", "count": 1, "template": template}]}),
        at("v1beta2", "Workload", "wl-b2", {"queueName": "lq", "priority": 7, "priorityClassRef": {
            "group": GROUP, "kind": "WorkloadPriorityClass", "name": wpc},
            "podSets": [{"name": "main", "count": 1, "template": template}]}),
    ]
    for version, plural, body in cluster_scoped:
        await retrying(lambda v=version, p=plural, b=body: co.create_cluster_custom_object(  # type: ignore[misc]
            GROUP, v, p, b), what=f"{body['kind']} {body['metadata']['name']}")
    for body in workloads:
        version = body["apiVersion"].split("/")[1]
        await retrying(lambda v=version, b=body: co.create_namespaced_custom_object(  # type: ignore[misc]
            GROUP, v, ns, "workloads", b), what=f"Workload {body['metadata']['name']}")

    log = SqliteLog(tmp_path / "log")
    stop = asyncio.Event()
    stats = WatcherStats()
    watcher = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster=CLUSTER, stats=stats,
                                                   backoff=(0.1, 1.0)))
    try:
        await eventually(lambda: seen(log, ("applied", "Cohort", f"/{root}"), ("applied", "Cohort", f"/{child}"),
                                      ("applied", "ClusterQueue", f"/{cq1}"), ("applied", "ClusterQueue", f"/{cq2}"),
                                      ("applied", "Workload", f"{ns}/wl-b1"), ("applied", "Workload", f"{ns}/wl-b2")),
                         what="every object, whatever version it was written at")
    finally:
        stop.set()
        await asyncio.wait_for(watcher, timeout=30)
        for version, plural, body in cluster_scoped:
            await co.delete_cluster_custom_object(GROUP, version, plural, body["metadata"]["name"])

    applied = {(type(e.event.object).__name__, e.event.object.name): e.event.object
               for e in envelopes(log) if isinstance(e.event, ObjectApplied)}
    assert applied[("Cohort", child)].parent == root  # type: ignore[union-attr]
    first = applied[("ClusterQueue", cq1)]
    assert isinstance(first, o.ClusterQueue)
    assert (first.cohort, first.admission_checks) == (child, ("prov",))
    assert (first.flavor_fungibility.when_can_borrow, first.flavor_fungibility.when_can_preempt) == (
        o.WhenCanBorrow.MAY_STOP_SEARCH, o.WhenCanPreempt.MAY_STOP_SEARCH)
    assert applied[("ClusterQueue", cq2)].cohort == root  # type: ignore[union-attr]
    want = o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name=wpc)
    assert applied[("Workload", "wl-b1")].priority_ref == want  # type: ignore[union-attr]
    assert applied[("Workload", "wl-b2")].priority_ref == want  # type: ignore[union-attr]
    refused = [r.value for r in log.read(Topics().dead_letters, 0, 1000)]
    assert not [r for r in refused if any(n.encode() in r for n in (root, child, cq1, cq2, ns))], refused
