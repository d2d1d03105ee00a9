"""Kueue's published job-kind examples, in their shapes (``tests/fixtures/kueue-job-kinds``), go
through ``simulate`` with Kueue's outcome: the Workload Kueue's integration would create (name
``<kind>-<name>-<hash>``, podSets by name and count) admitted on the single ClusterQueue with each
podSet's usage = count x per-pod requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.app.simulate import result_list, simulate

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-job-kinds"

EXAMPLES = [
    pytest.param("jobset.yaml", "jobset-nap-set-",
                 [("workers", 4, {"cpu": "4", "memory": "1200Mi"}), ("driver", 1, {"cpu": "2", "memory": "300Mi"})],
                 id="JobSet: replicas x parallelism per replicated job"),
    pytest.param("pytorchjob.yaml", "pytorchjob-pytorchjob-mnist-",
                 [("master", 1, {"cpu": "1", "memory": "250Mi"}), ("worker", 2, {"cpu": "2", "memory": "500Mi"})],
                 id="PyTorchJob"),
    pytest.param("tfjob.yaml", "tfjob-tfjob-mnist-",
                 [("ps", 1, {"cpu": "1", "memory": "250Mi"}), ("worker", 2, {"cpu": "2", "memory": "500Mi"})],
                 id="TFJob"),
    pytest.param("xgboostjob.yaml", "xgboostjob-xgboostjob-mnist-",
                 [("master", 1, {"cpu": "1", "memory": "250Mi"}), ("worker", 2, {"cpu": "2", "memory": "500Mi"})],
                 id="XGBoostJob"),
    pytest.param("paddlejob.yaml", "paddlejob-paddlejob-mnist-", [("worker", 2, {"cpu": "2", "memory": "500Mi"})],
                 id="PaddleJob"),
    pytest.param("jaxjob.yaml", "jaxjob-jaxjob-mnist-", [("worker", 2, {"cpu": "2", "memory": "500Mi"})],
                 id="JAXJob"),
    pytest.param("mpijob.yaml", "mpijob-pi-estimate-",
                 [("launcher", 1, {"cpu": "1", "memory": "1Gi"}), ("worker", 3, {"cpu": "3", "memory": "3Gi"})],
                 id="MPIJob: limits stand in for requests"),
    pytest.param("trainjob.yaml", "trainjob-pytorch-distributed-", [("node", 2, {"cpu": "4", "memory": "8Gi"})],
                 id="TrainJob: its ClusterTrainingRuntime's trainer Job, numNodes x resourcesPerNode"),
    pytest.param("raycluster.yaml", "raycluster-ray-full-",
                 [("head", 1, {"cpu": "1", "memory": "1953125Ki"}),  # 2G, as Kueue's usage in Ki
                  ("cpu-group", 2, {"cpu": "2", "memory": "1953125Ki"})],
                 id="RayCluster: head and worker group"),
    pytest.param("rayservice.yaml", "rayservice-ray-serve-",
                 [("head", 1, {"cpu": "1", "memory": "2Gi"}), ("serve-group", 1, {"cpu": "500m", "memory": "2Gi"})],
                 id="RayService: its rayClusterConfig's head and group"),
    pytest.param("rayjob.yaml", "rayjob-ray-count-",
                 [("head", 1, {"cpu": "1"}), ("small-group", 1, {"cpu": "1"}),
                  ("submitter", 1, {"cpu": "500m", "memory": "200Mi"})],
                 id="RayJob: K8sJobMode's submitter"),
    pytest.param("appwrapper-deployment.yaml", "appwrapper-wrapped-web-",
                 [("wrapped-web-0", 2, {"cpu": "500m"})], id="AppWrapper: a Deployment's declared podSet"),
    pytest.param("appwrapper-leaderworkerset.yaml", "appwrapper-wrapped-lws-",
                 [("wrapped-lws-0", 2, {"cpu": "200m"}), ("wrapped-lws-1", 4, {"cpu": "600m"})],
                 id="AppWrapper: a LeaderWorkerSet's declared leader and worker podSets"),
    pytest.param("appwrapper-pytorch.yaml", "appwrapper-wrapped-mnist-",
                 [("wrapped-mnist-0", 1, {"cpu": "1"}), ("wrapped-mnist-1", 2, {"cpu": "2"})],
                 id="AppWrapper: a PyTorchJob's podSets inferred (Master, Worker)"),
    pytest.param("sparkapplication.yaml", "sparkapplication-spark-count-",
                 [("driver", 1, {"cpu": "500m", "memory": "512Mi"}), ("executor", 2, {"cpu": "2", "memory": "2Gi"})],
                 id="SparkApplication: driver and executors, coreRequest and memory in Java notation"),
]


# Kueue's pod integration: (Workload name, or a prefix ending in '-' before a 5-digit hash; podSets
# with per-pod requests). A group's podSets are named by role hash (Kueue's values for these specs).
POD_EXAMPLES = [
    pytest.param("pod.yaml", [("pod-nap-", [("main", 1, {"cpu": "2"})])], id="Pod: one Workload per pod"),
    pytest.param("pod-group.yaml", [("trio", [("3e7adba3", 2, {"cpu": "500m"}), ("dc85db45", 1, {"cpu": "1"})])],
                 id="pod group: named after the group, a podSet per role"),
    pytest.param("deployment.yaml",
                 [(f"pod-web-frontend-{i}-", [("main", 1, {"cpu": "500m", "memory": "200Mi"})]) for i in range(2)],
                 id="Deployment: a Workload per pod"),
    pytest.param("statefulset.yaml", [("statefulset-kv-store-", [("main", 3, {"cpu": "300m", "memory": "100Mi"})])],
                 id="StatefulSet: one group of replicas"),
    pytest.param("leaderworkerset.yaml",
                 [(f"leaderworkerset-shards-{i}-", [("leader", 1, {"cpu": "200m"}), ("worker", 2, {"cpu": "100m"})])
                  for i in range(2)], id="LeaderWorkerSet: a group per replica"),
]


def _times(count: int, per_pod: dict[str, str]) -> dict[str, str]:
    from events.quantity import format_amount, to_amount

    return {r: format_amount(r, count * to_amount(r, q)) for r, q in per_pod.items()}


@pytest.mark.parametrize(("file", "workloads"), POD_EXAMPLES)
def test_pod_integration_example_is_admitted_with_kueues_pod_sets(
        file: str, workloads: list[tuple[str, list[tuple[str, int, dict[str, str]]]]]) -> None:
    items = result_list(simulate([str(DIR / "setup.yaml"), str(DIR / file)], None))["items"]
    assert len(items) == len(workloads)
    for wl, (name, pod_sets) in zip(items, workloads, strict=True):
        got = wl["metadata"]["name"]
        assert got == name if not name.endswith("-") else (got.startswith(name) and len(got) == len(name) + 5 + (
            6 if file == "pod.yaml" else 0))
        assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [(n, c) for n, c, _ in pod_sets]
        usage = [(a["name"], a["count"], a["resourceUsage"]) for a in wl["status"]["admission"]["podSetAssignments"]]
        assert usage == [(n, c, _times(c, r)) for n, c, r in pod_sets]


def _one(file: str) -> dict[str, Any]:
    items = result_list(simulate([str(DIR / "setup.yaml"), str(DIR / file)], None))["items"]
    assert len(items) == 1
    item: dict[str, Any] = items[0]
    return item


@pytest.mark.parametrize(("file", "prefix", "pod_sets"), EXAMPLES)
def test_example_is_admitted_with_kueues_pod_sets(file: str, prefix: str,
                                                  pod_sets: list[tuple[str, int, dict[str, str]]]) -> None:
    wl = _one(file)
    name = wl["metadata"]["name"]
    assert name.startswith(prefix) and len(name) == len(prefix) + 5 + (6 if file == "jobset.yaml" else 0)
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [(n, c) for n, c, _ in pod_sets]
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == "cluster-queue"
    assert [(a["name"], a["count"], a["resourceUsage"]) for a in admission["podSetAssignments"]] == pod_sets
    conditions = {c["type"]: c["status"] for c in wl["status"]["conditions"]}
    assert conditions["QuotaReserved"] == "True" and conditions["Admitted"] == "True"


def test_all_kinds_together_share_the_nine_cpus() -> None:
    files = [str(DIR / "setup.yaml"), *sorted(str(p) for p in DIR.glob("*.yaml") if p.name != "setup.yaml")]
    items = result_list(simulate(files, None))["items"]
    assert len(items) == len(EXAMPLES) + sum(len(p.values[1]) for p in POD_EXAMPLES)
    admitted = [i for i in items if "admission" in i["status"]]
    pending = [i for i in items if "admission" not in i["status"]]
    millis = sum(int(float(u["resourceUsage"]["cpu"].rstrip("m")) * (1 if u["resourceUsage"]["cpu"].endswith("m")
                                                                     else 1000))
                 for i in admitted for u in i["status"]["admission"]["podSetAssignments"])
    assert 0 < millis <= 9000
    assert pending, "the examples together ask for more than 9 CPUs"
    for wl in pending:
        assert any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in wl["status"]["conditions"])
