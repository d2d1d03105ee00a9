"""bench/kube.py's harness end to end, at its tiny size, on the session's kube-apiserver and Kafka broker.

The harness creates the objects of Kueue's baseline (2 ClusterQueues, the first 3 s of arrivals):
Workloads as Kueue's generator does (the default), or suspended Jobs through the job reconciler.
The watcher, scheduler and actuator run as ``kueuelog run`` processes over Kafka, and the harness
plays the pods as Kueue's runner does (an admitted workload is finished after its runtime; an evicted
Workload's reservation is cleared). Counts only: every workload admitted and finished as the harness
saw it through the API, every workload admitted and finished as the log records it (so every
eviction completed), and nothing of the run left in the API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import kube
from tests.infra.kafka import LocalKafka
from tests.infra.kube import LocalControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.mark.parametrize("objects", ["workloads", "jobs"])
async def test_the_kube_bench_admits_and_finishes_every_workload(
    kube_control_plane: LocalControlPlane, kafka_broker: LocalKafka, tmp_path: Path, objects: str,
) -> None:
    workloads = len(kube.plan(kube.TINY).arrivals)
    assert workloads == 72  # 2 ClusterQueues x (29 small + 5 medium + 2 large)
    result = await kube.run(kube_control_plane, kafka_broker.bootstrap_servers, kube.TINY, tmp_path, objects=objects)
    assert result.workloads == workloads
    assert result.admitted == result.finished == workloads, result.lines()
    assert result.log_admitted == result.log_finished == workloads, result.lines()
    # Every admission but the first of each workload follows an eviction that completed.
    assert result.log_admissions <= workloads + result.log_evictions, result.lines()
    assert result.cleanup_error == ""
    assert set(result.wait_by_class) == {"small", "medium", "large"}
    assert sum(result.cpu[name] for name in kube.SERVICES) > 0  # the services' processes were measured
    if objects == "workloads":
        assert result.reservations_cleared <= result.log_evictions, result.lines()

    api = kube.Api(kube_control_plane, 50, 100)
    collection = "/apis/batch/v1/jobs" if objects == "jobs" else f"/apis/kueue.x-k8s.io/{kube.V}/workloads"
    try:
        left = await api.call("GET", f"{collection}?labelSelector={kube.BENCH_LABEL}={result.rid}")
        queues = await api.call("GET", f"/apis/kueue.x-k8s.io/{kube.V}/clusterqueues"
                                       f"?labelSelector={kube.BENCH_LABEL}={result.rid}")
    finally:
        await api.close()
    assert left["items"] == [] and queues["items"] == [], "the run's objects are deleted"
