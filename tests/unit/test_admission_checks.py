"""Two-phase admission in the pure core: admission checks from quota reservation to Admitted,
Retry with Kueue's back-off, Rejected, podSetUpdates, and the ProvisioningRequest mapping."""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.manifests import Document, ManifestError, normalize
from events.messages import (
    AdmissionCheckUpdated,
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    ClockTicked,
    EvictWorkload,
    ObjectApplied,
    ProvisioningRequestCondition,
    ProvisioningRequestObserved,
    UpdateWorkloadStatus,
)
from services.core import provisioning
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.snapshot import encode_state
from services.core.state import State, finish_eviction, fold
from tests.builders import Builder, a_cluster_queue, a_flavor, a_local_queue, a_workload

T0 = 1_750_000_000_000
PRC = o.ProvisioningRequestConfig(name="prc", provisioning_class_name="check-capacity.autoscaling.x-k8s.io",
                                  managed_resources=("nvidia.com/gpu",), backoff_limit_count=2,
                                  node_selector_updates=(("cloud.example.com/request", "RequestKey"),))
PROV = o.AdmissionCheck(name="prov", controller_name="kueue.x-k8s.io/provisioning-request",
                        parameters_kind="ProvisioningRequestConfig", parameters_name="prc")


@pytest.mark.parametrize(
    ("base", "cap", "n", "want"),
    [
        pytest.param(60, 1800, 1, 60, id="first retry waits the base"),
        pytest.param(60, 1800, 2, 120, id="second retry doubles it"),
        pytest.param(60, 1800, 3, 240, id="third doubles again"),
        pytest.param(60, 1800, 5, 960, id="fifth: 60 * 2^4"),
        pytest.param(60, 1800, 6, 1800, id="sixth is capped at backoffMaxSeconds"),
        pytest.param(60, 1800, 200, 1800, id="a huge retry count stays capped"),
        pytest.param(0, 1800, 3, 0, id="base 0 (seed 004's example) retries at once"),
        pytest.param(10, 0, 4, 80, id="max 0 is no cap, as Go's cmp.Or in NewBackoff"),
    ],
)
def test_backoff_is_kueues_min_of_base_times_two_to_the_n_minus_1_and_max(base: int, cap: int, n: int,
                                                                          want: int) -> None:
    assert provisioning.backoff_seconds(base, cap, n) == want


def _obj(item: Builder | o.AnyObject, i: int) -> o.AnyObject:
    obj = normalize(Document("test.yaml", i, item.obj())) if isinstance(item, Builder) else item
    assert obj is not None
    return obj


class World:
    """A state driven by hand: fold objects and facts, run cycles, keep the decisions."""

    def __init__(self, *items: Builder | o.AnyObject) -> None:
        self.state = State()
        self.decisions: list[AnyDecision] = []
        self.news: list[UpdateWorkloadStatus] = []  # the last cycle's status-only decisions
        for i, item in enumerate(items):
            self.fold(ObjectApplied(time=T0, object=_obj(item, i)))

    def fold(self, ev: Any) -> None:
        fold(self.state, ev)

    def cycle(self) -> list[AnyDecision]:
        """The cycle's decisions but the status-only ones (those in ``news``)."""
        out = run_cycle(self.state).decisions
        self.decisions += out
        self.news = [d for d in out if isinstance(d, UpdateWorkloadStatus)]
        return [d for d in out if not isinstance(d, UpdateWorkloadStatus)]

    def told(self) -> list[tuple[str, str, int, int | None]]:
        """The last cycle's status news: (check state, message, requeue count, requeueAt) each."""
        return [(str(c.state), c.message, d.requeue_count, d.requeue_at) for d in self.news for c in d.admission_checks]

    def rec(self, key: str = "ns/w") -> Any:
        return self.state.workloads[key]

    def cond(self, type_: str, key: str = "ns/w") -> tuple[str, str]:
        c = self.rec(key).conditions[type_]
        return str(c.status), str(c.reason)

    def observe(self, at_s: int, attempt: int, *conds: tuple[str, str, str], details: Any = ()) -> None:
        self.fold(ProvisioningRequestObserved(
            time=T0 + at_s * 1000, namespace="ns", name=provisioning.request_name("w", "prov", attempt), workload="w",
            check="prov", attempt=attempt,
            conditions=tuple(ProvisioningRequestCondition(type=t, status=s, message=m) for t, s, m in conds),
            class_details=details))


def _world(*extra: Builder | o.AnyObject, gpu: int = 1, check_rule: Any = None) -> World:
    cq = a_cluster_queue("cq").flavor("gpu-flavor", cpu="8", **{"nvidia.com/gpu": "8"})
    if check_rule is None:
        cq = cq.admission_checks("prov")
    else:
        cq.body["spec"]["admissionChecksStrategy"] = {"admissionChecks": [check_rule]}
    wl = a_workload("ns", "w").queue("lq").request(cpu="1", **({"nvidia.com/gpu": str(gpu)} if gpu else {}))
    return World(a_flavor("gpu-flavor"), PRC, PROV, cq, a_local_queue("ns", "lq", "cq"), wl.created(0), *extra)


def test_reservation_adds_the_checks_pending_and_plans_the_provisioning_request() -> None:
    w = _world()
    (admit,) = w.cycle()
    assert isinstance(admit, AdmitWorkload)
    assert admit.admission_checks == ("prov",)
    (plan,) = admit.provisioning_requests or ()
    assert (plan.name, plan.attempt, plan.provisioning_class_name) == ("w-prov-1", 1, PRC.provisioning_class_name)
    assert plan.pod_sets == (o.ProvisioningRequestPodSet(pod_set="main", pod_template="ppt-w-prov-1-main", count=1),)
    assert w.cond("QuotaReserved") == ("True", "QuotaReserved")
    assert w.cond("Admitted") == ("False", "UnsatisfiedAdmissionChecks")
    assert w.rec().checks["prov"].state == o.CheckState.PENDING


def test_provisioned_request_admits_with_its_pod_set_updates() -> None:
    w = _world()
    w.cycle()
    w.observe(5, 1, ("Accepted", "True", ""), ("Provisioned", "False", "ETA 30s"))
    assert w.cycle() == []
    assert w.rec().checks["prov"].message == "ETA 30s"
    assert w.told() == [("Pending", "ETA 30s", 0, None)]  # status news: the Workload shows the ETA now
    w.observe(6, 1, ("Accepted", "True", ""), ("Provisioned", "False", "ETA 30s"))
    assert w.cycle() == [] and w.news == []  # the same report again: nothing new to tell
    w.observe(30, 1, ("Accepted", "True", ""), ("Provisioned", "True", "done"), details=(("RequestKey", "rk-1"),))
    (checked,) = w.cycle()
    assert isinstance(checked, AdmitChecked)
    assert checked.pod_set_updates == (o.PodSetUpdate(
        name="main", annotations=(("autoscaling.x-k8s.io/consume-provisioning-request", "w-prov-1"),
                                  ("autoscaling.x-k8s.io/provisioning-class-name", PRC.provisioning_class_name)),
        node_selector=(("cloud.example.com/request", "rk-1"),)),)
    assert w.cond("Admitted") == ("True", "Admitted")
    assert w.cycle() == []  # admitted once


def test_failures_retry_with_60_then_120_seconds_and_the_third_attempt_is_admitted() -> None:
    w = _world()
    w.cycle()
    w.observe(10, 1, ("Failed", "True", "no capacity"))
    (evict,) = w.cycle()
    assert isinstance(evict, EvictWorkload)
    # Told as Kueue's controllers write it: the check in Retry, then (after the eviction reset it to
    # Pending) status.requeueState.requeueAt at the end of the 60 s back-off.
    assert [d.id for d in w.decisions[-3:]] == [w.news[0].id, evict.id, w.news[1].id]
    retry = "Retrying after failure: no capacity"
    assert w.told() == [("Retry", retry, 0, None), ("Pending", "Reset to Pending after eviction. Previously: Retry",
                                                    0, T0 + 70_000)]
    assert (evict.reason, evict.message) == (
        "AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "prov" (Retrying after failure: no capacity)')
    check = w.rec().checks["prov"]
    assert (check.state, check.retry_count, check.requeue_after_seconds) == (o.CheckState.PENDING, 1, 60)
    finish_eviction(w.state, w.rec())
    assert w.cond("Requeued") == ("False", "AdmissionCheck")
    w.fold(ClockTicked(time=T0 + 69_999))
    assert w.cycle() == []  # 10 s + 60 s back-off not over
    w.fold(ClockTicked(time=T0 + 70_000))
    (again,) = w.cycle()
    assert isinstance(again, AdmitWorkload)
    assert [(d.requeue_at, d.id < again.id) for d in w.news] == [(None, True)]  # requeueAt cleared, then reserved
    assert [p.name for p in again.provisioning_requests or ()] == ["w-prov-2"]
    assert w.cond("Requeued") == ("True", "BackoffFinished")
    w.observe(75, 1, ("Failed", "True", "no capacity"))  # the old request again: changes nothing
    assert w.cycle() == []
    w.observe(80, 2, ("Failed", "True", "still none"))
    w.cycle()
    assert w.rec().checks["prov"].requeue_after_seconds == 120
    finish_eviction(w.state, w.rec())
    w.fold(ClockTicked(time=T0 + 200_000))
    (third,) = w.cycle()
    assert [p.name for p in third.provisioning_requests or ()] == ["w-prov-3"]  # type: ignore[union-attr]
    w.observe(210, 3, ("Provisioned", "True", "ok"))
    assert isinstance(w.cycle()[0], AdmitChecked)


def test_a_failure_past_the_limit_rejects_deactivates_and_releases_the_quota() -> None:
    w = _world()
    w.cycle()
    w.fold(AdmissionCheckUpdated(time=T0 + 1000, namespace="ns", name="w", check=o.AdmissionCheckState(
        name="prov", state=o.CheckState.PENDING, retry_count=2)))
    w.observe(2, 1, ("Failed", "True", "x"))  # attempt 1 is not the current attempt (3): ignored
    assert w.rec().checks["prov"].state == o.CheckState.PENDING
    w.observe(3, 3, ("Failed", "True", "gone"))
    assert w.rec().checks["prov"].state == o.CheckState.REJECTED
    (evict,) = w.cycle()
    assert isinstance(evict, EvictWorkload)
    assert w.told() == [("Rejected", "gone", 0, None)]  # told before the eviction
    assert (evict.reason, evict.message) == (
        "Deactivated", 'The workload is deactivated due to AdmissionCheck in Rejected state: "prov" (gone)')
    finish_eviction(w.state, w.rec())
    assert w.rec().admission is None and w.rec().deactivated
    assert all(v == 0 for v in w.state.cq_node("cq").usage.values())
    w.fold(ClockTicked(time=T0 + 10**7))
    assert w.cycle() == []  # never requeued


def test_capacity_revoked_rejects() -> None:
    w = _world()
    w.cycle()
    w.observe(1, 1, ("Provisioned", "True", "ok"))
    w.cycle()
    w.observe(2, 1, ("Provisioned", "True", "ok"), ("CapacityRevoked", "True", "nodes gone"))
    (evict,) = w.cycle()
    assert isinstance(evict, EvictWorkload) and evict.reason == "Deactivated"


def test_no_managed_resource_requested_is_ready_without_a_request() -> None:
    w = _world(gpu=0)
    (admit,) = w.cycle()
    assert isinstance(admit, AdmitWorkload) and not admit.provisioning_requests
    assert w.rec().checks["prov"].message == "the provisioning request is not needed"
    (checked,) = w.cycle()
    assert isinstance(checked, AdmitChecked) and checked.pod_set_updates == ()


def test_a_check_on_other_flavors_does_not_apply() -> None:
    w = _world(check_rule={"name": "prov", "onFlavors": ["other-flavor"]})
    (admit,) = w.cycle()
    assert isinstance(admit, AdmitWorkload) and not admit.admission_checks
    assert w.cond("Admitted") == ("True", "Admitted")


def test_failed_checks_in_the_input_keep_the_workload_from_being_nominated() -> None:
    wl = a_workload("ns", "w").queue("lq").request(cpu="1").created(0)
    wl.body["status"] = {"admissionChecks": [{"name": "prov", "state": "Retry", "message": "m"}]}
    cq = a_cluster_queue("cq").flavor("gpu-flavor", cpu="8").admission_checks("prov")
    w = World(a_flavor("gpu-flavor"), PRC, PROV, cq, a_local_queue("ns", "lq", "cq"), wl)
    w.cycle()
    assert w.rec().admission is None
    assert w.rec().conditions["QuotaReserved"].message == "The workload has failed admission checks"


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        pytest.param((), "AdmissionCheckNotFound", id="missing check"),
        pytest.param((PROV,), "AdmissionCheckInactive", id="check naming a missing config"),
    ],
)
def test_a_cluster_queue_with_a_missing_or_inactive_check_is_inactive(objects: tuple[Any, ...], reason: str) -> None:
    cq = a_cluster_queue("cq").flavor("gpu-flavor", cpu="8").admission_checks("prov")
    w = World(a_flavor("gpu-flavor"), *objects, cq, a_local_queue("ns", "lq", "cq"),
              a_workload("ns", "w").queue("lq").request(cpu="1").created(0))
    w.state.ensure_indexed()
    assert w.state.index.inactive["cq"][0] == reason
    w.cycle()
    assert w.rec().admission is None


def test_a_pod_set_update_that_conflicts_with_the_flavor_fails_to_start() -> None:
    flavor = a_flavor("gpu-flavor").labels(**{"cloud.example.com/request": "fixed"})
    w = _world()
    w.fold(ObjectApplied(time=T0, object=_obj(flavor, 99)))
    w.cycle()
    w.observe(1, 1, ("Provisioned", "True", "ok"), details=(("RequestKey", "rk"),))
    (checked,) = w.cycle()
    assert isinstance(checked, AdmitChecked)
    assert checked.failed_to_start == ("invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for "
                                       "key=cloud.example.com/request, value1=fixed, value2=rk")
    assert w.rec().finished and w.rec().admission is None
    assert w.cond("Finished") == ("True", "FailedToStart")


def test_replaying_the_recorded_cycles_gives_the_live_state() -> None:
    """The check phase of a cycle (back-off releases, settled checks) replays through apply_cycle."""
    live, replayed = _world(), _world()
    script: list[Any] = [
        "cycle", ("obs", 10, 1, ("Failed", "True", "x")), "cycle", "finish",
        ClockTicked(time=T0 + 70_000), "cycle", ("obs", 71, 2, ("Provisioned", "True", "ok")), "cycle",
    ]
    for step in script:
        for w in (live, replayed):
            if step == "finish":
                finish_eviction(w.state, w.rec())
            elif isinstance(step, tuple):
                w.observe(step[1], step[2], step[3])
        if step == "cycle":
            result = run_cycle(live.state)
            from events.messages import CycleCompleted

            record = CycleCompleted(cycle=live.state.cycles, input_offset=0, time=live.state.now,
                                    decisions=len(result.decisions), admitted_heads=tuple(result.admitted_heads),
                                    heads=tuple(result.heads))
            apply_cycle(replayed.state, result.decisions, record)
        elif isinstance(step, ClockTicked):
            live.fold(step)
            replayed.fold(step)
    assert live.cond("Admitted") == ("True", "Admitted")
    assert encode_state(replayed.state) == encode_state(live.state)


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param({"provisioningClassName": "c", "parameters": {"a": {"nested": 1}}}, "spec.parameters.a",
                     "is a string", id="parameters must be strings"),
        pytest.param({"provisioningClassName": "Not_A_Class"}, "spec.provisioningClassName", "DNS subdomain",
                     id="class name shape"),
        pytest.param({"provisioningClassName": "c", "podSetMergePolicy": "Any"}, "spec.podSetMergePolicy",
                     "must be one of", id="merge policy"),
        pytest.param({"provisioningClassName": "c", "retryStrategy": {"backoffLimitCount": -1}},
                     "spec.retryStrategy.backoffLimitCount", "between 0", id="negative limit"),
        pytest.param({"provisioningClassName": "c", "podSetUpdates": {"nodeSelector": [{"key": "k"}]}},
                     "spec.podSetUpdates.nodeSelector[0].valueFromProvisioningClassDetail", "required",
                     id="node selector update without its detail"),
    ],
)
def test_invalid_provisioning_request_configs_are_refused_naming_the_field(spec: dict[str, Any], field: str,
                                                                            message: str) -> None:
    doc = Document("prc.yaml", 1, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ProvisioningRequestConfig",
                                   "metadata": {"name": "prc"}, "spec": spec})
    with pytest.raises(ManifestError) as e:
        normalize(doc)
    assert field in str(e.value) and message in str(e.value)


def test_one_check_ready_before_the_others_is_told_without_an_outcome() -> None:
    """Two checks of another controller: the first Ready is status news (the Workload shows it),
    not an admission; the same report again tells nothing; the second Ready admits."""
    other = [o.AdmissionCheck(name=n, controller_name="example.com/other") for n in ("a", "b")]
    cq = a_cluster_queue("cq").flavor("f", cpu="8").admission_checks("a", "b")
    w = World(a_flavor("f"), *other, cq, a_local_queue("ns", "lq", "cq"),
              a_workload("ns", "w").queue("lq").request(cpu="1").created(0))
    (admit,) = w.cycle()
    assert isinstance(admit, AdmitWorkload) and w.news == []  # the reservation writes them Pending itself

    def report(name: str, at_s: int) -> None:
        w.fold(AdmissionCheckUpdated(time=T0 + at_s * 1000, namespace="ns", name="w", check=o.AdmissionCheckState(
            name=name, state=o.CheckState.READY, message="ok")))

    report("a", 1)
    assert w.cycle() == []
    assert [(c.name, str(c.state)) for d in w.news for c in d.admission_checks] == [("a", "Ready"), ("b", "Pending")]
    report("a", 2)
    assert w.cycle() == [] and w.news == []
    report("b", 3)
    (checked,) = w.cycle()
    assert isinstance(checked, AdmitChecked) and w.news == []  # AdmitChecked carries the states itself
