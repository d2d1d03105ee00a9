"""The workload kinds' webhooks (services/webhook/kinds.py and the Job's managedBy), without a server,
and deploy/webhook/webhooks.yaml routing every kind of the registry to them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from events import jobkinds
from events.cluster import MULTIKUEUE_CONTROLLER, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from services.webhook import kinds, review

ROOT = Path(__file__).resolve().parents[2]


def _review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "operation": operation, "namespace": "team-a", "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _patch(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = answer["response"].get("patch")
    return None if raw is None else list(json.loads(base64.b64decode(raw)))


def _pod(cpu: str = "1") -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}


def jobset(queue: str | None = "lq", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "js", "namespace": "team-a"}
    if queue is not None:
        meta["labels"] = {QUEUE_NAME_LABEL: queue}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": _pod()}}}],
                     **spec}}


def pytorchjob(**run_policy: Any) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "pt", "namespace": "team-a", "labels": {QUEUE_NAME_LABEL: "lq"}},
            "spec": {**({"runPolicy": run_policy} if run_policy else {}),
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": _pod()}}}}


@pytest.mark.parametrize(("obj", "multikueue", "want"), [
    (jobset(), False, [{"op": "add", "path": "/spec/suspend", "value": True}]),
    (jobset(suspend=False), False, [{"op": "replace", "path": "/spec/suspend", "value": True}]),
    (jobset(suspend=True), False, None),
    (jobset(queue=None), True, None),  # not queued: not Kueue's (manageJobsWithoutQueueName false)
    (jobset(), True, [{"op": "add", "path": "/spec/suspend", "value": True},
                      {"op": "add", "path": "/spec/managedBy", "value": MULTIKUEUE_CONTROLLER}]),
    (jobset(managedBy="jobset.sigs.k8s.io/jobset-controller"), True, [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "replace", "path": "/spec/managedBy", "value": MULTIKUEUE_CONTROLLER}]),
    (jobset(managedBy="example.com/other"), True, [{"op": "add", "path": "/spec/suspend", "value": True}]),
    (pytorchjob(), True, [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}},
                          {"op": "add", "path": "/spec/runPolicy/managedBy", "value": MULTIKUEUE_CONTROLLER}]),
    (pytorchjob(suspend=False), False, [{"op": "replace", "path": "/spec/runPolicy/suspend", "value": True}]),
])
def test_a_queued_object_is_created_held_and_managed_by_multikueue_where_its_queue_uses_it(
    obj: dict[str, Any], multikueue: bool, want: list[dict[str, Any]] | None,
) -> None:
    answer = kinds.mutate_kind(_review(obj), multikueue=multikueue)
    assert answer["response"]["allowed"] is True
    assert _patch(answer) == want


def test_the_patches_apply_to_an_object_without_run_policy() -> None:
    """A JSON Patch applies in order: with no runPolicy, the first operation adds it and the second
    adds into it (two ``add``s of the parent would lose the first)."""
    obj = pytorchjob()
    patch = _patch(kinds.mutate_kind(_review(obj), multikueue=True)) or []
    applied = _apply(obj, patch)
    assert applied["spec"]["runPolicy"] == {"suspend": True, "managedBy": MULTIKUEUE_CONTROLLER}


def _apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    for op in patch:
        *parents, last = op["path"].split("/")[1:]
        at = out
        for p in parents:
            at = at[p]
        at[last] = op["value"]
    return out


def test_updates_and_objects_of_other_kinds_are_not_mutated() -> None:
    assert _patch(kinds.mutate_kind(_review(jobset(), operation="UPDATE"))) is None
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {QUEUE_NAME_LABEL: "lq"}},
           "spec": {"template": _pod()}}
    assert _patch(kinds.mutate_kind(_review(job))) is None


def test_a_jobs_managed_by_is_defaulted_for_a_multikueue_queue() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {QUEUE_NAME_LABEL: "lq"}},
           "spec": {"template": _pod()}}
    assert _patch(review.mutate_job(_review(job), multikueue=True)) == [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/managedBy", "value": MULTIKUEUE_CONTROLLER}]
    assert _patch(review.mutate_job(_review(job))) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_a_queued_object_simulate_would_refuse_is_refused_at_creation_naming_the_field() -> None:
    answer = kinds.validate_kind(_review(jobset(queue="Not_A_Queue")))
    assert answer["response"]["allowed"] is False
    assert f"metadata.labels.{QUEUE_NAME_LABEL}" in answer["response"]["status"]["message"]
    bad = jobset()
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = _pod(cpu="lots")
    message = kinds.validate_kind(_review(bad))["response"]["status"]["message"]
    assert message.startswith("JobSet team-a/js: ") and "spec.replicatedJobs[0]" in message and "cpu" in message
    assert kinds.validate_kind(_review(jobset()))["response"]["allowed"] is True
    assert kinds.validate_kind(_review(jobset(queue=None)))["response"]["allowed"] is True


def test_a_running_objects_queue_and_prebuilt_workload_are_immutable() -> None:
    old = jobset(suspend=False)
    moved = jobset(queue="other", suspend=False)
    answer = kinds.validate_kind(_review(moved, operation="UPDATE", old=old))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == (
        f"JobSet team-a/js: metadata.labels.{QUEUE_NAME_LABEL}: invalid value 'other': field is immutable")
    held = jobset(queue="other", suspend=True)
    assert kinds.validate_kind(_review(held, operation="UPDATE", old=jobset(suspend=True)))["response"]["allowed"]
    renamed = jobset(suspend=False)
    renamed["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] = "wl-2"
    answer = kinds.validate_kind(_review(renamed, operation="UPDATE", old=old))
    assert "field is immutable" in answer["response"]["status"]["message"]


def _rules(name: str) -> set[tuple[str, str, str, str]]:
    out: set[tuple[str, str, str, str]] = set()
    for doc in yaml.safe_load_all((ROOT / "deploy" / "webhook" / "webhooks.yaml").read_text(encoding="utf-8")):
        for hook in doc["webhooks"]:
            if hook["name"] == name:
                for rule in hook["rules"]:
                    out |= {(g, v, r, op) for g in rule["apiGroups"] for v in rule["apiVersions"]
                            for r in rule["resources"] for op in rule["operations"]}
    return out


@pytest.mark.parametrize("kind", jobkinds.OTHER_KINDS, ids=lambda k: k.kind)
def test_the_webhook_configuration_sends_every_kind_of_the_registry(kind: jobkinds.JobKind) -> None:
    assert (kind.group, kind.version, kind.plural, "CREATE") in _rules("mjobkinds.kueuelog.io")
    assert {(kind.group, kind.version, kind.plural, op) for op in ("CREATE", "UPDATE")} <= _rules(
        "vjobkinds.kueuelog.io")


def test_a_trainjob_is_held_and_checked_for_its_names_only_since_its_podsets_need_its_runtime() -> None:
    train = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "metadata": {"name": "tj", "namespace": "team-a", "labels": {QUEUE_NAME_LABEL: "lq"}},
             "spec": {"runtimeRef": {"name": "torch-distributed"}}}
    assert _patch(kinds.mutate_kind(_review(train))) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert kinds.validate_kind(_review(train))["response"]["allowed"] is True
    train["metadata"]["labels"][QUEUE_NAME_LABEL] = "Bad_Name"
    answer = kinds.validate_kind(_review(train))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(
        f"TrainJob team-a/tj: metadata.labels.{QUEUE_NAME_LABEL}: invalid value 'Bad_Name'")
