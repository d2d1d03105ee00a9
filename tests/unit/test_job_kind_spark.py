"""SparkApplication (``sparkoperator.k8s.io/v1beta2``) as Kueue's integration reads it: ``driver``
and ``executor`` podSets built from the roles (coreRequest, memory in Java notation, limits,
GPUs, sidecars, init containers), the webhook's refusals, how it ends; the admission written
into the roles themselves and undone on eviction."""

from __future__ import annotations

from typing import Any

import pytest

from events import jobkinds
from events import objects as o
from events.jobkinds.spark import SPARKAPPLICATION, java_memory
from events.manifests import Document, ManifestError, normalize
from services.actuator.kindplan import kind_admit_ops, kind_evict_ops
from tests.unit.test_job_kinds import obj
from tests.unit.test_kind_plan import GPU, SPOT, admit, apply, evict, served

GiB, MiB = 1 << 30, 1 << 20


def spark(driver: dict[str, Any] | None = None, executor: dict[str, Any] | None = None,
          **spec: Any) -> dict[str, Any]:
    return obj("sparkoperator.k8s.io/v1beta2", "SparkApplication",
               {"type": "Python", "mode": "cluster", "driver": driver or {"coreRequest": "1", "memory": "512m"},
                "executor": executor if executor is not None else {"instances": 3, "coreRequest": "2", "memory": "2g"},
                **spec})


def shape(body: dict[str, Any]) -> list[tuple[str, int, dict[str, int]]]:
    wl = normalize(Document(file="s.yaml", index=1, body=body))
    assert isinstance(wl, o.Workload)
    return [(p.name, p.count, dict(p.requests)) for p in wl.pod_sets]


def test_driver_and_executors() -> None:
    assert shape(spark()) == [("driver", 1, {"cpu": 1000, "memory": 512 * MiB}),
                              ("executor", 3, {"cpu": 2000, "memory": 2 * GiB})]


def test_no_instances_is_no_executor_pods_and_limits_stand_in_for_requests() -> None:
    body = spark(executor={"coreLimit": "500m", "memoryLimit": "1g", "gpu": {"name": "nvidia.com/gpu", "quantity": 1}})
    assert shape(body)[1] == ("executor", 0, {"cpu": 500, "memory": GiB, "nvidia.com/gpu": 1})


def test_sidecars_and_init_containers_count() -> None:
    side = {"name": "side", "image": "i", "resources": {"requests": {"cpu": "250m"}}}
    init = {"name": "init", "image": "i", "resources": {"requests": {"cpu": "3"}}}
    body = spark(driver={"coreRequest": "1", "sidecars": [side], "initContainers": [init]})
    assert shape(body)[0] == ("driver", 1, {"cpu": 3000})  # max(init 3, 1 + 250m)


def test_priority_from_the_driver_and_the_workload_name() -> None:
    body = spark(driver={"coreRequest": "1", "priorityClassName": "high"})
    wl = normalize(Document(file="s.yaml", index=1, body=body))
    assert isinstance(wl, o.Workload)
    assert wl.priority_ref is not None and wl.priority_ref.name == "high"
    assert wl.name == jobkinds.workload_name("SparkApplication", "sparkoperator.k8s.io", "x", "uid-1")


@pytest.mark.parametrize(("body", "field", "message"), [
    (spark(mode="client"), "spec.mode", "only cluster mode"),
    (spark(dynamicAllocation={"enabled": True}), "spec.dynamicAllocation.enabled", "workload slicing"),
    (spark(nodeSelector={"a": "b"}), "spec.nodeSelector", "not supported by kueuelog yet"),
    (spark(executor={"instances": -1}), "spec.executor.instances", "must be between 0"),
])
def test_refusals(body: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ManifestError) as e:
        normalize(Document(file="s.yaml", index=1, body=body))
    assert e.value.field == field and message in e.value.message


def test_java_memory() -> None:
    assert [java_memory(v) for v in ("512m", "2g", "1G", "100", "3k")] == ["512Mi", "2Gi", "1Gi", "100", "3Ki"]


@pytest.mark.parametrize(("state", "ended"), [
    ({"state": "COMPLETED"}, jobkinds.Finished(True, "")),
    ({"state": "FAILED", "errorMessage": "boom"}, jobkinds.Finished(False, "boom")),
    ({"state": "SUBMISSION_FAILED"}, jobkinds.Finished(False, "")),
    ({"state": "RUNNING"}, None),
])
def test_finished(state: dict[str, Any], ended: jobkinds.Finished | None) -> None:
    assert SPARKAPPLICATION.finished({"status": {"applicationState": state}}) == ended


def test_admission_into_the_roles_and_back() -> None:
    body = served(spark(driver={"coreRequest": "1", "nodeSelector": {"disk": "ssd"}}))
    body["spec"]["suspend"] = True
    checked = o.PodSetUpdate(name="executor", labels=(("l", "v"),))
    from events.messages import AdmitChecked
    d = AdmitChecked(id="c4-0", cycle=4, time=1, namespace="ns", name="wl", cluster_queue="cq",
                     admission=admit().admission, pod_set_updates=(checked,))
    running = apply(body, kind_admit_ops(SPARKAPPLICATION, body, d, {"driver": [GPU], "executor": [SPOT]}))
    assert running["spec"]["suspend"] is False
    assert running["spec"]["driver"]["nodeSelector"] == {"disk": "ssd", "gpu": "a100"}
    assert running["spec"]["executor"]["nodeSelector"] == {"pool": "spot"}
    assert running["spec"]["executor"]["tolerations"] == [dict(SPOT.tolerations[0])]
    assert running["spec"]["executor"]["labels"] == {"l": "v"}
    held = apply(running, kind_evict_ops(SPARKAPPLICATION, running, evict()))
    assert held["spec"]["suspend"] is True
    assert held["spec"]["driver"]["nodeSelector"] == {"disk": "ssd"}
    assert held["spec"]["executor"]["nodeSelector"] == {} and held["spec"]["executor"]["labels"] == {}
