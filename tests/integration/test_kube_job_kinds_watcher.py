"""The watcher with ``--job-kinds JobSet,PyTorchJob`` against a real kube-apiserver (our minimal
CRDs, ``tests/integration/jobkind_crds.py``): a queued JobSet and PyTorchJob are published as the
Workloads Kueue would create (name, podSets), their end as ``WorkloadFinished``, an evicted one held
again as ``EvictionCompleted``, their deletion as the Workload's; a Workload object they own is left
to them; nothing is published twice. The actuator's part is played with the framework's own patch
shapes (``events.jobkinds.patches``), so the API server also checks those: the flavor's node
selector lands in each podSet's template and comes off again on eviction."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from events import objects as o
from events.cluster import EVICTED_ANNOTATION
from events.cluster import QUEUE_NAME_LABEL as QUEUE_LABEL
from events.jobkinds.patches import Scheduling, evict_ops, resume_ops
from events.messages import ObjectApplied
from events.quantity import to_amount
from services.runtime.sqlite import SqliteLog
from services.watcher.kube import DEFAULT_KINDS, JOB_KINDS, WatcherStats, run_kube_watcher
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.test_kube_watcher import CLUSTER, Setup, envelopes, eventually, retrying, seen, what

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

KINDS = ("JobSet", "PyTorchJob")
MERGE = "application/merge-patch+json"
SPOT = Scheduling({"zone": "a"}, [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])


class Where:
    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")

    def amount(self, resource: str, value: object, field: str) -> int:
        return to_amount(resource, value)
WATCHED = (*DEFAULT_KINDS, *(k for k in JOB_KINDS if k.kind in KINDS))


def _pod(cpu: str) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}]}}


def a_jobset(name: str, queue: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": _pod("250m")}}},
                {"name": "driver", "template": {"spec": {"template": _pod("500m")}}}]}}


def a_pytorchjob(name: str, queue: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": _pod("1")},
                "Worker": {"replicas": 2, "template": _pod("1")}}}}


async def test_watcher_publishes_jobsets_and_pytorchjobs_as_their_workloads(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    await ensure_job_kind_crds(kube_api_client, *KINDS)
    co = client.CustomObjectsApi(kube_api_client)
    js = await retrying(lambda: co.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets",
                                                                   a_jobset("js", s.lq)), what="JobSet")
    pt = await retrying(lambda: co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs",
                                                                   a_pytorchjob("pt", s.lq)), what="PyTorchJob")
    wl_js = jobkinds.workload_name("JobSet", "jobset.x-k8s.io", "js", js["metadata"]["uid"])
    wl_pt = jobkinds.workload_name("PyTorchJob", "kubeflow.org", "pt", pt["metadata"]["uid"])
    # A Workload the JobSet owns (as Kueue would have created it) is the JobSet's to describe.
    await retrying(lambda: co.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": wl_js, "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                         "name": "js", "uid": js["metadata"]["uid"]}]},
        "spec": {"queueName": s.lq, "podSets": [{"name": "x", "count": 1, "template": _pod("9")}]}}),
        what="the JobSet's Workload")

    log = SqliteLog(tmp_path / "log")
    stats = WatcherStats()
    stop = asyncio.Event()
    watcher = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster=CLUSTER, stats=stats,
                                                   kinds=WATCHED, backoff=(0.1, 1.0)))
    try:
        await eventually(lambda: seen(log, ("applied", "Workload", f"{ns}/{wl_js}"),
                                      ("applied", "Workload", f"{ns}/{wl_pt}")), what="both Workloads")
        # Admitted and run (the actuator's and the operator's parts), then finished.
        pt_kind = jobkinds.kind_of("kubeflow.org/v1", "PyTorchJob")
        assert pt_kind is not None
        ops = resume_ops(Where(), pt_kind, pt, {"master": SPOT, "worker": SPOT})
        pt = await co.patch_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", "pt", ops)
        assert pt["spec"]["runPolicy"]["suspend"] is False
        for replica in ("Master", "Worker"):
            assert pt["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
        await co.patch_namespaced_custom_object_status("kubeflow.org", "v1", ns, "pytorchjobs", "pt", {"status": {
            "conditions": [{"type": "Succeeded", "status": "True", "message": "PyTorchJob pt is successfully "
                                                                               "completed."}]}}, _content_type=MERGE)
        await eventually(lambda: seen(log, ("WorkloadFinished", "Workload", f"{ns}/{wl_pt}")), what="pt finished")
        # Admitted, then evicted: the actuator holds it again and marks the eviction.
        js_kind = jobkinds.kind_of("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert js_kind is not None
        js = await co.patch_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js",
                                                     resume_ops(Where(), js_kind, js, {"workers": SPOT}))
        workers = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert (workers["nodeSelector"], workers["tolerations"]) == (dict(SPOT.node_selector), list(SPOT.tolerations))
        assert "nodeSelector" not in js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
        js = await co.patch_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js",
                                                     evict_ops(Where(), js_kind, js, {"workers": Scheduling()}))
        assert js["spec"]["suspend"] is True
        assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] == {}
        await co.patch_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js", {
            "metadata": {"annotations": {EVICTED_ANNOTATION: "d-1"}}}, _content_type=MERGE)
        await eventually(lambda: seen(log, ("EvictionCompleted", "Workload", f"{ns}/{wl_js}")),
                         what="js's eviction completed")
        await co.delete_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js")
        await eventually(lambda: seen(log, ("deleted", "Workload", f"{ns}/{wl_js}")), what="js's Workload deleted")
    finally:
        stop.set()
        await asyncio.wait_for(watcher, timeout=30)

    every = envelopes(log)
    ids = collections.Counter(e.id for e in every)
    assert [i for i, n in ids.items() if n > 1] == [], "an envelope was published twice"
    mine = collections.Counter(what(e) for e in every if s.mine(e) and what(e)[1] == "Workload")
    assert mine == {
        ("applied", "Workload", f"{ns}/{wl_js}"): 1,
        ("applied", "Workload", f"{ns}/{wl_pt}"): 1,
        ("WorkloadFinished", "Workload", f"{ns}/{wl_pt}"): 1,
        ("EvictionCompleted", "Workload", f"{ns}/{wl_js}"): 1,
        ("deleted", "Workload", f"{ns}/{wl_js}"): 1,
    }
    applied = {e.event.object.name: e.event.object for e in every
               if isinstance(e.event, ObjectApplied) and isinstance(e.event.object, o.Workload)}
    assert [(p.name, p.count, p.requests) for p in applied[wl_js].pod_sets] == [
        ("workers", 4, (("cpu", 250),)), ("driver", 1, (("cpu", 500),))]  # not the owned Workload's podSet
    assert [(p.name, p.count) for p in applied[wl_pt].pod_sets] == [("master", 1), ("worker", 2)]
    assert applied[wl_pt].owner == o.OwnerReference(api_version="kubeflow.org/v1", kind="PyTorchJob", name="pt",
                                                    uid=pt["metadata"]["uid"])
