"""The serving kinds' webhook paths, pure (``services.webhook.serving_review``): a queued
LeaderWorkerSet's templates marked as Kueue's webhook marks them, and the StatefulSet and
LeaderWorkerSet updates Kueue refuses, each in one line naming the object and the field."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from events.cluster import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from services.webhook import serving_review as sr

Q = {QUEUE_NAME_LABEL: "user-queue"}


def template(cpu: str = "1", **meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "nginx",
                                                    "resources": {"requests": {"cpu": cpu}}}]}}
    if meta:
        out["metadata"] = meta
    return out


def lws(labels: dict[str, str] | None = None, leader: bool = True, **spec: Any) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": 3, "workerTemplate": template("1", labels={"app": "w"})}
    if leader:
        lwt["leaderTemplate"] = template("2")
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "srv", "namespace": "team-a", "uid": "uid-srv", "labels": dict(Q if labels is None
                                                                                               else labels)},
            "spec": {"replicas": 2, "leaderWorkerTemplate": lwt, **spec}}


def sts(replicas: int | None = 2, labels: dict[str, str] | None = None, cpu: str = "1",
        status: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": template(cpu)}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "team-a", "uid": "uid-web",
                         "labels": dict(Q if labels is None else labels)},
            "spec": spec, "status": status or {}}


def review(obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u", "operation": "UPDATE" if old is not None else "CREATE",
                               "namespace": "team-a", "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"request": request}


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else None


def test_a_queued_lws_templates_get_the_queue_the_parent_and_the_serving_mark() -> None:
    body = lws(labels={**Q, PRIORITY_CLASS_LABEL: "high"})
    ops = patch_of(sr.mutate_lws(review(body)))
    assert ops == [
        {"op": "add", "path": "/spec/leaderWorkerTemplate/leaderTemplate/metadata",
         "value": {"labels": {QUEUE_NAME_LABEL: "user-queue", PRIORITY_CLASS_LABEL: "high"},
                   "annotations": {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK, p.SERVING: "true"}}},
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/labels/kueue.x-k8s.io~1queue-name",
         "value": "user-queue"},
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/labels/"
                              "kueue.x-k8s.io~1priority-class", "value": "high"},
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/annotations",
         "value": {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK, p.SERVING: "true"}}]


def test_an_lws_marked_already_unqueued_or_in_kube_system_is_not_patched() -> None:
    body = lws(leader=False)
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": dict(Q), "annotations": {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK, p.SERVING: "true"}}
    assert patch_of(sr.mutate_lws(review(body))) is None
    assert patch_of(sr.mutate_lws(review(lws(labels={})))) is None
    in_kube_system = review(lws())
    in_kube_system["request"]["namespace"] = "kube-system"
    assert patch_of(sr.mutate_lws(in_kube_system)) is None


def _changed(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    at = out
    for key in path[:-1]:
        at = at[key]
    if value is None:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return out


LWT = ("spec", "leaderWorkerTemplate")


@pytest.mark.parametrize(("old", "new", "want"), [
    pytest.param(None, lws(labels={QUEUE_NAME_LABEL: "Not_A_Queue"}),
                 "LeaderWorkerSet team-a/srv: metadata.labels.kueue.x-k8s.io/queue-name: invalid value 'Not_A_Queue'",
                 id="a queue name that is no LocalQueue name"),
    pytest.param(None, lws(replicas=1_000_001),
                 "LeaderWorkerSet team-a/srv: spec.replicas: invalid LeaderWorkerSet replicas: must be between 0 and "
                 "1000000, got 1000001", id="more replicas than Kueue takes"),
    pytest.param(lws(), _changed(lws(), (*LWT, "size"), 4),
                 "LeaderWorkerSet team-a/srv: spec.leaderWorkerTemplate.size: field is immutable",
                 id="the group size of a queued set"),
    pytest.param(lws(), _changed(lws(), (*LWT, "workerTemplate", "spec", "containers", 0, "resources"),
                                 {"requests": {"cpu": "3"}}),
                 "LeaderWorkerSet team-a/srv: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources"
                 ".requests.cpu: field is immutable", id="a worker's requests"),
    pytest.param(lws(), _changed(lws(), (*LWT, "leaderTemplate", "spec", "nodeSelector"), {"disk": "ssd"}),
                 "LeaderWorkerSet team-a/srv: spec.leaderWorkerTemplate.leaderTemplate.spec.nodeSelector: "
                 "field is immutable", id="the leader's node selector"),
    pytest.param(lws(), _changed(lws(), (*LWT, "leaderTemplate"), None),
                 "LeaderWorkerSet team-a/srv: spec.leaderWorkerTemplate.leaderTemplate: field is immutable",
                 id="the leader template removed"),
    pytest.param(lws(), lws(labels={}),
                 "LeaderWorkerSet team-a/srv: metadata.labels.kueue.x-k8s.io/queue-name: field is immutable",
                 id="the queue label removed"),
    pytest.param({**lws(), "status": {"readyReplicas": 1}}, lws(labels={QUEUE_NAME_LABEL: "other"}),
                 "LeaderWorkerSet team-a/srv: metadata.labels.kueue.x-k8s.io/queue-name: field is immutable",
                 id="the queue changed while replicas are ready"),
    pytest.param(lws(labels={**Q, PRIORITY_CLASS_LABEL: "high"}), lws(),
                 "LeaderWorkerSet team-a/srv: metadata.labels.kueue.x-k8s.io/priority-class: WorkloadPriorityClass "
                 "cannot be removed from a workload", id="the priority class removed"),
    pytest.param(sts(2), sts(3), "StatefulSet team-a/web: spec.replicas: field is immutable",
                 id="a StatefulSet resized between non-zero counts (Kueue: only through zero)"),
    pytest.param(sts(2), sts(None), "StatefulSet team-a/web: spec.replicas: field is immutable",
                 id="unset replicas is 1: to 1 from 2 is refused too"),
    pytest.param(sts(0), sts(2, status={"replicas": 1}),
                 "StatefulSet team-a/web: spec.replicas: scaling down is still in progress",
                 id="up from zero while the old pods are still there"),
    pytest.param(sts(2), sts(2, cpu="2"),
                 "StatefulSet team-a/web: spec.template.spec.containers[0].resources.requests.cpu: field is immutable",
                 id="a queued StatefulSet's requests"),
])
def test_kueues_refusals(old: dict[str, Any] | None, new: dict[str, Any], want: str) -> None:
    answer = sr.validate_serving(review(new, old))["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith(want)


@pytest.mark.parametrize(("old", "new"), [
    pytest.param(None, lws(), id="a queued set created"),
    pytest.param(lws(), lws(replicas=5), id="an LWS scaled (a Workload per replica follows)"),
    pytest.param(lws(), lws(labels={QUEUE_NAME_LABEL: "other"}), id="the queue changed while none is ready"),
    pytest.param(lws(), _changed(lws(), (*LWT, "workerTemplate", "spec", "containers", 0, "image"), "nginx:2"),
                 id="a change that is no part of admission (the image)"),
    pytest.param(lws(labels={}), _changed(lws(labels={}), (*LWT, "size"), 5), id="an unqueued set is not Kueue's"),
    pytest.param(sts(2), sts(0), id="a StatefulSet scaled to zero"),
    pytest.param(sts(0), sts(3), id="and up from zero once its pods and Workload are gone"),
    pytest.param(sts(2, labels={}), sts(5, labels={}), id="an unqueued StatefulSet resized"),
])
def test_what_kueue_lets_through(old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    assert sr.validate_serving(review(new, old))["response"]["allowed"] is True


def test_up_from_zero_waits_for_the_previous_workload_to_go() -> None:
    request = review(sts(3), sts(0))["request"]
    assert sr.statefulset_scaled_up_from_zero(request) == ("team-a", s.statefulset_workload_name("web", "uid-web"))
    assert sr.refusal(request, workload_exists=True) == (
        "StatefulSet team-a/web: spec.replicas: workload from previous scale-down is still being deleted")
    assert sr.statefulset_scaled_up_from_zero(review(sts(3), sts(2))["request"]) is None
    assert sr.statefulset_scaled_up_from_zero(review(sts(3, labels={}), sts(0, labels={}))["request"]) is None


def test_a_leaderworkersets_statefulset_is_the_sets_not_a_queued_statefulsets() -> None:
    """Kueue's ``managedByAnotherFramework``: the LWS controller's StatefulSets carry the set's marked
    templates; resizing them is the LWS controller's business, and they get no StatefulSet marks."""
    from services.webhook import review as rv
    old, new = sts(2), sts(3)
    for body in (old, new):
        body["spec"]["template"]["metadata"] = {"annotations": {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK}}
    assert sr.validate_serving(review(new, old))["response"]["allowed"] is True
    assert patch_of(rv.mutate_serving(review(new))) is None
    assert sr.validate_serving(review(sts(3), sts(2)))["response"]["allowed"] is False
