"""Fair sharing: exact dominant resource shares, weights and fair preemption."""

from __future__ import annotations

from fractions import Fraction

import pytest

from services.core.fairsharing import drs
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, build_state, simulate

FAIR = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "fairSharing": {"enable": True}}


def _cohort(b_weight: str | None = None):
    b = a_cluster_queue("cq-b").cohort("all").flavor("default", cpu=0).preemption(reclaim="Any", within="LowerPriority")
    if b_weight is not None:
        b = b.weight(b_weight)
    return [
        a_flavor("default"),
        a_cluster_queue("lender").cohort("all").flavor("default", cpu=12),
        a_cluster_queue("cq-a").cohort("all").flavor("default", cpu=0)
        .preemption(reclaim="Any", within="LowerPriority"),
        b,
        a_local_queue("a", "lq", "cq-a"),
        a_local_queue("b", "lq", "cq-b"),
    ]


def _b_uses_everything():
    return [a_workload("b", f"b{i:02d}").queue("lq").request(cpu=1).admitted("cq-b", {"cpu": "default"}, i)
            for i in range(12)]


def _a_wants(n: int):
    return [a_workload("a", f"a{i:02d}").queue("lq").request(cpu=1).created(100 + i) for i in range(n)]


@pytest.mark.parametrize(
    ("b_weight", "want_a", "want_b"),
    [
        pytest.param(None, 6, 6, id="equal weights: the borrower is preempted until shares are equal"),
        pytest.param("2", 4, 8, id="cq-b weight 2: it keeps twice the share of cq-a"),
        pytest.param("0", 12, 0, id="cq-b weight 0: any borrowing by it is reclaimable"),
    ],
)
def test_fair_preemption_balances_borrowing_by_weight(b_weight, want_a, want_b):
    out = simulate(FAIR, *_cohort(b_weight), *_b_uses_everything(), *_a_wants(12))
    admitted = out.admitted()
    assert sum(1 for cq in admitted.values() if cq == "cq-a") == want_a
    assert sum(1 for cq in admitted.values() if cq == "cq-b") == want_b
    preempted = out.preempted()
    assert len(preempted) == 12 - want_b
    assert all(out.condition(k, "Preempted") == ("True", "InCohortFairSharing") for k in preempted)


def test_without_fair_sharing_a_borrower_cannot_reclaim_from_another_borrower():
    out = simulate(*_cohort(), *_b_uses_everything(), *_a_wants(12))
    assert not out.preempted()
    assert all(cq == "cq-b" for cq in out.admitted().values())


def test_dominant_resource_share_is_an_exact_fraction():
    state = build_state(FAIR, *_cohort(), *_b_uses_everything()[:5])
    state.ensure_indexed()
    # cq-b borrows 5 of the 12 CPUs its cohort can lend: 5 * 1000 / 12, weight 1.
    assert drs(state, state.cq_node("cq-b")) == (0, Fraction(5000, 12))
    assert drs(state, state.cq_node("cq-a")) == (0, Fraction(0))


def test_admission_order_prefers_the_lower_share():
    """Two heads, one cycle, room for only one: the ClusterQueue with the lower share goes first,
    even though classical ordering (priority, then age) would pick the other."""
    objs = [FAIR, a_flavor("default"),
            a_cluster_queue("lender").cohort("all").flavor("default", cpu=4),
            a_cluster_queue("cq-a").cohort("all").flavor("default", cpu=0),
            a_cluster_queue("cq-b").cohort("all").flavor("default", cpu=0),
            a_local_queue("a", "lq", "cq-a"), a_local_queue("b", "lq", "cq-b"),
            a_workload("a", "a-running").queue("lq").request(cpu=2).admitted("cq-a", {"cpu": "default"}),
            a_workload("a", "a-new").queue("lq").request(cpu=2).priority(100).created(0),
            a_workload("b", "b-new").queue("lq").request(cpu=2).created(1)]
    fair = simulate(*objs, cycles=1)
    assert set(fair.admitted()) == {"a/a-running", "b/b-new"}
    assert "no longer fits after processing another workload" in fair.message("a/a-new")
    classical = simulate(*objs[1:], cycles=1)
    assert set(classical.admitted()) == {"a/a-running", "a/a-new"}


@pytest.mark.parametrize(
    ("strategies", "want_preempted"),
    [
        pytest.param(["LessThanOrEqualToFinalShare"], [],
                     id="S2-a alone: evicting b's 12-CPU job would leave b below a, so it is kept"),
        pytest.param(["LessThanInitialShare"], ["b/big"],
                     id="S2-b alone: a after admission (1) is below b before (12), so b is preempted"),
        pytest.param(None, ["b/big"], id="default: S2-a finds nothing, then S2-b preempts"),
    ],
)
def test_fair_preemption_strategies(strategies, want_preempted):
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
              "fairSharing": {"enable": True}}
    if strategies is not None:
        config["fairSharing"]["preemptionStrategies"] = strategies
    out = simulate(
        config, a_flavor("default"),
        a_cluster_queue("lender").cohort("all").flavor("default", cpu=12),
        a_cluster_queue("cq-a").cohort("all").flavor("default", cpu=0).preemption(reclaim="Any"),
        a_cluster_queue("cq-b").cohort("all").flavor("default", cpu=0).preemption(reclaim="Any"),
        a_local_queue("a", "lq", "cq-a"), a_local_queue("b", "lq", "cq-b"),
        a_workload("b", "big").queue("lq").request(cpu=12).admitted("cq-b", {"cpu": "default"}),
        a_workload("a", "small").queue("lq").request(cpu=1).created(10),
    )
    assert out.preempted() == want_preempted
    assert ("a/small" in out.admitted()) is bool(want_preempted)


def _premium_and_cheap(incoming_cpu: int):
    """Kueue's preemption_fair_test "nominal first": cq-a holds 2 of its 3 premium CPUs and borrows
    5 cheap ones (a high share); cq-b borrows 1 premium CPU (a low share)."""
    running = [a_workload("a", f"prem{i}").queue("lq").request(cpu=1).admitted("cq-a", {"cpu": "premium"}, i)
               for i in range(2)]
    running += [a_workload("a", f"cheap{i}").queue("lq").request(cpu=1).admitted("cq-a", {"cpu": "cheap"}, 10 + i)
                for i in range(5)]
    running.append(a_workload("b", "prem").queue("lq").request(cpu=1).admitted("cq-b", {"cpu": "premium"}, 20))
    return [
        FAIR, a_flavor("premium"), a_flavor("cheap"),
        a_cluster_queue("cq-a").cohort("all").group(("premium", {"cpu": 3}), ("cheap", {"cpu": 0}))
        .preemption(reclaim="Any").fungibility(when_can_borrow="MayStopSearch", when_can_preempt="MayStopSearch"),
        a_cluster_queue("cq-b").cohort("all").group(("premium", {"cpu": 0}), ("cheap", {"cpu": 6})),
        a_local_queue("a", "lq", "cq-a"), a_local_queue("b", "lq", "cq-b"),
        *running,
        a_workload("a", "incoming").queue("lq").request(cpu=incoming_cpu).created(100),
    ]


@pytest.mark.parametrize(
    ("incoming_cpu", "want_preempted"),
    [
        pytest.param(1, ["b/prem"], id="within nominal after admission: reclaims from the borrower "
                                       "whatever the shares (InCohortReclamation)"),
        pytest.param(2, [], id="borrowing after admission: shares decide, and cq-a's high share protects cq-b"),
    ],
)
def test_a_preemptor_within_its_nominal_quota_reclaims_without_comparing_shares(incoming_cpu, want_preempted):
    """Kueue's FairSharingPreemptWithinNominal (beta, on by default): runFirstFsStrategy skips the
    strategies when the preemptor's ClusterQueue, with the incoming workload, borrows none of the
    resources needing preemption (pkg/scheduler/preemption/preemption.go)."""
    out = simulate(*_premium_and_cheap(incoming_cpu), cycles=1)
    assert out.preempted() == want_preempted
    assert out.wl("a/incoming").pending  # never admitted on the cheap flavor by borrowing
    for key in want_preempted:
        assert out.condition(key, "Preempted") == ("True", "InCohortReclamation")
    if want_preempted:
        assert out.message("a/incoming").endswith("Pending the preemption of 1 workload(s)")
