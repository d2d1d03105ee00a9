"""The workload kinds of ``events.jobkinds``: manifest -> podSets (names, counts, requests, order),
the Workload's name and priority, and the refusals, one table per kind; and ``batch/v1`` Job
through the framework giving the same podSet as ``events.jobs``.

Counts and names follow Kueue's integrations (``pkg/controller/jobs/<kind>``): JobSet one podSet per
replicated Job (replicas x min(parallelism, completions)); Kubeflow one per replica type present,
in the kind's order, lowercased; Ray ``head`` then worker groups (replicas x numOfHosts), RayJob's
``submitter`` in K8sJobMode.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from events import jobkinds
from events import objects as o
from events.cluster import POD_PRIORITY_CLASS_SOURCE, WORKLOAD_PRIORITY_CLASS_SOURCE
from events.manifests import Document, ManifestError, normalize

FILE = "kinds.yaml"
Mi, Gi = 1 << 20, 1 << 30


def pod(cpu: str = "1", memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu}
    if memory is not None:
        requests["memory"] = memory
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": requests}}], **extra}}


def obj(api_version: str, kind: str, spec: dict[str, Any], name: str = "x", queue: str | None = "lq",
        **meta: Any) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue is not None else {}
    labels.update(meta.pop("labels", {}))
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": "uid-1", "labels": labels, **meta}, "spec": spec}


def jobset(*jobs: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return obj("jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobs": list(jobs)}, **meta)


def rj(name: str, replicas: int | None = None, parallelism: int | None = None, completions: int | None = None,
       cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": pod(cpu)}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    out: dict[str, Any] = {"name": name, "template": {"spec": spec}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def kubeflow(kind: str, field: str, replicas: dict[str, int | None], version: str = "v1",
             **spec: Any) -> dict[str, Any]:
    specs = {t: ({"template": pod()} if n is None else {"replicas": n, "template": pod()}) for t, n in replicas.items()}
    return obj(f"kubeflow.org/{version}", kind, {field: specs, **spec})


def cluster_spec(*groups: tuple[str, int | None, int | None], head_cpu: str = "1") -> dict[str, Any]:
    workers = []
    for name, replicas, hosts in groups:
        g: dict[str, Any] = {"groupName": name, "template": pod("2")}
        if replicas is not None:
            g["replicas"] = replicas
        if hosts is not None:
            g["numOfHosts"] = hosts
        workers.append(g)
    return {"headGroupSpec": {"template": pod(head_cpu, "1Gi")}, "workerGroupSpecs": workers}


def raycluster(*groups: tuple[str, int | None, int | None], **meta: Any) -> dict[str, Any]:
    return obj("ray.io/v1", "RayCluster", cluster_spec(*groups), **meta)


def rayjob(*groups: tuple[str, int | None, int | None], **spec: Any) -> dict[str, Any]:
    return obj("ray.io/v1", "RayJob", {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec(*groups),
                                       **spec})


def load(body: dict[str, Any]) -> o.Workload:
    wl = normalize(Document(FILE, 1, body))
    assert isinstance(wl, o.Workload)
    return wl


def shape(wl: o.Workload) -> list[tuple[str, int, int]]:
    """Each podSet as (name, count, CPU millis per pod)."""
    return [(ps.name, ps.count, dict(ps.requests).get("cpu", 0)) for ps in wl.pod_sets]


CASES = [
    # JobSet
    pytest.param(jobset(rj("workers"), rj("driver", cpu="2")), [("workers", 1, 1000), ("driver", 1, 2000)],
                 id="jobset: one podSet per replicated job, in order, replicas default 1"),
    pytest.param(jobset(rj("w", replicas=3, parallelism=4)), [("w", 12, 1000)],
                 id="jobset: replicas x parallelism"),
    pytest.param(jobset(rj("w", replicas=2, parallelism=4, completions=3)), [("w", 6, 1000)],
                 id="jobset: parallelism capped by completions"),
    pytest.param(jobset(rj("Leader", replicas=0)), [("leader", 0, 1000)],
                 id="jobset: podSet names are lowercased, zero replicas kept"),
    # Kubeflow v1
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Worker": 3, "Master": None}),
                 [("master", 1, 1000), ("worker", 3, 1000)], id="pytorchjob: master then worker, replicas default 1"),
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Worker": 2}), [("worker", 2, 1000)],
                 id="pytorchjob: only the replica types present"),
    pytest.param(kubeflow("TFJob", "tfReplicaSpecs", {"Evaluator": 1, "Worker": 4, "PS": 2, "Chief": 1, "Master": 1}),
                 [("chief", 1, 1000), ("master", 1, 1000), ("ps", 2, 1000), ("worker", 4, 1000),
                  ("evaluator", 1, 1000)], id="tfjob: chief, master, ps, worker, evaluator"),
    pytest.param(kubeflow("XGBoostJob", "xgbReplicaSpecs", {"Master": 1, "Worker": 2}),
                 [("master", 1, 1000), ("worker", 2, 1000)], id="xgboostjob"),
    pytest.param(kubeflow("PaddleJob", "paddleReplicaSpecs", {"Worker": 2}), [("worker", 2, 1000)], id="paddlejob"),
    pytest.param(kubeflow("JAXJob", "jaxReplicaSpecs", {"Worker": 2}), [("worker", 2, 1000)], id="jaxjob"),
    # MPIJob v2beta1
    pytest.param(kubeflow("MPIJob", "mpiReplicaSpecs", {"Worker": 2, "Launcher": 1}, version="v2beta1"),
                 [("launcher", 1, 1000), ("worker", 2, 1000)], id="mpijob: launcher then worker"),
    # Ray
    pytest.param(raycluster(("small", None, None), ("big", 3, 2)), [("head", 1, 1000), ("small", 1, 2000),
                                                                     ("big", 6, 2000)],
                 id="raycluster: head then groups, replicas x numOfHosts"),
    pytest.param(raycluster(), [("head", 1, 1000)], id="raycluster: head only"),
    pytest.param(obj("ray.io/v1", "RayService", {"rayClusterConfig": cluster_spec(("g", 3, None))}),
                 [("head", 1, 1000), ("g", 3, 2000)], id="rayservice: its rayClusterConfig"),
    pytest.param(rayjob(("g", 2, None)), [("head", 1, 1000), ("g", 2, 2000), ("submitter", 1, 500)],
                 id="rayjob: K8sJobMode (default) adds KubeRay's submitter"),
    pytest.param(rayjob(("g", 2, None), submissionMode="HTTPMode"), [("head", 1, 1000), ("g", 2, 2000)],
                 id="rayjob: HTTPMode has no submitter"),
    pytest.param(rayjob(("g", 2, None), submissionMode="SidecarMode"), [("head", 1, 1500), ("g", 2, 2000)],
                 id="rayjob: SidecarMode adds the submitter to the head"),
    pytest.param(rayjob(submitterPodTemplate=pod("3")), [("head", 1, 1000), ("submitter", 1, 3000)],
                 id="rayjob: submitterPodTemplate is the submitter's"),
]


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_pod_sets(body: dict[str, Any], expected: list[tuple[str, int, int]]) -> None:
    assert shape(load(body)) == expected


def test_rayjob_default_submitter_requests_memory_too() -> None:
    submitter = load(rayjob())
    assert dict(submitter.pod_sets[-1].requests) == {"cpu": 500, "memory": 200 * Mi}


@pytest.mark.parametrize("ft", [
    pytest.param({"annotations": {"ray.io/ft-enabled": "True"}}, id="annotation"),
    pytest.param({}, id="gcsFaultToleranceOptions"),
])
def test_raycluster_gcs_fault_tolerance_head_covers_redis_cleanup(ft: dict[str, Any]) -> None:
    body = obj("ray.io/v1", "RayCluster", cluster_spec(head_cpu="100m"), **ft)
    if not ft:
        body["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    head = load(body).pod_sets[0]
    assert dict(head.requests) == {"cpu": 200, "memory": Gi}  # cpu raised to 200m; 1Gi memory already above 256Mi


@pytest.mark.parametrize("body", [
    pytest.param(jobset(rj("w")), id="jobset"),
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1}), id="pytorchjob"),
    pytest.param(raycluster(), id="raycluster"),
])
def test_workload_name_owner_and_queue(body: dict[str, Any]) -> None:
    wl = load(body)
    kind, group = body["kind"], body["apiVersion"].rpartition("/")[0]
    digest = hashlib.sha1(f"{kind}\n{group}\nx\nuid-1".encode(), usedforsecurity=False).hexdigest()
    assert wl.name == f"{kind.lower()}-x-{digest[:5]}"  # Kueue's GetWorkloadNameForOwnerWithGVK
    assert (wl.namespace, wl.queue_name) == ("ns", "lq")
    assert wl.owner == o.OwnerReference(api_version=body["apiVersion"], kind=kind, name="x", uid="uid-1")


def test_kueue_names_a_pytorchjob_workload_as_kueue_does() -> None:
    # Kueue's own test expectation style: "pytorchjob-<name>-<hash>" over "PyTorchJob\nkubeflow.org\n<name>\n<uid>".
    assert jobkinds.workload_name("PyTorchJob", "kubeflow.org", "a", "b") == (
        "pytorchjob-a-" + hashlib.sha1(b"PyTorchJob\nkubeflow.org\na\nb").hexdigest()[:5])


def test_priority_label_then_kind_then_templates() -> None:
    body = kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 1})
    assert load(body).priority_ref is None
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    assert load(body).priority_ref == o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="low")
    body["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    assert load(body).priority_ref == o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="high")
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "wpc"
    assert load(body).priority_ref == o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name="wpc")
    js = jobset(rj("a"), rj("b"))
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "p"
    assert load(js).priority_ref == o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="p")


def test_without_queue_label_not_kueues() -> None:
    assert normalize(Document(FILE, 1, jobset(rj("w"), queue=None))) is None
    selector_only = obj("ray.io/v1", "RayJob", {"clusterSelector": {"ray.io/cluster": "c"}})
    assert normalize(Document(FILE, 1, selector_only)) is None  # runs on an existing cluster


def refuse(body: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as e:
        normalize(Document(FILE, 1, body))
    return e.value


def _without(body: dict[str, Any], *path: str | int) -> dict[str, Any]:
    out = copy.deepcopy(body)
    at: Any = out
    for p in path[:-1]:
        at = at[p]
    del at[path[-1]]
    return out


REFUSALS = [
    pytest.param(jobset(), "spec.replicatedJobs", "must have at least 1 item", id="jobset without jobs"),
    pytest.param(jobset({"name": "w", "template": {"spec": {"template": {"spec": {"containers": []}}}}}),
                 "spec.replicatedJobs[0].template.spec.template.spec.containers", "must have at least 1 item",
                 id="jobset pod template without containers"),
    pytest.param(jobset(rj("w", replicas=-1)), "spec.replicatedJobs[0].replicas", "must be between 0",
                 id="jobset negative replicas"),
    pytest.param(jobset(rj("w", replicas=2**31 - 1, parallelism=2)), "spec.replicatedJobs[0].replicas",
                 "replicas x the Job's pods at once (2147483647 x 2 = 4294967294) must be at most 2147483647",
                 id="jobset pod count past 32 bits"),
    pytest.param(raycluster(("g", 2**30, 4)), "spec.workerGroupSpecs[0].numOfHosts",
                 "replicas x numOfHosts (1073741824 x 4 = 4294967296) must be at most 2147483647",
                 id="raycluster pod count past 32 bits"),
    pytest.param(jobset(rj("bad_name")), "spec.replicatedJobs[0].name", "RFC 1123 label", id="jobset bad name"),
    pytest.param(jobset(rj("w"), queue="Team_A"), "metadata.labels.kueue.x-k8s.io/queue-name",
                 "lowercase RFC 1123 subdomain", id="bad queue name"),
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Launcher": 1}),
                 "spec.pytorchReplicaSpecs.Launcher", "unknown replica type: PyTorchJob takes Master, Worker",
                 id="pytorchjob unknown replica type"),
    pytest.param(obj("kubeflow.org/v1", "PyTorchJob", {}), "spec.pytorchReplicaSpecs", "required field is missing",
                 id="pytorchjob without replica specs"),
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": "two"}),  # type: ignore[dict-item]
                 "spec.pytorchReplicaSpecs.Master.replicas", "expected an integer", id="pytorchjob replicas not int"),
    pytest.param(rayjob(shutdownAfterJobFinishes=False), "spec.shutdownAfterJobFinishes",
                 "should delete the cluster after finishing", id="rayjob keeps its cluster"),
    pytest.param(rayjob(clusterSelector={"a": "b"}), "spec.clusterSelector", "should not use an existing cluster",
                 id="rayjob with selector and cluster spec"),
    pytest.param(obj("ray.io/v1", "RayJob", {"shutdownAfterJobFinishes": True}), "spec.rayClusterSpec",
                 "rayClusterSpec is required", id="rayjob without cluster"),
    pytest.param(raycluster(("Head", 1, None)), "spec.workerGroupSpecs[0].groupName", "reserved for the head group",
                 id="raycluster worker group named head"),
    pytest.param(obj("ray.io/v1", "RayCluster", {**cluster_spec(), "enableInTreeAutoscaling": True}),
                 "spec.enableInTreeAutoscaling", "workload slicing", id="raycluster autoscaling"),
    pytest.param(_without(raycluster(), "spec", "headGroupSpec"), "spec.headGroupSpec", "required field is missing",
                 id="raycluster without head"),
    pytest.param(obj("ray.io/v1", "RayCluster", {"headGroupSpec": {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}}}),
        "spec.headGroupSpec.template.spec.containers[0].resources.requests.cpu", "", id="raycluster bad quantity"),
    pytest.param(jobset({"name": "w", "template": {"spec": {"template": {"spec": {"containers": "c"}}}}}),
                 "spec.replicatedJobs[0].template.spec.template.spec.containers", "expected an array",
                 id="jobset containers not a list"),
]


@pytest.mark.parametrize(("body", "field", "message"), REFUSALS)
def test_refusals_name_the_object_and_field(body: dict[str, Any], field: str, message: str) -> None:
    err = refuse(body)
    assert (err.file, err.document, err.obj, err.field) == (FILE, 1, f"{body['kind']} ns/x", field)
    assert message in err.message
    assert "\n" not in str(err)


@pytest.mark.parametrize(("parallelism", "completions"), [(None, None), (4, None), (4, 2), (2, 5), (0, 1)])
def test_batch_job_through_the_framework_matches_events_jobs(parallelism: int | None, completions: int | None) -> None:
    spec: dict[str, Any] = {"template": pod("250m", "64Mi")}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    body = obj("batch/v1", "Job", spec)
    wl = load(body)

    class Where:
        def error(self, field: str, message: str) -> Exception:
            return ValueError(f"{field}: {message}")

        def amount(self, resource: str, value: object, field: str) -> int:
            from events.quantity import to_amount
            return to_amount(resource, value)

    sources = tuple(jobkinds.JOB.pod_sets(Where(), body))
    assert jobkinds.pod_sets(Where(), sources) == wl.pod_sets
    assert wl.name == jobkinds.workload_name("Job", "batch", "x", "uid-1")


JS = "jobset.x-k8s.io/v1alpha2"


def _cond(kind: str, status: str = "True", message: str = "m") -> dict[str, Any]:
    return {"conditions": [{"type": "Other", "status": "True"}, {"type": kind, "status": status, "message": message}]}


@pytest.mark.parametrize(("api_version", "kind", "status", "expected"), [
    pytest.param(JS, "JobSet", _cond("Completed"), jobkinds.Finished(True, "m"), id="jobset ok"),
    pytest.param(JS, "JobSet", _cond("Failed"), jobkinds.Finished(False, "m"), id="jobset fail"),
    pytest.param(JS, "JobSet", _cond("Completed", "False"), None, id="jobset not yet"),
    pytest.param("kubeflow.org/v1", "PyTorchJob", _cond("Succeeded"), jobkinds.Finished(True, "m"), id="pytorch ok"),
    pytest.param("kubeflow.org/v1", "TFJob", _cond("Failed"), jobkinds.Finished(False, "m"), id="tfjob fail"),
    pytest.param("kubeflow.org/v2beta1", "MPIJob", _cond("Running"), None, id="mpijob running"),
    pytest.param("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "ok"},
                 jobkinds.Finished(True, "ok"), id="rayjob ok"),
    pytest.param("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"},
                 jobkinds.Finished(False, ""), id="rayjob fail"),
    pytest.param("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Running"}, None, id="rayjob running"),
    pytest.param("ray.io/v1", "RayCluster", {"state": "failed"}, None, id="raycluster never finishes"),
    pytest.param("ray.io/v1", "RayService", {"serviceStatus": "Running"}, None, id="rayservice never finishes"),
    pytest.param("batch/v1", "Job", _cond("Complete"), jobkinds.Finished(True, "m"), id="job ok"),
    pytest.param("kubeflow.org/v1", "PyTorchJob", {"conditions": "broken"}, None, id="broken status"),
])
def test_finished(api_version: str, kind: str, status: dict[str, Any], expected: jobkinds.Finished | None) -> None:
    k = jobkinds.kind_of(api_version, kind)
    assert k is not None
    assert k.finished({"status": status}) == expected


def test_suspended_reads_the_kinds_flag() -> None:
    pt = jobkinds.kind_of("kubeflow.org/v1", "PyTorchJob")
    js = jobkinds.kind_of("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert pt is not None and js is not None
    assert pt.suspended({"spec": {"runPolicy": {"suspend": True}}})
    assert not pt.suspended({"spec": {"suspend": True}})
    assert not pt.suspended({"spec": {"runPolicy": None}})
    assert js.suspended({"spec": {"suspend": True}}) and not js.suspended({"spec": {}})
    rs = jobkinds.kind_of("ray.io/v1", "RayService")
    assert rs is not None and rs.suspended({"spec": {"rayClusterConfig": {"suspend": True}}})
