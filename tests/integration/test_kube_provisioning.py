"""Two-phase admission on a real kube-apiserver: the ProvisioningRequest admission check.

The whole loop runs as in test_kube_e2e (watcher, scheduler, actuator with the job reconciler,
each as its ServiceAccount with the shipped RBAC). The test plays the cluster autoscaler: it
patches the ProvisioningRequest's status. It proves that the Job stays suspended while its quota
is reserved and the request is not provisioned, that the Workload's status shows the check as it
changes (Pending with the autoscaler's message, Retry and ``requeueState`` after a failure — every
version of it recorded by a watch, as ``kubectl get -w`` shows them), that the Job is unsuspended
with the check's podSetUpdates once it is provisioned, and that an eviction suspends it again and
deletes its ProvisioningRequest.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from events.cluster import QUEUE_NAME_LABEL
from services.runtime.clock import wall_clock_ms
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.kube_deploy import KUEUE_GROUP, rbac_applied
from tests.integration.test_kube_e2e import (
    MERGE,
    conditions,
    deployed,  # noqa: F401 - a fixture, used by name
    eventually,
    kueuelog,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

V = "v1beta1"
PR = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")
CLASS = "check-capacity.autoscaling.x-k8s.io"
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
JOBKINDS_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "jobkinds" / "rbac.yaml"


class Setup:
    def __init__(self, api: client.ApiClient) -> None:
        tag = uuid.uuid4().hex[:8]
        self.co, self.batch, self.core = client.CustomObjectsApi(api), client.BatchV1Api(api), client.CoreV1Api(api)
        self.ns, self.rf, self.cq, self.check, self.prc = (f"prov-{tag}", f"gpu-{tag}", f"cq-{tag}", f"prov-{tag}",
                                                          f"prc-{tag}")

    async def create(self) -> None:
        await self.core.create_namespace({"metadata": {"name": self.ns}})

        async def cluster(plural: str, kind: str, name: str, body: dict[str, Any]) -> None:
            await self.co.create_cluster_custom_object(KUEUE_GROUP, V, plural, {
                "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": kind, "metadata": {"name": name}, **body})

        await cluster("resourceflavors", "ResourceFlavor", self.rf, {"spec": {"nodeLabels": {"pool": "gpu"}}})
        await cluster("provisioningrequestconfigs", "ProvisioningRequestConfig", self.prc, {"spec": {
            "provisioningClassName": CLASS, "managedResources": ["example.com/gpu"],
            "parameters": {"ValidUntilSeconds": "300"},
            "retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1},
            "podSetUpdates": {"nodeSelector": [{"key": "autoscaling.example.com/request",
                                                "valueFromProvisioningClassDetail": "RequestKey"}]}}})
        await cluster("admissionchecks", "AdmissionCheck", self.check, {"spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": KUEUE_GROUP, "kind": "ProvisioningRequestConfig", "name": self.prc}}})
        await cluster("clusterqueues", "ClusterQueue", self.cq, {"spec": {
            "namespaceSelector": {}, "admissionChecks": [self.check],
            "resourceGroups": [{"coveredResources": ["cpu", "example.com/gpu"], "flavors": [
                {"name": self.rf, "resources": [{"name": "cpu", "nominalQuota": "4"},
                                                {"name": "example.com/gpu", "nominalQuota": "4"}]}]}]}})
        await self.co.create_namespaced_custom_object(KUEUE_GROUP, V, self.ns, "localqueues", {
            "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "LocalQueue", "metadata": {"name": "lq"},
            "spec": {"clusterQueue": self.cq}})

    async def delete(self) -> None:
        for plural, name in (("clusterqueues", self.cq), ("admissionchecks", self.check),
                             ("provisioningrequestconfigs", self.prc), ("resourceflavors", self.rf)):
            with contextlib.suppress(ApiException):
                await self.co.delete_cluster_custom_object(KUEUE_GROUP, V, plural, name)

    async def job(self, name: str) -> None:
        await self.batch.create_namespaced_job(self.ns, {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: "lq"},
                         "annotations": {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60"}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                                "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"},
                                              "limits": {"example.com/gpu": "1"}}}]}}}})

    async def read_job(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = await self.co.get_namespaced_custom_object("batch", "v1", self.ns, "jobs", name)
        return out

    async def requests(self) -> list[dict[str, Any]]:
        out = await self.co.list_namespaced_custom_object(*PR[:2], self.ns, PR[2])
        return list(out.get("items") or [])

    async def answer(self, name: str, *conds: tuple[str, str, str], details: dict[str, str] | None = None) -> None:
        """The autoscaler's part: the request's status."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status: dict[str, Any] = {"conditions": [
            {"type": t, "status": s, "reason": t, "message": m, "lastTransitionTime": now} for t, s, m in conds]}
        if details:
            status["provisioningClassDetails"] = details
        await self.co.patch_namespaced_custom_object_status(*PR[:2], self.ns, PR[2], name, {"status": status},
                                                            _content_type=MERGE)


Seen = tuple[tuple[tuple[str, str, int], ...], tuple[tuple[str, Any], ...], str]
"""One version of the Workload's status: its checks (state, message, retryCount), its requeueState
and its Admitted condition (status/reason)."""


def _seen(wl: dict[str, Any]) -> Seen:
    status = wl.get("status") or {}
    checks = tuple((str(c.get("state")), str(c.get("message") or ""), int(c.get("retryCount") or 0))
                   for c in status.get("admissionChecks") or [])
    admitted = conditions(wl).get("Admitted") or {}
    return checks, tuple(sorted((status.get("requeueState") or {}).items())), (
        f"{admitted.get('status')}/{admitted.get('reason')}")


async def _record(co: client.CustomObjectsApi, ns: str, out: list[Seen]) -> None:
    """Every version of every Workload in ``ns`` as a watch delivers them (until cancelled)."""
    version = ""
    while True:
        w = watch.Watch()
        async with w.stream(co.list_namespaced_custom_object, KUEUE_GROUP, V, ns, "workloads",
                            resource_version=version or None, timeout_seconds=120) as stream:
            async for event in stream:
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    out.append(_seen(obj))


def _index(seen: list[Seen], what: str, found: Any, after: int = -1) -> int:
    for i, s in enumerate(seen):
        if i > after and found(s):
            return i
    raise AssertionError(f"the Workload's status never showed {what} (after version {after}): {seen!r}")


@pytest.mark.usefixtures("deployed")
async def test_job_waits_for_provisioning_then_runs_with_its_pod_set_updates_and_eviction_deletes_the_request(
        kube_api_client: client.ApiClient, kube_control_plane: LocalControlPlane,
        tmp_path: Any) -> None:
    s = Setup(kube_api_client)
    await s.create()
    log = SqliteLog(tmp_path / "log")
    seen: list[Seen] = []
    recorder = asyncio.create_task(_record(s.co, s.ns, seen))
    try:
        # The scheduler wakes at its own deadlines (the Retry's back-off), as `kueuelog run scheduler` does.
        async with kueuelog(kube_control_plane, log, cluster="prov",
                            scheduler_options={"wall_clock": wall_clock_ms, "cluster": "prov"}) as running:
            await s.job("train")

            async def one_request() -> dict[str, Any] | None:
                reqs = await s.requests()
                return reqs[0] if len(reqs) == 1 else None

            req = await eventually(running, one_request, what="the ProvisioningRequest")
            name = req["metadata"]["name"]
            assert name.endswith(f"-{s.check}-1")
            assert req["spec"]["provisioningClassName"] == CLASS
            assert req["spec"]["parameters"] == {"ValidUntilSeconds": "60"}  # the Job's annotation wins
            (ps,) = req["spec"]["podSets"]
            assert ps["count"] == 1 and ps["podTemplateRef"]["name"] == f"ppt-{name}-main"
            template = await s.core.read_namespaced_pod_template(ps["podTemplateRef"]["name"], s.ns)
            assert template.template.spec.node_selector == {"pool": "gpu"}
            wl_name = req["metadata"]["ownerReferences"][0]["name"]

            async def workload() -> dict[str, Any]:
                out: dict[str, Any] = await s.co.get_namespaced_custom_object(KUEUE_GROUP, V, s.ns, "workloads",
                                                                              wl_name)
                return out

            def reserved_not_admitted_in(wl: dict[str, Any]) -> bool:
                c = conditions(wl)
                return (c.get("QuotaReserved", {}).get("status") == "True"
                        and c.get("Admitted", {}).get("reason") == "UnsatisfiedAdmissionChecks")

            async def reserved_not_admitted() -> dict[str, Any] | None:
                wl = await workload()
                return wl if reserved_not_admitted_in(wl) else None

            wl = await eventually(running, reserved_not_admitted, what="quota reserved, checks unsatisfied")
            assert [c["state"] for c in wl["status"]["admissionChecks"]] == ["Pending"]
            # Accepted, not provisioned yet: the Job stays suspended.
            await s.answer(name, ("Accepted", "True", "accepted"), ("Provisioned", "False", "ETA 1m"))

            async def eta_shown() -> bool:  # what kubectl shows while the autoscaler works
                wl = await workload()
                return (reserved_not_admitted_in(wl)
                        and [(c["state"], c["message"]) for c in wl["status"]["admissionChecks"]] == [
                            ("Pending", "ETA 1m")])

            await eventually(running, eta_shown, what="the check Pending with the autoscaler's ETA on the Workload")
            assert (await s.read_job("train"))["spec"]["suspend"] is True

            # The first attempt fails: Retry (backoffLimitCount 1), the workload evicted and held for
            # the 1 s back-off (status.requeueState.requeueAt), then reserved again with attempt 2.
            await s.answer(name, ("Accepted", "True", "accepted"), ("Failed", "True", "no capacity"))

            async def second_request() -> dict[str, Any] | None:
                reqs = await s.requests()
                return reqs[0] if len(reqs) == 1 and reqs[0]["metadata"]["name"].endswith("-2") else None

            name = (await eventually(running, second_request, what="attempt 2's ProvisioningRequest"))["metadata"][
                "name"]
            await eventually(running, reserved_not_admitted, what="quota reserved again after the back-off")
            assert (await s.read_job("train"))["spec"]["suspend"] is True

            await s.answer(name, ("Accepted", "True", "accepted"), ("Provisioned", "True", "done"),
                           details={"RequestKey": "rk-42"})

            async def running_job() -> dict[str, Any] | None:
                job = await s.read_job("train")
                return job if job["spec"].get("suspend") is False else None

            job = await eventually(running, running_job, what="the Job unsuspended")
            pod = job["spec"]["template"]
            assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "autoscaling.example.com/request": "rk-42"}
            assert pod["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == name
            wl = await workload()
            assert conditions(wl)["Admitted"]["status"] == "True"
            assert [c["state"] for c in wl["status"]["admissionChecks"]] == ["Ready"]
            # Every version the watch delivered, in order: Pending with the ETA while reserved, the
            # Retry, the back-off's requeueAt with the check reset (retryCount 1), then Ready and Admitted.
            waiting = "False/UnsatisfiedAdmissionChecks"
            eta = _index(seen, "Pending with the ETA",
                         lambda v: v[0] == (("Pending", "ETA 1m", 0),) and v[2] == waiting)
            retry = _index(seen, "the check in Retry",
                           lambda v: v[0] == (("Retry", "Retrying after failure: no capacity", 0),), eta)
            backoff = _index(seen, "requeueState.requeueAt with the check reset",
                             lambda v: dict(v[1]).get("requeueAt") is not None and v[0] == (
                                 ("Pending", "Reset to Pending after eviction. Previously: Retry", 1),), retry)
            _index(seen, "requeueAt cleared once the back-off is over",
                   lambda v: dict(v[1]).get("requeueAt") is None, backoff)
            _index(seen, "Ready and Admitted",
                   lambda v: [c[0] for c in v[0]] == ["Ready"] and v[2] == "True/Admitted", backoff)

            # Capacity revoked: the check is Rejected, the workload evicted (deactivated), the Job
            # suspended again and its ProvisioningRequest and PodTemplate deleted.
            await s.answer(name, ("Accepted", "True", "accepted"), ("Provisioned", "True", "done"),
                           ("CapacityRevoked", "True", "nodes gone"), details={"RequestKey": "rk-42"})

            async def suspended_and_cleaned() -> bool:
                job = await s.read_job("train")
                templates = await s.core.list_namespaced_pod_template(s.ns)
                pod = job["spec"]["template"]
                restored = ("autoscaling.x-k8s.io/consume-provisioning-request"
                            not in ((pod.get("metadata") or {}).get("annotations") or {})
                            and "autoscaling.example.com/request" not in (pod["spec"].get("nodeSelector") or {}))
                return (job["spec"].get("suspend") is True and not await s.requests() and not templates.items
                        and restored)

            await eventually(running, suspended_and_cleaned,
                             what="the Job suspended and restored, its request and template deleted")
            wl = await workload()
            assert conditions(wl)["Evicted"]["reason"] == "DeactivatedDueToAdmissionCheck"
            (check,) = wl["status"]["admissionChecks"]  # reset as Kueue resets them on eviction
            assert check["state"] == "Pending"
            assert check["message"] == "Reset to Pending after eviction. Previously: Rejected"
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError, ApiException):
            await recorder
        log.close()
        await s.delete()


@pytest.mark.usefixtures("deployed")
async def test_a_finished_workloads_request_is_deleted(kube_api_client: client.ApiClient,
                                                       kube_control_plane: LocalControlPlane, tmp_path: Any) -> None:
    s = Setup(kube_api_client)
    await s.create()
    log = SqliteLog(tmp_path / "log")
    try:
        async with kueuelog(kube_control_plane, log, cluster="prov2") as running:
            await s.job("infer")

            async def one_request() -> dict[str, Any] | None:
                reqs = await s.requests()
                return reqs[0] if len(reqs) == 1 else None

            name = (await eventually(running, one_request, what="the ProvisioningRequest"))["metadata"]["name"]
            await s.answer(name, ("Accepted", "True", "accepted"), ("Provisioned", "True", "done"),
                           details={"RequestKey": "rk-7"})

            async def started() -> bool:
                return (await s.read_job("infer"))["spec"].get("suspend") is False

            await eventually(running, started, what="the Job unsuspended")
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            patch = {"status": {"startTime": now, "active": 1, "ready": 1}}
            await s.batch.patch_namespaced_job_status("infer", s.ns, patch, _content_type=MERGE)
            done = [{"type": t, "status": "True", "reason": "CompletionsReached", "message": "done",
                     "lastTransitionTime": now} for t in ("SuccessCriteriaMet", "Complete")]
            patch = {"status": {"active": 0, "ready": 0, "succeeded": 1, "completionTime": now, "conditions": done}}
            await s.batch.patch_namespaced_job_status("infer", s.ns, patch, _content_type=MERGE)

            async def cleaned() -> bool:
                templates = await s.core.list_namespaced_pod_template(s.ns)
                return not await s.requests() and not templates.items

            await eventually(running, cleaned, what="the finished workload's request and template deleted")
    finally:
        log.close()
        await s.delete()


@pytest.mark.usefixtures("deployed")
async def test_a_jobsets_pod_sets_get_their_pod_set_updates(kube_api_client: client.ApiClient,
                                                            kube_control_plane: LocalControlPlane,
                                                            tmp_path: Any) -> None:
    """A JobSet behind the provisioning check (``--job-kinds JobSet``, the shipped roles): it stays
    suspended until its request is provisioned, then each replicated Job's pod template gets its
    podSet's podSetUpdates (the consume annotation, the nodeSelector from provisioningClassDetails)
    with the flavor's node labels."""
    rbac = contextlib.AsyncExitStack()  # the shipped roles, removed again at the end (the plane is shared)
    await rbac.enter_async_context(rbac_applied(kube_api_client, JOBKINDS_RBAC))
    await ensure_job_kind_crds(kube_api_client, "JobSet")
    s = Setup(kube_api_client)
    await s.create()
    log = SqliteLog(tmp_path / "log")
    gpu_pod = {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "busybox:1.36", "command": ["true"],
        "resources": {"requests": {"cpu": "250m", "example.com/gpu": "1"}, "limits": {"example.com/gpu": "1"}}}]}}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js", "labels": {QUEUE_NAME_LABEL: "lq"}},
              "spec": {"suspend": True, "replicatedJobs": [
                  {"name": "workers", "replicas": 1, "template": {"spec": {"parallelism": 2, "template": gpu_pod}}},
                  {"name": "driver", "template": {"spec": {"template": gpu_pod}}}]}}
    try:
        async with kueuelog(kube_control_plane, log, cluster="prov3", watcher_options={"job_kinds": ("JobSet",)},
                            actuator_options={"job_kinds": ("JobSet",)}) as running:
            await eventually(running, lambda: s.co.create_namespaced_custom_object(*JS[:2], s.ns, JS[2], jobset),
                             what="the JobSet created (CRD served)")

            async def one_request() -> dict[str, Any] | None:
                reqs = await s.requests()
                return reqs[0] if len(reqs) == 1 else None

            req = await eventually(running, one_request, what="the JobSet's ProvisioningRequest")
            assert sorted(ps["podTemplateRef"]["name"].rsplit("-", 1)[1] for ps in req["spec"]["podSets"]) == [
                "driver", "workers"]
            assert (await s.co.get_namespaced_custom_object(*JS[:2], s.ns, JS[2], "js"))["spec"]["suspend"] is True
            name = req["metadata"]["name"]
            await s.answer(name, ("Accepted", "True", "accepted"), ("Provisioned", "True", "done"),
                           details={"RequestKey": "rk-js"})

            async def released() -> dict[str, Any] | None:
                js = await s.co.get_namespaced_custom_object(*JS[:2], s.ns, JS[2], "js")
                return js if js["spec"].get("suspend") is False else None

            js = await eventually(running, released, what="the JobSet released once provisioned")
            for rj in js["spec"]["replicatedJobs"]:
                pod = rj["template"]["spec"]["template"]
                assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "autoscaling.example.com/request": "rk-js"}, rj
                assert pod["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"] == name
    finally:
        log.close()
        await s.delete()
        await rbac.aclose()
