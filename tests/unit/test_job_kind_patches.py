"""Suspend / resume / evict patch shapes per kind (``events.jobkinds.patches``), applied with a small
RFC 6902 ``add`` so that what a patch does to the manifest is what is asserted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from events import jobkinds
from events.jobkinds.patches import PatchConflict, Scheduling, evict_ops, resume_ops, suspend_patch
from events.quantity import to_amount
from tests.unit.test_job_kinds import jobset, kubeflow, pod, rayjob, rj


class Where:
    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")

    def amount(self, resource: str, value: object, field: str) -> int:
        return to_amount(resource, value)


def apply(body: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(body)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        at: Any = out
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at[p]
        if isinstance(at, list):
            at[int(last)] = op["value"]
        else:
            at[last] = op["value"]
    return out


SPOT = Scheduling({"node.example/pool": "spot"}, [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])
GPU = Scheduling({"node.example/gpu": "a100"})


@pytest.mark.parametrize(("body", "patch"), [
    pytest.param(jobset(rj("w")), {"spec": {"suspend": True}}, id="jobset"),
    pytest.param(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1}),
                 {"spec": {"runPolicy": {"suspend": True}}}, id="pytorchjob"),
    pytest.param(rayjob(), {"spec": {"suspend": True}}, id="rayjob"),
    pytest.param({"apiVersion": "batch/v1", "kind": "Job"}, {"spec": {"suspend": True}}, id="job"),
])
def test_suspend_patch(body: dict[str, Any], patch: dict[str, Any]) -> None:
    kind = jobkinds.kind_of(body["apiVersion"], body["kind"])
    assert kind is not None
    assert suspend_patch(kind, True) == patch


def test_jobset_resume_writes_each_replicated_jobs_template() -> None:
    body = jobset(rj("workers"), rj("driver"))
    body["spec"]["suspend"] = True
    kind = jobkinds.kind_of("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert kind is not None
    out = apply(body, resume_ops(Where(), kind, body, {"workers": SPOT, "driver": GPU}))
    assert out["spec"]["suspend"] is False
    specs = [j["template"]["spec"]["template"]["spec"] for j in out["spec"]["replicatedJobs"]]
    assert specs[0]["nodeSelector"] == {"node.example/pool": "spot"}
    assert specs[0]["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    assert (specs[1]["nodeSelector"], specs[1]["tolerations"]) == ({"node.example/gpu": "a100"}, [])


def test_pytorchjob_resume_adds_run_policy_and_merges_the_templates_own_selector() -> None:
    body = kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 2})
    body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    kind = jobkinds.kind_of("kubeflow.org/v1", "PyTorchJob")
    assert kind is not None
    out = apply(body, resume_ops(Where(), kind, body, {"master": GPU, "worker": SPOT}))
    assert out["spec"]["runPolicy"] == {"suspend": False}
    worker = out["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"] == {"zone": "a", "node.example/pool": "spot"}
    back = apply(out, evict_ops(Where(), kind, out, {"master": Scheduling(), "worker": Scheduling({"zone": "a"})}))
    assert back["spec"]["runPolicy"] == {"suspend": True}
    assert back["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {"zone": "a"}
    assert back["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {}


def test_resume_refuses_a_selector_conflict() -> None:
    body = kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1})
    body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] = {"node.example/gpu": "t4"}
    kind = jobkinds.kind_of("kubeflow.org/v1", "PyTorchJob")
    assert kind is not None
    with pytest.raises(PatchConflict, match=r"podSet master: nodeSelector node\.example/gpu"):
        resume_ops(Where(), kind, body, {"master": GPU})


def test_rayjob_default_submitter_is_written_whole() -> None:
    body = rayjob(("g", 1, None))
    kind = jobkinds.kind_of("ray.io/v1", "RayJob")
    assert kind is not None
    out = apply(body, resume_ops(Where(), kind, body, {"head": GPU, "g": SPOT, "submitter": GPU}))
    submitter = out["spec"]["submitterPodTemplate"]["spec"]
    assert submitter["nodeSelector"] == {"node.example/gpu": "a100"}
    assert submitter["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
    assert out["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["nodeSelector"] == {
        "node.example/pool": "spot"}
    with_template = rayjob(submitterPodTemplate=pod("2"))
    ops = resume_ops(Where(), kind, with_template, {"submitter": GPU})
    assert {op["path"] for op in ops} == {"/spec/suspend", "/spec/submitterPodTemplate/spec/nodeSelector",
                                          "/spec/submitterPodTemplate/spec/tolerations"}
