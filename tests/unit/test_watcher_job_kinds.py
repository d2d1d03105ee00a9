"""The watcher's translation of the workload kinds besides Job (``events.jobkinds``): a queued
JobSet / PyTorchJob / RayJob is published as the Workload Kueue would create, its end as
``WorkloadFinished``, its eviction's completion once it is held again; the Workload it owns is
left to it when its kind is watched (and translated as a Workload when it is not)."""

from __future__ import annotations

import copy
from typing import Any

from events import objects as o
from events.cluster import EVICTED_ANNOTATION
from events.messages import EvictionCompleted, ObjectApplied, WorkloadFinished
from services.watcher.translate import Published, Ref, translate
from tests.unit.test_job_kinds import jobset, kubeflow, rayjob, rj

CLUSTER = "east"
NOW = 1_750_000_000_000
OWNERS = frozenset({"Job", "JobSet", "PyTorchJob", "RayJob"})


def served(body: dict[str, Any], rv: str = "7", **meta: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["metadata"].update({"resourceVersion": rv, **meta})
    return out


def pytorch(suspend: bool = True, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    body = served(kubeflow("PyTorchJob", "pytorchReplicaSpecs", {"Master": 1, "Worker": 2}), **meta)
    body["spec"]["runPolicy"] = {"suspend": suspend}
    if status is not None:
        body["status"] = status
    return body


def test_a_queued_pytorchjob_is_published_as_its_workload() -> None:
    got = translate("PyTorchJob", "ADDED", pytorch(), cluster=CLUSTER, time_ms=NOW, owners=OWNERS)
    assert got.errors == [] and got.source == Ref("PyTorchJob", "ns", "x")
    assert [type(e.event) for e in got.envelopes] == [ObjectApplied]
    wl = got.envelopes[0].event.object  # type: ignore[union-attr]
    assert isinstance(wl, o.Workload)
    assert [(p.name, p.count) for p in wl.pod_sets] == [("master", 1), ("worker", 2)]
    assert wl.owner is not None and (wl.owner.kind, wl.owner.name) == ("PyTorchJob", "x")
    assert got.envelopes[0].id == "watcher:east:PyTorchJob:ns/x:7:applied"
    assert not got.frozen  # held: its spec may still change the Workload


def test_running_is_frozen_and_finishing_is_published() -> None:
    running = translate("PyTorchJob", "MODIFIED", pytorch(suspend=False), cluster=CLUSTER, time_ms=NOW)
    assert running.frozen
    done = pytorch(suspend=False, status={"conditions": [{"type": "Succeeded", "status": "True", "message": "ok"}]})
    got = translate("PyTorchJob", "MODIFIED", done, cluster=CLUSTER, time_ms=NOW)
    wl = got.envelopes[0].event.object  # type: ignore[union-attr]
    assert got.envelopes[1].event == WorkloadFinished(time=NOW, namespace="ns", name=wl.name, succeeded=True,
                                                      message="ok")


def test_an_evicted_jobset_held_again_completes_its_eviction() -> None:
    body = served(jobset(rj("w")), annotations={EVICTED_ANNOTATION: "d-9"})
    body["spec"]["suspend"] = True
    got = translate("JobSet", "MODIFIED", body, cluster=CLUSTER, time_ms=NOW)
    wl = got.envelopes[0].event.object  # type: ignore[union-attr]
    assert wl.annotations == ()  # the actuator's bookkeeping is not the user's
    assert got.envelopes[1].event == EvictionCompleted(time=NOW, namespace="ns", name=wl.name)
    assert got.envelopes[1].correlation_id == "d-9"


def test_rayjob_finished_from_its_deployment_status() -> None:
    body = served(rayjob())
    body["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "boom"}
    got = translate("RayJob", "MODIFIED", body, cluster=CLUSTER, time_ms=NOW)
    assert isinstance(got.envelopes[1].event, WorkloadFinished)
    assert (got.envelopes[1].event.succeeded, got.envelopes[1].event.message) == (False, "boom")


def test_a_bad_object_is_an_error_naming_it() -> None:
    body = served(jobset({"name": "w"}))
    got = translate("JobSet", "ADDED", body, cluster=CLUSTER, time_ms=NOW)
    assert got.envelopes == []
    assert got.errors == ["cluster:east: document 0 (JobSet ns/x): spec.replicatedJobs[0].template: "
                          "required field is missing"]


def _owned_workload() -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "jobset-x-1", "namespace": "ns", "resourceVersion": "3",
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "x",
                                              "uid": "u"}]},
            "spec": {"queueName": "lq", "podSets": [{"name": "w", "count": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]}}


def test_a_workload_owned_by_a_watched_kind_is_left_to_it() -> None:
    watched = translate("Workload", "ADDED", _owned_workload(), cluster=CLUSTER, time_ms=NOW, owners=OWNERS)
    assert watched.envelopes == []
    unwatched = translate("Workload", "ADDED", _owned_workload(), cluster=CLUSTER, time_ms=NOW)
    assert [type(e.event) for e in unwatched.envelopes] == [ObjectApplied]


def test_memory_rebuilt_from_the_log_knows_the_owner() -> None:
    got = translate("JobSet", "ADDED", served(jobset(rj("w"))), cluster=CLUSTER, time_ms=NOW, owners=OWNERS)
    memory = Published(OWNERS)
    memory.remember(got.envelopes[0])
    assert memory.sources("JobSet") == [Ref("JobSet", "ns", "x")]
    again = memory.select(got)
    assert again.envelopes == [] and again.skipped == 2  # and the not-ready of a starting JobSet, quiet
