"""A Workload nothing owns (created as a Workload, as Kueue's performance generator does) on a real
kube-apiserver, through the whole loop (watcher -> scheduler -> actuator, each as its ServiceAccount).

It is admitted; a higher-priority one preempts it: the actuator marks it ``Evicted`` (and the
eviction's decision id in ``kueuelog.io/evicted``) but leaves its reservation to its owner, so the
preemptor waits. The test then plays Kueue's performance runner: it clears the victim's reservation
(``QuotaReserved=False``, reason Pending, no ``status.admission``), the watcher publishes
``EvictionCompleted`` with the eviction's decision id, the preemptor is admitted, the actuator does
not write the victim's admission back, and once the preemptor is marked ``Finished`` the victim is
admitted again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.cluster import EVICTED_ANNOTATION
from events.codec import decode_envelope
from events.envelope import Topics
from events.messages import AdmitWorkload, EvictionCompleted, EvictWorkload
from services.runtime.sqlite import SqliteLog
from tests.infra.kube import LocalControlPlane
from tests.integration.kube_deploy import KUEUE_GROUP
from tests.integration.test_kube_e2e import (
    MERGE,
    Cluster,
    _caught_up,
    conditions,
    decisions,
    deployed,
    eventually,
    kueuelog,
    stamp,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
__all__ = ["deployed"]  # the fixture, used by name

V2 = "v1beta2"


def standalone(name: str, cpu: str, priority: int) -> dict[str, Any]:
    """As Kueue's generator makes one: queue, spec.priority, one pod set of one pod."""
    return {"apiVersion": f"{KUEUE_GROUP}/{V2}", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": "lq", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": cpu}}}]}}}]}}


async def test_a_standalone_workload_is_preempted_its_owner_completes_the_eviction_and_it_runs_again(
    deployed: None, kube_control_plane: LocalControlPlane, kube_api_client: client.ApiClient, tmp_path: Path,
) -> None:
    c = Cluster(kube_api_client)
    await c.create(cpu="3")
    co = client.CustomObjectsApi(kube_api_client)
    log = SqliteLog(tmp_path / "log")
    topics = Topics()

    async def read(name: str) -> dict[str, Any]:
        out: dict[str, Any] = await co.get_namespaced_custom_object(KUEUE_GROUP, V2, c.ns_in, "workloads", name)
        return out

    def admitted(name: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
        async def check() -> dict[str, Any] | None:
            wl = await read(name)
            ok = conditions(wl).get("Admitted", {}).get("status") == "True" and wl["status"].get("admission")
            return wl if ok else None

        return check

    async def status(name: str, wl: dict[str, Any], body: dict[str, Any]) -> None:
        await co.patch_namespaced_custom_object_status(
            KUEUE_GROUP, V2, c.ns_in, "workloads", name,
            {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]}, "status": body}, _content_type=MERGE)

    try:
        async with kueuelog(kube_control_plane, log, cluster="standalone") as running:
            await co.create_namespaced_custom_object(KUEUE_GROUP, V2, c.ns_in, "workloads",
                                                     standalone("victim", "3", 100))
            await eventually(running, admitted("victim"), what="the victim to be admitted")
            await co.create_namespaced_custom_object(KUEUE_GROUP, V2, c.ns_in, "workloads",
                                                     standalone("preemptor", "3", 1000))

            async def evicted() -> dict[str, Any] | None:
                wl = await read("victim")
                marked = EVICTED_ANNOTATION in (wl["metadata"].get("annotations") or {})
                return wl if marked and conditions(wl).get("Evicted", {}).get("status") == "True" else None

            victim = await eventually(running, evicted, what="the victim to be marked evicted")
            got = conditions(victim)
            assert got["QuotaReserved"]["status"] == "True" and victim["status"]["admission"], \
                "the reservation is its owner's to clear"
            assert got["Preempted"]["reason"] == "InClusterQueue"
            await eventually(running, lambda: _caught_up(log, topics), what="the services to catch up")
            assert not (await read("preemptor")).get("status", {}).get("admission"), \
                "the victim still holds the quota"

            # Kueue's runner: clear the evicted workload's reservation (one status write).
            victim = await read("victim")
            conds = [x for x in victim["status"]["conditions"] if x["type"] not in ("QuotaReserved", "Admitted")]
            conds += [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                       "message": "Evicted by the test runner", "lastTransitionTime": stamp()},
                      {"type": "Admitted", "status": "False", "reason": "NoReservation",
                       "message": "The workload has no reservation", "lastTransitionTime": stamp()}]
            await status("victim", victim, {"conditions": conds, "admission": None})
            preemptor = await eventually(running, admitted("preemptor"), what="the preemptor to be admitted")
            await eventually(running, lambda: _caught_up(log, topics), what="the services to catch up")
            victim = await read("victim")
            assert not victim["status"].get("admission"), "the actuator does not write the admission back"
            assert conditions(victim)["QuotaReserved"]["status"] == "False"

            # The preemptor's runtime is over: Finished (one status write); the victim runs again.
            done = {"type": "Finished", "status": "True", "reason": "ByTest", "message": "By test runner",
                    "lastTransitionTime": stamp()}
            await status("preemptor", preemptor, {"conditions": [*preemptor["status"]["conditions"], done]})
            victim = await eventually(running, admitted("victim"), what="the victim to be admitted again")
            assert conditions(victim)["Evicted"]["status"] == "False"
            await eventually(running, lambda: _caught_up(log, topics), what="the services to catch up")

        ds = decisions(log, topics)
        victim_key = f"{c.ns_in}/victim"
        evictions = [d for d in ds if isinstance(d, EvictWorkload) and f"{d.namespace}/{d.name}" == victim_key]
        admissions = [d for d in ds if isinstance(d, AdmitWorkload) and f"{d.namespace}/{d.name}" == victim_key]
        assert len(evictions) == 1 and len(admissions) == 2
        # The session's services and topics are shared with other tests: this test's namespace only.
        completed = [(env.event.name, env.correlation_id) for r in log.read(topics.cluster_events, 0, 100_000)
                     if isinstance((env := decode_envelope(r.value)).event, EvictionCompleted)
                     and env.event.namespace == c.ns_in]
        assert completed == [("victim", evictions[0].id)]
        assert victim["metadata"]["annotations"][EVICTED_ANNOTATION] == evictions[0].id
    finally:
        log.close()
        await c.delete(kube_api_client)
