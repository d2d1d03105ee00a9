"""AppWrapper (``workload.codeflare.dev/v1beta2``) as Kueue's integration reads it: podSets from
its components' declared or inferred pod sets (named ``<name>-<n>`` across components), the
subset of the template Kueue copies, the AppWrapper webhook's refusals, how it ends; and the
admission written into ``podSetInfos`` (not the templates), cleared on eviction. Also a check's
podSetUpdates (labels, annotations, nodeSelector) per podSet for a template kind (a JobSet)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events import jobkinds
from events import objects as o
from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION
from events.jobkinds.appwrapper import APPWRAPPER
from events.manifests import Document, ManifestError, normalize
from events.messages import AdmitChecked
from tests.unit.test_job_kinds import jobset, obj, pod, rj
from tests.unit.test_kind_plan import GPU, JS, SPOT, admit, apply, evict, served

AW = "workload.codeflare.dev/v1beta2"


def wrap(*templates: dict[str, Any], declared: list[list[dict[str, Any]]] | None = None,
         name: str = "aw") -> dict[str, Any]:
    components = []
    for i, t in enumerate(templates):
        c: dict[str, Any] = {"template": t}
        if declared is not None and declared[i]:
            c["podSets"] = declared[i]
        components.append(c)
    return obj(AW, "AppWrapper", {"components": components}, name=name)


def workload(body: dict[str, Any]) -> o.Workload:
    wl = normalize(Document(file="aw.yaml", index=1, body=body))
    assert isinstance(wl, o.Workload)
    return wl


def shape(body: dict[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    return [(p.name, p.count, dict(p.requests)) for p in workload(body).pod_sets]


def job(parallelism: int | None = None, completions: int | None = None, cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": pod(cpu)}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}


def deployment(replicas: int | None = 3, kind: str = "Deployment") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": pod("100m")}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "d"}, "spec": spec}


RAY = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
       "spec": {"headGroupSpec": {"template": pod("1")},
                "workerGroupSpecs": [{"groupName": "g", "replicas": 3, "numOfHosts": 2, "template": pod("2")}]}}
PYTORCH = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": pod("2")},
                                            "Master": {"template": pod("1")}}}}
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s"},
          "spec": {"replicatedJobs": [{"name": "w", "replicas": 2,
                                       "template": {"spec": {"parallelism": 3, "completions": 2,
                                                             "template": pod("1")}}}]}}


@pytest.mark.parametrize(("templates", "expected"), [
    pytest.param([job(parallelism=4, completions=2)], [("aw-0", 2, {"cpu": 1000})],
                 id="Job: min(parallelism, completions)"),
    pytest.param([job()], [("aw-0", 1, {"cpu": 1000})], id="Job: 1 when unset"),
    pytest.param([JOBSET], [("aw-0", 4, {"cpu": 1000})], id="JobSet: replicas x pods per Job"),
    pytest.param([PYTORCH], [("aw-0", 1, {"cpu": 1000}), ("aw-1", 2, {"cpu": 2000})],
                 id="PyTorchJob: Master then Worker, whatever the manifest's order"),
    pytest.param([RAY], [("aw-0", 1, {"cpu": 1000}), ("aw-1", 3, {"cpu": 2000})],
                 id="RayCluster: head, then groups by replicas (numOfHosts not read)"),
    pytest.param([deployment(), deployment(None, "StatefulSet")],
                 [("aw-0", 3, {"cpu": 100}), ("aw-1", 1, {"cpu": 100})],
                 id="Deployment and StatefulSet: spec.replicas, numbered across components"),
    pytest.param([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **pod("300m")},
                  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {}}],
                 [("aw-0", 1, {"cpu": 300})], id="Pod: one; a Service has no podSets"),
])
def test_inferred_pod_sets(templates: list[dict[str, Any]], expected: list[tuple[str, int, dict[str, int]]]) -> None:
    assert shape(wrap(*templates)) == expected


def test_declared_pod_sets_and_the_template_kueue_copies() -> None:
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
           "spec": {"leaderWorkerTemplate": {"leaderTemplate": pod("1", priorityClassName="high"),
                                             "workerTemplate": pod("2")}}}
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {"labels": {"app": "x"}, "name": "dropped"}
    body = wrap(lws, declared=[[{"path": "template.spec.leaderWorkerTemplate.leaderTemplate", "replicas": 2},
                                {"path": "template.spec.leaderWorkerTemplate.workerTemplate", "replicas": 6}]])
    assert shape(body) == [("aw-0", 2, {"cpu": 1000}), ("aw-1", 6, {"cpu": 2000})]
    wl = workload(body)
    assert wl.priority_ref == o.PriorityRef(source="scheduling.k8s.io/priorityclass", name="high")
    assert wl.name == jobkinds.workload_name("AppWrapper", "workload.codeflare.dev", "aw", "uid-1")
    sources = APPWRAPPER.pod_sets(_where(), body)
    assert "volumes" not in sources[1].template["spec"]
    assert sources[1].template["metadata"] == {"labels": {"app": "x"}}
    assert sources[1].info_at == ("spec", "components", 0, "podSetInfos", 1)


def _where() -> Any:
    from services.actuator.kindplan import _Where
    return _Where("AppWrapper ns/aw")


@pytest.mark.parametrize(("body", "field", "message"), [
    pytest.param(wrap(job(parallelism=2), declared=[[{"path": "template.spec.template", "replicas": 3}]]),
                 "spec.components[0].podSets", "replicas 3 of the podSet with path", id="declared replicas differ"),
    pytest.param(wrap(PYTORCH, declared=[[{"path": "template.spec.pytorchReplicaSpecs.Master.template"}]]),
                 "spec.components[0].podSets", "1 podSets declared, but the wrapped 2", id="declared too few"),
    pytest.param(wrap(deployment(), declared=[[{"path": "spec.template"}]]), "spec.components[0].podSets[0].path",
                 "first element of the path must be 'template'", id="path outside the template"),
    pytest.param(wrap(deployment(), declared=[[{"path": "template.spec.nope"}]]), "spec.components[0].podSets",
                 "the podSet with path 'template.spec.template' is missing", id="declared path not the inferred"),
    pytest.param(wrap({"apiVersion": "example.com/v1", "kind": "Thing", "spec": {}},
                      declared=[[{"path": "template.spec.pods[0]"}]]), "spec.components[0].template.spec.pods[0]",
                 "required field is missing", id="declared path to nothing"),
    pytest.param(wrap(deployment(), declared=[[{"path": "template.spec.template"}] * 2]),
                 "spec.components[0].podSets[1].path", "multiple podSets with path", id="same path twice"),
    pytest.param(obj(AW, "AppWrapper", {"components": [{"podSets": []}]}), "spec.components[0].template",
                 "required field is missing", id="no template"),
])
def test_refusals_name_the_field(body: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ManifestError) as e:
        normalize(Document(file="aw.yaml", index=1, body=body))
    assert e.value.field == field and message in e.value.message


@pytest.mark.parametrize(("status", "ended"), [
    ({"phase": "Succeeded"}, jobkinds.Finished(True, "AppWrapper finished successfully")),
    ({"phase": "Failed"}, jobkinds.Finished(False, "AppWrapper failed")),
    ({"phase": "Failed", "conditions": [{"type": "ResourcesDeployed", "status": "True"}]}, None),
    ({"phase": "Running"}, None),
])
def test_finished_as_kueue_reads_it(status: dict[str, Any], ended: jobkinds.Finished | None) -> None:
    assert APPWRAPPER.finished({"status": status}) == ended


def test_admission_goes_into_pod_set_infos_and_eviction_clears_them() -> None:
    body = served(wrap(PYTORCH, deployment(2)))
    body["spec"]["suspend"] = True
    running = apply(body, kindplan_admit(body, {"aw-0": [GPU], "aw-1": [SPOT], "aw-2": [SPOT]}))
    assert running["spec"]["suspend"] is False
    first, second = running["spec"]["components"]
    assert first["podSetInfos"] == [{"nodeSelector": {"gpu": "a100"}},
                                    {"nodeSelector": {"pool": "spot"}, "tolerations": [dict(SPOT.tolerations[0])]}]
    assert second["podSetInfos"] == [{"nodeSelector": {"pool": "spot"}, "tolerations": [dict(SPOT.tolerations[0])]}]
    assert running["spec"]["components"][0]["template"] == body["spec"]["components"][0]["template"]  # untouched
    held = apply(running, kindplan_evict(running))
    assert held["spec"]["suspend"] is True
    assert all("podSetInfos" not in c for c in held["spec"]["components"])
    again = apply(held, kindplan_admit(held, {"aw-0": [SPOT], "aw-1": [GPU], "aw-2": [GPU]}))
    assert again["spec"]["components"][1]["podSetInfos"] == [{"nodeSelector": {"gpu": "a100"}}]


def kindplan_admit(body: dict[str, Any], flavors: dict[str, Any], d: Any = None) -> list[dict[str, Any]]:
    from services.actuator.kindplan import kind_admit_ops
    return kind_admit_ops(APPWRAPPER if body["kind"] == "AppWrapper" else JS, body, d or admit(), flavors)


def kindplan_evict(body: dict[str, Any]) -> list[dict[str, Any]]:
    from services.actuator.kindplan import kind_evict_ops
    return kind_evict_ops(APPWRAPPER if body["kind"] == "AppWrapper" else JS, body, evict())


def checked(*updates: o.PodSetUpdate) -> AdmitChecked:
    return AdmitChecked(id="c4-0", cycle=4, time=1, namespace="ns", name="wl", cluster_queue="cq",
                        admission=o.Admission(cluster_queue="cq", pod_set_assignments=()), pod_set_updates=updates)


def test_a_checks_pod_set_updates_reach_each_pod_set_and_are_undone_on_eviction() -> None:
    body = served(jobset(rj("w"), rj("d")))
    body["spec"]["suspend"] = True
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    update = o.PodSetUpdate(name="w", labels=(("provisioned", "yes"), ("team", "a")), annotations=(("note", "n"),),
                            node_selector=(("zone", "z1"),))
    running = apply(body, kindplan_admit(body, {"w": [SPOT], "d": [GPU]}, checked(update)))
    w = running["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    d = running["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert w["metadata"] == {"labels": {"team": "a", "provisioned": "yes"}, "annotations": {"note": "n"}}
    assert w["spec"]["nodeSelector"] == {"pool": "spot", "zone": "z1"}
    assert "metadata" not in d and d["spec"]["nodeSelector"] == {"gpu": "a100"}
    remembered = json.loads(running["metadata"]["annotations"][ORIGINAL_POD_SCHEDULING_ANNOTATION])
    assert remembered["w"]["labels"] == {"provisioned": None, "team": "a"}
    held = apply(running, kindplan_evict(running))
    w = held["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert w["metadata"] == {"labels": {"team": "a"}, "annotations": {}}
    assert w["spec"]["nodeSelector"] == {}


def test_a_pod_set_update_against_the_template_is_an_invalid_object() -> None:
    from services.actuator.kubeapi import InvalidObject
    body = served(jobset(rj("w")))
    body["spec"]["suspend"] = True
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    with pytest.raises(InvalidObject, match="labels team"):
        kindplan_admit(body, {"w": [SPOT]}, checked(o.PodSetUpdate(name="w", labels=(("team", "b"),))))
    with pytest.raises(InvalidObject, match="conflict for key=pool"):
        kindplan_admit(body, {"w": [SPOT]}, checked(o.PodSetUpdate(name="w", node_selector=(("pool", "x"),))))


def test_the_pod_set_updates_reach_an_appwrappers_pod_set_infos() -> None:
    body = served(wrap(deployment(2)))
    body["spec"]["suspend"] = True
    update = o.PodSetUpdate(name="aw-0", labels=(("l", "1"),), annotations=(("a", "2"),))
    running = apply(body, kindplan_admit(body, {"aw-0": [GPU]}, checked(update)))
    assert running["spec"]["components"][0]["podSetInfos"] == [
        {"labels": {"l": "1"}, "annotations": {"a": "2"}, "nodeSelector": {"gpu": "a100"}}]
