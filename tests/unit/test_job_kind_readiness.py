"""Each workload kind's readiness as Kueue's integration reads it (``events.jobkinds.readiness``),
and the watcher turning it into ``PodsReady`` / ``PodsNotReady`` (what waitForPodsReady folds):
ready once, not ready only after a readiness, nothing while held."""

from __future__ import annotations

from typing import Any

import pytest

from events import jobkinds
from events.messages import ObjectApplied, PodsNotReady, PodsReady
from services.watcher.translate import Published, translate
from tests.unit.test_job_kinds import jobset, rj
from tests.unit.test_watcher_job_kinds import CLUSTER, NOW, pytorch, served


def kind(api_version: str, name: str) -> jobkinds.JobKind:
    found = jobkinds.kind_of(api_version, name)
    assert found is not None
    return found


JS = kind("jobset.x-k8s.io/v1alpha2", "JobSet")
PT = kind("kubeflow.org/v1", "PyTorchJob")
MPI = kind("kubeflow.org/v2beta1", "MPIJob")
RJ = kind("ray.io/v1", "RayJob")
RC = kind("ray.io/v1", "RayCluster")
RS = kind("ray.io/v1", "RayService")
AW = kind("workload.codeflare.dev/v1beta2", "AppWrapper")
SP = kind("sparkoperator.k8s.io/v1beta2", "SparkApplication")
RUNNING = [{"type": "Running", "status": "True"}]


@pytest.mark.parametrize(("k", "body", "ready"), [
    (JS, {"spec": {"replicatedJobs": [{"replicas": 2}, {}]},
          "status": {"replicatedJobsStatus": [{"ready": 1, "succeeded": 1}, {"ready": 1}]}}, True),
    (JS, {"spec": {"replicatedJobs": [{"replicas": 2}, {}]},
          "status": {"replicatedJobsStatus": [{"ready": 2}]}}, False),
    (JS, {"spec": {"replicatedJobs": [{}]}}, False),
    (PT, {"status": {"conditions": RUNNING}}, True),
    (PT, {"status": {"conditions": [{"type": "Running", "status": "False"}]}}, False),
    (MPI, {"status": {"conditions": RUNNING}}, True),
    (RJ, {"status": {"rayClusterStatus": {"state": "ready"}}}, True),
    (RJ, {"status": {"jobDeploymentStatus": "Running"}}, False),
    (RC, {"status": {"state": "ready"}}, True),
    (RC, {"status": {"state": "suspended"}}, False),
    (RS, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True),
    (AW, {"status": {"conditions": [{"type": "PodsReady", "status": "True"}]}}, True),
    (AW, {"status": {"phase": "Running"}}, False),
    (SP, {"spec": {"executor": {"instances": 2}},
          "status": {"applicationState": {"state": "RUNNING"}, "executorState": {"a": "RUNNING", "b": "COMPLETED"}}},
     True),
    (SP, {"spec": {"executor": {"instances": 2}},
          "status": {"applicationState": {"state": "RUNNING"}, "executorState": {"a": "RUNNING", "b": "PENDING"}}},
     False),
    (SP, {"spec": {}, "status": {"applicationState": {"state": "RUNNING"}}}, True),
    (SP, {"spec": {}, "status": {"applicationState": {"state": "SUBMITTED"}}}, False),
])
def test_readiness_as_kueue_reads_it(k: jobkinds.JobKind, body: dict[str, Any], ready: bool) -> None:
    assert k.pods_ready(body) is ready


def test_the_watcher_publishes_readiness_once_and_its_loss_after_it() -> None:
    owners = frozenset({"Job", "PyTorchJob", "JobSet"})
    memory = Published(owners)

    def publish(body: dict[str, Any]) -> list[type]:
        change = memory.select(translate("PyTorchJob", "MODIFIED", body, cluster=CLUSTER, time_ms=NOW, owners=owners))
        memory.commit(change)
        return [type(e.event) for e in change.envelopes]

    assert publish(pytorch(suspend=True)) == [ObjectApplied]
    assert publish(pytorch(suspend=False, rv="8")) == []  # starting: not ready is no news yet
    assert publish(pytorch(suspend=False, status={"conditions": RUNNING}, rv="9")) == [PodsReady]
    assert publish(pytorch(suspend=False, status={"conditions": RUNNING}, rv="10")) == []
    lost = {"conditions": [{"type": "Running", "status": "False"}]}
    assert publish(pytorch(suspend=False, status=lost, rv="11")) == [PodsNotReady]


def test_a_held_object_says_nothing_of_readiness() -> None:
    body = served(jobset(rj("w")))
    body["spec"]["suspend"] = True
    body["status"] = {"replicatedJobsStatus": [{"ready": 1}]}
    got = translate("JobSet", "ADDED", body, cluster=CLUSTER, time_ms=NOW, owners=frozenset({"JobSet"}))
    assert [type(e.event) for e in got.envelopes] == [ObjectApplied]
