"""The Kubernetes actuator's pure parts: pod template injection and restoration, Workload and
queue status payloads, API error classification, idempotency and the rate limiter."""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from events import conditions as cond
from events import objects as o
from events.cluster import DECISION_CYCLE_ANNOTATION as ANN_CYCLE
from events.cluster import DECISION_ID_ANNOTATION as ANN_DECISION
from events.cluster import EVICTED_ANNOTATION as ANN_EVICTED
from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION as ANN_ORIGINAL
from events.messages import AdmitWorkload, EvictWorkload, MarkPending, PendingReason
from services.actuator.kubeapi import InvalidObject, KubeApiError, TokenBucket, classify
from services.actuator.kubeplan import (
    FlavorScheduling,
    QueueCounts,
    admitted_status,
    evicted_status,
    flavor_names,
    flavor_quotas,
    flavor_scheduling,
    holds_quota,
    idempotency,
    injected,
    job_admit_patch,
    job_evict_patch,
    job_finished,
    job_restore_patch,
    pending_status,
    queue_status_patch,
    set_condition,
    status_patch,
)

T = 1_700_000_000_000
SPOT = FlavorScheduling("spot", (("pool", "spot"),), ({"key": "spot", "operator": "Exists"},))
OWN = {"key": "own", "operator": "Exists"}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def a_job(*, suspend: bool = True, selector: dict[str, str] | None = None, tolerations: list[Any] | None = None,
          annotations: dict[str, str] | None = None, started: bool = False) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "main"}]}
    if selector is not None:
        pod["nodeSelector"] = selector
    if tolerations is not None:
        pod["tolerations"] = tolerations
    job: dict[str, Any] = {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": "7",
                                        "annotations": annotations or {}},
                           "spec": {"suspend": suspend, "template": {"spec": pod}}}
    if started:
        job["status"] = {"startTime": "2025-01-01T00:00:00Z"}
    return job


def admission(*flavors: tuple[str, str], cq: str = "cq") -> o.Admission:
    return o.Admission(cluster_queue=cq, pod_set_assignments=(o.PodSetAssignment(
        name="main", flavors=flavors, resource_usage=tuple((r, 1000 if r == "cpu" else 2**30) for r, _ in flavors),
        count=1),))


def admit(cycle: int = 2, *, flavors: tuple[tuple[str, str], ...] = (("cpu", "spot"),), name: str = "wl",
          cq: str = "cq") -> AdmitWorkload:
    return AdmitWorkload(id=f"c{cycle}-0", cycle=cycle, time=T + cycle * 1000, namespace="ns", name=name,
                         cluster_queue=cq, admission=admission(*flavors, cq=cq))


def evict(cycle: int = 3, *, reason: str = "Preempted", preemption_reason: str = "InClusterQueue",
          name: str = "wl") -> EvictWorkload:
    return EvictWorkload(id=f"c{cycle}-0", cycle=cycle, time=T + cycle * 1000, namespace="ns", name=name,
                         cluster_queue="cq", reason=reason, message="to make room", preemption_reason=preemption_reason)


def pending(cycle: int = 1, *, message: str = "no room", name: str = "wl") -> MarkPending:
    return MarkPending(id=f"c{cycle}-0", cycle=cycle, time=T + cycle * 1000, namespace="ns", name=name,
                       cluster_queue="cq", reason=PendingReason.WAITING_FOR_QUOTA, message=message)


def pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


# --- flavors ------------------------------------------------------------------------------------


def test_a_flavor_injects_its_node_labels_and_tolerations() -> None:
    rf = {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"pool": "spot", "arch": "arm"},
                                                 "tolerations": [{"key": "spot", "operator": "Exists"}]}}
    assert flavor_scheduling(rf) == FlavorScheduling("spot", (("arch", "arm"), ("pool", "spot")),
                                                     ({"key": "spot", "operator": "Exists"},))
    assert flavor_scheduling({"metadata": {"name": "plain"}}) == FlavorScheduling("plain")


@pytest.mark.parametrize(("spec", "field"), [
    pytest.param({"nodeLabels": ["pool"]}, "spec.nodeLabels", id="node labels not a map"),
    pytest.param({"nodeLabels": {"pool": 3}}, "spec.nodeLabels", id="a node label value not a string"),
    pytest.param({"tolerations": {"key": "x"}}, "spec.tolerations", id="tolerations not a list"),
    pytest.param({"tolerations": ["x"]}, "spec.tolerations[0]", id="a toleration not an object"),
])
def test_a_malformed_flavor_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObject) as e:
        flavor_scheduling({"metadata": {"name": "bad"}, "spec": spec})
    assert e.value.field == field
    assert e.value.retriable is False
    assert str(e.value).startswith(f"ResourceFlavor bad: {field}: ")


def test_flavor_names_are_the_distinct_assigned_flavors() -> None:
    assert flavor_names(admit(flavors=(("cpu", "spot"), ("memory", "spot"), ("nvidia.com/gpu", "a100")))) == (
        "a100", "spot")


def test_an_admission_with_two_pod_sets_for_a_job_is_refused() -> None:
    two = o.Admission(cluster_queue="cq", pod_set_assignments=(
        o.PodSetAssignment(name="a", flavors=(("cpu", "x"),), resource_usage=(("cpu", 1),), count=1),
        o.PodSetAssignment(name="b", flavors=(("cpu", "x"),), resource_usage=(("cpu", 1),), count=1)))
    d = AdmitWorkload(id="c1-0", cycle=1, namespace="ns", name="wl", admission=two)
    with pytest.raises(InvalidObject) as e:
        flavor_names(d)
    assert e.value.field == "admission.podSetAssignments"
    assert "a Job has exactly one pod set, the admission assigns 2" in str(e.value)


# --- the pod template ---------------------------------------------------------------------------


def test_injection_adds_the_flavor_to_the_templates_own_scheduling() -> None:
    selector, tolerations = injected({"team": "a"}, [OWN], [SPOT], "Job ns/j")
    assert selector == {"team": "a", "pool": "spot"}
    assert tolerations == [OWN, {"key": "spot", "operator": "Exists"}]
    # A toleration the template already has is not added twice.
    assert injected({}, [{"key": "spot", "operator": "Exists"}], [SPOT], "Job ns/j")[1] == [
        {"key": "spot", "operator": "Exists"}]


def test_a_node_label_the_template_sets_otherwise_is_a_conflict() -> None:
    with pytest.raises(InvalidObject) as e:
        injected({"pool": "on-demand"}, [], [SPOT], "Job ns/j")
    assert e.value.field == "spec.template.spec.nodeSelector.pool"
    assert "'on-demand'" in str(e.value) and "ResourceFlavor spot needs 'spot'" in str(e.value)


def test_admit_unsuspends_injects_and_remembers_the_original() -> None:
    job = a_job(selector={"team": "a"}, tolerations=[OWN])
    patch = job_admit_patch(job, admit(), [SPOT])
    assert patch["metadata"]["resourceVersion"] == "7"
    after = merge(job, patch)
    assert after["spec"]["suspend"] is False
    assert pod(after)["nodeSelector"] == {"team": "a", "pool": "spot"}
    assert pod(after)["tolerations"] == [OWN, {"key": "spot", "operator": "Exists"}]
    ann = after["metadata"]["annotations"]
    assert (ann[ANN_DECISION], ann[ANN_CYCLE]) == ("c2-0", "2")
    assert json.loads(ann[ANN_ORIGINAL]) == {"nodeSelector": {"team": "a"}, "tolerations": [OWN]}


def test_evict_suspends_then_restore_puts_the_original_back() -> None:
    admitted = merge(a_job(selector={"team": "a"}, tolerations=[OWN]),
                     job_admit_patch(a_job(selector={"team": "a"}, tolerations=[OWN]), admit(), [SPOT]))
    admitted["metadata"]["resourceVersion"] = "8"
    # Running: Kubernetes refuses a template change, so the eviction only suspends.
    patch = job_evict_patch(admitted, evict())
    assert "template" not in patch["spec"]
    suspended = merge(admitted, patch)
    ann = suspended["metadata"]["annotations"]
    assert (suspended["spec"]["suspend"], ann[ANN_DECISION], ann[ANN_EVICTED]) == (True, "c3-0", "c3-0")
    assert pod(suspended)["nodeSelector"] == {"team": "a", "pool": "spot"}
    # Suspended and not started: the template goes back and the annotation goes away.
    restore = job_restore_patch(suspended)
    assert restore is not None
    restored = merge(suspended, restore)
    assert pod(restored)["nodeSelector"] == {"team": "a"}
    assert pod(restored)["tolerations"] == [OWN]
    assert ANN_ORIGINAL not in restored["metadata"]["annotations"]
    assert job_restore_patch(restored) is None


def test_evict_of_a_suspended_job_that_never_started_restores_in_the_same_write() -> None:
    job = a_job(suspend=True, selector={"pool": "spot"}, tolerations=[{"key": "spot", "operator": "Exists"}],
                annotations={ANN_ORIGINAL: json.dumps({"nodeSelector": {}, "tolerations": []})})
    after = merge(job, job_evict_patch(job, evict()))
    assert "nodeSelector" not in pod(after) and "tolerations" not in pod(after)
    started = a_job(suspend=True, started=True, selector={"pool": "spot"},
                    annotations={ANN_ORIGINAL: json.dumps({"nodeSelector": {}, "tolerations": []})})
    assert pod(merge(started, job_evict_patch(started, evict())))["nodeSelector"] == {"pool": "spot"}


def test_readmission_before_the_restore_starts_from_the_original() -> None:
    """Evicted on flavor spot, not restored yet, admitted on flavor a100: spot's label must go."""
    job = a_job(suspend=True, selector={"team": "a", "pool": "spot"},
                annotations={ANN_ORIGINAL: json.dumps({"nodeSelector": {"team": "a"}, "tolerations": []}),
                             ANN_EVICTED: "c3-0"})
    a100 = FlavorScheduling("a100", (("gpu", "a100"),))
    after = merge(job, job_admit_patch(job, admit(4, flavors=(("cpu", "a100"),)), [a100]))
    assert pod(after)["nodeSelector"] == {"team": "a", "gpu": "a100"}
    assert ANN_EVICTED not in after["metadata"]["annotations"]
    assert json.loads(after["metadata"]["annotations"][ANN_ORIGINAL])["nodeSelector"] == {"team": "a"}


def test_a_malformed_original_annotation_is_refused_naming_it() -> None:
    job = a_job(annotations={ANN_ORIGINAL: "{not json"})
    with pytest.raises(InvalidObject) as e:
        job_admit_patch(job, admit(), [SPOT])
    assert e.value.field == f"metadata.annotations.{ANN_ORIGINAL}"


# --- idempotency --------------------------------------------------------------------------------


@pytest.mark.parametrize(("annotations", "decision", "want"), [
    pytest.param({}, admit(2), "apply", id="never actuated"),
    pytest.param({ANN_DECISION: "c2-0", ANN_CYCLE: "2"}, admit(2), "applied", id="this decision already"),
    pytest.param({ANN_DECISION: "c1-0", ANN_CYCLE: "1"}, evict(3), "apply", id="an older decision"),
    pytest.param({ANN_DECISION: "c2-3", ANN_CYCLE: "2"}, evict(2), "apply", id="another decision of the same cycle"),
    pytest.param({ANN_DECISION: "c5-0", ANN_CYCLE: "5"}, admit(2), "stale", id="a newer cycle: never go back"),
    pytest.param({ANN_DECISION: "x", ANN_CYCLE: "junk"}, admit(2), "apply", id="an unreadable cycle counts as none"),
])
def test_idempotency_by_decision(annotations: dict[str, str], decision: AdmitWorkload | EvictWorkload,
                                 want: str) -> None:
    assert idempotency(a_job(annotations=annotations), decision) == want


# --- Workload status ----------------------------------------------------------------------------


def test_admitted_status_is_what_simulate_renders() -> None:
    status = pending_status({}, pending())
    out = admitted_status(status, admit(flavors=(("cpu", "spot"), ("memory", "spot"))))
    assert out["admission"] == {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "flavors": {"cpu": "spot", "memory": "spot"},
         "resourceUsage": {"cpu": "1", "memory": "1Gi"}, "count": 1}]}
    assert out["conditions"] == [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
         "message": "Quota reserved in ClusterQueue cq", "lastTransitionTime": "2023-11-14T22:13:22Z"},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
         "lastTransitionTime": "2023-11-14T22:13:22Z"},
    ]


def test_evicted_status_says_why_and_holds_no_quota() -> None:
    out = evicted_status(admitted_status({}, admit()), evict())
    assert "admission" not in out
    got = {c["type"]: (c["status"], c["reason"], c["message"]) for c in out["conditions"]}
    assert got == {
        "QuotaReserved": ("False", "Pending", "to make room"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Evicted": ("True", "Preempted", "to make room"),
        "Preempted": ("True", "InClusterQueue", "to make room"),
        "Requeued": ("True", "Preempted", "to make room"),
    }
    stopped = {c["type"]: c for c in evicted_status({}, evict(reason="ClusterQueueStopped", preemption_reason=""))[
        "conditions"]}
    assert "Preempted" not in stopped
    assert stopped["Requeued"]["status"] == "False"  # a drained workload waits for its queue to restart


def test_readmission_turns_the_old_eviction_into_history() -> None:
    out = admitted_status(evicted_status(admitted_status({}, admit()), evict()), admit(4))
    got = {c["type"]: (c["status"], c["reason"], c["message"]) for c in out["conditions"]}
    assert got["Evicted"] == ("False", "QuotaReserved", "Previously: to make room")
    assert got["Preempted"] == ("False", "QuotaReserved", "Previously: to make room")
    assert got["QuotaReserved"][0] == got["Admitted"][0] == "True"


def test_set_condition_keeps_the_transition_time_when_the_status_stays() -> None:
    conds: list[dict[str, Any]] = []
    set_condition(conds, cond.pending("first", T + 1500))
    set_condition(conds, cond.pending("second", T + 9000))
    assert conds == [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "second",
                      "lastTransitionTime": "2023-11-14T22:13:21Z"}]  # second precision, from the first
    set_condition(conds, cond.quota_reserved("cq", T + 9000))
    assert conds[0]["lastTransitionTime"] == "2023-11-14T22:13:29Z"


def test_status_patch_writes_only_what_changed() -> None:
    wl = {"metadata": {"resourceVersion": "3"}, "status": pending_status({}, pending())}
    assert status_patch(wl, pending_status(wl["status"], pending())) is None
    changed = status_patch(wl, pending_status(wl["status"], pending(2, message="still no room")))
    assert changed is not None and changed["metadata"] == {"resourceVersion": "3"}
    assert changed["status"]["conditions"][0]["message"] == "still no room"
    admitted = {"metadata": {"resourceVersion": "4"}, "status": admitted_status({}, admit())}
    assert holds_quota(admitted) and not holds_quota(wl)
    evicting = status_patch(admitted, evicted_status(admitted["status"], evict()))
    assert evicting is not None and evicting["status"]["admission"] is None  # merge patch: removed


# --- queue status -------------------------------------------------------------------------------

CQ = {"spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
    {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "1"}, {"name": "memory", "nominalQuota": "4Gi"}]},
    {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": 8}, {"name": "memory", "nominalQuota": "x"}]},
]}]}}


def test_queue_counts_follow_the_decisions() -> None:
    counts = QueueCounts()
    counts.fold(pending(name="a"))
    counts.fold(pending(name="b"))
    counts.learn_local_queue("ns/a", "ns/lq")
    assert counts.dirty_cluster_queues == {"cq"} and counts.dirty_local_queues == {"ns/lq"}
    counts.fold(admit(name="a", flavors=(("cpu", "spot"), ("memory", "spot"))))
    counts.fold(admit(name="c", flavors=(("cpu", "spot"),)))
    status = counts.cluster_queue_status("cq", flavor_quotas(CQ))
    assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (1, 2, 2)
    assert status["flavorsReservation"] == status["flavorsUsage"] == [
        {"name": "spot", "resources": [{"name": "cpu", "total": "2", "borrowed": "1"},
                                       {"name": "memory", "total": "1Gi", "borrowed": "0"}]},
        {"name": "on-demand", "resources": [{"name": "cpu", "total": "0", "borrowed": "0"},
                                            {"name": "memory", "total": "0"}]},  # unreadable quota: no borrowed
    ]
    lq = counts.local_queue_status("ns/lq")
    assert (lq["pendingWorkloads"], lq["admittedWorkloads"]) == (0, 1)
    assert lq["flavorsUsage"] == [{"name": "spot", "resources": [{"name": "cpu", "total": "1"},
                                                                 {"name": "memory", "total": "1Gi"}]}]
    assert lq["flavorUsage"] is None  # v1beta1's spelling, cleared by the merge patch
    counts.fold(evict(name="a"))
    after = counts.cluster_queue_status("cq")
    assert (after["pendingWorkloads"], after["reservingWorkloads"]) == (2, 1)
    assert after["flavorsUsage"] == [{"name": "spot", "resources": [{"name": "cpu", "total": "1"}]}]


def test_queue_status_is_written_only_when_it_changed() -> None:
    desired = QueueCounts().cluster_queue_status("cq")
    assert queue_status_patch({"status": {**desired, "conditions": []}}, desired) is None
    assert queue_status_patch({}, desired) == {"status": desired}


# --- errors -------------------------------------------------------------------------------------


def api_error(status: int, message: str = "nope") -> ApiException:
    e = ApiException(status=status, reason="Reason")
    e.body = json.dumps({"kind": "Status", "reason": "Invalid" if status == 422 else "Other", "message": message})
    return e


@pytest.mark.parametrize(("status", "not_found_retriable", "retriable"), [
    pytest.param(409, False, True, id="409 conflict: re-read and retry"),
    pytest.param(429, False, True, id="429 too many requests"),
    pytest.param(500, False, True, id="500"),
    pytest.param(503, False, True, id="503"),
    pytest.param(404, True, True, id="404 of a Workload or Job that does not exist yet"),
    pytest.param(404, False, False, id="404 of a flavor"),
    pytest.param(400, False, False, id="400"),
    pytest.param(403, False, False, id="403 forbidden"),
    pytest.param(422, False, False, id="422 invalid"),
])
def test_api_errors_are_classified(status: int, not_found_retriable: bool, retriable: bool) -> None:
    e = classify(api_error(status, "the message"), call="patch Job ns/j", not_found_retriable=not_found_retriable)
    assert isinstance(e, KubeApiError)
    assert (e.status, e.retriable, e.conflict) == (status, retriable, status == 409)
    assert str(e).startswith(f"patch Job ns/j: HTTP {status} ")
    assert str(e).endswith(": the message")


@pytest.mark.parametrize("exc", [
    pytest.param(TimeoutError(), id="timeout"),
    pytest.param(aiohttp.ServerDisconnectedError(), id="server disconnected"),
    pytest.param(aiohttp.ClientPayloadError("cut"), id="payload cut"),
    pytest.param(ConnectionRefusedError(), id="connection refused"),
    pytest.param(ApiException(status=0, reason="transport"), id="kubernetes-asyncio transport error"),
])
def test_transport_errors_are_retriable(exc: BaseException) -> None:
    e = classify(exc, call="get Workload ns/w")
    assert e is not None and e.retriable and e.status is None
    assert str(e).startswith("get Workload ns/w: ")


def test_a_bug_is_not_classified() -> None:
    assert classify(KeyError("x"), call="get Workload ns/w") is None


# --- the rate limiter ---------------------------------------------------------------------------


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    bucket = TokenBucket(qps=10, burst=3, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(0.0) == pytest.approx(0.1)
    assert bucket.reserve(0.0) == pytest.approx(0.2)
    assert bucket.reserve(10.0) == 0.0  # refilled, never above the burst
    assert [bucket.reserve(10.0) for _ in range(3)][-1] == pytest.approx(0.1)


@pytest.mark.parametrize(("qps", "burst", "message"), [
    pytest.param(0, 1, "qps: must be greater than 0", id="no qps"),
    pytest.param(5, 0, "burst: must be at least 1", id="no burst"),
])
def test_token_bucket_refuses_a_bad_setting(qps: float, burst: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenBucket(qps, burst, 0.0)


def test_a_workload_waiting_for_its_checks_reserves_but_is_not_admitted_until_they_are_ready() -> None:
    import msgspec

    from events.messages import AdmitChecked

    counts = QueueCounts()
    reserve = msgspec.structs.replace(admit(name="a", flavors=(("cpu", "spot"),)), admission_checks=("prov",))
    counts.fold(reserve)
    status = counts.cluster_queue_status("cq")
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (1, 0)
    assert status["flavorsReservation"] == [{"name": "spot", "resources": [{"name": "cpu", "total": "1"}]}]
    assert status["flavorsUsage"] == []
    counts.fold(AdmitChecked(id="c2-0", cycle=2, namespace=reserve.namespace, name="a", cluster_queue="cq",
                             admission=reserve.admission))
    status = counts.cluster_queue_status("cq")
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (1, 1)
    assert status["flavorsUsage"] == status["flavorsReservation"]
    assert admitted_status({}, reserve)["conditions"][1]["reason"] == "UnsatisfiedAdmissionChecks"


def test_a_finished_job_is_never_restored() -> None:
    """A Job evicted after it finished never runs again: its template is not waited on."""
    def job(*conditions: tuple[str, str]) -> dict[str, object]:
        return {"spec": {"suspend": True},
                "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}

    assert job_finished(job(("SuccessCriteriaMet", "True"), ("Complete", "True")))
    assert job_finished(job(("Failed", "True")))
    assert not job_finished(job(("Complete", "False")))
    assert not job_finished(job())
    assert not job_finished({"status": {"conditions": "garbled"}})


def test_token_bucket_tells_whether_the_limit_bit_lately() -> None:
    bucket = TokenBucket(qps=10, burst=2, now=0.0)
    bucket.reserve(0.0), bucket.reserve(0.0)
    assert not bucket.bit_within(5.0, 0.0), "the burst: nobody waited"
    assert bucket.reserve(0.0) > 0
    assert bucket.bit_within(5.0, 4.9) and not bucket.bit_within(5.0, 5.0)


async def test_status_yields_to_orders_while_the_rate_limit_bites() -> None:
    """Pending marks and queue statuses are status, not orders: while calls wait for the rate
    limit, marks earn credit at the throttled rate and a queue's status waits the longer interval."""
    import time

    from kubernetes_asyncio import client

    from services.actuator.kube_port import KubePort
    from services.actuator.kubeplan import cluster_queue_ref

    async with client.ApiClient() as api:
        for throttled, credit in ((False, KubePort.marks_per_step), (True, 2 * KubePort.marks_per_second_throttled)):
            port = KubePort(api, cluster="c")
            port.kube.throttled = lambda within, t=throttled: t  # type: ignore[method-assign]
            port._mark_credit, port._credit_at = 0.0, time.monotonic() - 2.0
            await port.before_batch(1)
            assert port._mark_credit == pytest.approx(credit, abs=0.05)
        # Throttled, a queue written 10 s ago is not due (every 30 s): no call, still to be written.
        port.counts.dirty_cluster_queues.add("cq")
        port._queue_written[str(cluster_queue_ref("cq"))] = time.monotonic() - 10.0
        await port.after_batch()
        assert port.stats.api.total == 0 and port.counts.dirty_cluster_queues == {"cq"}


async def test_an_admission_is_applied_again_only_for_a_workload_adopted_while_it_holds_it() -> None:
    """A job claiming a prebuilt Workload after its admission: the port applies the admission (the
    last one, not evicted since, recovered from the history after a restart) before its next batch;
    a Workload evicted since, or never admitted, is left alone."""
    from kubernetes_asyncio import client

    from services.actuator.kube_port import KubePort

    api = client.ApiClient()  # (never called)
    port = KubePort(api, cluster="test")
    port.recover(iter([admit(2, name="a"), admit(2, name="b"), pending(3, name="c"), evict(4, name="b")]))
    for name in ("a", "b", "c", "unknown"):
        port.workload_adopted("ns", name)
    assert port.deferred - port.deferred_marks - port.deferred_queues == 1  # a only
    port.workload_adopted("ns", "a")  # told twice: applied once
    assert port.deferred - port.deferred_marks - port.deferred_queues == 1
    await api.close()
