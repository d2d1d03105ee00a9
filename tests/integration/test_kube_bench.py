"""bench/kube.py's harness end to end, at its tiny size, on the session's kube-apiserver and Kafka broker.

The harness creates the Jobs of Kueue's baseline (2 ClusterQueues, the first 3 s of arrivals), the
watcher, scheduler and actuator (with the job reconciler) run as ``kueuelog run`` processes over
Kafka, and the harness plays the pods (a Job seen admitted is completed after its runtime). Counts
only: every Job admitted and finished as the harness saw it through the API, every workload
admitted and finished as the log records it, and nothing of the run left in the API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import kube
from tests.infra.kafka import LocalKafka
from tests.infra.kube import LocalControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


async def test_the_kube_bench_admits_and_finishes_every_workload(
    kube_control_plane: LocalControlPlane, kafka_broker: LocalKafka, tmp_path: Path,
) -> None:
    jobs = len(kube.plan(kube.TINY).arrivals)
    assert jobs == 72  # 2 ClusterQueues x (29 small + 5 medium + 2 large)
    result = await kube.run(kube_control_plane, kafka_broker.bootstrap_servers, kube.TINY, tmp_path)
    assert result.workloads == jobs
    assert result.admitted == result.finished == jobs, result.lines()
    assert result.log_admitted == result.log_finished == jobs, result.lines()
    assert result.log_admissions >= jobs
    assert result.cleanup_error == ""
    assert set(result.wait_by_class) == {"small", "medium", "large"}
    assert sum(result.cpu[name] for name in kube.SERVICES) > 0  # the services' processes were measured

    api = kube.Api(kube_control_plane, 50, 100)
    try:
        left = await api.call("GET", f"/apis/batch/v1/jobs?labelSelector={kube.BENCH_LABEL}={result.rid}")
        queues = await api.call("GET", f"/apis/kueue.x-k8s.io/{kube.V}/clusterqueues"
                                       f"?labelSelector={kube.BENCH_LABEL}={result.rid}")
    finally:
        await api.close()
    assert left["items"] == [] and queues["items"] == [], "the run's objects are deleted"
