"""``kueue.x-k8s.io/prebuilt-workload-name`` in manifests (``events.jobkinds.prebuilt``): a Job or
another kind naming an existing Workload runs under it, which it adopts (controller owner and
``job-uid`` label); no Workload of its own. Missing, foreign-owned, out-of-sync or unsupported:
one clear error naming the job and the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from events import objects as o
from events.cluster import JOB_UID_LABEL, PREBUILT_WORKLOAD_LABEL
from events.manifests import ManifestError, load
from services.app.simulate import result_list, simulate

SETUP = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-job-kinds" / "setup.yaml"


def container(cpu: str = "1") -> dict[str, Any]:
    return {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}


def workload(name: str = "pre", *pod_sets: tuple[str, int, str]) -> dict[str, Any]:
    sets = pod_sets or (("main", 2, "1"),)
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": "user-queue", "podSets": [
                {"name": n, "count": c, "template": {"spec": {"containers": [container(cpu)]}}}
                for n, c, cpu in sets]}}


def job(name: str = "j", pre: str = "pre", pods: int = 2, cpu: str = "1", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "user-queue",
                                                  PREBUILT_WORKLOAD_LABEL: pre, **labels}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [container(cpu)]}}}}


def jobset(pre: str) -> dict[str, Any]:
    rj = {"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 1, "template": {
        "spec": {"containers": [container("500m")]}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "labels": {"kueue.x-k8s.io/queue-name": "user-queue",
                                                  PREBUILT_WORKLOAD_LABEL: pre}},
            "spec": {"suspend": True, "replicatedJobs": [rj]}}


def loaded(*docs: dict[str, Any]) -> list[o.AnyObject]:
    return [obj for _, obj in load({"m.yaml": yaml.safe_dump_all(docs)})]


def refusal(*docs: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as e:
        loaded(*docs)
    return e.value


@pytest.mark.parametrize("order", ["workload first", "job first"])
def test_a_job_adopts_the_prebuilt_workload(order: str) -> None:
    docs = [workload(), job()] if order == "workload first" else [job(), workload()]
    objs = loaded(*docs)
    assert len(objs) == 1
    wl = objs[0]
    assert isinstance(wl, o.Workload) and wl.name == "pre"
    assert wl.owner is not None and (wl.owner.kind, wl.owner.name) == ("Job", "j")
    assert dict(wl.labels)[JOB_UID_LABEL] == wl.owner.uid


def test_simulate_admits_the_prebuilt_workload_owned_by_its_job(tmp_path: Path) -> None:
    file = tmp_path / "m.yaml"
    file.write_text(yaml.safe_dump_all([workload(), job()]))
    items = result_list(simulate([str(SETUP), str(file)], None))["items"]
    assert [i["metadata"]["name"] for i in items] == ["pre"]
    assert items[0]["metadata"]["ownerReferences"][0]["name"] == "j"
    assert items[0]["status"]["admission"]["clusterQueue"] == "cluster-queue"


def test_a_jobset_adopts_one_with_its_pod_sets() -> None:
    objs = loaded(workload("pre", ("w", 2, "500m")), jobset("pre"))
    assert len(objs) == 1 and isinstance(objs[0], o.Workload) and objs[0].owner is not None
    assert objs[0].owner.kind == "JobSet"


def test_a_trainjob_adopts_one_with_its_runtimes_pod_sets() -> None:
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "rt"}, "spec": {"template": {"spec": {"replicatedJobs": [
                   {"name": "w", "template": {"spec": {"parallelism": 2, "template": {
                       "spec": {"containers": [container("500m")]}}}}}]}}}}
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "tj", "labels": {"kueue.x-k8s.io/queue-name": "user-queue",
                                                PREBUILT_WORKLOAD_LABEL: "pre"}},
          "spec": {"suspend": True, "runtimeRef": {"name": "rt"}}}
    objs = loaded(tj, workload("pre", ("w", 2, "500m")), runtime)
    assert len(objs) == 1 and isinstance(objs[0], o.Workload) and objs[0].owner is not None
    assert (objs[0].owner.kind, objs[0].name) == ("TrainJob", "pre")


def test_a_long_name_comes_from_the_annotation() -> None:
    name = "p" * 70
    j = job(pre="")
    del j["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL]
    j["metadata"]["annotations"] = {PREBUILT_WORKLOAD_LABEL: name}
    objs = loaded(workload(name), j)
    assert [getattr(x, "name", "") for x in objs] == [name]


@pytest.mark.parametrize(("docs", "field", "message"), [
    ([job(pre="nope")], f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}", "Workload default/nope not found"),
    ([workload(), job(pods=3)], f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}",
     "out of sync with its job (podSets[0] (main) count: the job has 3, the Workload 2)"),
    ([workload(), job(cpu="2")], f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}", "requests"),
    ([workload(), job(), job("k")], f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}", "already owned by Job j"),
    ([job(pre="Bad_Name")], f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}", "lowercase RFC 1123"),
])
def test_refusals(docs: list[dict[str, Any]], field: str, message: str) -> None:
    e = refusal(*docs)
    assert e.field == field and message in e.message


def test_a_kind_kueue_does_not_take_it_for() -> None:
    jax = {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob",
           "metadata": {"name": "x", "labels": {"kueue.x-k8s.io/queue-name": "user-queue",
                                                PREBUILT_WORKLOAD_LABEL: "pre"}},
           "spec": {"runPolicy": {"suspend": True}, "jaxReplicaSpecs": {"Worker": {
               "template": {"spec": {"containers": [container()]}}}}}}
    e = refusal(workload(), copy.deepcopy(jax))
    assert e.message == 'is not supported for "kubeflow.org/v1, Kind=JAXJob"'


# --- on a cluster: the reconciler's adoption plan (services.actuator.prebuiltplan) --------------


def served_workload(pods: int = 2, **meta: Any) -> dict[str, Any]:
    body = workload()
    body["spec"]["podSets"][0]["count"] = pods
    body["metadata"].update({"namespace": "default", "resourceVersion": "3", **meta})
    return body


def own() -> o.Workload:
    """The Workload the Job would be itself (here: as adopted; only its podSets are compared)."""
    wl = loaded(workload(), job())[0]
    assert isinstance(wl, o.Workload)
    return wl


OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-1", "controller": True,
         "blockOwnerDeletion": True}


def test_adoption_plan() -> None:
    from services.actuator.prebuiltplan import adoption
    fresh = adoption(served_workload(), own(), OWNER)
    assert fresh.patch == {"metadata": {"resourceVersion": "3", "ownerReferences": [OWNER],
                                        "labels": {JOB_UID_LABEL: "u-1"}}}
    assert not fresh.foreign and not fresh.out_of_sync
    mine = adoption(served_workload(ownerReferences=[OWNER]), own(), OWNER)
    assert mine.patch is None and not mine.out_of_sync
    other = {**OWNER, "name": "k", "uid": "u-2"}
    assert adoption(served_workload(ownerReferences=[other]), own(), OWNER).foreign.endswith("controlled by Job k")
    stale = adoption(served_workload(pods=5), own(), OWNER)
    assert stale.patch is not None and "count: the job has 2, the Workload 5" in stale.out_of_sync
