"""The job reconciler's planning: given a Job as the API returns it, what to do.

Mirrors Kueue's job reconciler (``pkg/controller/jobframework/reconciler.go``) plus its Job
webhook's "create suspended": a queued Job running without admission is suspended (or, with
policy ``reject``, rejected); a suspended one with no active pods gets its Workload (Kueue's
name, owner reference, job-uid label, one pod set ``main`` as the scheduler folds it); a
finished one gets ``Finished=True`` on its Workload; the rest is left alone. A Job that
cannot be read is an error naming the Job and the field.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio import client

from events import objects as o
from events.cluster import DECISION_ID_ANNOTATION as DECISION_ANNOTATION
from events.cluster import REJECTED_LABEL
from events.jobs import workload_name_for_job
from events.manifests import Document, normalize
from services.actuator import job_reconciler as shell
from services.actuator.job_reconciler import (
    Finished,
    JobError,
    JobPlan,
    JobRef,
    PriorityQuery,
    ResolvedPriority,
    default_priority,
    finished_status,
    plan_job,
    rejection_message,
)
from tests.builders import JobBuilder, a_job

UID = "0d3c6a0e-5b1f-4a8e-9a53-6f3f0c1b2a77"
WL = workload_name_for_job("train", UID)
REF = JobRef("team-a", "train", UID, "42")


def job(queue: str | None = "lq", *, suspend: bool | None = True, **requests: Any) -> JobBuilder:
    b = a_job("team-a", "train", queue).request(**(requests or {"cpu": "1"}))
    b.body["metadata"].update(uid=UID, resourceVersion="42", creationTimestamp="2025-01-01T00:00:00Z")
    if suspend is None:
        b.body["spec"].pop("suspend")
    else:
        b.body["spec"]["suspend"] = suspend
    return b


def with_status(b: JobBuilder, **status: Any) -> dict[str, Any]:
    body = b.obj()
    body["status"] = status
    return body


def cond(type_: str, status: str = "True", message: str | None = None) -> dict[str, Any]:
    c = {"type": type_, "status": status, "reason": "x"}
    if message is not None:
        c["message"] = message
    return c


def body_of(plan: JobPlan, priority: ResolvedPriority | None = None) -> dict[str, Any]:
    assert plan.workload is not None, plan
    return plan.workload.body_with(priority or ResolvedPriority())


# --- what to do ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "policy", "want_suspend", "want_reject", "want_workload", "want_finished"),
    [
        pytest.param(job(suspend=False).obj(), "suspend", True, False, False, None,
                     id="created running and never admitted: suspend first, the Workload comes after"),
        pytest.param(job(suspend=None).obj(), "suspend", True, False, False, None,
                     id="spec.suspend left out means running"),
        pytest.param(job(suspend=False).obj(), "reject", False, True, False, None,
                     id="created running with policy reject: rejected, not queued"),
        pytest.param(job().obj(), "suspend", False, False, True, None,
                     id="created suspended: it gets its Workload"),
        pytest.param(job().obj(), "reject", False, False, True, None,
                     id="created suspended with policy reject: queued as usual"),
        pytest.param(with_status(job(), active=2), "suspend", False, False, False, None,
                     id="suspended but pods still active: wait for them to stop, as Kueue does"),
        pytest.param(job(suspend=False).annotate(DECISION_ANNOTATION, "7:0").obj(), "suspend", False, False, True,
                     None, id="running after admission: left running, its Workload made sure of"),
        pytest.param(job(suspend=False).annotate(DECISION_ANNOTATION, "7:0").obj(), "reject", False, False, True,
                     None, id="running after admission is not rejected either"),
        pytest.param(with_status(job(suspend=False).annotate(DECISION_ANNOTATION, "7:0"),
                                 conditions=[cond("Complete", message="done")]), "suspend",
                     False, False, False, Finished(WL, True, "done"),
                     id="completed: Finished(Succeeded) with the Job condition's message"),
        pytest.param(with_status(job(suspend=False), conditions=[cond("Failed", message="BackoffLimitExceeded")]),
                     "suspend", False, False, False, Finished(WL, False, "BackoffLimitExceeded"),
                     id="failed, even never admitted: Finished(Failed), not suspended"),
        pytest.param(with_status(job(), conditions=[cond("Complete")]), "suspend", False, False, False,
                     Finished(WL, True, "Job finished successfully"),
                     id="a condition without a message gets Kueue's default one"),
        pytest.param(with_status(job(), conditions=[cond("Complete", "False"), cond("Suspended")]), "suspend",
                     False, False, True, None, id="conditions that are not an ending change nothing"),
        pytest.param(job(queue=None, suspend=False).obj(), "suspend", False, False, False, None,
                     id="no queue-name label: not Kueue's Job"),
        pytest.param(job(suspend=False).label(REJECTED_LABEL, "true").obj(), "suspend", False, False, False, None,
                     id="rejected earlier: rejected for good"),
    ],
)
def test_plan(body: dict[str, Any], policy: Any, want_suspend: bool, want_reject: bool, want_workload: bool,
              want_finished: Finished | None) -> None:
    plan = plan_job(body, policy=policy)
    assert plan.job == REF
    assert plan.suspend is want_suspend
    assert (plan.reject is not None) is want_reject
    assert (plan.workload is not None) is want_workload
    assert plan.finished == want_finished
    assert plan.invalid is None
    assert plan.nothing_to_do is not (want_suspend or want_reject or want_workload or want_finished is not None)


def test_rejection_says_why_and_what_to_do() -> None:
    plan = plan_job(job(suspend=False).obj(), policy="reject")
    assert plan.reject == rejection_message(REF, "lq")
    assert "kueue.x-k8s.io/queue-name=lq" in plan.reject
    assert "spec.suspend=true" in plan.reject
    assert "no admission webhook" in plan.reject


def test_after_the_suspend_the_same_job_gets_its_workload() -> None:
    running = job(suspend=False).obj()
    assert plan_job(running).suspend
    running["spec"]["suspend"] = True  # what the patch returns
    assert plan_job(running).workload is not None


# --- the Workload ----------------------------------------------------------------------------


def test_workload_body_is_kueues() -> None:
    body = job(cpu="500m", memory="1Gi").parallelism(5, completions=3).obj()
    body["spec"]["template"]["metadata"] = {"labels": {"app": "x"}, "creationTimestamp": None}
    body = body_of(plan_job(body))
    assert body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",  # our CRDs' storage version
        "kind": "Workload",
        "metadata": {
            "name": WL,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/job-uid": UID},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "queueName": "lq",
            "podSets": [{
                "name": "main",
                "count": 3,  # min(parallelism, completions)
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"restartPolicy": "Never", "containers": [
                        {"name": "main", "image": "busybox",
                         "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
                },
            }],
            "priority": 0,
        },
    }


def test_workload_agrees_with_what_the_scheduler_folds() -> None:
    """The Workload object read back as a manifest is the Workload the scheduler makes of the Job."""
    body = job(cpu="2", memory="3Gi").parallelism(4).annotate("kueue.x-k8s.io/job-min-parallelism", "2").obj()
    from_job = normalize(Document("job", 1, body))
    from_object = normalize(Document("wl", 1, body_of(plan_job(body))))
    assert isinstance(from_job, o.Workload) and isinstance(from_object, o.Workload)
    assert from_object.name == from_job.name == WL
    assert from_object.queue_name == from_job.queue_name == "lq"
    assert from_object.pod_sets == from_job.pod_sets
    assert from_object.pod_sets[0].count == 4 and from_object.pod_sets[0].min_count == 2
    assert from_object.owner == from_job.owner


@pytest.mark.parametrize(
    ("change", "want_query"),
    [
        pytest.param(lambda b: b, PriorityQuery("PriorityClass", ""), id="no class: the cluster's default, if any"),
        pytest.param(lambda b: b.label("kueue.x-k8s.io/priority-class", "high"),
                     PriorityQuery("WorkloadPriorityClass", "high"), id="the priority-class label"),
        pytest.param(lambda b: b.body["spec"]["template"]["spec"].update(priorityClassName="pods") or b,
                     PriorityQuery("PriorityClass", "pods"), id="the pod template's priorityClassName"),
        pytest.param(lambda b: b.label("kueue.x-k8s.io/priority-class", "high").body["spec"]["template"]["spec"]
                     .update(priorityClassName="pods") or b,
                     PriorityQuery("WorkloadPriorityClass", "high"), id="the label wins over the pod's class"),
    ],
)
def test_priority_comes_from_where_kueue_takes_it(change: Any, want_query: PriorityQuery) -> None:
    plan = plan_job(change(job()).obj())
    assert plan.workload is not None and plan.workload.priority == want_query


def test_resolved_priority_goes_into_the_spec_as_kueue_writes_it() -> None:
    plan = plan_job(job().label("kueue.x-k8s.io/priority-class", "high").obj())
    spec = body_of(plan, ResolvedPriority("high", "kueue.x-k8s.io/workloadpriorityclass", 1000))["spec"]
    # v1beta2 spells v1beta1's priorityClassName + priorityClassSource as priorityClassRef.
    assert (spec["priorityClassRef"], spec["priority"]) == (
        {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}, 1000)
    assert "priorityClassName" not in spec and "priorityClassSource" not in spec
    assert plan.workload is not None and "priority" not in plan.workload.body["spec"]  # the draft is untouched


def test_a_pod_priority_class_is_referenced_in_v1beta2_spelling() -> None:
    spec = body_of(plan_job(job().obj()), ResolvedPriority("b", "scheduling.k8s.io/priorityclass", 3))["spec"]
    assert (spec["priorityClassRef"], spec["priority"]) == (
        {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "b"}, 3)


def test_default_priority_is_the_lowest_global_default() -> None:
    pcs = [{"metadata": {"name": n}, "value": v, "globalDefault": d}
           for n, v, d in [("a", 5, True), ("b", 3, True), ("c", 1, False), ("d", 3, True)]]
    assert default_priority(pcs) == ResolvedPriority("b", "scheduling.k8s.io/priorityclass", 3)
    assert default_priority([pcs[2]]) == ResolvedPriority()


def test_provisioning_request_annotations_are_copied_and_no_others() -> None:
    body = job().annotate("provreq.kueue.x-k8s.io/maxRunDurationSeconds", "60").annotate("other", "x").obj()
    assert body_of(plan_job(body))["metadata"]["annotations"] == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}


def test_list_items_without_kind_are_jobs() -> None:
    body = job().obj()
    del body["apiVersion"], body["kind"]
    assert plan_job(body).workload is not None


# --- Finished on the Workload ----------------------------------------------------------------


def workload(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": WL, "resourceVersion": "9", "generation": 2},
            "status": {"conditions": list(conditions)}}


def test_finished_condition_is_added_once_keeping_the_others() -> None:
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z"}
    patch = finished_status(workload(admitted), Finished(WL, False, "BackoffLimitExceeded"), 1_735_689_601_999)
    assert patch == {
        "metadata": {"resourceVersion": "9"},
        "status": {"conditions": [admitted, {
            "type": "Finished", "status": "True", "reason": "Failed", "message": "BackoffLimitExceeded",
            "lastTransitionTime": "2025-01-01T00:00:01Z", "observedGeneration": 2}]},
    }
    done = workload(admitted, patch["status"]["conditions"][1])
    assert finished_status(done, Finished(WL, True, "x"), 0) is None


def test_a_false_finished_condition_is_replaced() -> None:
    patch = finished_status(workload(cond("Finished", "False")), Finished(WL, True, "ok"), 0)
    assert patch is not None
    assert [(c["type"], c["status"], c["reason"]) for c in patch["status"]["conditions"]] == [
        ("Finished", "True", "Succeeded")]


# --- bad input -------------------------------------------------------------------------------


def test_a_job_that_cannot_become_a_workload_is_reported_and_still_suspended() -> None:
    plan = plan_job(job(suspend=False, cpu="lots").obj())
    assert plan.suspend
    assert isinstance(plan.invalid, JobError)
    assert plan.invalid.job == "team-a/train"
    assert plan.invalid.field == "spec.template.spec.containers[0].resources.requests.cpu"
    assert str(plan.invalid).startswith("Job team-a/train: spec.template.spec.containers[0].resources.requests.cpu: ")


def test_a_suspended_job_that_cannot_become_a_workload_gets_none() -> None:
    plan = plan_job(job().label("kueue.x-k8s.io/queue-name", "Not_A_Queue").obj())
    assert plan.workload is None and not plan.suspend
    assert plan.invalid is not None and plan.invalid.field == "metadata.labels.kueue.x-k8s.io/queue-name"


def test_rejection_of_an_unconvertible_job_says_both() -> None:
    plan = plan_job(job(suspend=False, cpu="lots").obj(), policy="reject")
    assert plan.reject is not None and "spec.suspend=true" in plan.reject and "requests.cpu" in plan.reject


def _set(path: str, value: Any) -> Any:
    def change(body: dict[str, Any]) -> dict[str, Any]:
        *parents, last = path.split(".")
        node = body
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DELETE:
            node.pop(last)
        else:
            node[last] = value
        return body
    return change


_DELETE = object()


@pytest.mark.parametrize(
    ("change", "want_job", "want_field", "want_text"),
    [
        pytest.param(_set("metadata.name", _DELETE), "team-a/?", "metadata.name", "required field is missing",
                     id="no name"),
        pytest.param(_set("metadata.uid", _DELETE), "team-a/train", "metadata.uid", "required field is missing",
                     id="no uid: nothing to own the Workload by"),
        pytest.param(_set("metadata.labels", ["q"]), "team-a/train", "metadata.labels", "expected an object, got list",
                     id="labels not a map"),
        pytest.param(_set("metadata.annotations", {"a": 1}), "team-a/train", "metadata.annotations.a",
                     "expected a string, got int", id="an annotation not a string"),
        pytest.param(_set("spec.suspend", "yes"), "team-a/train", "spec.suspend", "expected a boolean, got 'yes'",
                     id="suspend not a boolean"),
        pytest.param(_set("status.conditions", {"type": "Complete"}), "team-a/train", "status.conditions",
                     "expected a list, got dict", id="conditions not a list"),
        pytest.param(_set("status.conditions", [{"type": "Complete"}]), "team-a/train", "status.conditions[0]",
                     "expected an object with string type and status", id="a condition without status"),
        pytest.param(_set("status.active", "2"), "team-a/train", "status.active", "expected an integer, got '2'",
                     id="active not a number"),
        pytest.param(_set("kind", "CronJob"), "team-a/train", "kind", "expected a batch/v1 Job, got batch/v1 CronJob",
                     id="not a Job"),
    ],
)
def test_a_job_that_cannot_be_read_is_an_error_naming_job_and_field(
    change: Any, want_job: str, want_field: str, want_text: str
) -> None:
    with pytest.raises(JobError) as err:
        plan_job(change(job().obj()))
    assert (err.value.job, err.value.field, err.value.message) == (want_job, want_field, want_text)
    assert str(err.value) == f"Job {want_job}: {want_field}: {want_text}"


def test_no_metadata_at_all() -> None:
    with pytest.raises(JobError, match=r"^Job \?: metadata: required field is missing$"):
        plan_job({"spec": {}})


# --- the shell's pure edges: watch events and API errors -------------------------------------


def an_api_client() -> client.ApiClient:
    """Never called: the reconciler's parts under test make no request."""
    return client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))


async def test_watch_events_keep_the_newest_jobs_and_410_means_relist() -> None:
    api = an_api_client()
    try:
        r = shell.JobReconciler(api, cluster="c")
        added = job().obj()
        assert r._on_event({"type": "ADDED", "object": added}, "1") == "42"
        assert r._jobs[("team-a", "train")] == added and r._queue.qsize() == 1
        assert r._on_event({"type": "MODIFIED", "object": added}, "42") == "42"
        assert r._queue.qsize() == 1  # already queued: handled once, from the newest version
        bookmark = {"type": "BOOKMARK", "object": {"kind": "Job", "metadata": {"resourceVersion": "77"}}}
        assert r._on_event(bookmark, "42") == "77"
        r._workload_done.add(UID)
        assert r._on_event({"type": "DELETED", "object": added}, "77") == "42"
        assert ("team-a", "train") not in r._jobs and UID not in r._workload_done
        with pytest.raises(shell._Gone):
            r._on_event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}, "77")
        with pytest.raises(shell.KubeApiError) as err:
            r._on_event({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}, "77")
        assert err.value.retriable
    finally:
        await api.close()


async def test_policy_must_be_known() -> None:
    api = an_api_client()
    try:
        with pytest.raises(ValueError, match=r"policy must be one of \['suspend', 'reject'\], got 'drop'"):
            shell.JobReconciler(api, cluster="c", policy="drop")  # type: ignore[arg-type]
    finally:
        await api.close()


@pytest.mark.parametrize(
    ("status", "body", "want_retriable", "want_terminating"),
    [
        pytest.param(409, {"reason": "Conflict", "message": "changed"}, True, False, id="conflict: read again"),
        pytest.param(429, {"reason": "TooManyRequests"}, True, False, id="throttled or storage initialising"),
        pytest.param(503, b"not json", True, False, id="server error without a Status body"),
        pytest.param(422, {"reason": "Invalid", "message": "spec.podSets: bad"}, False, False,
                     id="invalid: the same request fails again"),
        pytest.param(403, {"reason": "Forbidden", "message": "being terminated",
                           "details": {"causes": [{"reason": "NamespaceTerminating"}]}}, False, True,
                     id="a namespace being deleted takes nothing new"),
    ],
)
def test_api_errors_say_whether_to_retry(status: int, body: Any, want_retriable: bool, want_terminating: bool) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    err = shell._status_error("create Workload ns/x", status, raw)
    assert isinstance(err, shell.KubeApiError)
    assert (err.status, err.retriable, isinstance(err, shell._NamespaceTerminating)) == (
        status, want_retriable, want_terminating)
    assert str(err).startswith(f"create Workload ns/x: HTTP {status}")


async def test_workers_reconcile_jobs_at_once_but_each_job_by_one_worker_at_a_time() -> None:
    """A Job that changes while a worker reconciles it is not handed to a second worker: it is
    reconciled again once the first pass is over; other Jobs go ahead meanwhile."""
    api = an_api_client()
    try:
        r = shell.JobReconciler(api, cluster="c")
        release = asyncio.Event()
        running: list[tuple[str, str]] = []
        passes: list[tuple[str, str]] = []
        most = 0

        async def reconcile(key: tuple[str, str]) -> None:
            nonlocal most
            assert key not in running  # never two workers on one Job
            running.append(key)
            most = max(most, len(running))
            if key == ("ns", "slow"):
                await release.wait()
            await asyncio.sleep(0)
            running.remove(key)
            passes.append(key)

        r._reconcile = reconcile  # type: ignore[method-assign]
        workers = [asyncio.create_task(r._work()) for _ in range(r.workers)]
        r._enqueue(("ns", "slow"))
        await asyncio.sleep(0)
        r._enqueue(("ns", "slow"))  # changed while being reconciled
        r._enqueue(("ns", "a"))
        r._enqueue(("ns", "b"))
        for _ in range(10):
            await asyncio.sleep(0)
        assert passes == [("ns", "a"), ("ns", "b")] and most == 3  # went ahead of the slow one
        release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        assert passes.count(("ns", "slow")) == 2 and not running
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    finally:
        await api.close()
