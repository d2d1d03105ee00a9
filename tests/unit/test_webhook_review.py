"""The webhooks' decisions (services/webhook/review.py), without a server."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from events import t9k
from services.webhook import review


def _review(obj: dict[str, Any], operation: str = "CREATE", user: str = "alice",
            groups: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "namespace": "team-a", "object": obj,
                        "userInfo": {"username": user, "groups": list(groups)}}}


def _job(*, kueue: bool = False, t9k_queue: str | None = None, suspend: bool | None = None,
         cpu: str = "1", scheduler: str = t9k.SCHEDULER_NAME) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "i",
                                                         "resources": {"requests": {"cpu": cpu}}}]}}
    if t9k_queue:
        template["metadata"] = {"labels": {t9k.QUEUE_LABEL: t9k_queue}}
        template["spec"]["schedulerName"] = scheduler
    spec: dict[str, Any] = {"template": template}
    if suspend is not None:
        spec["suspend"] = suspend
    meta: dict[str, Any] = {"name": "j", "namespace": "team-a"}
    if kueue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _patch(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else None


@pytest.mark.parametrize(
    ("job", "operation", "want"),
    [
        pytest.param(_job(kueue=True), "CREATE", [{"op": "add", "path": "/spec/suspend", "value": True}],
                     id="a Kueue-queued Job without suspend is created suspended"),
        pytest.param(_job(kueue=True, suspend=False), "CREATE",
                     [{"op": "replace", "path": "/spec/suspend", "value": True}], id="suspend: false is replaced"),
        pytest.param(_job(t9k_queue="demo"), "CREATE", [{"op": "add", "path": "/spec/suspend", "value": True}],
                     id="a Job on a T9k Queue too"),
        pytest.param(_job(kueue=True, suspend=True), "CREATE", None, id="already suspended: nothing to do"),
        pytest.param(_job(), "CREATE", None, id="not queued: not ours"),
        pytest.param(_job(t9k_queue="demo", scheduler="default-scheduler"), "CREATE", None,
                     id="a queue label without t9k-scheduler is not T9k's"),
        pytest.param(_job(kueue=True), "UPDATE", None, id="only on create (the scheduler unsuspends later)"),
    ],
)
def test_mutate_job(job: dict[str, Any], operation: str, want: list[dict[str, Any]] | None) -> None:
    answer = review.mutate_job(_review(job, operation))
    assert answer["response"]["allowed"] is True and answer["response"]["uid"] == "u-1"
    assert _patch(answer) == want


def test_validate_object_refuses_with_the_parsers_field_and_message() -> None:
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "cq"},
          "spec": {"cohort": "all", "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
              {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 12, "lendingLimit": 13}]}]}]}}
    answer = review.validate_object(_review(cq))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert answer["status"]["message"] == (
        "ClusterQueue cq: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be less than or equal "
        "to the nominalQuota (13 > 12)")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = 12
    assert review.validate_object(_review(cq))["response"]["allowed"] is True


def test_validate_t9k_job_with_the_seeds_queue() -> None:
    queue = {"metadata": {"name": "demo", "namespace": "t9k-system"},
             "spec": {"users": ["alice"], "quota": {"requests": {"cpu": 40}}},
             "status": {"allocated": {"cpu": "38"}}}
    lookup = review.Lookup(queue=queue, namespace_labels={})
    refused = review.validate_t9k_job(_review(_job(t9k_queue="demo", cpu="4")), lookup)["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"] == (
        "Queue demo: cpu quota 40, allocated 38, request 4: 42 would exceed the quota")
    assert review.validate_t9k_job(_review(_job(t9k_queue="demo", cpu="2")), lookup)["response"]["allowed"] is True
    bob = review.validate_t9k_job(_review(_job(t9k_queue="demo", cpu="1"), user="bob"), lookup)["response"]
    assert bob["allowed"] is False and "user 'bob' may not use Queue demo" in bob["status"]["message"]
    missing = review.validate_t9k_job(_review(_job(t9k_queue="demo")), review.Lookup(None, {}))["response"]
    assert missing["status"]["message"] == "Queue demo does not exist in namespace t9k-system"
    not_t9k = review.validate_t9k_job(_review(_job(kueue=True)), review.Lookup(None, {}))["response"]
    assert not_t9k["allowed"] is True


_ZONES = {"metadata": {"name": "demo", "namespace": "t9k-system"}, "spec": {"nodeSelector": {
    "matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["peking", "tianjin"]}]}}}
_SEED_TERM = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["peking", "tianjin"]}


def test_the_seeds_node_selector_becomes_required_node_affinity_at_creation() -> None:
    answer = review.mutate_job(_review(_job(t9k_queue="demo")), _ZONES)
    patch = _patch(answer)
    assert patch == [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/template/spec/affinity", "value": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [_SEED_TERM]}]}}}},
    ]


def test_the_queues_selector_is_anded_into_every_term_the_pod_already_has() -> None:
    job = _job(t9k_queue="demo", suspend=True)
    job["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}
    queue = {**_ZONES, "spec": {"nodeSelector": {"matchLabels": {"pool": "a"}}}}
    (op,) = _patch(review.mutate_job(_review(job), queue)) or []
    assert op["op"] == "replace"
    terms = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    pool = {"key": "pool", "operator": "In", "values": ["a"]}
    assert terms == [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}, pool]},
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
                      "matchExpressions": [pool]}]
    assert _patch(review.mutate_job(_review(_job(t9k_queue="demo")), {**_ZONES, "spec": {}})) == [
        {"op": "add", "path": "/spec/suspend", "value": True}]


def _pod(*, gates: list[dict[str, str]] | None = None, owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1" if owner == "Job" else "apps/v1", "kind": owner,
                                    "name": "o", "uid": "u-o", "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


GATE = {"name": "kueue.x-k8s.io/admission"}


@pytest.mark.parametrize(
    ("pod", "bound", "operation", "want"),
    [
        pytest.param(_pod(), True, "CREATE", [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}],
                     id="a pod in a bound namespace is created gated"),
        pytest.param(_pod(gates=[{"name": "other"}]), True, "CREATE",
                     [{"op": "add", "path": "/spec/schedulingGates/-", "value": GATE}], id="beside other gates"),
        pytest.param(_pod(owner="ReplicaSet"), True, "CREATE",
                     [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}],
                     id="a Deployment's pod is a workload of its own"),
        pytest.param(_pod(gates=[GATE]), True, "CREATE", None, id="gated already"),
        pytest.param(_pod(owner="Job"), True, "CREATE", None, id="a Job's pod: the Job is the workload"),
        pytest.param(_pod(), False, "CREATE", None, id="a namespace in no leaf is left alone"),
        pytest.param(_pod(), True, "UPDATE", None, id="only at creation"),
    ],
)
def test_mutate_pod(pod: dict[str, Any], bound: bool, operation: str, want: list[dict[str, Any]] | None) -> None:
    answer = review.mutate_pod(_review(pod, operation), bound=bound)
    assert answer["response"]["allowed"] is True
    assert _patch(answer) == want


def test_a_job_without_a_queue_label_in_a_bound_namespace_goes_to_local_queue_default_suspended() -> None:
    job = _job()
    assert _patch(review.mutate_job(_review(job))) is None, "not bound: not Kueue's"
    assert _patch(review.mutate_job(_review(job), bound=True)) == [
        {"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}},
        {"op": "add", "path": "/spec/suspend", "value": True}]
    job["metadata"]["labels"] = {"team": "a"}
    assert _patch(review.mutate_job(_review(job), bound=True))[0] == {  # type: ignore[index]
        "op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "default"}
    job["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u"}]
    assert _patch(review.mutate_job(_review(job), bound=True)) is None, "a CronJob's Job is its own"
