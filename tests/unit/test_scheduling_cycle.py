"""One Kueue scheduling cycle, and cycles until nothing changes (Kueue's ``pkg/scheduler/scheduler.go``).

Sections 1, 2 and 7 of the Kueue digest are the specification: one head per
ClusterQueue per cycle; heads ordered non-borrowing first (by borrowing level),
then priority, then queue-order time; quota admitted earlier in a cycle is counted
for later heads; namespaceSelector, stopPolicy and missing queues keep workloads
pending with Kueue's reasons and messages; partial admission searches the largest
count that fits; freed quota requeues parked workloads of the whole cohort.
"""

from __future__ import annotations

from typing import Any

import pytest

from events.messages import ObjectDeleted, WorkloadFinished
from services.app.simulate import run
from services.core.state import fold
from tests.builders import (
    Builder,
    Outcome,
    WorkloadBuilder,
    a_cluster_queue,
    a_cohort,
    a_flavor,
    a_job,
    a_local_queue,
    a_namespace,
    a_priority_class,
    a_workload,
    build_state,
    simulate,
)

NO_LONGER_FITS = "Workload no longer fits after processing another workload"


def _cohort(**nominal: int) -> list[Builder]:
    """A flavor, the namespace ``ns``, and one ClusterQueue per keyword (``cq_a=4`` -> ``cq-a``) in
    cohort ``co``, each with a LocalQueue ``ns/lq-<cq>``."""
    out: list[Builder] = [a_flavor("f"), a_namespace("ns")]
    for key, cpu in nominal.items():
        name = key.replace("_", "-")
        out += [a_cluster_queue(name).cohort("co").flavor("f", cpu=cpu), a_local_queue("ns", f"lq-{name}", name)]
    return out


def _wl(name: str, cq: str, cpu: str = "1", priority: int = 0, created: int = 0) -> WorkloadBuilder:
    return a_workload("ns", name).queue(f"lq-{cq}").request(cpu=cpu).priority(priority).created(created)


def _running(name: str, cq: str, cpu: str, priority: int = 0) -> WorkloadBuilder:
    return a_workload("ns", name).queue(f"lq-{cq}").request(cpu=cpu).priority(priority).admitted(cq, {"cpu": "f"})


# --- entry ordering -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quotas", "heads", "want_admitted", "want_skipped"),
    [
        pytest.param(
            {"cq_a": 0, "cq_b": 4},
            [_wl("borrower", "cq-a", "4", priority=100, created=0), _wl("owner", "cq-b", "4", priority=0, created=50)],
            ["ns/owner"],
            "ns/borrower",
            id="non-borrowing before borrowing, even against higher priority and an older workload",
        ),
        pytest.param(
            {"cq_a": 0, "cq_b": 0, "lender": 4},
            [_wl("low", "cq-a", "4", priority=1, created=0), _wl("high", "cq-b", "4", priority=5, created=50)],
            ["ns/high"],
            "ns/low",
            id="both borrowing: higher priority first, even if newer",
        ),
        pytest.param(
            {"cq_a": 0, "cq_b": 0, "lender": 4},
            [_wl("new", "cq-a", "4", created=50), _wl("old", "cq-b", "4", created=0)],
            ["ns/old"],
            "ns/new",
            id="both borrowing at equal priority: the older first",
        ),
        pytest.param(
            {"cq_a": 0, "cq_b": 0, "lender": 4},
            [_wl("first", "cq-b", "4", created=0), _wl("second", "cq-a", "4", created=0)],
            ["ns/first"],
            "ns/second",
            id="equal priority and creation time: input order",
        ),
    ],
)
def test_heads_are_ordered_as_kueue_orders_them(quotas, heads, want_admitted, want_skipped):
    out = simulate(*_cohort(**quotas), *heads, cycles=1)
    assert sorted(out.admitted()) == want_admitted
    assert out.wl(want_skipped).pending
    assert out.message(want_skipped) == NO_LONGER_FITS


@pytest.mark.parametrize(
    ("workloads", "want_order"),
    [
        pytest.param([("old-low", 0, 0), ("new-high", 10, 20), ("mid", 5, 10)], ["new-high", "mid", "old-low"],
                     id="priority first"),
        pytest.param([("newer", 0, 20), ("older", 0, 10), ("oldest", 0, 0)], ["oldest", "older", "newer"],
                     id="equal priority: creation time"),
        pytest.param([("listed-first", 0, 0), ("listed-second", 0, 0), ("listed-third", 0, 0)],
                     ["listed-first", "listed-second", "listed-third"], id="equal priority and time: input order"),
    ],
)
def test_queue_order_within_a_cluster_queue(workloads, want_order):
    """One head per cycle and room for all: after k cycles the first k in queue order are admitted."""
    objs = [*_cohort(cq=len(workloads)), *[_wl(n, "cq", "1", priority=p, created=t) for n, p, t in workloads]]
    got = [sorted(simulate(*objs, cycles=k).admitted()) for k in range(1, len(workloads) + 1)]
    assert got == [sorted(f"ns/{n}" for n in want_order[:k]) for k in range(1, len(workloads) + 1)]


def test_a_lower_borrowing_level_goes_first():
    """near borrows within its own cohort (level 1); far must borrow from the root (level 2)."""
    objs = [
        a_flavor("f"),
        a_namespace("ns"),
        a_cohort("root"),
        a_cohort("left").parent("root"),
        a_cohort("right").parent("root"),
        a_cluster_queue("near").cohort("left").flavor("f", cpu=0),
        a_cluster_queue("lender").cohort("left").flavor("f", cpu=4),
        a_cluster_queue("far").cohort("right").flavor("f", cpu=0),
        a_local_queue("ns", "lq-near", "near"),
        a_local_queue("ns", "lq-far", "far"),
        _wl("far-wl", "far", "4", priority=100, created=0),
        _wl("near-wl", "near", "4", priority=0, created=50),
    ]
    out = simulate(*objs, cycles=1)
    assert out.admitted() == {"ns/near-wl": "near"}
    assert out.message("ns/far-wl") == NO_LONGER_FITS


@pytest.mark.parametrize(
    "cycles",
    [pytest.param(1, id="one cycle"), pytest.param(None, id="until nothing changes")],
)
def test_two_heads_in_one_cohort_never_over_admit(cycles):
    objs = [*_cohort(cq_a=2, cq_b=2, lender=2), _wl("a1", "cq-a", "4", created=0), _wl("b1", "cq-b", "4", created=10)]
    out = simulate(*objs, cycles=cycles)
    assert out.admitted() == {"ns/a1": "cq-a"}
    want = (
        NO_LONGER_FITS
        if cycles == 1
        else ("couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, 2 more needed")
    )
    assert out.message("ns/b1") == want


@pytest.mark.parametrize(
    ("cycles", "want_admitted"),
    [
        pytest.param(1, ["ns/w0"], id="--cycles 1: only the head of the ClusterQueue"),
        pytest.param(2, ["ns/w0", "ns/w1"], id="--cycles 2: one more"),
        pytest.param(None, ["ns/w0", "ns/w1", "ns/w2"], id="until nothing changes: all three"),
    ],
)
def test_one_head_per_cluster_queue_per_cycle(cycles, want_admitted):
    objs = [*_cohort(cq=3), *[_wl(f"w{i}", "cq", "1", created=i) for i in (2, 0, 1)]]
    out = simulate(*objs, cycles=cycles)
    assert sorted(out.admitted()) == want_admitted


@pytest.mark.parametrize(
    ("reclaim", "want_admitted"),
    [
        pytest.param(
            None,
            {"ns/running": "cq-a"},
            id="a preemptor without candidates holds back its unused nominal quota for the rest of the cycle",
        ),
        pytest.param(
            "Any",
            {"ns/b1": "cq-b", "ns/running": "cq-a"},
            id="reclaimWithinCohort Any: it can always reclaim later, so nothing is held back",
        ),
    ],
)
def test_a_preemptor_without_candidates_reserves_quota_in_the_cycle(reclaim, want_admitted):
    """cq-a (4, running 2 at priority 5) has a head of 4 at priority 5: it needs preemption but
    LowerPriority finds no candidate. Kueue reserves min(4, 4 - 2) = 2 for it in the cycle, so cq-b's
    borrowing head of 2, ordered after it by priority, no longer fits."""
    cq_a = a_cluster_queue("cq-a").cohort("co").flavor("f", cpu=4).preemption(within="LowerPriority", reclaim=reclaim)
    objs = [
        a_flavor("f"),
        a_namespace("ns"),
        cq_a,
        a_local_queue("ns", "lq-cq-a", "cq-a"),
        a_cluster_queue("cq-b").cohort("co").flavor("f", cpu=0),
        a_local_queue("ns", "lq-cq-b", "cq-b"),
        _running("running", "cq-a", "2", priority=5),
        _wl("a1", "cq-a", "4", priority=5, created=0),
        _wl("b1", "cq-b", "2", priority=0, created=0),
    ]
    out = simulate(*objs, cycles=1)
    assert out.admitted() == want_admitted
    assert out.preempted() == []
    if "ns/b1" not in want_admitted:
        assert out.message("ns/b1") == NO_LONGER_FITS


# --- namespaceSelector ----------------------------------------------------------------------------

MISMATCH = "workload namespace doesn't match ClusterQueue selector"


@pytest.mark.parametrize(
    ("selector", "want_admitted"),
    [
        pytest.param({}, ["other", "team-a", "team-b"], id="{} matches every namespace"),
        pytest.param(None, [], id="null selector matches no namespace"),
        pytest.param({"matchLabels": {"team": "a"}}, ["team-a"], id="matchLabels"),
        pytest.param(
            {"matchLabels": {"kubernetes.io/metadata.name": "team-b"}},
            ["team-b"],
            id="matchLabels on the namespace name label",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            ["team-a", "team-b"],
            id="matchExpressions In",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            ["other", "team-b"],
            id="matchExpressions NotIn also matches a namespace without the label",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            ["team-a", "team-b"],
            id="matchExpressions Exists",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]},
            ["other"],
            id="matchExpressions DoesNotExist",
        ),
        pytest.param(
            {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
            [],
            id="matchLabels and matchExpressions must both hold",
        ),
    ],
)
def test_namespace_selector(selector, want_admitted):
    namespaces = {"team-a": {"team": "a"}, "team-b": {"team": "b"}, "other": {}}
    objs: list[Any] = [a_flavor("f"), a_cluster_queue("cq").flavor("f", cpu=10).selector(selector)]
    for ns, labels in namespaces.items():
        objs += [
            a_namespace(ns, **labels),
            a_local_queue(ns, "lq", "cq"),
            a_workload(ns, "w").queue("lq").request(cpu="1"),
        ]
    out = simulate(*objs)
    assert sorted(k.split("/")[0] for k in out.admitted()) == want_admitted
    for ns in namespaces:
        if ns not in want_admitted:
            assert out.condition(f"{ns}/w", "QuotaReserved") == ("False", "Misconfigured")
            assert out.message(f"{ns}/w") == MISMATCH


def test_strict_fifo_does_not_wait_behind_a_namespace_mismatch():
    """NamespaceMismatch is the one requeue reason that parks a StrictFIFO head."""
    cq = a_cluster_queue("cq").flavor("f", cpu=10).strict_fifo().selector({"matchLabels": {"team": "a"}})
    objs = [a_flavor("f"), cq, a_namespace("team-a", team="a"), a_namespace("other"),
            a_local_queue("team-a", "lq", "cq"), a_local_queue("other", "lq", "cq"),
            a_workload("other", "old").queue("lq").request(cpu="1").created(0),
            a_workload("team-a", "new").queue("lq").request(cpu="1").created(10)]
    out = simulate(*objs)
    assert out.admitted() == {"team-a/new": "cq"}
    assert out.message("other/old") == MISMATCH


def test_a_cohort_cycle_admits_nothing_in_the_tree():
    objs = [a_flavor("f"), a_namespace("ns"), a_cohort("x").parent("y"), a_cohort("y").parent("x"),
            a_cluster_queue("cq").cohort("x").flavor("f", cpu=10), a_local_queue("ns", "lq-cq", "cq"),
            _wl("w", "cq", "1")]
    out = simulate(*objs)
    assert out.admitted() == {}
    assert out.wl("ns/w").pending


# --- stopPolicy -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "cycles", "want_admitted", "want_evicted", "want_requeued"),
    [
        pytest.param("None", None, ["ns/pending", "ns/running"], None, None, id="None: both run"),
        pytest.param(
            "Hold",
            None,
            ["ns/running"],
            None,
            None,
            id="Hold: the admitted workload keeps running, the pending one waits",
        ),
        pytest.param(
            "HoldAndDrain",
            1,
            [],
            ("True", "ClusterQueueStopped"),
            None,
            id="HoldAndDrain: the admitted workload is evicted with reason ClusterQueueStopped",
        ),
        pytest.param(
            "HoldAndDrain",
            None,
            [],
            ("True", "ClusterQueueStopped"),
            ("False", "ClusterQueueStopped"),
            id="HoldAndDrain until quiescent: Requeued=False(ClusterQueueStopped) holds it back",
        ),
    ],
)
def test_cluster_queue_stop_policy(policy, cycles, want_admitted, want_evicted, want_requeued):
    cq = a_cluster_queue("cq").flavor("f", cpu=4)
    if policy != "None":
        cq = cq.stop(policy)
    out = simulate(
        a_flavor("f"),
        a_namespace("ns"),
        cq,
        a_local_queue("ns", "lq-cq", "cq"),
        _running("running", "cq", "2"),
        _wl("pending", "cq", "1"),
        cycles=cycles,
    )
    assert sorted(out.admitted()) == want_admitted
    assert out.condition("ns/running", "Evicted") == want_evicted
    assert out.condition("ns/running", "Requeued") == want_requeued
    if want_evicted:
        assert out.wl("ns/running").conditions["Evicted"].message == "The ClusterQueue is stopped"
    if policy != "None":
        assert out.condition("ns/pending", "QuotaReserved") == ("False", "Suspended")
        assert out.message("ns/pending") == "ClusterQueue cq is inactive"


def _local_queues(policy: str) -> list[Builder]:
    return [
        a_flavor("f"),
        a_namespace("ns"),
        a_cluster_queue("cq").flavor("f", cpu=10),
        a_local_queue("ns", "lq-stopped", "cq").stop(policy),
        a_local_queue("ns", "lq-open", "cq"),
        a_workload("ns", "running").queue("lq-stopped").request(cpu="2").admitted("cq", {"cpu": "f"}),
    ]


@pytest.mark.parametrize(
    ("policy", "cycles", "want_running_admitted", "want_evicted", "want_requeued"),
    [
        pytest.param("Hold", None, True, None, None, id="LocalQueue Hold: its admitted workload keeps running"),
        pytest.param(
            "HoldAndDrain",
            1,
            False,
            ("True", "LocalQueueStopped"),
            None,
            id="LocalQueue HoldAndDrain: its admitted workload is evicted with reason LocalQueueStopped",
        ),
        pytest.param(
            "HoldAndDrain",
            None,
            False,
            ("True", "LocalQueueStopped"),
            ("False", "LocalQueueStopped"),
            id="LocalQueue HoldAndDrain until quiescent: the drained workload is not admitted again",
        ),
    ],
)
def test_local_queue_stop_policy_on_admitted_workloads(
    policy, cycles, want_running_admitted, want_evicted, want_requeued
):
    out = simulate(*_local_queues(policy), cycles=cycles)
    assert ("ns/running" in out.admitted()) is want_running_admitted
    assert out.condition("ns/running", "Evicted") == want_evicted
    if want_evicted:
        assert out.wl("ns/running").conditions["Evicted"].message == "The LocalQueue is stopped"
    assert out.condition("ns/running", "Requeued") == want_requeued


@pytest.mark.parametrize(
    "policy",
    [pytest.param("Hold", id="LocalQueue Hold"), pytest.param("HoldAndDrain", id="LocalQueue HoldAndDrain")],
)
def test_a_stopped_local_queue_holds_its_pending_workloads(policy):
    objs = [
        *_local_queues(policy),
        a_workload("ns", "held").queue("lq-stopped").request(cpu="1").created(0),
        a_workload("ns", "open").queue("lq-open").request(cpu="1").created(10),
    ]
    out = simulate(*objs)
    assert "ns/open" in out.admitted()
    assert out.wl("ns/held").pending
    assert out.condition("ns/held", "QuotaReserved") == ("False", "Suspended")
    assert out.message("ns/held") == "LocalQueue lq-stopped is inactive"


# --- missing queues -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "want_message"),
    [
        pytest.param([], "LocalQueue lq doesn't exist", id="missing LocalQueue"),
        pytest.param(
            [a_local_queue("ns", "lq", "ghost")],
            "ClusterQueue ghost doesn't exist",
            id="LocalQueue pointing at a missing ClusterQueue",
        ),
    ],
)
def test_a_workload_without_a_cluster_queue_is_inadmissible(queues, want_message):
    out = simulate(
        a_flavor("f"),
        a_namespace("ns"),
        a_cluster_queue("cq").flavor("f", cpu=10),
        *queues,
        a_workload("ns", "w").queue("lq").request(cpu="1"),
    )
    assert out.admitted() == {}
    assert out.condition("ns/w", "QuotaReserved") == ("False", "Misconfigured")
    assert out.message("ns/w") == want_message


# --- partial admission ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quota", "used", "count", "min_count", "want_count"),
    [
        pytest.param(10, 0, 8, 2, 8, id="the full count fits: no reduction"),
        pytest.param(5, 0, 8, 2, 5, id="8 pods, quota 5: the largest count that fits is 5"),
        pytest.param(8, 5, 6, 2, 3, id="only 3 cores unused: 3 pods"),
        pytest.param(7, 0, 8, 7, 7, id="exactly minCount fits"),
        pytest.param(1, 0, 8, 2, None, id="not even minCount fits: pending"),
        pytest.param(5, 0, 8, None, None, id="without minCount there is no partial admission"),
    ],
)
def test_partial_admission(quota, used, count, min_count, want_count):
    objs: list[Any] = [*_cohort(cq=quota)]
    if used:
        objs.append(_running("running", "cq", str(used)))
    objs.append(a_workload("ns", "w").queue("lq-cq").pod_set("main", count, min_count, cpu="1"))
    out = simulate(*objs)
    rec = out.wl("ns/w")
    if want_count is None:
        assert rec.pending
        assert out.message("ns/w").startswith("couldn't assign flavors to pod set main: insufficient")
        return
    psa = rec.admission.pod_set_assignments[0]
    assert (psa.count, dict(psa.resource_usage)) == (want_count, {"cpu": want_count * 1000})


def test_partial_admission_shrinks_only_the_pod_set_with_min_count():
    wl = a_workload("ns", "w").queue("lq-cq").pod_set("driver", 1, cpu="1").pod_set("workers", 10, 4, cpu="1")
    out = simulate(*_cohort(cq=7), wl)
    counts = {psa.name: psa.count for psa in out.wl("ns/w").admission.pod_set_assignments}
    assert counts == {"driver": 1, "workers": 6}


def test_partial_admission_of_a_job_with_min_parallelism():
    job = (
        a_job("ns", "job", "lq-cq").parallelism(8).request(cpu="1").annotate("kueue.x-k8s.io/job-min-parallelism", "2")
    )
    out = simulate(*_cohort(cq=5), job)
    assert out.wl("ns/job").admission.pod_set_assignments[0].count == 5


# --- priority -------------------------------------------------------------------------------------


def _pod_priority_class_workload(name: str, pc: str) -> WorkloadBuilder:
    wl = a_workload("ns", name).queue("lq-cq").request(cpu="1")
    wl.body["spec"]["priorityClassName"] = pc
    wl.body["spec"]["priorityClassSource"] = "scheduling.k8s.io/priorityclass"
    return wl


def _job_with_pod_priority_class(name: str, pc: str):
    job = a_job("ns", name, "lq-cq").request(cpu="1").created(100)
    job.body["spec"]["template"]["spec"]["priorityClassName"] = pc
    return job


@pytest.mark.parametrize(
    ("classes", "contender", "want_winner"),
    [
        pytest.param(
            [a_priority_class("high", 100)],
            a_workload("ns", "classy").queue("lq-cq").request(cpu="1").priority_class("high").created(100),
            "ns/classy",
            id="Workload with a WorkloadPriorityClass of 100 beats spec.priority 50",
        ),
        pytest.param(
            [a_priority_class("low", 10)],
            a_workload("ns", "classy").queue("lq-cq").request(cpu="1").priority_class("low").created(0),
            "ns/plain",
            id="Workload with a WorkloadPriorityClass of 10 loses to spec.priority 50",
        ),
        pytest.param(
            [a_priority_class("high", 100, workload=False)],
            _pod_priority_class_workload("classy", "high").created(100),
            "ns/classy",
            id="Workload with a PriorityClass of 100 beats spec.priority 50",
        ),
        pytest.param(
            [a_priority_class("high", 100)],
            a_job("ns", "classy", "lq-cq").request(cpu="1").created(100).label("kueue.x-k8s.io/priority-class", "high"),
            "ns/classy",
            id="Job labelled with a WorkloadPriorityClass of 100 beats spec.priority 50",
        ),
        pytest.param(
            [a_priority_class("high", 100, workload=False)],
            _job_with_pod_priority_class("classy", "high"),
            "ns/classy",
            id="Job whose pod template names a PriorityClass of 100 beats spec.priority 50",
        ),
    ],
)
def test_priority_comes_from_priority_classes(classes, contender, want_winner):
    plain = a_workload("ns", "plain").queue("lq-cq").request(cpu="1").priority(50).created(50)
    out = simulate(*classes, *_cohort(cq=1), plain, contender, cycles=1)
    assert list(out.admitted()) == [out.wl(want_winner).key]


def test_a_global_default_priority_class_applies_to_jobs_without_one():
    default = a_priority_class("everyone", 100, workload=False)
    default.body["globalDefault"] = True
    plain = a_workload("ns", "plain").queue("lq-cq").request(cpu="1").priority(50).created(50)
    job = a_job("ns", "job", "lq-cq").request(cpu="1").created(100)
    out = simulate(default, *_cohort(cq=1), plain, job, cycles=1)
    assert list(out.admitted()) == ["ns/" + out.wl("ns/job").obj.name]
    assert out.wl("ns/job").priority == 100


def test_several_global_default_priority_classes_the_lowest_value_wins():
    high = a_priority_class("a-high", 100, workload=False)
    low = a_priority_class("b-low", 10, workload=False)
    for pc in (high, low):
        pc.body["globalDefault"] = True
    out = simulate(high, low, *_cohort(cq=1), a_job("ns", "job", "lq-cq").request(cpu="1"))
    assert out.wl("ns/job").priority == 10


# --- pre-admitted workloads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quotas", "running_in", "pending_in"),
    [
        pytest.param({"cq": 2}, "cq", "cq", id="same ClusterQueue: 4 in use of a quota of 2"),
        pytest.param(
            {"cq_a": 2, "cq_b": 2}, "cq-a", "cq-b", id="cohort: 4 in use in cq-a leave nothing for cq-b's nominal 2"
        ),
    ],
)
def test_a_pre_admitted_workload_above_todays_quota_still_counts(quotas, running_in, pending_in):
    out = simulate(*_cohort(**quotas), _running("big", running_in, "4"), _wl("small", pending_in, "1"))
    assert out.admitted() == {"ns/big": running_in}
    assert out.wl("ns/small").pending
    assert out.message("ns/small") == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, 1 more needed"
    )


# --- freed quota ----------------------------------------------------------------------------------


def _settle(*objects: Builder) -> Outcome:
    return Outcome(run(build_state(*objects), None))


@pytest.mark.parametrize(
    ("quotas", "running_in", "pending_in", "event"),
    [
        pytest.param(
            {"cq": 4},
            "cq",
            "cq",
            ObjectDeleted(kind="Workload", namespace="ns", name="running"),
            id="the running workload is deleted: the parked one in the same ClusterQueue is admitted",
        ),
        pytest.param(
            {"cq": 4},
            "cq",
            "cq",
            WorkloadFinished(namespace="ns", name="running"),
            id="the running workload finishes: the parked one is admitted",
        ),
        pytest.param(
            {"cq_a": 4, "cq_b": 0},
            "cq-a",
            "cq-b",
            ObjectDeleted(kind="Workload", namespace="ns", name="running"),
            id="deleted in cq-a: the workload parked in cq-b of the same cohort borrows the freed quota",
        ),
        pytest.param(
            {"cq_a": 4, "cq_b": 0},
            "cq-a",
            "cq-b",
            WorkloadFinished(namespace="ns", name="running"),
            id="finished in cq-a: the workload parked in cq-b of the same cohort is admitted",
        ),
    ],
)
def test_freed_quota_requeues_parked_best_effort_fifo_workloads(quotas, running_in, pending_in, event):
    out = _settle(*_cohort(**quotas), _running("running", running_in, "4"), _wl("waiting", pending_in, "4"))
    assert out.wl("ns/waiting").pending
    run(out.state, None)
    assert out.wl("ns/waiting").pending, "nothing was freed, so a parked workload stays parked"
    fold(out.state, event)
    run(out.state, None)
    assert out.admitted() == {"ns/waiting": pending_in}
    if isinstance(event, WorkloadFinished):
        assert out.condition("ns/running", "Finished") == ("True", "Succeeded")


# --- requests above limits ------------------------------------------------------------------------


def _over(path: str, *resources: str) -> str:
    names = ",".join(f'"{r}"' for r in resources)
    return f"{path}: Invalid value: [{names}]: requests must not exceed its limits"


_C0 = "spec.podSets[0].template.spec.containers[0]"


@pytest.mark.parametrize(
    ("workload", "want_message"),
    [
        pytest.param(_wl("w", "cq-a", cpu="200m").limits(cpu="100m"),
                     f"resources validation failed: {_over(_C0, 'cpu')}",
                     id="a request above its limit: Kueue's scheduler_test case, pending and Misconfigured"),
        pytest.param(a_workload("ns", "w").queue("lq-cq-a").request(cpu="2", memory="2Gi")
                     .limits(cpu="1", memory="1Gi"),
                     f"resources validation failed: {_over(_C0, 'cpu', 'memory')}",
                     id="every resource above its limit is named, sorted"),
        pytest.param(_wl("w", "cq-a", cpu="1").container({"cpu": "1"}, {"cpu": "500m"})
                     .container({"memory": "2Gi"}, {"memory": "1Gi"}, init=True),
                     "resources validation failed: ["
                     f"{_over('spec.podSets[0].template.spec.initContainers[0]', 'memory')}, "
                     f"{_over('spec.podSets[0].template.spec.containers[1]', 'cpu')}]",
                     id="init containers first, then containers; several errors are aggregated in brackets"),
        pytest.param(a_job("ns", "job", "lq-cq-a").request(cpu="2").limits(cpu="1"),
                     f"resources validation failed: {_over(_C0, 'cpu')}",
                     id="a Job's container is named by its place in the Workload"),
        pytest.param(_wl("w", "cq-a", cpu="1").limits(cpu="1"), "", id="requests equal to limits are admitted"),
        pytest.param(_wl("w", "cq-a", cpu="1").limits(cpu="2"), "", id="requests below limits are admitted"),
    ],
)
def test_requests_above_limits_keep_the_workload_pending(workload, want_message):
    """Kueue's nominate runs ValidateAdmissibility, whose ValidateResources refuses a container
    whose requests exceed its limits: the workload stays pending, QuotaReserved=False with the
    field error as message (pkg/scheduler/scheduler.go, pkg/workload/resources.go)."""
    out = simulate(*_cohort(cq_a=8), workload, cycles=1)
    key = "ns/w" if workload.body["kind"] == "Workload" else "ns/job"
    if not want_message:
        assert out.wl(key).admission is not None
        return
    rec = out.wl(key)
    assert rec.pending
    assert rec.pending_reason == "Misconfigured"
    assert out.condition(key, "QuotaReserved") == ("False", "Misconfigured")
    assert out.message(key) == want_message
