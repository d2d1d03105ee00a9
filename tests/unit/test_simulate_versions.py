"""``simulate -o json|yaml`` shows each Workload in the Kueue API version its input used.

A Workload given in the input keeps its ``apiVersion``; one made from a Job is shown at v1beta2
when the input writes any Kueue object at v1beta2 (else v1beta1, as before), spelled for that
version (``events/kueue_versions.py``: v1beta2's ``priorityClassRef``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from events.manifests import Document, normalize
from services.app.simulate import simulate
from services.core.render import workload_list

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "kueue-examples"


def _queues(version: str) -> list[dict[str, Any]]:
    g = f"kueue.x-k8s.io/{version}"
    return [
        {"apiVersion": g, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": g, "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
             {"name": "default", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]}},
        {"apiVersion": g, "kind": "LocalQueue", "metadata": {"namespace": "ns", "name": "lq"},
         "spec": {"clusterQueue": "cq"}},
        {"apiVersion": g, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 100},
        {"apiVersion": "batch/v1", "kind": "Job",
         "metadata": {"namespace": "ns", "name": "train",
                      "labels": {"kueue.x-k8s.io/queue-name": "lq", "kueue.x-k8s.io/priority-class": "high"}},
         "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}},
    ]


def _items(tmp_path: Path, *files: list[dict[str, Any]] | Path) -> list[dict[str, Any]]:
    paths = []
    for i, f in enumerate(files):
        if isinstance(f, Path):
            paths.append(str(f))
            continue
        path = tmp_path / f"in-{i}.yaml"
        path.write_text(yaml.safe_dump_all(f))
        paths.append(str(path))
    result = simulate(paths, None)
    items: list[dict[str, Any]] = workload_list(result.state, result.versions)["items"]
    return items


def test_a_v1beta1_input_still_gets_v1beta1_workloads(tmp_path: Path) -> None:
    [wl] = _items(tmp_path, _queues("v1beta1"))
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert (wl["spec"]["priorityClassName"], wl["spec"]["priorityClassSource"]) == (
        "high", "kueue.x-k8s.io/workloadpriorityclass")


def test_a_v1beta2_input_gets_v1beta2_workloads_spelled_for_v1beta2(tmp_path: Path) -> None:
    [wl] = _items(tmp_path, _queues("v1beta2"))
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert wl["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                              "name": "high"}
    assert "priorityClassName" not in wl["spec"] and "priorityClassSource" not in wl["spec"]
    assert wl["status"]["admission"]["clusterQueue"] == "cq"


def test_each_workload_of_the_input_keeps_its_own_version(tmp_path: Path) -> None:
    items = _items(tmp_path, CORPUS / "10-workload-v1beta1.yaml", CORPUS / "11-workload-v1beta2.yaml")
    versions = {i["metadata"]["name"]: i["apiVersion"].rpartition("/")[2] for i in items}
    assert sorted(set(versions.values())) == ["v1beta1", "v1beta2"]
    for doc in (CORPUS / "10-workload-v1beta1.yaml", CORPUS / "11-workload-v1beta2.yaml"):
        for body in yaml.safe_load_all(doc.read_text()):
            if body and body["kind"] == "Workload":
                assert versions[body["metadata"]["name"]] == body["apiVersion"].rpartition("/")[2]


def test_a_v1beta2_rendering_reads_back_as_the_same_workload(tmp_path: Path) -> None:
    v1 = _items(tmp_path, _queues("v1beta1"))[0]
    v2 = _items(tmp_path, _queues("v1beta2"))[0]
    assert normalize(Document("out", 1, v2)) == normalize(Document("out", 1, v1))
