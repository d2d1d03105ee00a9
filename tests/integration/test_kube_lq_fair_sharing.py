"""A LocalQueue's admission fair sharing status written to a real kube-apiserver.

The scheduler's part is the pure core: a ClusterQueue with admission fair sharing, a workload
admitted in lq, samples taken as the log's time passes; each cycle's ``UpdateLocalQueueFairSharing``
decisions (the ones about the LocalQueue: the test plays no Job) are appended to the log as the
scheduler appends them. The actuator runs as in production (the Kubernetes port) and writes the
LocalQueue's ``status.fairSharing.admissionFairSharingStatus`` through the status subresource.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.manifests import Document, format_time, normalize
from events.messages import ClockTicked, ObjectApplied, UpdateLocalQueueFairSharing
from services.core import admissionfair
from services.core.cycle import run_cycle
from services.core.state import State, fold
from services.runtime.sqlite import SqliteLog
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_local_queue, a_workload, build_state
from tests.integration.kube_deploy import eventually
from tests.integration.test_kube_actuator import (
    Cluster,
    caught_up,
    done,
    kueue_crds,  # noqa: F401 (the fixture, for usefixtures)
    running,
    write,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240), pytest.mark.usefixtures("kueue_crds")]

T0 = 1_700_000_000_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    out = SqliteLog(tmp_path / "log")
    yield out
    out.close()


def _cycle(state: State, log: SqliteLog) -> list[UpdateLocalQueueFairSharing]:
    said = [d for d in run_cycle(state).decisions if isinstance(d, UpdateLocalQueueFairSharing)]
    write(log, *said, done(state.cycles, len(said)))
    return said


async def test_the_actuator_writes_each_sample_to_the_local_queues_status(
    kube_namespace: str, kube_api_client: client.ApiClient, log: SqliteLog,
) -> None:
    k = Cluster(kube_api_client, kube_namespace)
    await k.queues()
    state = build_state(
        a_configuration().admission_fair_sharing(usageHalfLifeTime="10m", usageSamplingInterval="5m"),
        a_flavor(k.flavor), a_cluster_queue(k.cq).flavor(k.flavor, cpu="4").admission_fair_sharing(),
        a_local_queue(kube_namespace, "lq", k.cq))
    wl = normalize(Document("t.yaml", 1, a_workload(kube_namespace, "w").queue("lq").request(2, cpu="1").obj()))
    assert wl is not None
    fold(state, ObjectApplied(time=T0, object=wl))

    async def status() -> dict[str, Any] | None:
        lq = await k.read("localqueues", "lq")
        afs = ((lq.get("status") or {}).get("fairSharing") or {}).get("admissionFairSharingStatus")
        return afs if isinstance(afs, dict) else None

    def written(d: UpdateLocalQueueFairSharing) -> dict[str, Any]:
        return {"consumedResources": dict(d.consumed_resources),
                "lastUpdate": format_time(d.last_update // 1000 * 1000)}

    async with running(log, kube_api_client):
        first = _cycle(state, log)  # w admitted: lq is charged its entry penalty at once
        assert [d.name for d in first] == ["lq"] and first[0].consumed_resources
        await eventually(lambda: _is(status, written(first[0])), what="the first status")

        rv = (await k.read("localqueues", "lq"))["metadata"]["resourceVersion"]
        assert _cycle(state, log) == []  # nothing sampled since: nothing said, nothing written
        await eventually(caught_up(log), what="the empty cycle to be consumed")
        assert (await k.read("localqueues", "lq"))["metadata"]["resourceVersion"] == rv

        fold(state, ClockTicked(time=T0 + 300_000))  # a sample: the history moves toward the 2 cpu in use
        second = _cycle(state, log)
        want = admissionfair.quantity(state.afs[f"{kube_namespace}/lq"].consumed["cpu"])
        assert [d.consumed_resources for d in second] == [(("cpu", want),)]
        got = await eventually(lambda: _is(status, written(second[0])), what="the sampled status")
        assert got == {"consumedResources": {"cpu": want}, "lastUpdate": format_time(T0 + 300_000)}


async def _is(read: Any, want: dict[str, Any]) -> dict[str, Any] | None:
    got: dict[str, Any] | None = await read()
    return got if got == want else None
