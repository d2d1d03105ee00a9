"""The Kubernetes side of the ProvisioningRequest check, pure: the watcher's translation of a
request, and the actuator's bodies and podSetUpdate merge."""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.messages import ProvisioningRequestObserved
from services.actuator import checkplan
from services.actuator.kubeapi import InvalidObject
from services.watcher.translate import Published, translate

WL_OWNER = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "job-train-abcde", "uid": "u1"}


def _request(name: str, *, owner: dict[str, Any] | None = None, rv: str = "7", **status: Any) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv,
                         "ownerReferences": [owner or WL_OWNER]},
            "spec": {"provisioningClassName": "c", "podSets": [{"podTemplateRef": {"name": "t"}, "count": 1}]},
            "status": status}


def test_a_request_becomes_an_observation_of_its_workload_check_and_attempt() -> None:
    obj = _request("job-train-abcde-my-check-2", conditions=[
        {"type": "Provisioned", "status": "True", "message": "ok"}, {"type": "Accepted", "status": "True"}],
        provisioningClassDetails={"RequestKey": "rk"})
    tr = translate("ProvisioningRequest", "MODIFIED", obj, cluster="c1", time_ms=5)
    assert tr.errors == []
    (env,) = tr.envelopes
    ev = env.event
    assert isinstance(ev, ProvisioningRequestObserved)
    assert (ev.workload, ev.check, ev.attempt) == ("job-train-abcde", "my-check", 2)
    assert [(c.type, c.status, c.message) for c in ev.conditions] == [("Accepted", "True", ""),
                                                                       ("Provisioned", "True", "ok")]
    assert ev.class_details == (("RequestKey", "rk"),)
    memory = Published()
    first = memory.select(tr)
    memory.commit(first)
    assert len(first.envelopes) == 1
    again = translate("ProvisioningRequest", "MODIFIED", _request("job-train-abcde-my-check-2", rv="8", conditions=[
        {"type": "Accepted", "status": "True"}, {"type": "Provisioned", "status": "True", "message": "ok"}],
        provisioningClassDetails={"RequestKey": "rk"}), cluster="c1", time_ms=9)
    assert memory.select(again).envelopes == []  # the same status again is not news


@pytest.mark.parametrize(("obj", "errors"), [
    pytest.param(_request("other", owner={"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}), 0,
                 id="not a Workload's: says nothing"),
    pytest.param(_request("job-train-abcde-nodigits"), 1, id="a Workload's, badly named: an error"),
])
def test_requests_that_are_not_kueues_say_nothing(obj: dict[str, Any], errors: int) -> None:
    tr = translate("ProvisioningRequest", "ADDED", obj, cluster="c1", time_ms=1)
    assert tr.envelopes == [] and len(tr.errors) == errors


def test_pod_set_updates_merge_and_a_conflicting_node_selector_is_refused() -> None:
    update = o.PodSetUpdate(name="main", node_selector=(("pool", "gpu"), ("req", "rk")),
                            tolerations=(o.Toleration(key="gpu", operator="Exists", effect="NoSchedule"),))
    selector, tolerations = checkplan.merge_updates({"pool": "gpu"}, [], [update], "Job ns/j")
    assert selector == {"pool": "gpu", "req": "rk"}
    assert tolerations == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    with pytest.raises(InvalidObject, match="conflict for key=pool, value1=cpu, value2=gpu"):
        checkplan.merge_updates({"pool": "cpu"}, [], [update], "Job ns/j")


def test_the_request_and_its_pod_template_as_kueue_creates_them() -> None:
    plan = o.ProvisioningRequestPlan(
        name="wl-prov-1", check="prov", attempt=1, provisioning_class_name="c", parameters=(("a", "1"),),
        pod_sets=(o.ProvisioningRequestPodSet(pod_set="main", pod_template="ppt-wl-prov-1-main", count=3),))
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "metadata": {"name": "wl", "uid": "u"},
          "spec": {"podSets": [{"name": "main", "template": {"spec": {"containers": [{"name": "c"}]}}}]}}
    body = checkplan.request_body("ns", plan, wl)
    assert body["spec"] == {"provisioningClassName": "c", "parameters": {"a": "1"},
                            "podSets": [{"podTemplateRef": {"name": "ppt-wl-prov-1-main"}, "count": 3}]}
    assert body["metadata"]["labels"] == {"kueue.x-k8s.io/managed-by": "kueue"}
    assert body["metadata"]["ownerReferences"][0]["kind"] == "Workload"
    template = checkplan.pod_template_body("ns", "ppt-wl-prov-1-main", wl, "main", {"pool": "gpu"}, [])
    assert template["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}


def test_pod_set_update_labels_and_annotations_are_restored_on_eviction() -> None:
    """Kueue restores the template (RestorePodSpec) when a Job is suspended again: the labels and
    annotations a check's podSetUpdates added go back to what they were."""
    import json

    from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION as ORIGINAL
    from events.messages import AdmitChecked
    from services.actuator.kubeplan import job_admit_patch, job_restore_patch

    adm = o.Admission(cluster_queue="cq", pod_set_assignments=(o.PodSetAssignment(
        name="main", flavors=(("cpu", "f"),), resource_usage=(("cpu", 1000),), count=1),))
    d = AdmitChecked(id="c3-0", cycle=3, namespace="ns", name="wl", cluster_queue="cq", admission=adm,
                     pod_set_updates=(o.PodSetUpdate(name="main", labels=(("a", "2"), ("b", "3")),
                                                     annotations=(("x", "y"),)),))
    job: dict[str, Any] = {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "1"},
                           "spec": {"suspend": True, "template": {"metadata": {"labels": {"a": "1"}},
                                                                  "spec": {"containers": [{"name": "c"}]}}}}
    patch = job_admit_patch(job, d, [])
    assert patch["spec"]["template"]["metadata"] == {"labels": {"a": "2", "b": "3"}, "annotations": {"x": "y"}}
    recorded = json.loads(patch["metadata"]["annotations"][ORIGINAL])
    assert recorded["templateMetadata"] == {"labels": {"a": "1", "b": None}, "annotations": {"x": None}}
    job["metadata"]["annotations"] = {ORIGINAL: patch["metadata"]["annotations"][ORIGINAL]}
    job["spec"]["template"]["metadata"] = {"labels": {"a": "2", "b": "3"}, "annotations": {"x": "y"}}
    restore = job_restore_patch(job)
    assert restore is not None
    assert restore["spec"]["template"]["metadata"] == {"labels": {"a": "1", "b": None}, "annotations": {"x": None}}
