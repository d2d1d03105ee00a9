"""Kueue's pod integration, pure: plain pods, pod groups, Deployments, StatefulSets and
LeaderWorkerSets (``events.jobkinds.pods``, ``serving``, ``pod_documents``), the actuator's plan
and release patch (``services.actuator.podgroups``), the webhooks' gate (``services.webhook.review``)
and the watcher's reading of a Finished Workload."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from events.cluster import ADMISSION_GATE, QUEUE_NAME_LABEL
from events.jobkinds import parse_kind_names
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.naming import workload_name
from events.jobkinds.pod_documents import expand
from events.manifests import Document, ManifestError
from events.messages import WorkloadFinished
from services.actuator.podgroups import gone_for_good, plan_pods, pod_release_patch, to_stop
from services.watcher.translate import translate
from services.webhook import review

GATE = {"name": ADMISSION_GATE}
Q = {QUEUE_NAME_LABEL: "user-queue"}


def spec(cpu: str = "1", **extra: Any) -> dict[str, Any]:
    return {"restartPolicy": "Never", **extra,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}


def pod(name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        cpu: str = "1", phase: str = "", gated: bool = True, uid: str = "", **meta: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                                         "labels": {**Q, **(labels or {})}, "annotations": annotations or {},
                                         "resourceVersion": "7", **meta},
                            "spec": spec(cpu, **({"schedulingGates": [GATE]} if gated else {}))}
    if phase:
        body["status"] = {"phase": phase}
    return body


def group(name: str, total: int | str) -> tuple[dict[str, str], dict[str, str]]:
    return {p.GROUP_NAME: name}, {p.GROUP_TOTAL_COUNT: str(total)}


def docs(*bodies: dict[str, Any]) -> list[Document]:
    return [Document("f.yaml", i + 1, b) for i, b in enumerate(bodies)]


# --- the role hash: Kueue's own test vectors ---------------------------------------------------


@pytest.mark.parametrize(("pod_spec", "want"), [
    pytest.param({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}, "dc85db45",
                 id="cpu 1 (pod_controller_test: dc85db45)"),
    pytest.param({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
                 "4ebdd4a6", id="cpu 1, memory 1Gi (pod_controller_test: 4ebdd4a6)"),
    pytest.param({"containers": [{"name": "other", "image": "x", "command": ["a"],
                                  "resources": {"requests": {"cpu": "1000m"}}}]}, "dc85db45",
                 id="names, images, commands and the quantity's spelling do not count"),
])
def test_role_hash_is_kueues(pod_spec: dict[str, Any], want: str) -> None:
    assert p.role_hash(pod_spec) == want


@pytest.mark.parametrize(("raw", "want"), [("1000m", "1"), ("0.5", "500m"), ("1024Mi", "1Gi"), ("2000", "2k"),
                                           ("1500", "1500"), ("1.5Gi", "1536Mi"), (3, "3"), ("0", "0")])
def test_quantities_in_kubernetes_canonical_form(raw: object, want: str) -> None:
    assert p.canonical_quantity(raw) == want


# --- simulate: manifests to Kueue's Workloads --------------------------------------------------


def _wl(doc: Document) -> tuple[str, list[tuple[str, int]], list[str]]:
    b = doc.body
    return (b["metadata"]["name"], [(ps["name"], ps["count"]) for ps in b["spec"]["podSets"]],
            [f"{r['kind']}/{r['name']}" for r in b["metadata"]["ownerReferences"]])


def test_a_single_pod_is_one_workload_named_after_the_pod() -> None:
    [wl] = expand(docs(pod("sleep")))
    assert _wl(wl) == (workload_name("Pod", "", "sleep", "uid-sleep"), [("main", 1)], ["Pod/sleep"])
    assert wl.body["metadata"]["name"].startswith("pod-sleep-")


def test_a_group_is_one_workload_once_complete_with_a_podset_per_role() -> None:
    labels, ann = group("g", 3)
    out = expand(docs(pod("leader", labels, ann, cpu="2"), pod("w0", labels, ann), pod("w1", labels, ann)))
    [wl] = out
    assert _wl(wl) == ("g", sorted([(p.role_hash(spec("2")), 1), (p.role_hash(spec("1")), 2)]),
                       ["Pod/leader", "Pod/w0", "Pod/w1"])
    assert wl.index == 3  # where its last pod completes it
    assert wl.body["metadata"]["annotations"][p.IS_GROUP_WORKLOAD] == "true"


@pytest.mark.parametrize(("bodies", "field", "message"), [
    pytest.param([pod("a", *group("g", 2)), pod("b", *group("g", 3))], "metadata.annotations." + p.GROUP_TOTAL_COUNT,
                 "pods 'a' and 'b' of group 'g' have different 'kueue.x-k8s.io/pod-group-total-count' values: 2!=3",
                 id="mismatched total counts"),
    pytest.param([pod("a", {}, {p.GROUP_TOTAL_COUNT: "2"})], "metadata.labels." + p.GROUP_NAME,
                 "both the", id="a count without a group name"),
    pytest.param([pod("a", {p.GROUP_NAME: "g"}, {})], "metadata.annotations." + p.GROUP_TOTAL_COUNT,
                 "both the", id="a group name without a count"),
    pytest.param([pod("a", *group("g", "zero"))], "metadata.annotations." + p.GROUP_TOTAL_COUNT,
                 "not an integer", id="a count that is no integer"),
    pytest.param([pod("a", *group("g", 0))], "metadata.annotations." + p.GROUP_TOTAL_COUNT,
                 "greater than zero", id="a count of zero"),
    pytest.param([pod("a", *group("g", 3)), pod("b", *group("g", 3))], "metadata.annotations." + p.GROUP_TOTAL_COUNT,
                 "has 2 runnable pod(s) of 3", id="a group short of pods"),
    pytest.param([pod("a", *group("g", 2)),
                  pod("b", {**group("g", 2)[0], QUEUE_NAME_LABEL: "other"}, group("g", 2)[1])],
                 "metadata.labels." + QUEUE_NAME_LABEL, "different queue names", id="two queues in one group"),
])
def test_a_group_kueue_refuses_names_the_pod_and_the_annotation(bodies: list[dict[str, Any]], field: str,
                                                                message: str) -> None:
    with pytest.raises(ManifestError) as e:
        expand(docs(*bodies))
    assert e.value.obj.startswith("Pod default/") and e.value.field == field and message in e.value.message


def test_pods_kueue_does_not_manage_are_dropped() -> None:
    unqueued = pod("free")
    unqueued["metadata"]["labels"] = {}
    system = pod("sys")
    system["metadata"]["namespace"] = "kube-system"
    assert expand(docs(unqueued, system)) == []


def test_a_pods_bad_request_is_reported_at_the_pods_field() -> None:
    bad = pod("bad", cpu="lots")
    with pytest.raises(ManifestError) as e:
        expand(docs(bad))
    assert e.value.obj == "Pod default/bad" and e.value.field.startswith("spec.containers[0].resources.requests")


def _serving(kind: str, api_version: str, spec_: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "labels": dict(Q)}, "spec": spec_}


TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": spec("100m")}


def test_a_deployments_pods_are_each_a_workload_that_never_ends() -> None:
    out = expand(docs(_serving("Deployment", "apps/v1", {"replicas": 2, "template": TEMPLATE})))
    assert [(_wl(d)[1], d.body["metadata"]["annotations"]["kueuelog.io/sim-duration"]) for d in out] == [
        ([("main", 1)], "never")] * 2
    assert [d.body["metadata"]["labels"][p.MANAGED] for d in out] == ["true", "true"]


def test_a_statefulset_is_one_group_of_replicas() -> None:
    [wl] = expand(docs(_serving("StatefulSet", "apps/v1", {"replicas": 3, "template": TEMPLATE})))
    assert _wl(wl) == (s.statefulset_workload_name("web", "uid-web"), [("main", 3)], ["StatefulSet/web"])
    assert wl.body["metadata"]["name"].startswith("statefulset-web-")
    assert expand(docs(_serving("StatefulSet", "apps/v1", {"replicas": 0, "template": TEMPLATE}))) == []


@pytest.mark.parametrize(("lwt", "want"), [
    pytest.param({"size": 3, "leaderTemplate": TEMPLATE, "workerTemplate": TEMPLATE}, [("leader", 1), ("worker", 2)],
                 id="leader and workers"),
    pytest.param({"size": 4, "workerTemplate": TEMPLATE}, [("main", 4)], id="workers only"),
])
def test_a_leaderworkerset_is_one_group_per_replica(lwt: dict[str, Any], want: list[tuple[str, int]]) -> None:
    out = expand(docs(_serving("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1",
                               {"replicas": 2, "leaderWorkerTemplate": lwt})))
    assert [_wl(d) for d in out] == [
        (workload_name("LeaderWorkerSet", "leaderworkerset.x-k8s.io", f"web-{i}", "uid-web"), want,
         ["LeaderWorkerSet/web"]) for i in range(2)]


def test_a_serving_objects_bad_template_names_its_field() -> None:
    bad = _serving("StatefulSet", "apps/v1", {"replicas": 1, "template": {"spec": spec("many")}})
    with pytest.raises(ManifestError) as e:
        expand(docs(bad))
    assert e.value.obj == "StatefulSet default/web"
    assert e.value.field.startswith("spec.template.spec.containers[0].resources.requests")


# --- finishing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("phases", "annotations", "want"), [
    (["Succeeded", "Succeeded"], {}, "Pods succeeded: 2/2."),
    (["Succeeded", "Running"], {}, None),
    (["Succeeded", "Failed"], {}, None),  # a failed pod is retried: a replacement may still come
    (["Succeeded", "Failed"], {p.RETRIABLE_IN_GROUP: "false"}, "Pods succeeded: 1/2."),
    (["Succeeded", "Succeeded"], {p.SERVING: "true"}, None),
])
def test_when_a_group_is_finished(phases: list[str], annotations: dict[str, str], want: str | None) -> None:
    infos = [p.PodInfo("ns", f"p{i}", f"u{i}", annotations=annotations, phase=ph) for i, ph in enumerate(phases)]
    ended = p.group_finished(infos, 2)
    assert (ended.message if ended else None) == want


# --- the actuator's plan and patches ------------------------------------------------------------


def test_plan_creates_group_workloads_only_when_complete_and_finishes_them() -> None:
    labels, ann = group("g", 2)
    plan = plan_pods([pod("a", labels, ann)], [], [])
    assert plan.create == [] and plan.errors == []
    plan = plan_pods([pod("a", labels, ann), pod("b", labels, ann), pod("solo")], [], [])
    assert sorted(b["metadata"]["name"] for b in plan.create) == sorted(
        ["g", workload_name("Pod", "", "solo", "uid-solo")])
    wl = {"metadata": {"name": "g", "namespace": "default", "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "uid-a"}]}, "status": {}}
    done = plan_pods([pod("a", labels, ann, phase="Succeeded", gated=False),
                      pod("b", labels, ann, phase="Succeeded", gated=False)], [], [wl])
    assert [(w["metadata"]["name"], f.message) for w, f in done.finish] == [("g", "Pods succeeded: 2/2.")]
    orphans = plan_pods([], [], [wl]).orphans  # its pods are gone from the queued list...
    assert [w["metadata"]["name"] for w in orphans] == ["g"]
    assert gone_for_good(wl, [], [])  # ...and from the namespace
    unqueued = pod("a", gated=False)
    unqueued["metadata"]["labels"] = {}
    assert not gone_for_good(wl, [unqueued], [])  # an unqueued pod of that uid still owns it


def test_plan_labels_a_statefulsets_pods_into_its_group_and_makes_its_workload() -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "labels": dict(Q)},
           "spec": {"replicas": 2, "template": TEMPLATE}}
    owner = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "uid-web", "controller": True}]
    plan = plan_pods([pod("web-0", ownerReferences=owner)], [sts], [])
    name = s.statefulset_workload_name("web", "uid-web")
    assert [(b["metadata"]["name"], b["spec"]["podSets"][0]["count"]) for b in plan.create] == [(name, 2)]
    [(_, pod_name, patch)] = plan.label
    assert pod_name == "web-0" and patch["metadata"]["labels"][p.GROUP_NAME] == name
    assert patch["metadata"]["annotations"] == {p.GROUP_TOTAL_COUNT: "2", p.FAST_ADMISSION: "true",
                                                p.SERVING: "true", p.ROLE_HASH: "main"}
    scaled = {**sts, "spec": {**sts["spec"], "replicas": 0}}
    assert plan_pods([], [scaled], [{"metadata": {"name": name, "namespace": "default"}}]).delete == [
        ("default", name)]


def test_an_elastic_quota_trees_namespaces_are_left_to_its_pod_reconciler() -> None:
    assert plan_pods([pod("solo")], [], [], skip=frozenset({"default"})).create == []


def test_a_mismatched_group_is_reported_not_made() -> None:
    plan = plan_pods([pod("a", *group("g", 2)), pod("b", *group("g", 3))], [], [])
    assert plan.create == [] and len(plan.errors) == 1 and "Pod default/b" in plan.errors[0]


def test_release_patch_lifts_only_our_gate_and_adds_the_flavors_scheduling() -> None:
    body = pod("a")
    body["spec"]["schedulingGates"].append({"name": "other"})
    body["spec"]["nodeSelector"] = {"disk": "ssd"}
    patch = pod_release_patch(body, {"zone": "a"}, [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert patch == {"metadata": {"resourceVersion": "7"},
                     "spec": {"schedulingGates": [{"name": "other"}], "nodeSelector": {"disk": "ssd", "zone": "a"},
                              "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    assert pod_release_patch(pod("b", gated=False), {"zone": "a"}, []) is None


def test_eviction_stops_running_pods_only() -> None:
    assert to_stop(pod("r", phase="Running", gated=False))
    assert not to_stop(pod("g"))  # still gated: nothing to stop
    assert not to_stop(pod("s", phase="Succeeded", gated=False))


def test_job_kinds_take_pod() -> None:
    assert parse_kind_names("pod,JobSet") == ("JobSet", "Pod")


# --- the webhooks ----------------------------------------------------------------------------


def _review(obj: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {"request": {"uid": "u", "operation": "CREATE", "namespace": namespace, "object": obj}}


def _patch(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else None


def test_a_queued_pod_anywhere_is_created_gated_managed_with_its_role() -> None:
    body = pod("a", gated=False)
    assert _patch(review.mutate_pod(_review(body), bound=False)) == [
        {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"},
        {"op": "add", "path": "/metadata/annotations/kueue.x-k8s.io~1role-hash", "value": p.role_hash(body["spec"])},
        {"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}]
    assert _patch(review.mutate_pod(_review(body, "kueue-system"), bound=False)) is None
    unqueued = pod("b", gated=False)
    unqueued["metadata"]["labels"] = {}
    assert _patch(review.mutate_pod(_review(unqueued), bound=False)) is None


@pytest.mark.parametrize(("labels", "annotations", "field"), [
    ({}, {p.GROUP_TOTAL_COUNT: "2"}, "metadata.labels." + p.GROUP_NAME),
    ({p.GROUP_NAME: "g"}, {}, "metadata.annotations." + p.GROUP_TOTAL_COUNT),
    ({p.GROUP_NAME: "g"}, {p.GROUP_TOTAL_COUNT: "0"}, "metadata.annotations." + p.GROUP_TOTAL_COUNT),
])
def test_a_queued_pod_with_bad_group_metadata_is_refused_at_creation(labels: dict[str, str],
                                                                      annotations: dict[str, str], field: str) -> None:
    answer = review.mutate_pod(_review(pod("a", labels, annotations, gated=False)), bound=False)
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(f"Pod team-a/a: {field}: ")


def test_a_queued_deployments_template_is_queued_and_marked() -> None:
    dep = _serving("Deployment", "apps/v1", {"replicas": 1, "template": {"metadata": {"labels": {"app": "w"}},
                                                                        "spec": spec()}})
    assert _patch(review.mutate_serving(_review(dep))) == [
        {"op": "add", "path": "/spec/template/metadata/labels/kueue.x-k8s.io~1managed", "value": "true"},
        {"op": "add", "path": "/spec/template/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "user-queue"},
        {"op": "add", "path": "/spec/template/metadata/annotations",
         "value": {p.SUSPENDED_BY_PARENT: "deployment"}}]


# --- the watcher ----------------------------------------------------------------------------


def test_the_watcher_publishes_a_finished_pod_workload() -> None:
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
          "metadata": {"name": "g", "namespace": "default", "resourceVersion": "3",
                       "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "uid-a"}]},
          "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {"spec": spec()}}]},
          "status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded",
                                     "message": "Pods succeeded: 1/1.", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    tr = translate("Workload", "MODIFIED", wl, cluster="c", time_ms=5)
    assert tr.errors == []
    finished = [e.event for e in tr.envelopes if isinstance(e.event, WorkloadFinished)]
    assert [(f.name, f.succeeded, f.message) for f in finished] == [("g", True, "Pods succeeded: 1/1.")]


@pytest.mark.parametrize("value", [None, 1, True, "x", [], {}, [1], 1.5])
@pytest.mark.parametrize("path", [("spec",), ("spec", "schedulingGates"), ("metadata", "ownerReferences"),
                                  ("metadata", "labels"), ("metadata", "annotations"), ("status",)])
def test_a_hostile_pod_or_statefulset_never_stops_a_pass(path: tuple[str, ...], value: object) -> None:
    owner = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "uid-web", "controller": True}]
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "web", "namespace": "default", "uid": "uid-web", "labels": dict(Q)},
           "spec": {"replicas": 2, "template": TEMPLATE}}
    objs = [pod("a", *group("g", 2)), pod("solo"), pod("web-0", ownerReferences=owner), sts]
    for obj in objs:
        at: Any = obj
        for key in path[:-1]:
            at = at.setdefault(key, {})
        at[path[-1]] = value
        plan_pods(objs[:3], [objs[3]], [])
        for x in objs[:3]:
            pod_release_patch(x, {"zone": "a"}, [])
            to_stop(x)
