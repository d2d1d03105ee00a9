"""Classical preemption (Kueue's ``pkg/scheduler/preemption``), observed through simulate.

Section 5 of the Kueue digest is the specification (with 1.4 for how a preemptor
waits and 7 for the conditions): policies withinClusterQueue / reclaimWithinCohort /
borrowWithinCohort (with maxPriorityThreshold); candidates ordered other
ClusterQueues first, lower priority first, most recently admitted first; the set
of victims is minimal; a preemptor is never admitted in the cycle that evicts its
victims; two preemptors never count on the same victim; a ClusterQueue within its
nominal quota never loses a workload to another ClusterQueue.

Pre-admitted victims are given the same creation and admission time, so that the
"most recently admitted" order is unambiguous (one test separates the two).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import (
    Builder,
    ClusterQueueBuilder,
    WorkloadBuilder,
    a_cluster_queue,
    a_cohort,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_workload,
    simulate,
)

HUMAN = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


FAIR_SHARING = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "fairSharing": {"enable": True}}


def _cq(name: str, cpu: int, cohort: str | None = "co") -> ClusterQueueBuilder:
    cq = a_cluster_queue(name).flavor("f", cpu=cpu)
    return cq.cohort(cohort) if cohort else cq


def _world(*cqs: ClusterQueueBuilder) -> list[Builder]:
    out: list[Builder] = [a_flavor("f"), a_namespace("ns")]
    for cq in cqs:
        name = cq.body["metadata"]["name"]
        out += [cq, a_local_queue("ns", f"lq-{name}", name)]
    return out


def _pending(name: str, cq: str, cpu: int, priority: int = 0, created: int = 1000) -> WorkloadBuilder:
    return a_workload("ns", name).queue(f"lq-{cq}").request(cpu=str(cpu)).priority(priority).created(created)


def _running(name: str, cq: str, cpu: int, priority: int = 0, at: int = 0) -> WorkloadBuilder:
    """Admitted at ``at`` seconds (and created then, so both orderings agree)."""
    return (
        a_workload("ns", name)
        .queue(f"lq-{cq}")
        .request(cpu=str(cpu))
        .priority(priority)
        .created(at)
        .admitted(cq, {"cpu": "f"}, at_seconds=at)
    )


def _insufficient(more: int) -> str:
    return f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor f, {more} more needed"


def _victim_message(preemptor: str, reason: str) -> str:
    return f"Preempted to accommodate a workload (UID: {preemptor}, JobUID: UNKNOWN) due to {HUMAN[reason]}"


# --- withinClusterQueue ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "preemptor", "victim", "want_preempted"),
    [
        pytest.param("Never", (10, 0), (0, 100), False, id="Never: even a much lower priority is kept"),
        pytest.param("LowerPriority", (10, 0), (0, 100), True, id="LowerPriority: lower priority is preempted"),
        pytest.param("LowerPriority", (5, 0), (5, 100), False, id="LowerPriority: equal priority is kept"),
        pytest.param("LowerPriority", (5, 0), (10, 100), False, id="LowerPriority: higher priority is kept"),
        pytest.param(
            "LowerOrNewerEqualPriority",
            (10, 200),
            (0, 100),
            True,
            id="LowerOrNewerEqualPriority: lower priority is preempted",
        ),
        pytest.param(
            "LowerOrNewerEqualPriority",
            (5, 0),
            (5, 100),
            True,
            id="LowerOrNewerEqualPriority: equal priority and newer than the preemptor is preempted",
        ),
        pytest.param(
            "LowerOrNewerEqualPriority",
            (5, 200),
            (5, 100),
            False,
            id="LowerOrNewerEqualPriority: equal priority and older than the preemptor is kept",
        ),
        pytest.param(
            "LowerOrNewerEqualPriority",
            (5, 100),
            (5, 100),
            False,
            id="LowerOrNewerEqualPriority: equal priority and same creation time is kept",
        ),
    ],
)
def test_within_cluster_queue(policy, preemptor, victim, want_preempted):
    cq = _cq("cq", 4, cohort=None).preemption(within=policy)
    (p_prio, p_created), (v_prio, v_created) = preemptor, victim
    out = simulate(
        *_world(cq),
        _running("victim", "cq", 4, v_prio, at=v_created),
        _pending("preemptor", "cq", 4, p_prio, created=p_created),
        cycles=1,
    )
    assert out.preempted() == (["ns/victim"] if want_preempted else [])
    assert out.wl("ns/preemptor").pending
    if want_preempted:
        assert out.condition("ns/victim", "Preempted") == ("True", "InClusterQueue")


def test_no_preemption_candidates_keeps_kueues_message_and_names_the_policy():
    """Kueue writes the flavor assigner's message; kueuelog keeps it verbatim and adds, beyond Kueue,
    which policy protects the workloads of which ClusterQueue (PreemptionNotAllowed)."""
    cq = _cq("cq", 4, cohort=None).preemption(within="LowerPriority")
    out = simulate(*_world(cq), _running("victim", "cq", 4, 5), _pending("preemptor", "cq", 4, 5), cycles=1)
    assert out.preempted() == []
    assert out.message("ns/preemptor") == (
        _insufficient(4) + ". It would fit by preemption, but withinClusterQueue=LowerPriority "
        "does not allow preempting workloads of this ClusterQueue"
    )
    assert out.wl("ns/preemptor").pending_reason == "PreemptionNotAllowed"


def test_the_policy_message_names_the_protected_cluster_queues_not_their_workloads():
    """Which workloads would have to go changes with every admission; the ClusterQueues holding them
    rarely do, so the pending message (and with it the pending decisions) stays the same."""
    objs = [
        *_world(_cq("cq-a", 4).preemption(within="LowerPriority"), _cq("cq-b", 4), _cq("cq-c", 4)),
        _running("a0", "cq-a", 2, 5, at=5),
        _running("b1", "cq-b", 4, 0, at=10),
        _running("b2", "cq-b", 2, 0, at=20),
        _running("c1", "cq-c", 2, 0, at=30),
        _pending("a1", "cq-a", 4, 1),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == []
    # cq-b borrows (its workloads could be reclaimed); cq-c is within its nominal quota; a0 alone
    # would not make room. Explained before a1's own reservation, which would hide the answer.
    assert out.message("ns/a1") == (
        _insufficient(2) + ". It would fit by preemption, but reclaimWithinCohort=Never and "
        "borrowWithinCohort=Never do not allow preempting workloads of ClusterQueue(s) cq-b"
    )
    assert out.wl("ns/a1").pending_reason == "PreemptionNotAllowed"


def test_the_policy_message_reads_the_tree_the_nomination_read():
    """The explanation completes the nomination's message, so it reads the same tree: the cycle's
    start, not the quota that heads processed before it reserved. a1 (first: higher priority)
    reserves its nominal 2 cpu; against that, b1 would also need c2 gone, and the message would
    name cq-c too."""
    objs = [
        *_world(_cq("cq-a", 2).preemption(within="LowerPriority"), _cq("cq-b", 2).preemption(within="LowerPriority"),
                _cq("cq-c", 2), _cq("cq-d", 2)),
        _running("c1", "cq-c", 2, 0, at=10),
        _running("c2", "cq-c", 2, 0, at=11),
        _running("d1", "cq-d", 2, 0, at=20),
        _running("d2", "cq-d", 2, 0, at=21),
        _pending("a1", "cq-a", 2, 10),
        _pending("b1", "cq-b", 2, 0),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == []
    never = "reclaimWithinCohort=Never and borrowWithinCohort=Never do not allow preempting workloads of"
    assert out.message("ns/a1") == _insufficient(2) + f". It would fit by preemption, but {never} ClusterQueue(s) cq-d"
    assert out.message("ns/b1") == _insufficient(2) + f". It would fit by preemption, but {never} ClusterQueue(s) cq-d"


def test_with_preemption_disabled_the_message_is_kueues_alone():
    cq = _cq("cq", 4, cohort=None)
    out = simulate(*_world(cq), _running("victim", "cq", 4, 5), _pending("preemptor", "cq", 4, 50), cycles=1)
    assert out.preempted() == []
    assert out.message("ns/preemptor") == _insufficient(4)
    assert out.wl("ns/preemptor").pending_reason == "WaitingForQuota"


# --- reclaimWithinCohort --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "preemptor_priority", "borrower_priority", "want_preempted"),
    [
        pytest.param("Never", 10, 0, [], id="Never: the borrower keeps the quota it borrowed"),
        pytest.param("LowerPriority", 1, 0, ["ns/b2"], id="LowerPriority: a lower-priority borrower is reclaimed"),
        pytest.param("LowerPriority", 0, 0, [], id="LowerPriority: an equal-priority borrower is kept"),
        pytest.param("Any", 0, 10, ["ns/b2"], id="Any: even a higher-priority borrower is reclaimed"),
    ],
)
def test_reclaim_within_cohort(policy, preemptor_priority, borrower_priority, want_preempted):
    objs = [
        *_world(_cq("cq-a", 4).preemption(reclaim=policy), _cq("cq-b", 4)),
        _running("b1", "cq-b", 4, borrower_priority, at=10),
        _running("b2", "cq-b", 4, borrower_priority, at=20),
        _pending("a1", "cq-a", 4, preemptor_priority),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_preempted
    for key in want_preempted:
        assert out.condition(key, "Preempted") == ("True", "InCohortReclamation")


def test_reclaim_within_a_cohort_tree():
    """cq-b borrows from the root through its own cohort; cq-a reclaims across the tree."""
    objs = [
        a_cohort("root"),
        a_cohort("left").parent("root"),
        a_cohort("right").parent("root"),
        *_world(_cq("cq-a", 4, "left").preemption(reclaim="Any"), _cq("cq-b", 0, "right")),
        _running("b1", "cq-b", 4, at=10),
        _pending("a1", "cq-a", 4),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/b1"]
    assert out.condition("ns/b1", "Preempted") == ("True", "InCohortReclamation")
    final = simulate(*objs)
    assert final.admitted() == {"ns/a1": "cq-a"}


# --- borrowWithinCohort ---------------------------------------------------------------------------


def _borrow_world(reclaim: str, borrow: str | None, threshold: int | None, victim_priority: int) -> list[Any]:
    """cohort 8 = cq-a 4 + cq-b 2 + cq-c 2; cq-b runs 3 + 3 (borrowing 4); a1 wants 5, i.e. to borrow 1."""
    cq_a = _cq("cq-a", 4).preemption(reclaim=reclaim, borrow=borrow, threshold=threshold)
    return [
        *_world(cq_a, _cq("cq-b", 2), _cq("cq-c", 2)),
        _running("b1", "cq-b", 3, victim_priority, at=10),
        _running("b2", "cq-b", 3, victim_priority, at=20),
        _pending("a1", "cq-a", 5, priority=10),
    ]


@pytest.mark.parametrize(
    ("reclaim", "borrow", "threshold", "victim_priority", "want_preempted"),
    [
        pytest.param(
            "LowerPriority",
            None,
            None,
            0,
            [],
            id="no borrowWithinCohort: a preemptor that would still borrow cannot reclaim",
        ),
        pytest.param(
            "LowerPriority",
            "LowerPriority",
            None,
            0,
            ["ns/b2"],
            id="borrowWithinCohort LowerPriority: reclaims while borrowing",
        ),
        pytest.param(
            "LowerPriority",
            "LowerPriority",
            0,
            0,
            ["ns/b2"],
            id="maxPriorityThreshold 0: a victim of priority 0 may be preempted",
        ),
        pytest.param(
            "LowerPriority",
            "LowerPriority",
            0,
            1,
            [],
            id="maxPriorityThreshold 0: a victim of priority 1 is above the threshold",
        ),
        pytest.param(
            "Any",
            "LowerPriority",
            None,
            20,
            [],
            id="reclaim Any: a victim of higher priority than the borrowing preemptor is kept",
        ),
    ],
)
def test_borrow_within_cohort(reclaim, borrow, threshold, victim_priority, want_preempted):
    out = simulate(*_borrow_world(reclaim, borrow, threshold, victim_priority), cycles=1)
    assert out.preempted() == want_preempted
    for key in want_preempted:
        assert out.condition(key, "Preempted") == ("True", "InCohortReclaimWhileBorrowing")
    if not want_preempted:
        assert out.wl("ns/a1").pending
        assert not out.message("ns/a1").endswith("workload(s)")


def test_without_borrow_within_cohort_a_borrowing_preemptor_is_no_fit():
    out = simulate(*_borrow_world("LowerPriority", None, None, 0), cycles=1)
    assert out.message("ns/a1") == _insufficient(3)


# --- the minimal set of victims -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("running", "needed", "want_preempted"),
    [
        pytest.param(
            [("v1", 1, 0, 1), ("v2", 1, 0, 2), ("v3", 1, 0, 3), ("v4", 1, 0, 4)],
            2,
            ["ns/v3", "ns/v4"],
            id="four 1-core victims, 2 cores needed: only the two most recently admitted",
        ),
        pytest.param(
            [("small", 1, 0, 1), ("big", 4, 1, 2), ("keep", 1, 5, 3)],
            4,
            ["ns/big"],
            id="small goes first but big alone suffices: small is given back (fill-back)",
        ),
        pytest.param(
            [("a", 2, 0, 1), ("b", 2, 0, 2), ("c", 2, 0, 3)],
            6,
            ["ns/a", "ns/b", "ns/c"],
            id="everything is needed: everything is preempted",
        ),
    ],
)
def test_only_as_many_victims_as_needed(running, needed, want_preempted):
    cq = _cq("cq", sum(r[1] for r in running), cohort=None).preemption(within="LowerPriority")
    objs = [
        *_world(cq),
        *[_running(n, "cq", cpu, prio, at) for n, cpu, prio, at in running],
        _pending("preemptor", "cq", needed, priority=10),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_preempted
    assert out.message("ns/preemptor").endswith(f". Pending the preemption of {len(want_preempted)} workload(s)")


# --- candidate order ------------------------------------------------------------------------------


def test_other_cluster_queues_borrowing_workloads_go_before_own_lower_priority_ones():
    cq_a = _cq("cq-a", 4).preemption(within="LowerPriority", reclaim="LowerPriority")
    objs = [
        *_world(cq_a, _cq("cq-b", 4)),
        _running("own", "cq-a", 2, priority=0, at=10),
        _running("borrower", "cq-b", 6, priority=5, at=5),
        _pending("a1", "cq-a", 2, priority=10),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/borrower"]
    assert out.condition("ns/borrower", "Preempted") == ("True", "InCohortReclamation")


@pytest.mark.parametrize(
    ("running", "want_preempted"),
    [
        pytest.param(
            [("p1-recent", 1, 20), ("p0-early", 0, 10)],
            ["ns/p0-early"],
            id="lower priority first, however long it has run",
        ),
        pytest.param(
            [("early", 0, 10), ("recent", 0, 20)], ["ns/recent"], id="equal priority: the most recently admitted first"
        ),
    ],
)
def test_candidates_order_within_the_cluster_queue(running, want_preempted):
    cq = _cq("cq", 4, cohort=None).preemption(within="LowerPriority")
    objs = [
        *_world(cq),
        *[_running(n, "cq", 2, prio, at) for n, prio, at in running],
        _pending("preemptor", "cq", 2, priority=10),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_preempted


def test_most_recently_admitted_means_quota_reservation_time_not_creation_time():
    """x was created first but admitted last: x is the most recently admitted (QuotaReserved time)."""
    cq = _cq("cq", 4, cohort=None).preemption(within="LowerPriority")
    x = a_workload("ns", "x").queue("lq-cq").request(cpu="2").created(10).admitted("cq", {"cpu": "f"}, at_seconds=50)
    y = a_workload("ns", "y").queue("lq-cq").request(cpu="2").created(20).admitted("cq", {"cpu": "f"}, at_seconds=30)
    out = simulate(*_world(cq), x, y, _pending("preemptor", "cq", 2, priority=10), cycles=1)
    assert out.preempted() == ["ns/x"]


# --- candidates already being evicted -------------------------------------------------------------


def _evicting(name: str, cq: str, cpu: int, priority: int = 0, at: int = 0) -> WorkloadBuilder:
    """Evicted=True but still holding its quota: the eviction is under way."""
    return _running(name, cq, cpu, priority, at).evicted(at_seconds=at + 1)


@pytest.mark.parametrize(
    ("running", "preemptor_cpu", "want_new_victims", "want_pending_count"),
    [
        pytest.param(
            [_evicting("old", "cq", 2, at=10), _running("recent", "cq", 2, at=20)], 2, [], 1,
            id="an evicted candidate comes first and counts as the preemption: nothing new is evicted",
        ),
        pytest.param(
            [_evicting("old", "cq", 1, at=10), _running("early", "cq", 2, at=15), _running("recent", "cq", 1, at=20)],
            2, ["ns/recent"], 2,
            id="not enough on its own: it still comes first, then the usual order; one new eviction",
        ),
        pytest.param(
            [_evicting("old", "cq", 2, priority=20, at=10), _running("recent", "cq", 2, at=20)], 2, ["ns/recent"], 1,
            id="an evicted workload the policy protects is no candidate: its quota is still in use",
        ),
    ],
)
def test_candidates_being_evicted_come_first_and_count_as_preemption_in_progress(
        running, preemptor_cpu, want_new_victims, want_pending_count):
    """Kueue's CandidatesOrdering puts workloads with Evicted=True first (candidate_generator's
    splitEvicted, preemption/common/ordering.go), and IssuePreemptions counts a target already
    evicted as preempted without evicting it again (preemption.go): the preemptor waits."""
    cq = _cq("cq", 4, cohort=None).preemption(within="LowerPriority")
    objs = [*_world(cq), *running, _pending("preemptor", "cq", preemptor_cpu, priority=10)]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_new_victims
    assert out.wl("ns/old").evicting  # arrived being evicted; still holding quota in this cycle
    assert out.condition("ns/old", "Evicted") == ("True", "Preempted")
    assert out.message("ns/preemptor").endswith(f". Pending the preemption of {want_pending_count} workload(s)")
    final = simulate(*objs)
    assert "ns/preemptor" in final.admitted()
    assert not final.wl("ns/old").evicting  # its eviction completed after the first cycle
    assert final.condition("ns/old", "Requeued") is not None


# --- the preemptor waits for its victims ----------------------------------------------------------

SCENARIOS = {
    "InClusterQueue": (
        [
            *_world(_cq("cq", 4, cohort=None).preemption(within="LowerPriority")),
            _running("victim", "cq", 4, priority=0, at=10),
            _pending("preemptor", "cq", 4, priority=10),
        ],
        4,
    ),
    "InCohortReclamation": (
        [
            *_world(_cq("cq-a", 4).preemption(reclaim="Any"), _cq("cq-b", 0)),
            _running("victim", "cq-b", 4, at=10),
            _pending("preemptor", "cq-a", 4),
        ],
        4,
    ),
    "InCohortReclaimWhileBorrowing": (
        [
            *_world(
                _cq("cq-a", 4).preemption(reclaim="LowerPriority", borrow="LowerPriority"),
                _cq("cq-b", 2),
                _cq("cq-c", 2),
            ),
            _running("other", "cq-b", 3, at=5),
            _running("victim", "cq-b", 3, at=10),
            _pending("preemptor", "cq-a", 5, priority=10),
        ],
        3,
    ),
}


@pytest.mark.parametrize(
    "reason", [pytest.param(r, id=f"{r}: one cycle evicts, the preemptor waits") for r in SCENARIOS]
)
def test_a_preemptor_is_not_admitted_in_the_cycle_that_evicts_its_victims(reason):
    objs, missing = SCENARIOS[reason]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/victim"]
    assert out.condition("ns/victim", "Evicted") == ("True", "Preempted")
    assert out.condition("ns/victim", "Preempted") == ("True", reason)
    assert out.wl("ns/victim").conditions["Preempted"].message == _victim_message("preemptor", reason)
    assert out.wl("ns/victim").conditions["Evicted"].message == _victim_message("preemptor", reason)
    assert "ns/preemptor" not in out.admitted()
    assert out.wl("ns/preemptor").pending
    assert out.message("ns/preemptor") == f"{_insufficient(missing)}. Pending the preemption of 1 workload(s)"


@pytest.mark.parametrize(
    "reason",
    [pytest.param(r, id=f"{r}: until quiescent the preemptor runs, the victim is requeued") for r in SCENARIOS],
)
def test_until_quiescent_the_victim_is_requeued_and_the_preemptor_admitted(reason):
    objs, _ = SCENARIOS[reason]
    out = simulate(*objs)
    assert "ns/preemptor" in out.admitted()
    assert "ns/victim" not in out.admitted()
    assert out.wl("ns/victim").pending
    assert out.condition("ns/victim", "Requeued") == ("True", "Preempted")


def test_the_requeued_condition_carries_the_eviction_message():
    objs, _ = SCENARIOS["InClusterQueue"]
    out = simulate(*objs)
    assert out.wl("ns/victim").conditions["Requeued"].message == _victim_message("preemptor", "InClusterQueue")


@pytest.mark.parametrize(
    ("borrower_cpu", "want_borrower_admitted"),
    [
        pytest.param(2, True, id="after the preemptor's 4 and its victim's 3 the cohort has 2 left: the borrower fits"),
        pytest.param(3, False, id="3 fitted when heads were nominated, not after the preemptor's share: skipped"),
    ],
)
def test_a_preemptors_share_counts_for_later_heads_of_the_same_cycle(borrower_cpu, want_borrower_admitted):
    """cohort 6 = cq-a 4 + lender 2; cq-b borrows 3 (3 free). a1 needs 4 and reclaims b1's 3; c1 in cq-c
    borrows in the same cycle and sees the cohort as if b1 were gone and a1 were admitted."""
    objs = [
        *_world(_cq("cq-a", 4).preemption(reclaim="Any"), _cq("cq-b", 0), _cq("cq-c", 0), _cq("lender", 2)),
        _running("b1", "cq-b", 3, at=10),
        _pending("a1", "cq-a", 4, created=0),
        _pending("c1", "cq-c", borrower_cpu, created=100),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/b1"]
    assert ("ns/c1" in out.admitted()) is want_borrower_admitted
    if not want_borrower_admitted:
        assert out.message("ns/c1") == "Workload no longer fits after processing another workload"


@pytest.mark.parametrize(
    ("within", "want_preempted", "want_count"),
    [
        pytest.param(
            "LowerPriority", ["ns/low"], None, id="full count by preemption is preferred to partial admission"
        ),
        pytest.param("Never", [], 2, id="no preemption possible: partial admission of what fits"),
    ],
)
def test_partial_admission_only_when_the_full_count_cannot_preempt(within, want_preempted, want_count):
    cq = _cq("cq", 4, cohort=None).preemption(within=within)
    wl = a_workload("ns", "w").queue("lq-cq").pod_set("main", 4, 2, cpu="1").priority(10).created(100)
    out = simulate(*_world(cq), _running("low", "cq", 2, priority=0, at=10), wl, cycles=1)
    assert out.preempted() == want_preempted
    if want_count is None:
        assert out.wl("ns/w").pending
    else:
        assert out.wl("ns/w").admission.pod_set_assignments[0].count == want_count


# --- two preemptors in one cycle ------------------------------------------------------------------


OVERLAP_DEFERRED = ("Workload has overlapping preemption targets with another workload, "
                    "but will fit after these preemptions complete")


@pytest.mark.parametrize(
    ("borrowers", "want_first_cycle_victims", "want_c1_message", "want_c1_reason"),
    [
        pytest.param([("b1", 8, 10)], ["ns/b1"], OVERLAP_DEFERRED, "PreemptionPending",
                     id="one borrower for two reclaimers: evicted once; the second fits once it is gone "
                        "and waits for it (DeferredFit)"),
        pytest.param(
            [("b1", 4, 10), ("b2", 4, 20)], ["ns/b1", "ns/b2"],
            _insufficient(4) + ". Pending the preemption of 1 workload(s)", "PreemptionPending",
            id="two borrowers: both pick the most recent; the second, recomputed without it, takes the other",
        ),
    ],
)
def test_two_preemptors_never_count_on_the_same_victim(borrowers, want_first_cycle_victims, want_c1_message,
                                                       want_c1_reason):
    """Kueue's updateAssignmentIfNeeded (RecomputeAssignmentUponPreemptionTargetsOverlap, beta, on by
    default): a head whose targets overlap an earlier head's is assigned again as if the earlier
    victims were gone, and may preempt others in the same cycle (pkg/scheduler/scheduler.go)."""
    objs = [
        *_world(_cq("cq-a", 4).preemption(reclaim="Any"), _cq("cq-c", 4).preemption(reclaim="Any"), _cq("cq-b", 0)),
        *[_running(n, "cq-b", cpu, at=at) for n, cpu, at in borrowers],
        _pending("a1", "cq-a", 4, created=100),
        _pending("c1", "cq-c", 4, created=200),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_first_cycle_victims
    assert out.message("ns/a1").endswith(". Pending the preemption of 1 workload(s)")
    assert out.message("ns/c1") == want_c1_message
    assert out.wl("ns/c1").pending_reason == want_c1_reason
    # Waiting for victims, its own or the other preemptor's (DeferredFit): Kueue's reason for both.
    assert out.condition("ns/c1", "QuotaReserved") == ("False", "WaitingForPreemptedWorkloads")
    final = simulate(*objs)
    assert final.admitted() == {"ns/a1": "cq-a", "ns/c1": "cq-c"}


# --- nominal quota is safe ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("within", "lender_usage", "needed", "want_preempted"),
    [
        pytest.param(None, 3, 2, [], id="cq-b uses 3 of its 4: nothing of it is taken by the borrower"),
        pytest.param(None, 4, 1, [], id="cq-b uses exactly its 4: nothing of it is taken either"),
        pytest.param(
            "LowerPriority", 3, 2, ["ns/own"], id="the preemptor's own lower-priority workload goes instead of cq-b's"
        ),
    ],
)
def test_a_cluster_queue_within_its_nominal_quota_never_loses_a_workload_to_a_borrower(
    within, lender_usage, needed, want_preempted
):
    cq_a = _cq("cq-a", 4).preemption(within=within, reclaim="Any", borrow="LowerPriority")
    objs = [
        *_world(cq_a, _cq("cq-b", 4)),
        _running("own", "cq-a", 4, priority=0, at=10),
        _running("theirs", "cq-b", lender_usage, at=5),
        _pending("a1", "cq-a", needed, priority=100),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == want_preempted
    assert "ns/theirs" not in simulate(*objs).preempted()


def test_a_preemptor_keeps_the_head_of_its_queue_until_admitted():
    """BestEffortFIFO: while b-small waits for its victim, the eviction unparks the older b-big; without
    the sticky preemptor (Kueue main) b-big would head cq-b next cycle, the victim would be re-admitted
    and preempted again, forever."""
    from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, simulate

    out = simulate(
        a_flavor("f"),
        a_cluster_queue("cq-a").cohort("c").flavor("f", cpu=(4, 4)),
        a_cluster_queue("cq-b").cohort("c").flavor("f", cpu=4).preemption(reclaim="Any"),
        a_local_queue("ns", "lq-a", "cq-a"), a_local_queue("ns", "lq-b", "cq-b"),
        a_workload("ns", "a-borrower").queue("lq-a").request(cpu=6).priority(100).admitted("cq-a", {"cpu": "f"}),
        a_workload("ns", "b-big").queue("lq-b").request(cpu=6).created(0),
        a_workload("ns", "b-small").queue("lq-b").request(cpu=3).created(10),
    )
    assert out.result.converged
    assert out.admitted() == {"ns/b-small": "cq-b"}
    assert out.preempted() == ["ns/a-borrower"]
    assert out.wl("ns/a-borrower").pending and out.wl("ns/b-big").pending


def test_a_recomputed_head_with_nothing_left_to_preempt_waits_with_the_new_message():
    """c1 (borrowing, borrowWithinCohort) had nominated a1's victim; recomputed without it (and with
    a1's share counted) nothing is left to preempt: it waits with the recomputed assignment's message,
    not the overlap skip."""
    objs = [
        *_world(_cq("cq-a", 4).preemption(reclaim="Any"),
                _cq("cq-c", 2).preemption(reclaim="Any", borrow="LowerPriority"), _cq("cq-b", 0)),
        _running("b1", "cq-b", 8, at=10),
        _pending("a1", "cq-a", 4, created=100),
        _pending("c1", "cq-c", 4, priority=10, created=200),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/b1"]
    assert out.message("ns/c1") == _insufficient(2)
    assert out.wl("ns/c1").pending_reason == "WaitingForQuota"


def test_a_recomputed_head_is_not_explained_by_its_policy():
    """c1 had nominated b1, which a1 takes first; recomputed, nothing it may preempt is left. Its
    message is Kueue's: no "it would fit by preemption, but ..." from a search that would find b1
    (already going) and c0 (the policy protects it) in the middle of the cycle."""
    objs = [
        *_world(_cq("cq-a", 4).preemption(reclaim="Any"),
                _cq("cq-c", 4).preemption(reclaim="Any", borrow="LowerPriority"), _cq("cq-b", 0)),
        _running("c0", "cq-c", 4, priority=20, at=5),
        _running("b1", "cq-b", 4, at=10),
        _pending("a1", "cq-a", 4, created=100),
        _pending("c1", "cq-c", 4, priority=10, created=200),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["ns/b1"]
    assert out.message("ns/a1") == _insufficient(4) + ". Pending the preemption of 1 workload(s)"
    assert out.message("ns/c1") == _insufficient(4)
    assert out.wl("ns/c1").pending_reason == "WaitingForQuota"


# --- recomputation upon overlapping targets (Kueue's scheduler_recompute_preemption_test) ---------


def _recompute_tree() -> list[Builder]:
    """root-cohort (3005) -> parent-cohort-a (0) -> cq-hero (3000), cq-noisy (0);
    parent-cohort-b -> cq-tiny (50); parent-cohort-c -> cq-rest (0)."""
    out: list[Builder] = [
        a_flavor("default"), a_namespace("eng-alpha"),
        a_cohort("root-cohort").flavor("default", cpu="3005"),
        a_cohort("parent-cohort-a").parent("root-cohort").flavor("default", cpu="0"),
        a_cohort("parent-cohort-b").parent("root-cohort"),
        a_cohort("parent-cohort-c").parent("root-cohort"),
    ]
    for cq, cohort, cpu in (("cq-hero", "a", 3000), ("cq-noisy", "a", 0), ("cq-tiny", "b", 50), ("cq-rest", "c", 0)):
        out += [a_cluster_queue(cq).cohort(f"parent-cohort-{cohort}").flavor("default", cpu=cpu)
                .preemption(within="LowerPriority", reclaim="Any"),
                a_local_queue("eng-alpha", cq.replace("cq-", "lq-"), cq)]
    return out


def test_a_head_whose_targets_overlap_fits_once_the_earlier_victims_are_gone():
    """Kueue's "two workloads reclaim nominal quota; RecomputePreemptionTargetsUponOverlap enabled":
    wl-tiny-pending (older) reclaims wl-rest-admitted; wl-hero had nominated the same victim,
    is assigned again without it, fits its nominal quota and waits for that preemption (DeferredFit)."""
    objs = [
        *_recompute_tree(),
        a_workload("eng-alpha", "wl-rest-admitted").queue("lq-rest").request(cpu="6055")
        .admitted("cq-rest", {"cpu": "default"}),
        a_workload("eng-alpha", "wl-hero").queue("lq-hero").request(cpu="2950").created(1),
        a_workload("eng-alpha", "wl-tiny-pending").queue("lq-tiny").request(cpu="50").created(0),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["eng-alpha/wl-rest-admitted"]
    assert out.condition("eng-alpha/wl-rest-admitted", "Preempted") == ("True", "InCohortReclamation")
    assert out.message("eng-alpha/wl-tiny-pending") == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
        "50 more needed. Pending the preemption of 1 workload(s)")
    assert out.message("eng-alpha/wl-hero") == OVERLAP_DEFERRED
    assert out.wl("eng-alpha/wl-hero").pending_reason == "PreemptionPending"
    assert not out.wl("eng-alpha/wl-hero").inadmissible  # requeued as pending preemption, not parked
    final = simulate(*objs)
    assert {k: v for k, v in final.admitted().items() if k != "eng-alpha/wl-rest-admitted"} == {
        "eng-alpha/wl-hero": "cq-hero", "eng-alpha/wl-tiny-pending": "cq-tiny"}


def test_a_recomputed_head_keeps_its_nominated_flavor():
    """Kueue's "flavor stickiness with RecomputePreemptionTargetsUponOverlap" (fair sharing): cq-2's
    head goes first (lower share) and takes wl-admitted-default on flavor default; cq-1's head had
    nominated the same victim, is assigned again on default only (NominationMapping), finds nothing
    to preempt there and waits, rather than switching to on-demand."""
    cq = {"within": "LowerPriority", "reclaim": "Any"}
    objs = [
        FAIR_SHARING, a_flavor("default"), a_flavor("on-demand"), a_namespace("default"), a_cohort("root"),
        a_cluster_queue("cq-1").cohort("root").group(("default", {"cpu": 5}), ("on-demand", {"cpu": 5}))
        .preemption(**cq),
        a_cluster_queue("cq-2").cohort("root").group(("default", {"cpu": 5}), ("on-demand", {"cpu": 5}))
        .preemption(**cq),
        a_local_queue("default", "lq-1", "cq-1"), a_local_queue("default", "lq-2", "cq-2"),
        a_workload("default", "wl-admitted-default").queue("lq-1").request(cpu="10")
        .admitted("cq-1", {"cpu": "default"}),
        a_workload("default", "wl-admitted-on-demand").queue("lq-1").request(cpu="10")
        .admitted("cq-1", {"cpu": "on-demand"}),
        a_workload("default", "wl-pending-high-prio-1").queue("lq-1").request(cpu="10").priority(11).created(0),
        a_workload("default", "wl-pending-high-prio-2").queue("lq-2").request(cpu="10").priority(10).created(1),
    ]
    out = simulate(*objs, cycles=1)
    assert out.preempted() == ["default/wl-admitted-default"]
    assert out.condition("default/wl-admitted-default", "Preempted") == ("True", "InCohortFairSharing")
    assert out.message("default/wl-pending-high-prio-2") == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 10 more "
        "needed, insufficient unused quota for cpu in flavor on-demand, 10 more needed. "
        "Pending the preemption of 1 workload(s)")
    assert out.message("default/wl-pending-high-prio-1") == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 10 more "
        "needed, skipping flavor on-demand as it is not found in the nomination mapping for resource cpu")
    assert out.wl("default/wl-pending-high-prio-1").pending_reason == "WaitingForQuota"
    assert out.wl("default/wl-pending-high-prio-1").inadmissible


def _eng(name: str, lq: str, cpu: str, created: int = 0, priority: int = 0) -> WorkloadBuilder:
    return a_workload("eng-alpha", name).queue(lq).request(cpu=cpu).created(created).priority(priority)


def _eng_running(name: str, cq: str, cpu: str) -> WorkloadBuilder:
    return a_workload("eng-alpha", name).queue(cq.replace("cq-", "lq-")).request(cpu=cpu).admitted(
        cq, {"cpu": "default"})


def _short(more: int) -> str:
    return ("couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
            f"{more} more needed")


@pytest.mark.parametrize(
    ("workloads", "want_preempted", "want_messages"),
    [
        pytest.param(
            [_eng_running("wl-noisy-admitted", "cq-noisy", "3000"), _eng_running("wl-tiny-admitted", "cq-tiny", "60"),
             _eng_running("wl-rest-admitted", "cq-rest", "2995"),
             _eng("wl-hero", "lq-hero", "2990", created=1), _eng("wl-tiny-pending", "lq-tiny", "10")],
            {"wl-rest-admitted": "InCohortFairSharing", "wl-noisy-admitted": "InCohortReclamation"},
            {"wl-hero": _short(5) + ". Pending the preemption of 1 workload(s)",
             "wl-tiny-pending": _short(10) + ". Pending the preemption of 1 workload(s)"},
            id="hierarchical: wl-hero, recomputed without wl-rest-admitted, reclaims wl-noisy-admitted instead",
        ),
        pytest.param(
            [_eng_running("wl-rest-admitted", "cq-rest", "6055"), _eng("wl-hero", "lq-hero", "2950", created=1),
             _eng("wl-tiny-pending", "lq-tiny", "50"), _eng("wl-rest-pending", "lq-rest", "4000", 2, priority=10)],
            {"wl-rest-admitted": "InCohortReclamation"},
            {"wl-hero": OVERLAP_DEFERRED, "wl-tiny-pending": _short(50) + ". Pending the preemption of 1 workload(s)",
             "wl-rest-pending": _short(945)},
            id="two workloads reclaim nominal quota: wl-hero fits once wl-rest-admitted is gone (DeferredFit)",
        ),
    ],
)
def test_recomputation_upon_overlap_with_fair_sharing(workloads, want_preempted, want_messages):
    """Kueue's scheduler_recompute_preemption_test, fair sharing cases, in the same cohort tree."""
    out = simulate(FAIR_SHARING, *_recompute_tree(), *workloads, cycles=1)
    assert {k.split("/")[1]: out.condition(k, "Preempted")[1] for k in out.preempted()} == want_preempted
    assert {name: out.message(f"eng-alpha/{name}") for name in want_messages} == want_messages
