"""LeaderWorkerSet on a cluster, pure (``services.actuator.lws`` through ``podgroups.plan_pods``): a
Workload per replica made from the set, its pods labelled into their replica's group as Kueue's
LeaderWorkerSet reconciler does, scaled-down replicas' Workloads deleted, a deleted set's orphaned."""

from __future__ import annotations

from typing import Any

import pytest

from events.cluster import ADMISSION_GATE, QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.naming import workload_name
from services.actuator import group_release as gr
from services.actuator.kubeplan import FlavorScheduling
from services.actuator.podgroups import gone_for_good, plan_pods, pod_set_of

Q = {QUEUE_NAME_LABEL: "user-queue"}
NS = "default"


def template(cpu: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]}}


def lws(replicas: int = 2, size: int = 3, leader: bool = True, labels: dict[str, str] | None = None,
        uid: str = "uid-lws") -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": size, "workerTemplate": template("1")}
    if leader:
        lwt["leaderTemplate"] = template("2")
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "srv", "namespace": NS, "uid": uid, "labels": dict(Q if labels is None else labels)},
            "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt}}


def lws_pod(name: str, index: str | None, worker: bool, extra_labels: dict[str, str] | None = None,
            extra_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as the LWS controller makes it (and the webhook left it: queued, gated)."""
    labels = {**Q, s.LWS_NAME_LABEL: "srv", **(extra_labels or {})}
    if index is not None:
        labels[s.LWS_GROUP_INDEX_LABEL] = index
    annotations = {s.LWS_LEADER_NAME_ANNOTATION: f"srv-{index}"} if worker else {}
    sts = f"srv-{index}" if not worker else f"srv-{index}-workers"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "5",
                         "labels": labels, "annotations": {**annotations, **(extra_annotations or {})},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts,
                                              "uid": f"uid-{sts}", "controller": True}]},
            "spec": {**template("1")["spec"], "schedulingGates": [{"name": ADMISSION_GATE}]}}


def wl_name(index: int, uid: str = "uid-lws") -> str:
    return workload_name("LeaderWorkerSet", "leaderworkerset.x-k8s.io", f"srv-{index}", uid)


def test_the_workload_name_is_kueues() -> None:
    assert s.lws_workload_name("srv", "uid-lws", 1) == wl_name(1)
    assert wl_name(0).startswith("leaderworkerset-srv-0-") and len(wl_name(0)) == len("leaderworkerset-srv-0-") + 5


@pytest.mark.parametrize(("leader", "want"), [
    pytest.param(True, [("leader", 1, "2"), ("worker", 2, "1")], id="with a leader template: leader 1, workers size-1"),
    pytest.param(False, [("main", 3, "1")], id="without one: main of size pods from the worker template"),
])
def test_a_queued_set_gets_a_workload_per_replica(leader: bool, want: list[tuple[str, int, str]]) -> None:
    plan = plan_pods([], [], [], leaderworkersets=[lws(leader=leader)])
    assert [b["metadata"]["name"] for b in plan.create] == [wl_name(0), wl_name(1)]
    for body in plan.create:
        [owner] = body["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "srv", "uid-lws", True)
        assert body["metadata"]["annotations"] == {p.IS_GROUP_WORKLOAD: "true"}
        assert body["spec"]["queueName"] == "user-queue"
        got = [(ps["name"], ps["count"], ps["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"])
               for ps in body["spec"]["podSets"]]
        assert got == want


def test_an_unqueued_set_or_one_in_kube_system_is_left_alone() -> None:
    assert plan_pods([], [], [], leaderworkersets=[lws(labels={})]).create == []
    in_kube_system = lws()
    in_kube_system["metadata"]["namespace"] = "kube-system"
    assert plan_pods([], [], [], leaderworkersets=[in_kube_system]).create == []


def _existing(*indexes: int, uid: str = "uid-lws") -> list[dict[str, Any]]:
    return [{"metadata": {"name": wl_name(i, uid), "namespace": NS, "ownerReferences": [
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "srv", "uid": uid}]}}
        for i in indexes]


def test_scaling_down_deletes_the_replicas_past_the_new_count_and_up_creates_them() -> None:
    down = plan_pods([], [], _existing(0, 1, 2), leaderworkersets=[lws(replicas=1)])
    assert down.create == [] and down.delete == [(NS, wl_name(1)), (NS, wl_name(2))]
    up = plan_pods([], [], _existing(0), leaderworkersets=[lws(replicas=3)])
    assert [b["metadata"]["name"] for b in up.create] == [wl_name(1), wl_name(2)] and up.delete == []
    zero = plan_pods([], [], _existing(0, 1), leaderworkersets=[lws(replicas=0)])
    assert zero.create == [] and zero.delete == [(NS, wl_name(0)), (NS, wl_name(1))]


def test_another_objects_workloads_are_not_the_sets_to_delete() -> None:
    other = _existing(5, uid="uid-other")  # same namespace, owned by an older set of the same name
    plan = plan_pods([], [], other, leaderworkersets=[lws(replicas=1)])
    assert plan.delete == [] and [wl["metadata"]["name"] for wl in plan.orphans] == [wl_name(5, "uid-other")]


def test_a_deleted_sets_workloads_are_orphans_until_its_namespace_has_no_such_set() -> None:
    plan = plan_pods([], [], _existing(0, 1), leaderworkersets=[])
    assert [wl["metadata"]["name"] for wl in plan.orphans] == [wl_name(0), wl_name(1)]
    unqueued = lws(labels={})  # lost its queue label: still there, still the owner
    assert not gone_for_good(plan.orphans[0], [], [], [unqueued])
    assert gone_for_good(plan.orphans[0], [], [], [])


@pytest.mark.parametrize(("worker", "leader", "role"), [
    pytest.param(False, True, "leader", id="the leader (no leader-name annotation)"),
    pytest.param(True, True, "worker", id="a worker (the LWS controller names its leader)"),
    pytest.param(True, False, "main", id="without a leader template every pod is main"),
])
def test_a_sets_pod_is_labelled_into_its_replicas_group(worker: bool, leader: bool, role: str) -> None:
    plan = plan_pods([lws_pod("srv-1-1", "1", worker)], [], _existing(0, 1),
                     leaderworkersets=[lws(leader=leader)])
    [(ns, name, patch)] = plan.label
    assert (ns, name) == (NS, "srv-1-1")
    group = wl_name(1)
    assert patch == {"metadata": {"resourceVersion": "5",
                                  "labels": {p.MANAGED: "true", p.GROUP_NAME: group, p.PREBUILT_WORKLOAD: group},
                                  "annotations": {p.GROUP_TOTAL_COUNT: "3", p.ROLE_HASH: role, p.SERVING: "true"}}}


def test_a_pod_in_its_group_already_is_a_serving_member_that_never_finishes() -> None:
    labels = {p.MANAGED: "true", p.GROUP_NAME: wl_name(0), p.PREBUILT_WORKLOAD: wl_name(0)}
    annotations = {p.GROUP_TOTAL_COUNT: "3", p.ROLE_HASH: "worker", p.SERVING: "true"}
    member = lws_pod("srv-0-1", "0", True, labels, annotations)
    member["status"] = {"phase": "Succeeded"}
    plan = plan_pods([member], [], _existing(0, 1), leaderworkersets=[lws()])
    assert plan.label == [] and plan.create == [] and plan.finish == [] and plan.errors == []
    assert pod_set_of(member, {"metadata": {"annotations": {p.IS_GROUP_WORKLOAD: "true"}}}) == "worker"


def test_a_pod_without_its_group_index_yet_or_of_an_unqueued_set_is_not_touched() -> None:
    assert plan_pods([lws_pod("srv-0", None, False)], [], [], leaderworkersets=[lws()]).label == []
    plan = plan_pods([lws_pod("srv-0", "0", False)], [], [], leaderworkersets=[])
    assert plan.label == [] and plan.create == []  # not made a plain pod's Workload either


def test_the_sets_statefulsets_are_not_queued_statefulsets() -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "srv-0", "namespace": NS, "uid": "uid-srv-0",
                        "labels": {**Q, s.LWS_NAME_LABEL: "srv"}},
           "spec": {"replicas": 1, "template": template("1")}}
    assert plan_pods([], [sts], [], leaderworkersets=[lws(replicas=0)]).create == []


def test_a_set_kueue_cannot_read_is_reported_naming_the_field() -> None:
    bad = lws()
    bad["spec"]["leaderWorkerTemplate"]["size"] = 0
    plan = plan_pods([], [], [], leaderworkersets=[bad])
    assert plan.create == [] and len(plan.errors) == 1
    assert plan.errors[0].startswith("LeaderWorkerSet default/srv: spec.leaderWorkerTemplate.size: ")


# --- pods made after their group's admission (services.actuator.group_release) ----------------


def _admitted(name: str, admitted: bool = True) -> dict[str, Any]:
    return {"spec": {"podSets": [{"name": "leader", "count": 1}, {"name": "worker", "count": 2}]},
            "metadata": {"name": name, "namespace": NS, "annotations": {p.IS_GROUP_WORKLOAD: "true"},
                         "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                              "name": "srv", "uid": "uid-lws"}]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "leader", "flavors": {"cpu": "on-demand"}, "count": 1},
                {"name": "worker", "flavors": {"cpu": "spot", "memory": "on-demand"}, "count": 2}]},
                "conditions": [{"type": "QuotaReserved", "status": "True"},
                               {"type": "Admitted", "status": "True" if admitted else "False"}]}}


def _member(name: str, index: str, worker: bool, gated: bool = True) -> dict[str, Any]:
    group = wl_name(int(index))
    body = lws_pod(name, index, worker, {p.MANAGED: "true", p.GROUP_NAME: group, p.PREBUILT_WORKLOAD: group},
                   {p.GROUP_TOTAL_COUNT: "3", p.ROLE_HASH: "worker" if worker else "leader", p.SERVING: "true"})
    if not gated:
        body["spec"].pop("schedulingGates")
    return body


def test_a_gated_member_of_an_admitted_group_is_released_late() -> None:
    pods = [_member("srv-0", "0", False, gated=False), _member("srv-0-1", "0", True), _member("srv-1-1", "1", True)]
    plan = plan_pods(pods, [], [_admitted(wl_name(0)), _admitted(wl_name(1), admitted=False)],
                     leaderworkersets=[lws()])
    assert [(pod["metadata"]["name"], wl) for pod, wl in plan.late] == [("srv-0-1", wl_name(0))]


def test_an_evicted_group_has_nothing_to_release() -> None:
    evicted = _admitted(wl_name(0))
    del evicted["status"]["admission"]
    assert not gr.admitted(evicted) and gr.admitted(_admitted(wl_name(0)))
    assert plan_pods([_member("srv-0-1", "0", True)], [], [evicted], leaderworkersets=[lws()]).late == []


def test_the_late_pod_gets_its_podsets_flavors_scheduling() -> None:
    wl = _admitted(wl_name(0))
    flavors = {"on-demand": FlavorScheduling("on-demand", (("tier", "od"),)),
               "spot": FlavorScheduling("spot", (("tier", "spot"), ("zone", "b")),
                                        ({"key": "spot", "operator": "Exists", "effect": "NoSchedule"},))}
    assert gr.flavors_of(wl) == ["on-demand", "spot"]
    got = gr.scheduling(wl, flavors)
    assert got["leader"] == ({"tier": "od"}, [])
    assert got["worker"] == ({"tier": "spot", "zone": "b"}, [{"key": "spot", "operator": "Exists",
                                                              "effect": "NoSchedule"}])


def test_never_more_pods_released_than_the_podset_admits() -> None:
    running = [_member("srv-0-1", "0", True, gated=False), _member("srv-0-2", "0", True, gated=False)]
    extra = _member("srv-0-3", "0", True)  # a third worker where the Workload admits two
    plan = plan_pods([*running, extra], [], [_admitted(wl_name(0))], leaderworkersets=[lws()])
    assert plan.late == []
    finished = _member("srv-0-2", "0", True, gated=False)
    finished["status"] = {"phase": "Failed"}  # a finished worker frees its place
    plan = plan_pods([running[0], finished, extra], [], [_admitted(wl_name(0))], leaderworkersets=[lws()])
    assert [pod["metadata"]["name"] for pod, _ in plan.late] == ["srv-0-3"]


def _sts(replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": NS, "uid": "uid-web", "labels": dict(Q)},
            "spec": {"replicas": replicas, "template": template("1")}}


def _sts_pod(i: int, total: int, gated: bool) -> dict[str, Any]:
    group = s.statefulset_workload_name("web", "uid-web")
    body = lws_pod(f"web-{i}", None, False)
    body["metadata"]["labels"] = {**Q, p.MANAGED: "true", p.GROUP_NAME: group, p.PREBUILT_WORKLOAD: group}
    body["metadata"]["annotations"] = {p.GROUP_TOTAL_COUNT: str(total), p.FAST_ADMISSION: "true", p.SERVING: "true",
                                       p.ROLE_HASH: "main"}
    body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                            "uid": "uid-web", "controller": True}]
    if not gated:
        body["spec"].pop("schedulingGates")
    return body


def test_a_statefulset_resized_around_the_webhook_keeps_its_workload_and_its_pods_labels() -> None:
    """Kueue's webhook refuses a resize between non-zero counts; one made anyway (the scale
    subresource, which no webhook of Kueue's covers) changes neither the Workload's count nor the
    total count its pods joined with, and the pod past the admitted count stays gated."""
    name = s.statefulset_workload_name("web", "uid-web")
    wl = {"metadata": {"name": name, "namespace": NS, "annotations": {p.IS_GROUP_WORKLOAD: "true"},
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                            "uid": "uid-web"}]},
          "spec": {"podSets": [{"name": "main", "count": 2}]},
          "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [
              {"name": "main", "flavors": {"cpu": "on-demand"}, "count": 2}]},
              "conditions": [{"type": "Admitted", "status": "True"}]}}
    new_pod = lws_pod("web-2", None, False)
    new_pod["metadata"]["labels"] = dict(Q)
    new_pod["metadata"]["ownerReferences"] = _sts_pod(0, 2, False)["metadata"]["ownerReferences"]
    plan = plan_pods([_sts_pod(0, 2, False), _sts_pod(1, 2, False), new_pod], [_sts(3)], [wl])
    assert plan.create == [] and plan.delete == [] and plan.late == []
    assert [(name_, patch["metadata"]["annotations"][p.GROUP_TOTAL_COUNT]) for _, name_, patch in plan.label] == [
        ("web-2", "3")]  # only the new pod joins, with the count of its day
    joined = _sts_pod(2, 3, True)
    plan = plan_pods([_sts_pod(0, 2, False), _sts_pod(1, 2, False), joined], [_sts(3)], [wl])
    assert plan.label == [] and plan.late == []  # two admitted, two running: the third waits
    plan = plan_pods([_sts_pod(0, 2, False), joined], [_sts(3)], [wl])
    assert [pod["metadata"]["name"] for pod, _ in plan.late] == ["web-2"]  # web-1 gone: room for one


def test_a_statefulset_with_another_frameworks_template_gets_no_workload_of_its_own() -> None:
    made_by_lws = _sts(2)
    made_by_lws["spec"]["template"]["metadata"] = {"annotations": {p.SUSPENDED_BY_PARENT: s.LWS_FRAMEWORK}}
    assert plan_pods([], [made_by_lws], []).create == []
    assert [b["metadata"]["name"] for b in plan_pods([], [_sts(2)], []).create] == [
        s.statefulset_workload_name("web", "uid-web")]
