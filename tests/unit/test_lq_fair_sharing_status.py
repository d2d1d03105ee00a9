"""A LocalQueue's admission fair sharing status on the cluster: the actuator's patch of
``status.fairSharing.admissionFairSharingStatus`` (services/actuator/kubeplan.py), and the watcher,
which does not republish a LocalQueue for that status alone (services/watcher/translate.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from events.messages import UpdateLocalQueueFairSharing
from services.actuator.kubeplan import fair_sharing_status_patch
from services.watcher.translate import Published, translate

T = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def _decision(last_update: int = T + 300_250, **consumed: str) -> UpdateLocalQueueFairSharing:
    return UpdateLocalQueueFairSharing(id="c3-0", cycle=3, namespace="ns", name="lq",
                                       consumed_resources=tuple(sorted(consumed.items())), last_update=last_update)


def _lq(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                            "metadata": {"name": "lq", "namespace": "ns", "resourceVersion": "7"},
                            "spec": {"clusterQueue": "cq"}}
    if status is not None:
        body["status"] = status
    return body


@pytest.mark.parametrize(("obj", "decision", "want"), [
    pytest.param(_lq(), _decision(cpu="31999m"), {"status": {"fairSharing": {
        "weightedShare": 0, "admissionFairSharingStatus": {"consumedResources": {"cpu": "31999m"},
                                                           "lastUpdate": "2025-01-01T00:05:00Z"}}}},
        id="first written: lastUpdate in whole seconds, as metav1.Time"),
    pytest.param(_lq({"fairSharing": {"weightedShare": 0, "admissionFairSharingStatus": {
        "consumedResources": {"cpu": "31999m"}, "lastUpdate": "2025-01-01T00:05:00Z"}}}),
        _decision(cpu="31999m"), None, id="already says it: nothing to write"),
    pytest.param(_lq({"fairSharing": {"weightedShare": 3, "admissionFairSharingStatus": {
        "consumedResources": {"cpu": "2", "memory": "1Gi"}, "lastUpdate": "2025-01-01T00:00:00Z"}},
        "admittedWorkloads": 2}),
        _decision(cpu="1"), {"status": {"fairSharing": {
            "weightedShare": 3, "admissionFairSharingStatus": {"consumedResources": {"memory": None, "cpu": "1"},
                                                               "lastUpdate": "2025-01-01T00:05:00Z"}}}},
        id="a resource no longer consumed is removed; the rest of the status is left alone"),
])
def test_the_status_patch(obj: dict[str, Any], decision: UpdateLocalQueueFairSharing, want: Any) -> None:
    assert fair_sharing_status_patch(obj, decision) == want


def _publish(memory: Published, body: dict[str, Any]) -> list[str]:
    change = memory.select(translate("LocalQueue", "MODIFIED", body, cluster="east", time_ms=T))
    memory.commit(change)
    return [type(e.event).__name__ for e in change.envelopes]


def test_the_watcher_does_not_republish_a_local_queue_for_its_fair_sharing_status() -> None:
    memory = Published()
    first = _lq({"fairSharing": {"weightedShare": 0, "admissionFairSharingStatus": {
        "consumedResources": {"cpu": "2"}, "lastUpdate": "2025-01-01T00:00:00Z"}}})
    assert _publish(memory, first) == ["ObjectApplied"]  # the ledger is seeded from it once
    written = copy.deepcopy(first)
    written["metadata"]["resourceVersion"] = "8"
    written["status"]["fairSharing"]["admissionFairSharingStatus"]["consumedResources"] = {"cpu": "1500m"}
    assert _publish(memory, written) == []  # the actuator's write of the scheduler's own news
    moved = copy.deepcopy(written)
    moved["metadata"]["resourceVersion"] = "9"
    moved["spec"]["clusterQueue"] = "other"
    assert _publish(memory, moved) == ["ObjectApplied"]
