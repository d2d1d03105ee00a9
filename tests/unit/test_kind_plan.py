"""The job integration of the workload kinds besides Job, pure (``services.actuator.kindplan``):
the reconciler's plan per object, and the actuator's admission and eviction patches, applied here
with a small RFC 6902 applier so what they do to the object is what is asserted."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from events import jobkinds
from events import objects as o
from events.cluster import (
    DECISION_ID_ANNOTATION,
    EVICTED_ANNOTATION,
    ORIGINAL_POD_SCHEDULING_ANNOTATION,
)
from events.messages import AdmitChecked, AdmitWorkload, EvictWorkload
from services.actuator.job_reconciler import JobError
from services.actuator.kindplan import kind_admit_ops, kind_evict_ops, plan_kind, suspend_merge_patch
from services.actuator.kubeapi import InvalidObject
from services.actuator.kubeplan import FlavorScheduling, idempotency
from tests.unit.test_job_kinds import jobset, kubeflow, rayjob, rj


def kind(api_version: str, name: str) -> jobkinds.JobKind:
    found = jobkinds.kind_of(api_version, name)
    assert found is not None
    return found


JS = kind("jobset.x-k8s.io/v1alpha2", "JobSet")
PT = kind("kubeflow.org/v1", "PyTorchJob")
RJ = kind("ray.io/v1", "RayJob")
SPOT = FlavorScheduling("spot", (("pool", "spot"),), ({"key": "spot", "operator": "Exists", "effect": "NoSchedule"},))
GPU = FlavorScheduling("a100", (("gpu", "a100"),))


def served(body: dict[str, Any], rv: str = "5") -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["resourceVersion"] = rv
    return out


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at: Any = out
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at[p]
        key: Any = int(last) if isinstance(at, list) else last
        if op["op"] == "remove":
            del at[key]
        else:
            assert op["op"] in ("add", "replace")
            at[key] = op["value"]
    return out


def admit(cycle: int = 2) -> AdmitWorkload:
    return AdmitWorkload(id=f"c{cycle}-0", cycle=cycle, time=1, namespace="ns", name="wl", cluster_queue="cq",
                         admission=o.Admission(cluster_queue="cq", pod_set_assignments=()))


def evict(cycle: int = 3) -> EvictWorkload:
    return EvictWorkload(id=f"c{cycle}-0", cycle=cycle, time=1, namespace="ns", name="wl", cluster_queue="cq",
                         reason="Preempted", message="to make room")


# --- the reconciler's plan ---------------------------------------------------------------------


def test_a_running_unadmitted_object_is_held_first() -> None:
    body = served(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1}))
    plan = plan_kind(PT, body)
    assert plan.suspend and plan.workload is None
    assert suspend_merge_patch(PT, plan.job) == {
        "metadata": {"resourceVersion": "5"}, "spec": {"runPolicy": {"suspend": True}}}


def test_a_held_object_gets_its_workload_as_kueue_builds_it() -> None:
    body = served(jobset(rj("workers", replicas=2, parallelism=2), rj("driver")))
    body["spec"]["suspend"] = True
    plan = plan_kind(JS, body)
    assert not plan.suspend and plan.workload is not None
    wl = plan.workload.body
    assert plan.workload.name == jobkinds.workload_name("JobSet", "jobset.x-k8s.io", "x", "uid-1")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("workers", 4), ("driver", 1)]
    assert wl["spec"]["queueName"] == "lq"
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "JobSet"


def test_admitted_running_is_left_and_finished_is_written() -> None:
    body = served(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1}))
    body["metadata"]["annotations"] = {DECISION_ID_ANNOTATION: "c2-0"}
    plan = plan_kind(PT, body)
    assert not plan.suspend and plan.workload is not None
    body["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "oom"}]}
    plan = plan_kind(PT, body)
    assert plan.finished is not None and (plan.finished.succeeded, plan.finished.message) == (False, "oom")


def test_not_queued_and_unreadable() -> None:
    assert plan_kind(JS, served(jobset(rj("w"), queue=None))).nothing_to_do
    bad = served(jobset({"name": "w"}))
    bad["spec"]["suspend"] = True
    plan = plan_kind(JS, bad)
    assert plan.invalid is not None and plan.invalid.field == "spec.replicatedJobs[0].template"
    with pytest.raises(JobError, match=r"metadata\.resourceVersion"):
        plan_kind(JS, jobset(rj("w")))


# --- the actuator's patches --------------------------------------------------------------------


def test_admission_then_eviction_round_trip_on_a_pytorchjob() -> None:
    body = served(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 2}))
    body["spec"]["runPolicy"] = {"suspend": True}
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    ops = kind_admit_ops(PT, body, admit(), {"master": [GPU], "worker": [SPOT]})
    assert ops[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}
    running = apply(body, ops)
    assert running["spec"]["runPolicy"]["suspend"] is False
    specs = running["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"zone": "a", "pool": "spot"}
    assert specs["Worker"]["template"]["spec"]["tolerations"] == [dict(SPOT.tolerations[0])]
    annotations = running["metadata"]["annotations"]
    assert annotations[DECISION_ID_ANNOTATION] == "c2-0"
    assert json.loads(annotations[ORIGINAL_POD_SCHEDULING_ANNOTATION]) == {
        "master": {"nodeSelector": {}, "tolerations": []}, "worker": {"nodeSelector": {"zone": "a"}, "tolerations": []}}
    assert idempotency(running, admit()) == "applied"

    held = apply(running, kind_evict_ops(PT, running, evict()))
    assert held["spec"]["runPolicy"]["suspend"] is True
    assert held["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    assert held["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {}
    assert held["metadata"]["annotations"][EVICTED_ANNOTATION] == "c3-0"
    assert ORIGINAL_POD_SCHEDULING_ANNOTATION not in held["metadata"]["annotations"]
    assert idempotency(held, admit(2)) == "stale"

    again = apply(held, kind_admit_ops(PT, held, admit(4), {"master": [SPOT], "worker": [GPU]}))
    assert EVICTED_ANNOTATION not in again["metadata"]["annotations"]
    assert again["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {
        "zone": "a", "gpu": "a100"}  # the old flavor's label is gone


def test_a_readmission_without_restore_starts_from_the_originals() -> None:
    body = served(jobset(rj("w")))
    body["spec"]["suspend"] = True
    first = apply(body, kind_admit_ops(JS, body, admit(), {"w": [SPOT]}))
    first["spec"]["suspend"] = True  # held by someone else, templates still injected
    second = apply(first, kind_admit_ops(JS, first, admit(5), {"w": [GPU]}))
    spec = second["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert (spec["nodeSelector"], spec["tolerations"]) == ({"gpu": "a100"}, [])


def test_rayjob_submitter_template_written_on_admission() -> None:
    body = served(rayjob(("g", 1, None)))
    body["spec"]["suspend"] = True
    flavors = {"head": [SPOT], "g": [SPOT], "submitter": [GPU]}
    running = apply(body, kind_admit_ops(RJ, body, admit(), flavors))
    assert running["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"gpu": "a100"}


def test_a_selector_conflict_is_an_invalid_object() -> None:
    body = served(jobset(rj("w")))
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "ondemand"}
    with pytest.raises(InvalidObject, match="podSet w: nodeSelector pool"):
        kind_admit_ops(JS, body, admit(), {"w": [SPOT]})


# --- an admission check's podSetUpdates, per podSet ----------------------------------------------

TOL = o.Toleration(key="provisioned", operator="Exists", effect="NoSchedule")


def checked(*updates: o.PodSetUpdate, cycle: int = 2) -> AdmitChecked:
    return AdmitChecked(id=f"c{cycle}-0", cycle=cycle, time=1, namespace="ns", name="wl", cluster_queue="cq",
                        admission=o.Admission(cluster_queue="cq", pod_set_assignments=()), pod_set_updates=updates)


def _template(body: dict[str, Any], i: int) -> dict[str, Any]:
    out: dict[str, Any] = body["spec"]["replicatedJobs"][i]["template"]["spec"]["template"]
    return out


@pytest.mark.parametrize(("updates", "want_driver", "want_workers"), [
    pytest.param((), ({"pool": "spot"}, 1, {}, {}), ({"gpu": "a100"}, 0, {}, {}), id="no updates: the flavors only"),
    pytest.param((o.PodSetUpdate(name="workers", node_selector=(("req", "rk-1"),), tolerations=(TOL,),
                                 labels=(("team", "ml"),), annotations=(("consume", "wl-prov-1"),)),),
                 ({"pool": "spot"}, 1, {}, {}), ({"gpu": "a100", "req": "rk-1"}, 1, {"team": "ml", "keep": "x"},
                                                 {"consume": "wl-prov-1"}),
                 id="one podSet's updates land on its template only"),
    pytest.param((o.PodSetUpdate(name="driver", labels=(("extra", "1"),)),
                  o.PodSetUpdate(name="workers", node_selector=(("req", "rk-2"),))),
                 ({"pool": "spot"}, 1, {"extra": "1"}, {}), ({"gpu": "a100", "req": "rk-2"}, 0, {"keep": "x"}, {}),
                 id="each podSet its own"),
])
def test_a_checks_pod_set_updates_go_to_their_pod_sets_and_an_eviction_takes_them_back(
        updates: tuple[o.PodSetUpdate, ...], want_driver: tuple[Any, ...], want_workers: tuple[Any, ...]) -> None:
    body = served(jobset(rj("driver"), rj("workers", replicas=2)))
    body["spec"]["suspend"] = True
    body["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["metadata"] = {"labels": {"keep": "x"}}
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"keep": "x"}}
    running = apply(body, kind_admit_ops(JS, body, checked(*updates), {"driver": [SPOT], "workers": [GPU]}))
    assert running["spec"]["suspend"] is False
    for i, (selector, tolerations, labels, notes) in enumerate((want_driver, want_workers)):
        t = _template(running, i)
        assert t["spec"]["nodeSelector"] == selector
        assert len(t["spec"]["tolerations"]) == tolerations
        assert t["metadata"].get("labels", {}) == {"keep": "x", **labels}
        assert t["metadata"].get("annotations", {}) == notes
    held = apply(running, kind_evict_ops(JS, running, evict()))
    for i in (0, 1):  # the templates as they were written (an emptied map may stay)
        t = _template(held, i)
        assert {k: v for k, v in t["metadata"].items() if v} == _template(body, i)["metadata"]
        assert t["spec"] == {**_template(body, i)["spec"], "nodeSelector": {}, "tolerations": []}


def test_a_pod_set_update_that_conflicts_with_its_flavor_is_an_invalid_object() -> None:
    body = served(jobset(rj("driver"), rj("workers")))
    with pytest.raises(InvalidObject, match=r"podSetUpdates\[workers\]\.nodeSelector\.gpu: conflict"):
        kind_admit_ops(JS, body, checked(o.PodSetUpdate(name="workers", node_selector=(("gpu", "h100"),))),
                       {"driver": [SPOT], "workers": [GPU]})
