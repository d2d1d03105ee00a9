"""MultiKueue at the edges: the watcher takes the MultiKueue kinds and a worker's copy of a Job under
the manager's Workload name; the actuator's copy of a placed Job (services.actuator.multikueue)."""

from __future__ import annotations

from typing import Any

from events import objects as o
from events.cluster import MULTIKUEUE_ORIGIN_LABEL, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from events.jobkinds.jobset import JOBSET
from events.messages import ObjectApplied, PlaceWorkload
from services.actuator.multikueue import PLACED_KINDS, job_owner, placed_owner, remote_job, remote_object
from services.watcher.translate import translate

ADM = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "pool"),), resource_usage=(("cpu", 1000),), count=1),))
PLACE = PlaceWorkload(id="c3-0", cycle=3, namespace="ns", name="job-train-abcde", cluster="w1", check="mk",
                      admission=ADM, pod_set_updates=(o.PodSetUpdate(
                          name="main", node_selector=(("pool", "w1"),),
                          tolerations=(o.Toleration(key="gpu", operator="Exists", effect="NoSchedule"),)),))


def _job(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                         "labels": {QUEUE_NAME_LABEL: "lq", **extra.pop("labels", {})},
                         "annotations": {"kueuelog.io/decision-id": "c4-0", "team": "a"}},
            "spec": {"suspend": True, "parallelism": 1, "managedBy": "kueue.x-k8s.io/multikueue",
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                     "template": {"metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u-1", "app": "x"}},
                                  "spec": {"nodeSelector": {"team": "a"}, "containers": [
                                      {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}},
            **extra}


def test_the_copy_runs_unsuspended_with_the_workers_scheduling_under_the_managers_workload_name() -> None:
    copy = remote_job(_job(status={"active": 1}), PLACE, origin="manager")
    assert copy["metadata"] == {
        "name": "train", "namespace": "ns",
        "labels": {QUEUE_NAME_LABEL: "lq", PREBUILT_WORKLOAD_LABEL: "job-train-abcde",
                   MULTIKUEUE_ORIGIN_LABEL: "manager"},
        "annotations": {"team": "a"}}
    spec = copy["spec"]
    assert spec["suspend"] is False
    assert "managedBy" not in spec and "selector" not in spec and "status" not in copy
    assert spec["template"]["metadata"] == {"labels": {"app": "x"}}
    assert spec["template"]["spec"]["nodeSelector"] == {"team": "a", "pool": "w1"}
    assert spec["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_the_workers_watcher_reports_the_copy_under_the_managers_workload_name() -> None:
    copy = remote_job(_job(), PLACE, origin="manager")
    copy["metadata"] |= {"uid": "u-remote", "resourceVersion": "3"}
    out = translate("Job", "ADDED", copy, cluster="w1", time_ms=5)
    applied = [e.event for e in out.envelopes if isinstance(e.event, ObjectApplied)]
    assert [(a.object.namespace, a.object.name) for a in applied
            if isinstance(a.object, o.Workload)] == [("ns", "job-train-abcde")]


def test_a_prebuilt_workload_name_that_is_no_name_is_refused_naming_the_label() -> None:
    out = translate("Job", "ADDED", _job(labels={PREBUILT_WORKLOAD_LABEL: "Not_A_Name"}), cluster="w1", time_ms=5)
    assert out.errors and f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}: invalid value" in out.errors[0]


def test_the_watcher_translates_the_multikueue_kinds() -> None:
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
            "metadata": {"name": "w1", "resourceVersion": "9"},
            "spec": {"clusterSource": {"kubeConfig": {"location": "w1-kubeconfig"}}},
            "status": {"conditions": [{"type": "Active", "status": "False", "reason": "x", "message": ""}]}}
    out = translate("MultiKueueCluster", "ADDED", body, cluster="manager", time_ms=5)
    assert not out.errors
    (env,) = out.envelopes
    assert isinstance(env.event, ObjectApplied)
    assert env.event.object == o.MultiKueueCluster(name="w1", location="w1-kubeconfig", active=False)


def test_the_job_behind_a_workload_is_its_batch_v1_owner() -> None:
    wl = {"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train"}]}}
    assert job_owner(wl) == "train"
    assert job_owner({"metadata": {"ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                                        "kind": "JobSet", "name": "js"}]}}) == ""


def _jobset() -> dict[str, Any]:
    def template() -> dict[str, Any]:  # one per podSet, as an API object read from JSON has
        return {"spec": {"nodeSelector": {"team": "a"}, "containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ns", "uid": "u-2", "resourceVersion": "4",
                         "labels": {QUEUE_NAME_LABEL: "lq"},
                         "annotations": {"kueuelog.io/decision-id": "c4-0", "team": "a"}},
            "spec": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue", "replicatedJobs": [
                {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": template()}}},
                {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": template()}}}]},
            "status": {"restarts": 0}}


def test_a_jobset_copy_runs_unsuspended_with_each_podsets_worker_scheduling() -> None:
    place = PlaceWorkload(id="c3-0", cycle=3, namespace="ns", name="jobset-js-abcde", cluster="w1", check="mk",
                          admission=ADM, pod_set_updates=(
                              o.PodSetUpdate(name="leader", node_selector=(("pool", "w1-small"),)),
                              o.PodSetUpdate(name="workers", node_selector=(("pool", "w1-big"),))))
    copy = remote_object(JOBSET, _jobset(), place, origin="manager")
    assert copy["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and copy["kind"] == "JobSet"
    assert copy["metadata"] == {
        "name": "js", "namespace": "ns",
        "labels": {QUEUE_NAME_LABEL: "lq", PREBUILT_WORKLOAD_LABEL: "jobset-js-abcde",
                   MULTIKUEUE_ORIGIN_LABEL: "manager"},
        "annotations": {"team": "a"}}
    assert copy["spec"]["suspend"] is False and "managedBy" not in copy["spec"] and "status" not in copy
    selectors = [rj["template"]["spec"]["template"]["spec"]["nodeSelector"] for rj in copy["spec"]["replicatedJobs"]]
    assert selectors == [{"team": "a", "pool": "w1-small"}, {"team": "a", "pool": "w1-big"}]


def test_a_kubeflow_copy_clears_run_policy_managed_by() -> None:
    from events.jobkinds import kubeflow

    pytorch = next(k for k in kubeflow.KINDS if k.kind == "PyTorchJob")
    def template() -> dict[str, Any]:
        return {"spec": {"containers": [{"name": "pytorch", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}

    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "pt", "namespace": "ns", "labels": {QUEUE_NAME_LABEL: "lq"}},
           "spec": {"runPolicy": {"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"},
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()},
                                            "Worker": {"replicas": 2, "template": template()}}}}
    place = PlaceWorkload(id="c3-0", cycle=3, namespace="ns", name="pytorchjob-pt-abcde", cluster="w1", check="mk",
                          admission=ADM, pod_set_updates=(o.PodSetUpdate(name="master", node_selector=(("p", "1"),)),
                                                          o.PodSetUpdate(name="worker", node_selector=(("p", "2"),))))
    copy = remote_object(pytorch, job, place, origin="manager")
    assert copy["spec"]["runPolicy"] == {"suspend": False}
    specs = copy["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"p": "1"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"p": "2"}


def test_the_placed_owner_is_any_kind_multikueue_places_and_only_those() -> None:
    def wl(api_version: str, kind: str) -> dict[str, Any]:
        return {"metadata": {"ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "x"}]}}

    assert placed_owner(wl("jobset.x-k8s.io/v1alpha2", "JobSet")) == (JOBSET, "x")
    assert placed_owner(wl("ray.io/v1", "RayJob")) is not None
    assert placed_owner(wl("kubeflow.org/v2beta1", "MPIJob")) is not None
    assert placed_owner(wl("sparkoperator.k8s.io/v1beta2", "SparkApplication")) is None
    assert placed_owner(wl("v1", "Pod")) is None
    assert set(PLACED_KINDS) >= {("batch/v1", "Job"), ("workload.codeflare.dev/v1beta2", "AppWrapper")}
