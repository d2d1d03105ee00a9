"""DRA on a real kube-apiserver: the watcher reads ResourceClaimTemplates (resource.k8s.io/v1,
served by kube-apiserver 1.34) into the Workloads of the Jobs that claim them, and the scheduler
counts the devices through the Configuration's deviceClassMappings (events/dra.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import dra
from events import objects as o
from events.messages import ObjectApplied
from services.app.simulate import run
from services.core.state import State, fold
from services.runtime.sqlite import SqliteLog
from services.watcher.kube import WatcherStats, run_kube_watcher
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_local_queue, build_state
from tests.integration.test_kube_watcher import Setup, envelopes, eventually, queued_job, retrying

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _template(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": dra.KIND, "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": count}}]}}}}


def _claiming_job(name: str, queue: str, template: str) -> dict[str, Any]:
    body = queued_job(name, queue)
    pod = body["spec"]["template"]["spec"]
    pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


def _workloads(log: SqliteLog, ns: str) -> dict[str, o.Workload]:
    out: dict[str, o.Workload] = {}
    for env in envelopes(log):
        ev = env.event
        if isinstance(ev, ObjectApplied) and isinstance(ev.object, o.Workload) and ev.object.namespace == ns:
            assert ev.object.owner is not None
            out[ev.object.owner.name] = ev.object
    return out


async def test_the_watcher_reads_claim_templates_into_the_jobs_workloads(
    kube_api_client: client.ApiClient, kube_namespace: str, tmp_path: Path,
) -> None:
    ns = kube_namespace
    s = Setup(kube_api_client, ns)
    await s.queues()
    co = client.CustomObjectsApi(kube_api_client)
    await retrying(lambda: co.create_namespaced_custom_object(dra.GROUP, "v1", ns, "resourceclaimtemplates",
                                                              _template("two-gpus", 2)), what="ResourceClaimTemplate")
    for name, template in (("claims-two", "two-gpus"), ("claims-missing", "absent")):
        await retrying(lambda n=name, t=template: s.batch.create_namespaced_job(  # type: ignore[misc]
            ns, _claiming_job(n, s.lq, t)), what=f"Job {name}")
    log = SqliteLog(tmp_path / "log")
    stop = asyncio.Event()
    watcher = asyncio.create_task(run_kube_watcher(log, kube_api_client, stop, cluster="east", stats=WatcherStats(),
                                                   backoff=(0.1, 1.0)))
    try:
        got = await eventually(lambda: (w := _workloads(log, ns)) and len(w) == 2 and w,
                               what="both Jobs' Workloads")
        (two,) = got["claims-two"].pod_sets[0].device_claims
        assert (two.template, two.resolved, two.devices, two.error) == ("two-gpus", True, (("gpu.example.com", 2),), "")
        (missing,) = got["claims-missing"].pod_sets[0].device_claims
        assert missing.resolved and missing.devices == ()
        assert missing.error.endswith('resourceclaimtemplates.resource.k8s.io "absent" not found')

        # The scheduler folds what the watcher published: 2 devices per pod as example.com/gpu.
        state = build_state(
            {**a_configuration().obj(), "resources": {"deviceClassMappings": [
                {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}]}},
            a_flavor("f"), a_cluster_queue(s.cq).flavor("f", cpu="4", **{"example.com/gpu": "4"}),
            a_local_queue(ns, s.lq, s.cq))
        _fold_published(state, log, ns)
        result = run(state, None).state.workloads
        admitted = {rec.obj.owner.name: rec for rec in result.values() if rec.obj.owner is not None}
        assert admitted["claims-two"].admission is not None
        assert dict(admitted["claims-two"].admission.pod_set_assignments[0].resource_usage)["example.com/gpu"] == 2
        pending = admitted["claims-missing"].conditions["QuotaReserved"]
        assert (pending.status, pending.reason) == ("False", "Misconfigured")
        assert "failed to get claim spec for ResourceClaimTemplate absent in podset main" in pending.message
    finally:
        stop.set()
        await asyncio.wait_for(watcher, 30)


def _fold_published(state: State, log: SqliteLog, ns: str) -> None:
    for env in envelopes(log):
        ev = env.event
        if isinstance(ev, ObjectApplied) and isinstance(ev.object, o.Workload) and ev.object.namespace == ns:
            fold(state, ev)
