"""``kueuelog convert``: front-end kinds to the Kueue manifests kueuelog runs them as."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.app.cli import main
from services.app.simulate import simulate

TREE = Path("examples/ack/elasticquotatree.yaml")
DEPLOYMENTS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx1, namespace: namespace1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  replicas: 5
  selector: {matchLabels: {app: nginx1}}
  template:
    metadata: {labels: {app: nginx1}}
    spec:
      containers: [{name: nginx, image: nginx, resources: {requests: {cpu: "5"}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: namespace3, creationTimestamp: "2026-01-01T00:00:01Z"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, resources: {requests: {cpu: "12"}}}]
"""


def _convert(capsys: pytest.CaptureFixture[str], *files: str) -> tuple[list[dict], list[str]]:  # type: ignore[type-arg]
    assert main(["convert", *files]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("# note:")]
    return [d for d in yaml.safe_load_all(out) if d is not None], notes


def test_the_tree_becomes_cohorts_cluster_queues_and_default_local_queues(capsys: pytest.CaptureFixture[str]) -> None:
    docs, notes = _convert(capsys, str(TREE))
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert kinds == [("ResourceFlavor", "default"), ("Cohort", "root"), ("Cohort", "root.a"), ("Cohort", "root.b"),
                     ("ClusterQueue", "root.a.1"), ("ClusterQueue", "root.a.2"), ("ClusterQueue", "root.b.1"),
                     ("ClusterQueue", "root.b.2")] + [("LocalQueue", "default")] * 4
    cq = docs[4]
    assert cq["spec"]["cohort"] == "root.a"
    assert cq["metadata"]["annotations"] == {"kueuelog.io/reclaim-within": "NominalQuota"}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "cpu", "nominalQuota": "10", "borrowingLimit": "10"}
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    a = docs[2]
    assert a["spec"]["parentName"] == "root"
    assert a["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "cpu", "nominalQuota": "0", "borrowingLimit": "20"}
    assert [d["metadata"]["namespace"] for d in docs[8:]] == ["namespace1", "namespace2", "namespace3", "namespace4"]
    assert any("reclaim-within" in n for n in notes)


def test_what_convert_prints_simulates_the_same_as_the_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(DEPLOYMENTS)
    docs, _ = _convert(capsys, str(TREE), str(workloads))
    assert {d["kind"] for d in docs} == {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "Workload", "Job"}
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    converted = tmp_path / "converted.yaml"
    converted.write_text(yaml.safe_dump_all(docs, sort_keys=False))

    def outcome(*paths: str) -> dict[str, str | None]:
        state = simulate(list(paths), None).state
        return {k: r.admission.cluster_queue if r.admission else None for k, r in state.workloads.items()}

    direct = outcome(str(TREE), str(workloads))
    assert direct == outcome(str(converted))
    assert sorted(direct.values(), key=str) == [None] + ["root.a.1"] * 4 + ["root.b.1"]


def test_kueue_kinds_pass_through_and_a_tree_outside_kube_system_is_not_in_effect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = yaml.safe_load(TREE.read_text())
    other["metadata"]["namespace"] = "team-x"
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump_all([other, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                                                "metadata": {"name": "on-demand"}}]))
    docs, notes = _convert(capsys, str(path))
    assert [d["kind"] for d in docs] == ["ResourceFlavor"]
    assert docs[0]["metadata"]["name"] == "on-demand"
    assert any("team-x/elasticquotatree" in n and "not in effect" in n for n in notes)


def test_two_trees_in_kube_system_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = yaml.safe_load(TREE.read_text())
    second["metadata"]["name"] = "another"
    path = tmp_path / "two.yaml"
    path.write_text(TREE.read_text() + "---\n" + yaml.safe_dump(second))
    assert main(["convert", str(path)]) == 2
    err = capsys.readouterr().err
    assert "(ElasticQuotaTree kube-system/another): metadata.name: kube-system already has ElasticQuotaTree " \
           "elasticquotatree" in err


def test_a_kind_kueuelog_does_not_take_is_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("apiVersion: example.io/v1\nkind: Queue\nmetadata: {name: q}\n")
    assert main(["convert", str(path)]) == 2
    assert "unsupported kind Queue" in capsys.readouterr().err
