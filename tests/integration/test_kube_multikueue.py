"""MultiKueue on two real kube-apiservers: a manager and a worker, each started by its fixture.

The manager runs kueuelog's stack (watcher, scheduler, actuator with the job reconciler, each as
its ServiceAccount, deploy/base's RBAC); the worker runs only a watcher (``--cluster worker-a``),
publishing to the same log. The manager's ClusterQueue has the multikueue AdmissionCheck; its
MultiKueueConfig lists the worker, whose MultiKueueCluster names the worker's kubeconfig by path.
A Job submitted on the manager (``spec.managedBy: kueue.x-k8s.io/multikueue``, as with Kueue) is
placed on the worker: its copy runs there with the worker flavor's node selector, the manager's
Workload shows ``status.clusterName`` and is admitted; the test plays the worker's kubelet and job
controller; the Job's completion flows back to the manager's Job and Workload, and the copy on the
worker is deleted. The log shows exactly one placement.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import objects as o
from events.cluster import MULTIKUEUE_CONTROLLER, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from events.codec import decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ClockTicked, ObjectApplied, PlaceWorkload, RemovePlacement
from events.objects import MultiKueueCluster
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log
from services.runtime.sqlite import SqliteLog
from services.watcher.service import WatcherService
from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import open_api_client
from tests.integration.kube_deploy import KUEUE_GROUP, apply_crds, create_or_replace, rbac_applied, read_yaml
from tests.integration.test_kube_e2e import (
    conditions,
    decisions,
    deployed,  # noqa: F401 - the fixture
    eventually,
    kueuelog,
    stamp,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

V = "v1beta2"
WORKER = "worker-a"
NS = "mk-team"
LOST_MS = 20_000


async def _create(co: client.CustomObjectsApi, plural: str, kind: str, name: str, body: dict[str, Any],
                  ns: str = "") -> None:
    obj = {"apiVersion": f"{KUEUE_GROUP}/{V}", "kind": kind, "metadata": {"name": name}, **body}
    try:
        if ns:
            await co.create_namespaced_custom_object(KUEUE_GROUP, V, ns, plural, obj)
        else:
            await co.create_cluster_custom_object(KUEUE_GROUP, V, plural, obj)
    except ApiException as e:
        if e.status != 409:
            raise


async def _namespace(api: client.ApiClient, name: str) -> None:
    try:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as e:
        if e.status != 409:
            raise


def _queue(flavor: str, cpu: str, checks: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"spec": spec}


async def _manager_objects(api: client.ApiClient, workers: dict[str, Path], tag: str = "") -> None:
    """The manager's MultiKueue objects (names suffixed with ``tag``: each test its own) and queue."""
    co = client.CustomObjectsApi(api)
    await _namespace(api, NS)
    await _create(co, "multikueueconfigs", "MultiKueueConfig", f"mk-config{tag}", {"spec": {"clusters": list(workers)}})
    for name, kubeconfig in workers.items():
        await _create(co, "multikueueclusters", "MultiKueueCluster", name, {"spec": {"clusterSource": {
            "kubeConfig": {"locationType": "Path", "location": str(kubeconfig)}}}})
    await _create(co, "admissionchecks", "AdmissionCheck", f"mk-check{tag}", {"spec": {
        "controllerName": MULTIKUEUE_CONTROLLER,
        "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": f"mk-config{tag}"}}})
    await _create(co, "resourceflavors", "ResourceFlavor", "mk-manager", {"spec": {}})
    await _create(co, "clusterqueues", "ClusterQueue", f"mk-cq{tag}", _queue("mk-manager", "10", [f"mk-check{tag}"]))
    await _create(co, "localqueues", "LocalQueue", f"mk-lq{tag}", {"spec": {"clusterQueue": f"mk-cq{tag}"}}, NS)


async def _worker_objects(api: client.ApiClient, pool: str = "worker-a", tag: str = "") -> None:
    co = client.CustomObjectsApi(api)
    await apply_crds(api)
    await _namespace(api, NS)
    await _create(co, "resourceflavors", "ResourceFlavor", f"mk-{pool}-pool",
                  {"spec": {"nodeLabels": {"kueuelog.io/pool": pool}}})
    await _create(co, "clusterqueues", "ClusterQueue", f"mk-cq{tag}", _queue(f"mk-{pool}-pool", "4", []))
    await _create(co, "localqueues", "LocalQueue", f"mk-lq{tag}", {"spec": {"clusterQueue": f"mk-cq{tag}"}}, NS)


def _ticked(log: Log, topics: Topics, *names: str) -> bool:
    """Each of these clusters has a heartbeat in the log."""
    seen: set[str] = set()
    offset = 0
    while batch := log.read(topics.cluster_events, offset, 5000):
        for rec in batch:
            env = decode_envelope(rec.value)
            if isinstance(env.event, ClockTicked):
                seen.add(env.cluster)
        offset = batch[-1].offset + 1
    return seen >= set(names)


def _cluster_known(log: Log, topics: Topics, *names: str) -> bool:
    """The manager's watcher published these MultiKueueClusters: from now on the scheduler folds
    events under those cluster names into the workers' views (start the workers' watchers then)."""
    seen: set[str] = set()
    offset = 0
    while batch := log.read(topics.cluster_events, offset, 5000):
        for rec in batch:
            ev = decode_envelope(rec.value).event
            if isinstance(ev, ObjectApplied) and isinstance(ev.object, MultiKueueCluster):
                seen.add(ev.object.name)
        offset = batch[-1].offset + 1
    return seen >= set(names)


async def test_a_job_placed_on_the_worker_runs_there_its_status_flows_back_and_it_is_cleaned_up(
    deployed: None, kube_control_plane: LocalControlPlane, kube_worker_plane: LocalControlPlane,  # noqa: F811
    kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    await _manager_objects(kube_api_client, {WORKER: kube_worker_plane.kubeconfig_path})
    manager_batch = client.BatchV1Api(kube_api_client)
    async with open_api_client(kube_worker_plane) as worker_api:
        await _worker_objects(worker_api)
        worker_batch = client.BatchV1Api(worker_api)
        try:
            async with kueuelog(kube_control_plane, log, cluster="manager", topics=topics) as running:
                async def known() -> bool:
                    return _cluster_known(log, topics, WORKER)

                await eventually(running, known, what="the MultiKueueCluster in the log")
                stop = asyncio.Event()
                watcher = WatcherService(log, worker_api, cluster=WORKER, topics=topics, backoff=(0.1, 1.0))
                worker_task = asyncio.create_task(watcher.run(stop), name="worker watcher")
                try:
                    await _placed_run_and_finish(running, manager_batch, worker_batch)
                    await _too_big_waits_nominating_the_worker(running, manager_batch)
                finally:
                    stop.set()
                    await asyncio.wait_for(worker_task, timeout=60)
            ds = decisions(log, topics)
            placed = [d for d in ds if isinstance(d, PlaceWorkload)]
            removed = [d for d in ds if isinstance(d, RemovePlacement)]
            assert [(d.cluster, d.check) for d in placed] == [(WORKER, "mk-check")], "placed exactly once"
            assert [(d.cluster, str(d.reason)) for d in removed] == [(WORKER, "WorkloadFinished")]
        finally:
            log.close()


async def _too_big_waits_nominating_the_worker(running: Any, manager_batch: client.BatchV1Api) -> None:
    """A Job the worker's ClusterQueue (4 cpu) cannot admit holds manager quota and waits: its
    Workload shows the worker it is tried on in ``status.nominatedClusterNames``, as Kueue's."""
    wl_name = await _submit(manager_batch, "too-big", "mk-lq", cpu="6")
    co = client.CustomObjectsApi(manager_batch.api_client)  # type: ignore[attr-defined]

    async def nominated() -> dict[str, Any] | None:
        try:
            wl = await co.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", NS, "workloads", wl_name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(wl) if (wl.get("status") or {}).get("nominatedClusterNames") == [WORKER] else None

    wl = await eventually(running, nominated, what="the waiting Workload's nominatedClusterNames")
    assert "clusterName" not in wl["status"]


async def _submit(manager_batch: client.BatchV1Api, name: str, queue: str, cpu: str = "1") -> str:
    """A Job on the manager, as with Kueue's MultiKueue (managedBy); returns its Workload's name."""
    from events import jobs

    created = await manager_batch.create_namespaced_job(NS, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: queue}},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                 "managedBy": MULTIKUEUE_CONTROLLER,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [
                     {"name": "main", "image": "busybox:1.36", "command": ["true"],
                      "resources": {"requests": {"cpu": cpu}}}]}}}})
    return jobs.workload_name_for_job(name, created.metadata.uid)


def _remote(worker_batch: client.BatchV1Api, name: str) -> Any:
    async def remote() -> dict[str, Any] | None:
        try:
            job = await client.CustomObjectsApi(worker_batch.api_client).get_namespaced_custom_object(
                "batch", "v1", NS, "jobs", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return dict(job)

    return remote


async def _placed_run_and_finish(running: Any, manager_batch: client.BatchV1Api,
                                 worker_batch: client.BatchV1Api) -> None:
    wl_name = await _submit(manager_batch, "train", "mk-lq")
    co = client.CustomObjectsApi(manager_batch.api_client)
    remote = _remote(worker_batch, "train")

    copy = await eventually(running, remote, what="the Job's copy on the worker")
    pod = copy["spec"]["template"]["spec"]
    assert copy["spec"]["suspend"] is False
    assert pod["nodeSelector"] == {"kueuelog.io/pool": "worker-a"}, "the worker flavor's node labels"
    assert copy["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] == wl_name
    assert "managedBy" not in copy["spec"]

    async def admitted_there() -> dict[str, Any] | None:
        wl = await co.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", NS, "workloads", wl_name)
        ok = conditions(wl).get("Admitted", {}).get("status") == "True" and wl["status"].get("clusterName") == WORKER
        return dict(wl) if ok else None

    await eventually(running, admitted_there, what="the manager's Workload admitted, clusterName the worker")
    # The worker's kubelet and job controller: the pod runs, then the Job completes.
    await worker_batch.patch_namespaced_job_status("train", NS, {"status": {"startTime": stamp(), "active": 1,
                                                                            "ready": 1}},
                                                   _content_type="application/merge-patch+json")
    now = stamp()
    await worker_batch.patch_namespaced_job_status("train", NS, {"status": {
        "active": 0, "ready": 0, "succeeded": 1, "completionTime": now, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached",
             "message": "Reached expected number of succeeded pods", "lastTransitionTime": now}]}},
        _content_type="application/merge-patch+json")

    async def cleaned_up() -> bool:
        return await remote() is None

    await eventually(running, cleaned_up, what="the copy on the worker deleted once finished")

    async def flowed_back() -> dict[str, Any] | None:
        job = await co.get_namespaced_custom_object("batch", "v1", NS, "jobs", "train")
        done = any(c.get("type") == "Complete" and c.get("status") == "True"
                   for c in (job.get("status") or {}).get("conditions") or [])
        wl = await co.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", NS, "workloads", wl_name)
        finished = conditions(wl).get("Finished", {}).get("status") == "True"
        return dict(job) if done and finished else None

    job = await eventually(running, flowed_back, what="the worker's completion on the manager's Job and Workload")
    assert job["status"]["succeeded"] == 1


async def test_a_lost_worker_s_workload_is_placed_on_the_other_exactly_once(
    deployed: None, kube_control_plane: LocalControlPlane, kube_worker_plane: LocalControlPlane,  # noqa: F811
    kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    """Two workers with heartbeats every second; a workerLostTimeout of 20 s (the Configuration, in
    the log: twenty missed heartbeats, so a loaded machine's slow beat is not a loss). The workload
    goes to worker-c (first in spec.clusters); worker-c's API server is stopped: its heartbeat
    stops, and once 20 s of log time pass the workload is requeued on the manager and placed on
    worker-d, exactly once."""
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    lost = LocalControlPlane()
    lost.start(tmp_path / "worker-c")
    config = Envelope(id="seed:configuration", source="test", event=ObjectApplied(
        time=wall_clock_ms(), object=o.Configuration(multikueue_worker_lost_timeout_ms=LOST_MS)))
    log.append(topics.cluster_events, [(event_key(config), encode(config))])
    workers = {"worker-c": lost.kubeconfig_path, "worker-d": kube_worker_plane.kubeconfig_path}
    await _manager_objects(kube_api_client, workers, tag="-lost")
    manager_batch = client.BatchV1Api(kube_api_client)
    stop = asyncio.Event()
    try:
        async with open_api_client(lost) as c_api, open_api_client(kube_worker_plane) as d_api:
            await _worker_objects(c_api, "worker-c", tag="-lost")
            await _worker_objects(d_api, "worker-d", tag="-lost")
            async with kueuelog(kube_control_plane, log, cluster="manager", topics=topics) as running:
                async def known() -> bool:
                    return _cluster_known(log, topics, *workers)

                await eventually(running, known, what="both MultiKueueClusters in the log")
                watchers = [asyncio.create_task(WatcherService(log, api, cluster=name, topics=topics,
                                                               backoff=(0.1, 1.0), heartbeat_s=1.0).run(stop))
                            for name, api in (("worker-c", c_api), ("worker-d", d_api))]
                try:
                    async def beating() -> bool:
                        return _ticked(log, topics, *workers)

                    await eventually(running, beating, what="both workers' heartbeats in the log")
                    await _submit(manager_batch, "move", "mk-lq-lost")
                    await eventually(running, _remote(client.BatchV1Api(c_api), "move"),
                                     what="the Job's copy on worker-c")
                    lost.stop()  # worker-c's API server is gone: its heartbeat stops
                    copy = await eventually(running, _remote(client.BatchV1Api(d_api), "move"),
                                            what="the Job's copy on worker-d after worker-c was lost")
                    assert copy["spec"]["template"]["spec"]["nodeSelector"] == {"kueuelog.io/pool": "worker-d"}
                finally:
                    stop.set()
                    await asyncio.wait_for(asyncio.gather(*watchers, return_exceptions=True), timeout=60)
        ds = [d for d in decisions(log, topics)
              if isinstance(d, PlaceWorkload | RemovePlacement) and d.name.startswith("job-move-")]
        assert [d.cluster for d in ds if isinstance(d, PlaceWorkload)] == ["worker-c", "worker-d"]
        assert [(d.cluster, str(d.reason)) for d in ds if isinstance(d, RemovePlacement)] == [
            ("worker-c", "WorkerLost")]
    finally:
        lost.stop()
        log.close()


MK_DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "multikueue"
JOBKINDS_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "jobkinds" / "rbac.yaml"
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
SYSTEM_NS = "kueuelog-system"


async def _worker_identity_kubeconfig(worker_api: client.ApiClient, plane: LocalControlPlane) -> str:
    """A kubeconfig for the worker's ServiceAccount ``kueuelog-multikueue`` (deploy/multikueue/worker.yaml,
    applied here): what a Secret on the manager holds, so the manager acts there with only those rights."""
    await _namespace(worker_api, SYSTEM_NS)
    for doc in read_yaml(MK_DEPLOY / "worker.yaml"):
        await create_or_replace(worker_api, doc)
    token = await client.CoreV1Api(worker_api).create_namespaced_service_account_token(
        "kueuelog-multikueue", SYSTEM_NS, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
    cfg = yaml.safe_load(plane.kubeconfig_path.read_text())
    for user in cfg["users"]:
        user["user"] = {"token": token.status.token}
    return str(yaml.safe_dump(cfg))


async def _kubeconfig_secret(api: client.ApiClient, name: str, text: str) -> None:
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=SYSTEM_NS),
                           data={"kubeconfig": base64.b64encode(text.encode()).decode()})
    core = client.CoreV1Api(api)
    try:
        await core.create_namespaced_secret(SYSTEM_NS, body)
    except ApiException as e:
        if e.status != 409:
            raise
        await core.replace_namespaced_secret(name, SYSTEM_NS, body)


async def test_a_jobset_is_placed_through_a_kubeconfig_secret_with_the_workers_own_rights(
    deployed: None, kube_control_plane: LocalControlPlane, kube_worker_plane: LocalControlPlane,  # noqa: F811
    kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    """A JobSet (``spec.managedBy: kueue.x-k8s.io/multikueue``) on the manager is placed on worker-b,
    whose MultiKueueCluster names a Secret (``locationType: Secret``) holding a kubeconfig for the
    worker's ServiceAccount of deploy/multikueue/worker.yaml; the manager's actuator runs as its own
    ServiceAccount with deploy/multikueue/manager.yaml and deploy/jobkinds. The copy runs on the worker
    with each replicated job's worker flavor selector; the test plays the worker's JobSet controller
    (Completed); the status flows back, the manager's Workload finishes, the copy is deleted."""
    from events import jobkinds
    from tests.integration.jobkind_crds import ensure_job_kind_crds
    from tests.integration.test_kube_job_kinds_watcher import a_jobset

    api = kube_api_client
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    rbac = contextlib.AsyncExitStack()
    manager_rbac = [d for d in read_yaml(MK_DEPLOY / "manager.yaml") if d["kind"] in ("Role", "RoleBinding")]
    try:
        await rbac.enter_async_context(rbac_applied(api, JOBKINDS_RBAC))
        await rbac.enter_async_context(rbac_applied(api, MK_DEPLOY / "manager.yaml"))
        rbac_api = client.RbacAuthorizationV1Api(api)
        for doc in manager_rbac:  # the Secret reader, in kueuelog-system (deploy/base made it)
            create = (rbac_api.create_namespaced_role if doc["kind"] == "Role"
                      else rbac_api.create_namespaced_role_binding)
            with contextlib.suppress(ApiException):
                await create(SYSTEM_NS, doc)
        await ensure_job_kind_crds(api, "JobSet")
        async with open_api_client(kube_worker_plane) as worker_api:
            await _worker_objects(worker_api, "worker-b", tag="-js")
            await ensure_job_kind_crds(worker_api, "JobSet")
            await _kubeconfig_secret(api, "worker-b-kubeconfig",
                                     await _worker_identity_kubeconfig(worker_api, kube_worker_plane))
            co = client.CustomObjectsApi(api)
            await _namespace(api, NS)
            await _create(co, "multikueueconfigs", "MultiKueueConfig", "mk-config-js",
                          {"spec": {"clusters": ["worker-b"]}})
            await _create(co, "multikueueclusters", "MultiKueueCluster", "worker-b", {"spec": {"clusterSource": {
                "kubeConfig": {"locationType": "Secret", "location": "worker-b-kubeconfig"}}}})
            await _create(co, "admissionchecks", "AdmissionCheck", "mk-check-js", {"spec": {
                "controllerName": MULTIKUEUE_CONTROLLER,
                "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": "mk-config-js"}}})
            await _create(co, "resourceflavors", "ResourceFlavor", "mk-manager", {"spec": {}})
            await _create(co, "clusterqueues", "ClusterQueue", "mk-cq-js", _queue("mk-manager", "10", ["mk-check-js"]))
            await _create(co, "localqueues", "LocalQueue", "mk-lq-js", {"spec": {"clusterQueue": "mk-cq-js"}}, NS)
            kinds = {"job_kinds": ("JobSet",)}
            async with kueuelog(kube_control_plane, log, cluster="manager", topics=topics, watcher_options=kinds,
                                actuator_options=kinds) as running:
                async def known() -> bool:
                    return _cluster_known(log, topics, "worker-b")

                await eventually(running, known, what="the MultiKueueCluster in the log")
                stop = asyncio.Event()
                watcher = WatcherService(log, worker_api, cluster="worker-b", topics=topics, backoff=(0.1, 1.0),
                                         job_kinds=("JobSet",))
                worker_task = asyncio.create_task(watcher.run(stop), name="worker watcher")
                try:
                    body = a_jobset("js", "mk-lq-js")
                    body["spec"]["managedBy"] = MULTIKUEUE_CONTROLLER
                    created = await eventually(running, lambda: co.create_namespaced_custom_object(
                        *JS[:2], NS, JS[2], body), what="JobSet js created (CRD served)")
                    wl_name = jobkinds.workload_name("JobSet", JS[0], "js", created["metadata"]["uid"])
                    await _jobset_placed_run_and_finish(running, co, client.CustomObjectsApi(worker_api), wl_name)
                finally:
                    stop.set()
                    await asyncio.wait_for(worker_task, timeout=60)
        placed = [d for d in decisions(log, topics) if isinstance(d, PlaceWorkload) and d.name == wl_name]
        removed = [d for d in decisions(log, topics) if isinstance(d, RemovePlacement) and d.name == wl_name]
        assert [d.cluster for d in placed] == ["worker-b"], "placed exactly once"
        assert [str(d.reason) for d in removed] == ["WorkloadFinished"]
    finally:
        for doc in manager_rbac:
            delete = (client.RbacAuthorizationV1Api(api).delete_namespaced_role if doc["kind"] == "Role"
                      else client.RbacAuthorizationV1Api(api).delete_namespaced_role_binding)
            with contextlib.suppress(ApiException):
                await delete(doc["metadata"]["name"], SYSTEM_NS)
        await rbac.aclose()
        log.close()


async def _jobset_placed_run_and_finish(running: Any, co: client.CustomObjectsApi, worker_co: client.CustomObjectsApi,
                                        wl_name: str) -> None:
    async def remote() -> dict[str, Any] | None:
        try:
            return dict(await worker_co.get_namespaced_custom_object(*JS[:2], NS, JS[2], "js"))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    copy = await eventually(running, remote, what="the JobSet's copy on the worker")
    assert copy["spec"]["suspend"] is False and "managedBy" not in copy["spec"]
    assert copy["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] == wl_name
    for rj in copy["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"kueuelog.io/pool": "worker-b"}

    async def admitted_there() -> dict[str, Any] | None:
        wl = await co.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", NS, "workloads", wl_name)
        ok = (conditions(wl).get("Admitted", {}).get("status") == "True"
              and wl["status"].get("clusterName") == "worker-b")
        return dict(wl) if ok else None

    await eventually(running, admitted_there, what="the manager's Workload admitted, clusterName worker-b")
    now = stamp()
    await worker_co.patch_namespaced_custom_object_status(*JS[:2], NS, JS[2], "js", {"status": {"conditions": [
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed",
         "lastTransitionTime": now}]}}, _content_type="application/merge-patch+json")

    async def cleaned_up() -> bool:
        return await remote() is None

    await eventually(running, cleaned_up, what="the JobSet's copy on the worker deleted once finished")

    async def flowed_back() -> dict[str, Any] | None:
        js = await co.get_namespaced_custom_object(*JS[:2], NS, JS[2], "js")
        done = any(c.get("type") == "Completed" and c.get("status") == "True"
                   for c in (js.get("status") or {}).get("conditions") or [])
        wl = await co.get_namespaced_custom_object(KUEUE_GROUP, "v1beta2", NS, "workloads", wl_name)
        finished = conditions(wl).get("Finished", {}).get("status") == "True"
        return dict(js) if done and finished else None

    await eventually(running, flowed_back, what="the worker's completion on the manager's JobSet and Workload")
