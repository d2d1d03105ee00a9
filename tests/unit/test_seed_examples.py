"""The worked examples of the seed documents 000 (Kueue's ClusterQueue page) and 001 (TKE guide)."""

from __future__ import annotations

import pytest

from tests.builders import (
    a_cluster_queue,
    a_flavor,
    a_job,
    a_local_queue,
    a_workload,
    simulate,
)


def _team(cq: str, cohort: str = "team-ab", **quota: object):
    return a_cluster_queue(cq).cohort(cohort).flavor("default-flavor", **quota)


def _queues():
    return [a_flavor("default-flavor"), a_local_queue("team-a", "lq", "team-a-cq"),
            a_local_queue("team-b", "lq", "team-b-cq")]


@pytest.mark.parametrize(
    ("team_b_quota", "team_a_quota", "want_max_cpu"),
    [
        pytest.param({"cpu": 12}, {"cpu": 9}, 21, id="team-b idle: team-a can use 12+9=21 CPUs"),
        pytest.param({"cpu": 12}, {"cpu": (9, 1)}, 10, id="borrowingLimit 1: team-a can use 9+1=10 CPUs"),
        pytest.param({"cpu": (12, None, 1)}, {"cpu": 9}, 10, id="team-b lendingLimit 1: team-a can use 9+1=10 CPUs"),
    ],
)
def test_borrowing_limits_bound_what_team_a_can_admit(team_b_quota, team_a_quota, want_max_cpu):
    jobs = [a_workload("team-a", f"w{i:02d}").queue("lq").request(cpu="1").created(i) for i in range(25)]
    out = simulate(*_queues(), _team("team-a-cq", **team_a_quota), _team("team-b-cq", **team_b_quota), *jobs)
    assert len(out.admitted()) == want_max_cpu
    first_pending = f"team-a/w{want_max_cpu:02d}"
    assert out.wl(first_pending).pending
    assert "insufficient unused quota for cpu in flavor default-flavor, 1 more needed" in out.message(first_pending)


def test_team_b_can_use_both_nominal_quotas_when_team_a_lends_everything():
    jobs = [a_workload("team-b", f"w{i:02d}").queue("lq").request(cpu="1").created(i) for i in range(25)]
    out = simulate(*_queues(), _team("team-a-cq", cpu=9), _team("team-b-cq", cpu=12), *jobs)
    assert len(out.admitted()) == 21


def test_nominal_quota_of_team_b_is_served_before_team_a_borrows():
    """team-a has used its nominal quota; a pending team-b workload within nominal goes first."""
    out = simulate(
        *_queues(), _team("team-a-cq", cpu=9), _team("team-b-cq", cpu=12),
        a_workload("team-a", "running").queue("lq").request(cpu="9").admitted("team-a-cq", {"cpu": "default-flavor"}),
        a_workload("team-a", "borrower").queue("lq").request(cpu="12").created(0),
        a_workload("team-b", "owner").queue("lq").request(cpu="12").created(10),
        cycles=1,
    )
    assert out.admitted() == {"team-a/running": "team-a-cq", "team-b/owner": "team-b-cq"}
    assert out.wl("team-a/borrower").pending


def test_pod_count_quota_limits_admissions():
    """The doc's first ClusterQueue: cpu 9, memory 36Gi, pods 5."""
    cq = a_cluster_queue("cluster-queue").flavor("default-flavor", cpu=9, memory="36Gi", pods=5)
    jobs = [a_workload("default", f"w{i}").queue("lq").request(cpu="1", memory="1Gi").created(i) for i in range(7)]
    out = simulate(a_flavor("default-flavor"), cq, a_local_queue("default", "lq", "cluster-queue"), *jobs)
    assert len(out.admitted()) == 5
    assert "insufficient unused quota for pods in flavor default-flavor, 1 more needed" in out.message("default/w5")
    usage = dict(out.wl("default/w0").admission.pod_set_assignments[0].resource_usage)
    assert usage == {"cpu": 1000, "memory": 1 << 30, "pods": 1}


@pytest.mark.parametrize(
    ("strategy", "want_new_admitted"),
    [
        pytest.param("StrictFIFO", False, id="StrictFIFO: the older workload blocks the newer one"),
        pytest.param("BestEffortFIFO", True, id="BestEffortFIFO: the newer workload that fits is admitted"),
    ],
)
def test_queueing_strategy(strategy, want_new_admitted):
    cq = a_cluster_queue("cq").flavor("default-flavor", cpu=4)
    if strategy == "StrictFIFO":
        cq = cq.strict_fifo()
    out = simulate(
        a_flavor("default-flavor"), cq, a_local_queue("default", "lq", "cq"),
        a_workload("default", "running").queue("lq").request(cpu="2").admitted("cq", {"cpu": "default-flavor"}),
        a_workload("default", "old").queue("lq").request(cpu="3").created(0),
        a_workload("default", "new").queue("lq").request(cpu="1").created(1),
    )
    assert ("default/new" in out.admitted()) is want_new_admitted
    assert out.wl("default/old").pending


def test_all_or_nothing_job_of_four_pods_never_partially_starts_on_two_cpus():
    cq = a_cluster_queue("cluster-queue").flavor("default-flavor", cpu=2)
    job = a_job("default", "all-or-nothing-job", "user-queue").parallelism(4, 4).request(cpu=1)
    out = simulate(a_flavor("default-flavor"), cq, a_local_queue("default", "user-queue", "cluster-queue"), job)
    rec = out.wl("default/all-or-nothing-job")
    assert rec.pending
    assert rec.obj.pod_sets[0].count == 4
    assert "request (4) > maximum capacity (2)" in out.message("default/all-or-nothing-job")
    assert rec.pending_reason == "ExceedsMaxQuota"


def test_heterogeneous_gpus_t4_first_then_a100():
    cq = a_cluster_queue("gpu").group(("gpu-t4", {"nvidia.com/gpu": 8}), ("gpu-a100", {"nvidia.com/gpu": 4}))
    jobs = [a_job("default", f"infer-{i}", "gpu-workloads").parallelism(2).request(nvidia_com__gpu=1).created(i)
            for i in range(7)]
    out = simulate(a_flavor("gpu-t4").labels(**{"gpu-type": "nvidia-t4"}),
                   a_flavor("gpu-a100").labels(**{"gpu-type": "nvidia-a100"}),
                   cq, a_local_queue("default", "gpu-workloads", "gpu"), *jobs)
    got = [out.flavors(f"default/infer-{i}")["nvidia.com/gpu"] for i in range(6)]
    assert got == ["gpu-t4"] * 4 + ["gpu-a100"] * 2
    assert out.wl("default/infer-6").pending


def test_flavor_order_first_flavor_with_enough_unused_nominal_quota():
    cq = a_cluster_queue("cq").group(("spot", {"cpu": 9}), ("on-demand", {"cpu": 18}))
    out = simulate(a_flavor("spot"), a_flavor("on-demand"), cq, a_local_queue("default", "lq", "cq"),
                   *[a_workload("default", f"j{i}").queue("lq").request(cpu=c).created(i)
                     for i, c in enumerate([6, 6, 3])])
    assert [out.flavors(f"default/j{i}")["cpu"] for i in range(3)] == ["spot", "on-demand", "spot"]
