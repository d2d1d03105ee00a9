"""Kubeflow Trainer's TrainJob (``events.jobkinds.trainjob``): manifest and runtime -> podSets (names,
counts, requests, node selectors), the refusals, Kueue's runtime patch on admission and eviction, the
pods-ready and finished readings, as Kueue's integration (``pkg/controller/jobs/trainjob``) builds
them from the Trainer's JobSet."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION, EVICTED_ANNOTATION, ORIGINAL_POD_SCHEDULING_ANNOTATION
from events.jobkinds import trainjob
from events.jobkinds.trainjob import TRAINJOB
from events.manifests import ManifestError, load
from events.messages import AdmitChecked, AdmitWorkload, EvictWorkload
from services.actuator.kindplan import kind_admit_ops, kind_evict_ops, plan_kind
from services.actuator.kubeplan import FlavorScheduling, idempotency

Gi = 1 << 30
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
SPOT = FlavorScheduling("spot", (("pool", "spot"),), ({"key": "spot", "operator": "Exists", "effect": "NoSchedule"},))
GPU = FlavorScheduling("a100", (("gpu", "a100"),))


def container(name: str = "node", **requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "i"}
    if requests:
        out["resources"] = {"requests": dict(requests)}
    return out


def rjob(name: str, *, trainer: bool = False, parallelism: int | None = None, replicas: int | None = None,
         containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [container()] if containers is None
                                                      else containers}}}
    if parallelism is not None:
        job_spec["parallelism"] = parallelism
    out: dict[str, Any] = {"name": name, "template": {"spec": job_spec}}
    if trainer:
        out["template"]["metadata"] = {"labels": dict(ANCESTOR)}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def runtime(*jobs: dict[str, Any], ml: dict[str, Any] | None = None, name: str = "rt",
            namespace: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"replicatedJobs": list(jobs)}}}
    if ml is not None:
        spec["mlPolicy"] = ml
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    kind = trainjob.NAMESPACED_RUNTIME if namespace is not None else trainjob.CLUSTER_RUNTIME
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def train(trainer: dict[str, Any] | None = None, *, ref: dict[str, Any] | None = None, name: str = "tj",
          **spec: Any) -> dict[str, Any]:
    body_spec: dict[str, Any] = {"runtimeRef": ref or {"name": "rt"}, **spec}
    if trainer is not None:
        body_spec["trainer"] = trainer
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "uid-1",
                         "labels": {"kueue.x-k8s.io/queue-name": "lq"}}, "spec": body_spec}


def workload(*docs: dict[str, Any]) -> o.Workload:
    import yaml

    text = yaml.safe_dump_all(list(docs))
    found = [obj for _, obj in load({"in.yaml": text}) if isinstance(obj, o.Workload)]
    assert len(found) == 1
    return found[0]


def shape(wl: o.Workload) -> list[tuple[str, int, dict[str, int]]]:
    return [(ps.name, ps.count, dict(ps.requests)) for ps in wl.pod_sets]


TORCH = {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}


@pytest.mark.parametrize(("docs", "expected"), [
    pytest.param(
        [runtime(rjob("node", trainer=True)), train({"numNodes": 2, "resourcesPerNode": {"requests": {
            "cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})],
        [("node", 2, {})],
        id="without an mlPolicy resourcesPerNode is not taken (the Trainer merges it only with one)"),
    pytest.param(
        [runtime(rjob("node", trainer=True), ml=TORCH), train({"numNodes": 2, "resourcesPerNode": {"requests": {
            "cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}})],
        [("node", 2, {"cpu": 4000, "memory": 8 * Gi, "nvidia.com/gpu": 1})],
        id="Kueue's page: torch runtime, numNodes 2, resourcesPerNode into the container named node"),
    pytest.param(
        [runtime(rjob("node", trainer=True, containers=[container("trainer")]), ml=TORCH, namespace="ns"),
         train({"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": "2"}}},
               ref={"name": "rt", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"})],
        [("node", 1, {})],
        id="a namespaced runtime whose trainer container is not named node: resourcesPerNode lands nowhere"),
    pytest.param(
        [runtime(rjob("dataset-initializer", replicas=2, containers=[container("dataset-initializer", cpu="1")]),
                 rjob("model-initializer", parallelism=3, containers=[container("model-initializer", cpu="1")]),
                 rjob("node", trainer=True, replicas=4, parallelism=7, containers=[container(cpu="2", memory="1Gi")]),
                 ml={"numNodes": 3, "torch": {}}),
         train({"resourcesPerNode": {"requests": {"cpu": "3"}}})],
        [("dataset-initializer", 2, {"cpu": 1000}), ("model-initializer", 3, {"cpu": 1000}),
         ("node", 3, {"cpu": 3000, "memory": Gi})],
        id="initializers keep replicas x parallelism; the trainer runs mlPolicy.numNodes once; resources merged "
           "key by key"),
    pytest.param(
        [runtime(rjob("node", trainer=True, parallelism=2, containers=[container(cpu="1")])),
         train({"numNodes": 4})],
        [("node", 4, {"cpu": 1000})],
        id="no mlPolicy: the trainer's parallelism, replaced by numNodes"),
    pytest.param(
        [runtime(rjob("node", trainer=True, parallelism=2, containers=[container(cpu="1")])), train()],
        [("node", 2, {"cpu": 1000})],
        id="no mlPolicy and no numNodes: the trainer's parallelism"),
    pytest.param(
        [runtime(rjob("launcher", containers=[container("launcher", cpu="1")]),
                 rjob("node", trainer=True, containers=[container(cpu="1")]),
                 ml={"numNodes": 1, "mpi": {"runLauncherAsNode": True}}),
         train({"numNodes": 3, "resourcesPerNode": {"requests": {"cpu": "2"}}})],
        [("launcher", 1, {"cpu": 1000}), ("node", 2, {"cpu": 2000})],
        id="MPI with runLauncherAsNode: the Job named node runs numNodes - 1"),
    pytest.param(
        [runtime(rjob("launcher", containers=[container("launcher", cpu="1")]),
                 rjob("node", containers=[container(cpu="1")]), ml={"mpi": {}}),
         train({"numNodes": 3})],
        [("launcher", 1, {"cpu": 1000}), ("node", 3, {"cpu": 1000})],
        id="MPI: numNodes goes to the Job named node even without the ancestor label"),
])
def test_pod_sets(docs: list[dict[str, Any]], expected: list[tuple[str, int, dict[str, int]]]) -> None:
    wl = workload(*docs)
    assert shape(wl) == expected
    assert wl.owner is not None and wl.owner.kind == "TrainJob"
    assert wl.name.startswith("trainjob-tj-")


def test_runtime_patches_but_kueues_own_reach_the_pod_templates() -> None:
    patches = [
        {"manager": "someone", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}}}]}}}},
        {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}}]}}}},
    ]
    wl = workload(runtime(rjob("node", trainer=True, containers=[container(cpu="1")])),
                  train(runtimePatches=patches))
    assert dict(wl.pod_sets[0].node_selector) == {"zone": "a"}


def test_a_later_runtime_of_the_same_name_wins_and_an_embedded_one_in_the_input_is_ignored() -> None:
    body = train()
    body[trainjob.RUNTIME_KEY] = {"kind": "ClusterTrainingRuntime", "name": "rt", "spec": {}}
    wl = workload(runtime(rjob("node", trainer=True, parallelism=5)), body,
                  runtime(rjob("node", trainer=True, parallelism=2)))
    assert shape(wl) == [("node", 2, {})]


def refused(*docs: dict[str, Any]) -> ManifestError:
    import yaml

    with pytest.raises(ManifestError) as e:
        load({"in.yaml": yaml.safe_dump_all(list(docs))})
    return e.value


@pytest.mark.parametrize(("docs", "obj", "field", "message"), [
    pytest.param([train()], "TrainJob ns/tj", "spec.runtimeRef.name",
                 "runtime 'rt' not found (no ClusterTrainingRuntime rt)", id="missing cluster runtime"),
    pytest.param([runtime(rjob("node", trainer=True)), train(ref={"name": "rt", "kind": "TrainingRuntime"})],
                 "TrainJob ns/tj", "spec.runtimeRef.name", "runtime 'rt' not found (no TrainingRuntime ns/rt)",
                 id="a namespaced runtime is looked for in the TrainJob's namespace only"),
    pytest.param([train(ref={"name": "rt", "apiGroup": "example.com"})], "TrainJob ns/tj", "spec.runtimeRef.apiGroup",
                 "unsupported runtime: ClusterTrainingRuntime.example.com", id="foreign runtime group"),
    pytest.param([train(ref={"name": "rt", "kind": "JobSet"})], "TrainJob ns/tj", "spec.runtimeRef.kind",
                 "unsupported runtime: JobSet.trainer.kubeflow.org", id="foreign runtime kind"),
    pytest.param([train(ref={"kind": "ClusterTrainingRuntime"})], "TrainJob ns/tj", "spec.runtimeRef.name",
                 "required field is missing",
                 id="no runtime name"),
    pytest.param([runtime(rjob("node", trainer=True)), train({"numNodes": 0})], "TrainJob ns/tj",
                 "spec.trainer.numNodes", "must be between 1", id="zero nodes"),
    pytest.param([runtime(rjob("node", trainer=True), ml=TORCH),
                  train({"resourcesPerNode": {"requests": {"cpu": "lots"}}})],
                 "TrainJob ns/tj", "spec.trainer.resourcesPerNode.requests.cpu", "", id="bad quantity"),
    pytest.param([runtime(rjob("node", trainer=True)),
                  train(runtimePatches=[{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {
                      "replicatedJobs": [{"name": "worker"}]}}}}])],
                 "TrainJob ns/tj", "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name",
                 "the runtime has no replicated Job 'worker' (has node)", id="patch of a replicated Job not there"),
    pytest.param([train(), runtime()], "ClusterTrainingRuntime rt", "spec.template.spec.replicatedJobs",
                 "must have at least 1 item", id="a runtime is checked where it is written"),
    pytest.param([runtime(rjob("node", containers=[]))], "ClusterTrainingRuntime rt",
                 "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers",
                 "must have at least 1 item", id="a runtime's pod template without containers"),
])
def test_refusals_name_the_object_and_field(docs: list[dict[str, Any]], obj: str, field: str, message: str) -> None:
    err = refused(*docs)
    assert (err.obj, err.field) == (obj, field), str(err)
    assert message in err.message
    assert "\n" not in str(err)


# --- the cluster: plan, admission, eviction ----------------------------------------------------


def served(body: dict[str, Any], runtime_spec: dict[str, Any] | None) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"]["resourceVersion"] = "5"
    return trainjob.embed(out, lambda k, ns, n: runtime_spec if (k, ns, n) == ("ClusterTrainingRuntime", "", "rt")
                          else None)


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at: Any = out
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at[p]
        if op["op"] == "remove":
            del at[int(last) if isinstance(at, list) else last]
        elif isinstance(at, list) and last == "-":
            at.append(op["value"])
        else:
            at[int(last) if isinstance(at, list) else last] = op["value"]
    return out


def admit(cycle: int = 2) -> AdmitWorkload:
    return AdmitWorkload(id=f"c{cycle}-0", cycle=cycle, time=1, namespace="ns", name="wl", cluster_queue="cq",
                         admission=o.Admission(cluster_queue="cq", pod_set_assignments=()))


def evict(cycle: int = 3) -> EvictWorkload:
    return EvictWorkload(id=f"c{cycle}-0", cycle=cycle, time=1, namespace="ns", name="wl", cluster_queue="cq",
                         reason="Preempted", message="to make room")


RUNTIME_SPEC = runtime(rjob("launcher", containers=[container("launcher", cpu="1")]),
                       rjob("node", trainer=True, containers=[container(cpu="1")]),
                       ml={"numNodes": 2, "torch": {}})["spec"]


def test_plan_holds_a_running_trainjob_and_makes_its_workload_once_held() -> None:
    body = served(train(), RUNTIME_SPEC)
    assert plan_kind(TRAINJOB, body).suspend
    body["spec"]["suspend"] = True
    draft = plan_kind(TRAINJOB, body).workload
    assert draft is not None
    assert [(p["name"], p["count"]) for p in draft.body["spec"]["podSets"]] == [("launcher", 1), ("node", 2)]
    assert draft.body["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


def test_plan_without_its_runtime_is_invalid_and_held() -> None:
    plan = plan_kind(TRAINJOB, served(train(), None))
    assert plan.suspend and plan.workload is None
    assert plan.invalid is not None and "runtime 'rt' not found" in str(plan.invalid)


def test_admission_goes_into_kueues_runtime_patch_and_an_eviction_empties_it() -> None:
    body = served(train(suspend=True), RUNTIME_SPEC)
    ops = kind_admit_ops(TRAINJOB, body, admit(), {"launcher": [SPOT], "node": [GPU]})
    assert ops[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"}
    assert all(trainjob.RUNTIME_KEY not in op["path"] for op in ops)
    running = apply(body, ops)
    assert running["spec"]["suspend"] is False
    assert running["spec"]["runtimePatches"] == [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [
            {"name": "launcher", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {"pool": "spot"}, "tolerations": [dict(SPOT.tolerations[0])]}}}}},
            {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}},
        ]}}}}]
    assert running["metadata"]["annotations"][DECISION_ID_ANNOTATION] == "c2-0"
    assert ORIGINAL_POD_SCHEDULING_ANNOTATION in running["metadata"]["annotations"]
    assert idempotency(running, admit()) == "applied"
    # The runtime's templates are untouched, and the Workload read from the running TrainJob is the same.
    assert running[trainjob.RUNTIME_KEY] == body[trainjob.RUNTIME_KEY]
    assert plan_kind(TRAINJOB, running).workload == plan_kind(TRAINJOB, body).workload

    held = apply(running, kind_evict_ops(TRAINJOB, running, evict()))
    assert held["spec"]["suspend"] is True
    assert held["spec"]["runtimePatches"] == [{"manager": "kueue.x-k8s.io/manager",
                                               "trainingRuntimeSpec": {"template": {"spec": {}}}}]
    assert held["metadata"]["annotations"][EVICTED_ANNOTATION] == "c3-0"
    assert ORIGINAL_POD_SCHEDULING_ANNOTATION not in held["metadata"]["annotations"]

    again = apply(held, kind_admit_ops(TRAINJOB, held, admit(4), {"launcher": [GPU], "node": [SPOT]}))
    assert len(again["spec"]["runtimePatches"]) == 1
    jobs = again["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [j["template"]["spec"]["template"]["spec"]["nodeSelector"] for j in jobs] == [{"gpu": "a100"},
                                                                                          {"pool": "spot"}]


def test_admission_keeps_other_managers_patches_and_fills_the_webhooks_empty_one() -> None:
    other = {"manager": "me", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "b"}}}}}
    body = served(train(suspend=True, runtimePatches=[other, {"manager": "kueue.x-k8s.io/manager"}]), RUNTIME_SPEC)
    running = apply(body, kind_admit_ops(TRAINJOB, body, admit(), {"node": [GPU]}))
    assert running["spec"]["runtimePatches"][0] == other
    assert running["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] == [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "a100"}}}}}}]
    body = served(train(suspend=True, runtimePatches=[other]), RUNTIME_SPEC)
    running = apply(body, kind_admit_ops(TRAINJOB, body, admit(), {"node": [GPU]}))
    assert [p["manager"] for p in running["spec"]["runtimePatches"]] == ["me", "kueue.x-k8s.io/manager"]


def test_a_checks_pod_set_updates_go_into_the_patch() -> None:
    body = served(train(suspend=True), RUNTIME_SPEC)
    d = AdmitChecked(id="c2-0", cycle=2, time=1, namespace="ns", name="wl", cluster_queue="cq",
                     admission=o.Admission(cluster_queue="cq", pod_set_assignments=()),
                     pod_set_updates=(o.PodSetUpdate(name="node", labels=(("team", "x"),),
                                                     node_selector=(("zone", "b"),)),))
    running = apply(body, kind_admit_ops(TRAINJOB, body, d, {"node": [GPU]}))
    job = running["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert job["template"]["spec"]["template"] == {"metadata": {"labels": {"team": "x"}},
                                                   "spec": {"nodeSelector": {"gpu": "a100", "zone": "b"}}}


@pytest.mark.parametrize(("status", "ready"), [
    ({}, False),
    ({"jobsStatus": [{"name": "launcher", "ready": 1}]}, False),
    ({"jobsStatus": [{"name": "launcher", "ready": 1}, {"name": "node", "succeeded": 1}]}, True),
])
def test_pods_ready_counts_the_replicated_jobs(status: dict[str, Any], ready: bool) -> None:
    body = served(train(), RUNTIME_SPEC)
    body["status"] = status
    assert TRAINJOB.pods_ready(body) is ready


def test_finished_by_complete_or_failed() -> None:
    body = train()
    assert TRAINJOB.finished(body) is None
    body["status"] = {"conditions": [{"type": "Complete", "status": "True", "message": "done"}]}
    finished = TRAINJOB.finished(body)
    assert finished is not None and finished.succeeded and finished.message == "done"
    body["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    finished = TRAINJOB.finished(body)
    assert finished is not None and not finished.succeeded


def test_the_watchers_runtimes_hand_back_the_trainjobs_waiting_for_one() -> None:
    from services.watcher.kube import TrainingRuntimes, job_kind_watches

    runtimes = TrainingRuntimes()
    waiting = served(train(name="a"), None)
    other = served(train(name="b", ref={"name": "other"}), None)
    runtimes.remember("ADDED", waiting)
    runtimes.remember("ADDED", other)
    assert trainjob.RUNTIME_KEY not in trainjob.embed(waiting, runtimes.get)
    rt = runtime(rjob("node", trainer=True))
    assert runtimes.note("ClusterTrainingRuntime", "ADDED", rt) == [waiting]
    assert trainjob.embed(waiting, runtimes.get)[trainjob.RUNTIME_KEY]["spec"] == rt["spec"]
    runtimes.remember("DELETED", waiting)
    assert runtimes.note("ClusterTrainingRuntime", "MODIFIED", rt) == []
    assert runtimes.note("ClusterTrainingRuntime", "DELETED", rt) == []
    assert runtimes.get("ClusterTrainingRuntime", "", "rt") is None
    # A namespaced runtime is only the TrainJobs' of its namespace.
    local = served(train(name="c", ref={"name": "rt", "kind": "TrainingRuntime"}), None)
    runtimes.remember("ADDED", local)
    assert runtimes.note("TrainingRuntime", "ADDED", runtime(rjob("node"), namespace="elsewhere")) == []
    assert runtimes.note("TrainingRuntime", "ADDED", runtime(rjob("node"), namespace="ns")) == [local]
    assert [k.kind for k in job_kind_watches(["JobSet", "TrainJob"])] == [
        "JobSet", "ClusterTrainingRuntime", "TrainingRuntime", "TrainJob"]
    assert [k.kind for k in job_kind_watches(["JobSet"])] == ["JobSet"]
