"""The whole loop on a real kube-apiserver for the workload kinds: watcher and actuator with
``--job-kinds PyTorchJob,JobSet``, the scheduler between them over the embedded log, each service
as its ServiceAccount with ``deploy/base`` and ``deploy/jobkinds``'s RBAC (so the shipped roles
are proven sufficient). A user creates a PyTorchJob running and a JobSet; the PyTorchJob is held,
admitted and released with the flavor's node labels and tolerations in every replica's template;
the JobSet waits for quota; the PyTorchJob finishes, its quota is freed and the JobSet is admitted.
No operators run: the test plays their part (the PyTorchJob's Succeeded condition)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import jobkinds
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.jobkind_crds import ensure_job_kind_crds
from tests.integration.kube_deploy import rbac_applied
from tests.integration.test_kube_e2e import (
    MERGE,
    SPOT_TOLERATION,
    Cluster,
    conditions,
    deployed,  # noqa: F401  (the fixture)
    eventually,
    kueuelog,
)
from tests.integration.test_kube_job_kinds_watcher import a_jobset, a_pytorchjob

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

KINDS = ("JobSet", "PyTorchJob")
RBAC = Path(__file__).resolve().parents[2] / "deploy" / "jobkinds" / "rbac.yaml"
PT = ("kubeflow.org", "v1", "pytorchjobs")
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


async def test_pytorchjob_admitted_finishes_and_frees_quota_for_a_jobset(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    api = kube_api_client
    rbac = contextlib.AsyncExitStack()  # the shipped roles, removed again at the end
    await rbac.enter_async_context(rbac_applied(api, RBAC))
    await ensure_job_kind_crds(api, *KINDS)
    c = Cluster(api)
    await c.create(cpu="4")
    co = client.CustomObjectsApi(api)
    ns = c.ns_in
    log = SqliteLog(tmp_path / "log")
    async with kueuelog(kube_control_plane, log, cluster="e2e", watcher_options={"job_kinds": KINDS},
                        actuator_options={"job_kinds": KINDS}) as running:
        running_pt = a_pytorchjob("pt", "lq")  # 1 + 2 pods of 1 CPU: 3 of the 4
        running_pt["spec"]["runPolicy"]["suspend"] = False  # as a user creates it: no webhook holds it
        pt = await eventually(running, lambda: co.create_namespaced_custom_object(*PT[:2], ns, PT[2], running_pt),
                              what="PyTorchJob pt created (CRD served, RBAC in effect)")
        wl_pt = jobkinds.workload_name("PyTorchJob", PT[0], "pt", pt["metadata"]["uid"])

        async def workload(name: str) -> dict[str, Any] | None:
            with contextlib.suppress(client.exceptions.ApiException):
                out: dict[str, Any] = await co.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns,
                                                                           "workloads", name)
                return out
            return None

        async def admitted_pt() -> dict[str, Any] | None:
            obj = await co.get_namespaced_custom_object(*PT[:2], ns, PT[2], "pt")
            wl = await workload(wl_pt)
            ok = (obj["spec"]["runPolicy"].get("suspend") is False and conditions(wl).get("Admitted", {}).get(
                "status") == "True" and "kueuelog.io/decision-id" in obj["metadata"].get("annotations", {}))
            return obj if ok else None

        pt = await eventually(running, admitted_pt, what="the PyTorchJob held, then admitted and released")
        for replica in pt["spec"]["pytorchReplicaSpecs"].values():
            spec = replica["template"]["spec"]
            assert spec["nodeSelector"] == {"kueuelog.io/pool": "spot"}
            assert spec["tolerations"] == [SPOT_TOLERATION]
        reconcilers = {r.kind.kind: r for r in running.actuator.kinds}
        assert reconcilers["PyTorchJob"].stats.suspended == 1  # its reconciler held it first

        js = await co.create_namespaced_custom_object(*JS[:2], ns, JS[2], a_jobset("js", "lq"))  # 2 CPUs
        wl_js = jobkinds.workload_name("JobSet", JS[0], "js", js["metadata"]["uid"])

        async def pending_js() -> bool:
            reserved = conditions(await workload(wl_js)).get("QuotaReserved", {})
            return reserved.get("status") == "False" and "insufficient unused quota for cpu" in reserved.get(
                "message", "")

        await eventually(running, pending_js, what="the JobSet pending for quota")
        await co.patch_namespaced_custom_object_status(*PT[:2], ns, PT[2], "pt", {"status": {"conditions": [
            {"type": "Succeeded", "status": "True", "message": "PyTorchJob pt is successfully completed."}]}},
            _content_type=MERGE)

        async def admitted_js() -> dict[str, Any] | None:
            obj = await co.get_namespaced_custom_object(*JS[:2], ns, JS[2], "js")
            wl = await workload(wl_js)
            ok = obj["spec"].get("suspend") is False and conditions(wl).get("Admitted", {}).get("status") == "True"
            return obj if ok else None

        js = await eventually(running, admitted_js, what="the JobSet admitted once the PyTorchJob finished")
        finished = conditions(await workload(wl_pt)).get("Finished", {})
        assert finished.get("status") == "True"
        for rj in js["spec"]["replicatedJobs"]:
            assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"kueuelog.io/pool": "spot"}
    await c.delete(api)
    await rbac.aclose()
