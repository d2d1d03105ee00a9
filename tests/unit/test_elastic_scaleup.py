"""Elastic Jobs scaled up (services/core/scaleup.py), as Kueue's workload slices do: a new slice
annotated ``kueue.x-k8s.io/workload-slice-replacement-for`` is admitted against the quota with the
old slice's usage counted as its own, keeps the old slice's flavors, never preempts it, and its
admission finishes the old slice (``WorkloadSliceReplaced``) in the same decision.

The first cases restate Kueue's own: ``pkg/scheduler/scheduler_test.go`` ("workload-slice fits in
single clusterQueue") and ``test/integration/singlecluster/scheduler/preemption_test.go`` ("Should
preempt on-scale-up Workloads with lower priority when there is not enough quota")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from events import objects as o
from events.codec import decode_decision, encode
from events.envelope import Envelope, Topics
from events.manifests import Document, normalize
from events.messages import (
    AdmitWorkload,
    ClockTicked,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    WorkloadFinished,
)
from services.app.simulate import fold_files_screened, run
from services.core.cycle import run_cycle
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, fold
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from tests.builders import (
    Builder,
    a_cluster_queue,
    a_configuration,
    a_flavor,
    a_local_queue,
    a_priority_class,
    a_workload,
)


def _state(*items: Builder) -> State:
    return fold_files_screened({"t.yaml": yaml.safe_dump_all([i.obj() for i in items])})[0]


def _finished_reason(state: State, key: str) -> str:
    c = state.workloads[key].conditions.get("Finished")
    return c.reason if c is not None and c.status == "True" else ""


def _flavors(state: State, key: str) -> dict[str, str]:
    adm = state.workloads[key].admission
    assert adm is not None, f"{key} holds no quota"
    return dict(adm.pod_set_assignments[0].flavors)


def _sales(quota: str) -> list[Builder]:
    return [a_flavor("default"), a_cluster_queue("sales").strict_fifo().flavor("default", cpu=quota),
            a_local_queue("sales", "main", "sales")]


def _foo_1() -> Builder:
    return a_workload("sales", "foo-1").queue("main").pod_set("one", 10, cpu="1").created(0).admitted(
        "sales", {"cpu": "default"})


@pytest.mark.parametrize("quota", [
    pytest.param("50", id="Kueue's case: room for both slices"),
    pytest.param("20", id="room only with the old slice's 10 counted as the new one's own"),
    pytest.param("15", id="exactly the new count"),
])
def test_the_new_slice_is_admitted_and_replaces_the_old_one(quota: str) -> None:
    foo_2 = a_workload("sales", "foo-2").queue("main").pod_set("one", 15, cpu="1").created(1).replaces("sales/foo-1")
    state = _state(*_sales(quota), _foo_1(), foo_2)
    decisions = run_cycle(state).decisions
    admits = [d for d in decisions if isinstance(d, AdmitWorkload)]
    assert [(d.name, d.replaced_slice) for d in admits] == [("foo-2", "sales/foo-1")]
    assert admits[0].admission.pod_set_assignments[0].resource_usage == (("cpu", 15_000),)
    assert _finished_reason(state, "sales/foo-1") == "WorkloadSliceReplaced"
    assert state.workloads["sales/foo-1"].admission is None  # its quota is released with the same decision
    assert state.cq_node("sales").usage == {("default", "cpu"): 15_000}  # never both slices' quota
    assert not [d for d in decisions if isinstance(d, EvictWorkload)]


def test_a_slice_that_does_not_fit_waits_and_the_old_slice_keeps_running() -> None:
    foo_2 = a_workload("sales", "foo-2").queue("main").pod_set("one", 15, cpu="1").created(1).replaces("sales/foo-1")
    state = _state(*_sales("14"), _foo_1(), foo_2)
    assert run_cycle(state).decisions[0].name == "foo-2"
    rec = state.workloads["sales/foo-2"]
    assert rec.admission is None
    # It asks for the 5 it adds: 4 are free.
    message = rec.conditions["QuotaReserved"].message
    assert "insufficient unused quota for cpu in flavor default, 1 more needed" in message
    assert _flavors(state, "sales/foo-1") == {"cpu": "default"}
    assert not _finished_reason(state, "sales/foo-1")


def _two_flavors(quota_a: str, quota_b: str) -> list[Builder]:
    return [a_flavor("a"), a_flavor("b"),
            a_cluster_queue("cq").group(("a", {"cpu": quota_a}), ("b", {"cpu": quota_b})),
            a_local_queue("ns", "lq", "cq")]


def test_the_new_slice_keeps_the_old_slices_flavor() -> None:
    old = a_workload("ns", "old").queue("lq").request(2, cpu="1").created(0).admitted("cq", {"cpu": "b"})
    new = a_workload("ns", "new").queue("lq").request(3, cpu="1").created(1).replaces("ns/old")
    state = _state(*_two_flavors("10", "3"), old, new)
    run_cycle(state)
    assert _flavors(state, "ns/new") == {"cpu": "b"}  # flavor a, tried first and empty, is not the old slice's


def test_a_slice_that_only_fits_another_flavor_waits() -> None:
    old = a_workload("ns", "old").queue("lq").request(2, cpu="1").created(0).admitted("cq", {"cpu": "b"})
    new = a_workload("ns", "new").queue("lq").request(4, cpu="1").created(1).replaces("ns/old")
    state = _state(*_two_flavors("10", "3"), old, new)
    run_cycle(state)
    message = state.workloads["ns/new"].conditions["QuotaReserved"].message
    assert state.workloads["ns/new"].admission is None
    assert "could not assign a flavor since the original workload is assigned: b" in message
    assert "insufficient unused quota for cpu in flavor b, 1 more needed" in message


def _elastic_cq(within: str) -> list[Builder]:
    return [a_flavor("alpha"), a_cluster_queue("cq").flavor("alpha", cpu="2").preemption(within=within),
            a_local_queue("ns", "q", "cq"), a_priority_class("low", 10), a_priority_class("high", 100)]


def test_scaling_up_preempts_a_lower_priority_workload_then_replaces_the_old_slice() -> None:
    low = a_workload("ns", "low").queue("q").request(cpu="1").priority_class("low").elastic().created(0).admitted(
        "cq", {"cpu": "alpha"})
    high = a_workload("ns", "high").queue("q").request(cpu="1").priority_class("high").elastic().created(1).admitted(
        "cq", {"cpu": "alpha"})
    high_2 = (a_workload("ns", "high-2").queue("q").request(2, cpu="1").priority_class("high").elastic().created(2)
              .replaces("ns/high"))
    state = _state(*_elastic_cq("LowerOrNewerEqualPriority"), low, high, high_2)
    first = run_cycle(state).decisions
    assert [(type(d).__name__, d.name) for d in first if not d.id.endswith("-status")] == [
        ("EvictWorkload", "low"), ("MarkPending", "high-2")]  # the old slice is not a target
    fold(state, EvictionCompleted(time=0, namespace="ns", name="low"))
    second = [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]
    assert [(d.name, d.replaced_slice) for d in second] == [("high-2", "ns/high")]
    assert _finished_reason(state, "ns/high") == "WorkloadSliceReplaced"
    assert state.cq_node("cq").usage == {("alpha", "cpu"): 2000}


@pytest.mark.parametrize("fair", [pytest.param(False, id="classical"), pytest.param(True, id="fair sharing")])
def test_a_slice_never_preempts_the_slice_it_replaces(fair: bool) -> None:
    old = a_workload("ns", "old").queue("q").request(2, cpu="1").priority_class("low").created(0).admitted(
        "cq", {"cpu": "alpha"})
    new = a_workload("ns", "new").queue("q").request(3, cpu="1").priority_class("high").created(1).replaces("ns/old")
    config = [a_configuration().fair_sharing()] if fair else []
    state = _state(*config, *_elastic_cq("LowerPriority"), old, new)
    assert state.config.fair_sharing is fair
    decisions = run_cycle(state).decisions
    assert not [d for d in decisions if isinstance(d, EvictWorkload)]
    assert state.workloads["ns/new"].admission is None
    assert state.workloads["ns/old"].admission is not None


def test_a_replacement_for_a_workload_holding_no_quota_is_an_ordinary_workload() -> None:
    new = a_workload("sales", "foo-2").queue("main").pod_set("one", 15, cpu="1").created(1).replaces("sales/foo-1")
    state = _state(*_sales("15"), new)
    admits = [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]
    assert [(d.name, d.replaced_slice) for d in admits] == [("foo-2", msgspec.UNSET)]


# --- the fold: a later version of an admitted elastic workload with more pods ---------------------


def _doc(count: int, *, admitted: bool = False) -> o.Workload:
    b = a_workload("sales", "job").queue("main").request(count, cpu="1").elastic().created(0)
    if admitted:
        b = b.admitted("sales", {"cpu": "default"})
    obj = normalize(Document("t.yaml", 1, b.obj()))
    assert isinstance(obj, o.Workload)
    return obj


def test_scaling_up_an_admitted_elastic_workload_makes_a_new_slice() -> None:
    state = _state(*_sales("4"))
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    fold(state, ObjectApplied(time=5_000, object=_doc(3)))
    assert state.slices == {"sales/job": "sales/job-slice-2"}
    slice_ = state.workloads["sales/job-slice-2"]
    assert dict(slice_.obj.annotations)["kueue.x-k8s.io/workload-slice-replacement-for"] == "sales/job"
    assert dict(slice_.obj.annotations)["kueue.x-k8s.io/workload-slice-name"] == "job"
    assert slice_.obj.pod_sets[0].count == 3 and slice_.admission is None
    assert state.workloads["sales/job"].obj.pod_sets[0].count == 2  # the admitted slice is left as it is
    # Scaled again while the slice waits: the pending slice takes the new count in place (Kueue).
    fold(state, ObjectApplied(time=6_000, object=_doc(4)))
    assert sorted(state.workloads) == ["sales/job", "sales/job-slice-2"]
    assert state.workloads["sales/job-slice-2"].obj.pod_sets[0].count == 4
    again = decode_state(encode_state(state))
    assert again.slices == state.slices
    run_cycle(state)
    assert _flavors(state, "sales/job-slice-2") == {"cpu": "default"}
    assert _finished_reason(state, "sales/job") == "WorkloadSliceReplaced"
    # And once more: the newest slice is the one a later version is compared with.
    fold(state, ObjectApplied(time=7_000, object=_doc(3)))  # a scale-down of job-slice-2, in place
    assert state.workloads["sales/job-slice-2"].usage == {("default", "cpu"): 3000}
    fold(state, ObjectApplied(time=8_000, object=_doc(4)))
    assert state.slices == {"sales/job": "sales/job-slice-3"}
    assert dict(state.workloads["sales/job-slice-3"].obj.annotations)[
        "kueue.x-k8s.io/workload-slice-replacement-for"] == "sales/job-slice-2"


@pytest.mark.parametrize("later", [
    pytest.param(lambda: _doc(2), id="the same count"),
    pytest.param(lambda: _doc(1), id="a scale-down (in place)"),
])
def test_no_slice_without_a_scale_up(later: Any) -> None:
    state = _state(*_sales("4"))
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    fold(state, ObjectApplied(time=5_000, object=later()))
    assert state.slices == {} and sorted(state.workloads) == ["sales/job"]


def test_a_workload_that_is_not_elastic_is_not_sliced() -> None:
    state = _state(*_sales("4"))
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    plain = normalize(Document("t.yaml", 1, a_workload("sales", "job").queue("main").request(3, cpu="1").obj()))
    assert isinstance(plain, o.Workload)
    fold(state, ObjectApplied(time=5_000, object=plain))
    assert state.slices == {}


def test_simulate_scales_up_from_a_later_document() -> None:
    later = a_workload("sales", "job").queue("main").request(4, cpu="1").elastic().created(0)
    first = a_workload("sales", "job").queue("main").request(2, cpu="1").elastic().created(0).admitted(
        "sales", {"cpu": "default"})
    result = run(_state(*_sales("4"), first, later), None)
    assert _flavors(result.state, "sales/job-slice-2") == {"cpu": "default"}
    assert result.state.workloads["sales/job-slice-2"].obj.pod_sets[0].count == 4
    assert _finished_reason(result.state, "sales/job") == "WorkloadSliceReplaced"


def _replaced(state: State) -> State:
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    fold(state, ObjectApplied(time=5_000, object=_doc(3)))
    run_cycle(state)
    assert _finished_reason(state, "sales/job") == "WorkloadSliceReplaced"
    return state


def test_the_jobs_news_reach_the_slice_that_replaced_its_first() -> None:
    """The watcher names the Job's first Workload; once a slice replaced it, the Job's pods, its
    finish and its deletion are the newest slice's."""
    state = _replaced(_state(*_sales("4")))
    fold(state, WorkloadFinished(time=9_000, namespace="sales", name="job"))
    assert _finished_reason(state, "sales/job-slice-2") == "Succeeded"
    assert state.cq_node("sales").usage.get(("default", "cpu"), 0) == 0


def test_a_job_that_finishes_while_its_scale_up_waits_takes_the_waiting_slice_along() -> None:
    state = _state(*_sales("2"))
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    fold(state, ObjectApplied(time=5_000, object=_doc(3)))  # 1 more cpu: none free, it waits
    run_cycle(state)
    assert state.workloads["sales/job-slice-2"].admission is None
    fold(state, WorkloadFinished(time=9_000, namespace="sales", name="job"))
    assert _finished_reason(state, "sales/job") == "Succeeded"
    assert _finished_reason(state, "sales/job-slice-2") == "OutOfSync"
    assert not [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]


def test_a_second_scale_up_waits_behind_the_running_slice_whose_news_it_still_is() -> None:
    state = _replaced(_state(*_sales("3")))
    fold(state, ObjectApplied(time=6_000, object=_doc(5)))  # slice-3 would need 2 more: it waits
    run_cycle(state)
    assert state.workloads["sales/job-slice-3"].admission is None
    fold(state, WorkloadFinished(time=9_000, namespace="sales", name="job"))
    assert _finished_reason(state, "sales/job-slice-2") == "Succeeded"  # the running one, not the waiting one
    assert _finished_reason(state, "sales/job-slice-3") == "OutOfSync"


# --- the scheduler service: the log replays to the same decisions --------------------------------


def test_replay_verify_and_recovery_with_slices_and_fair_sharing_status(tmp_path: Path) -> None:
    topics = Topics()
    log = SqliteLog(tmp_path)
    try:
        setup = [a_configuration().admission_fair_sharing(usageHalfLifeTime="10m", usageSamplingInterval="5m"),
                 a_flavor("default"), a_cluster_queue("sales").flavor("default", cpu="4").admission_fair_sharing(),
                 a_local_queue("sales", "main", "sales")]
        events: list[Any] = [ObjectApplied(time=0, object=normalize(Document("t.yaml", i, b.obj())))
                             for i, b in enumerate(setup, start=1)]
        events += [ObjectApplied(time=1_000, object=_doc(2, admitted=True)),
                   ObjectApplied(time=2_000, object=_doc(3)),
                   ClockTicked(time=400_000),
                   ObjectApplied(time=401_000, object=_doc(4)),
                   WorkloadFinished(time=900_000, namespace="sales", name="job")]
        for i, ev in enumerate(events):
            log.append(topics.cluster_events, [("k", encode(Envelope(id=f"t:{i}", source="t", event=ev)))])
            live = Scheduler(log, batch_size=2, snapshot_every=3)
            live.recover()
            while live.step():
                pass
        decisions = [decode_decision(r.value) for r in log.read(topics.decisions, 0, 10_000)]
        replaced = [(d.name, d.replaced_slice) for d in decisions if isinstance(d, AdmitWorkload) and d.replaced_slice]
        assert replaced == [("job-slice-2", "sales/job"), ("job-slice-3", "sales/job-slice-2")]
        assert any(type(d).__name__ == "UpdateLocalQueueFairSharing" for d in decisions)
        assert list(Scheduler(log).replay(0, verify=True)) == []
        restarted = Scheduler(log)
        restarted.recover()
        assert encode_state(restarted.state) == encode_state(live.state)
        assert _finished_reason(live.state, "sales/job-slice-3") == "Succeeded"
    finally:
        log.close()


def test_an_old_slice_evicted_while_its_replacement_waits_is_finished_and_the_slice_admitted_alone() -> None:
    """Kueue's normalizeActiveSlices finishes an evicted slice that has a replacement; the waiting
    slice, with no quota left to take over, is then an ordinary workload of the Job's new count."""
    state = _state(*_sales("3"))
    fold(state, ObjectApplied(time=0, object=_doc(2, admitted=True)))
    fold(state, ObjectApplied(time=5_000, object=_doc(4)))  # 2 more: 1 free, it waits
    run_cycle(state)
    assert state.workloads["sales/job-slice-2"].admission is None
    state.workloads["sales/job"].evicting = True  # preempted by someone else, say
    fold(state, EvictionCompleted(time=6_000, namespace="sales", name="job"))
    assert _finished_reason(state, "sales/job") == "WorkloadSliceReplaced"
    assert state.workloads["sales/job"].admission is None
    assert not [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]  # 4 of 3: it still waits
    fold(state, ObjectApplied(time=7_000, object=_doc(3)))  # scaled back to what fits: in place, and admitted
    admits = [d for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]
    assert [(d.name, d.replaced_slice) for d in admits] == [("job-slice-2", msgspec.UNSET)]
