"""``explain`` answers first: one paragraph saying what a workload is now, why, since when and
what would unblock it, from the folded state (``services.core.answer``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from events.messages import WorkloadFinished
from services.core.answer import Answer, Eviction, answer, borrowing, pending_order, shortfalls
from services.core.state import fold
from tests.builders import Builder, a_cluster_queue, a_flavor, a_local_queue, a_namespace, a_workload, simulate


def _world() -> list[Builder]:
    """team-a (6 cpu nominal) and team-b (4 cpu nominal) share cohort co on flavor on-demand."""
    return [a_flavor("on-demand"), a_namespace("ns"),
            a_cluster_queue("team-a-cq").flavor("on-demand", cpu=6).cohort("co"),
            a_cluster_queue("team-b-cq").flavor("on-demand", cpu=4).cohort("co")
            .preemption(within="Never", reclaim="Never"),
            a_local_queue("ns", "a", "team-a-cq"), a_local_queue("ns", "b", "team-b-cq")]


def _wl(name: str, queue: str, cpu: int, created: int) -> Builder:
    return a_workload("ns", name).queue(queue).request(cpu=str(cpu)).created(created)


def _borrowing_10() -> Builder:
    """team-a's workload already running on 10 cpu: 4 of them borrowed from team-b."""
    return a_workload("ns", "big").queue("a").request(cpu="10").created(500).admitted(
        "team-a-cq", {"cpu": "on-demand"}, at_seconds=1)


@dataclass
class Case:
    objects: list[Builder]
    key: str
    cycles: int | None = None
    finish: tuple[str, ...] = ()
    evicted: Eviction | None = None
    want_status: str = ""
    want_position: int | None = None
    want_needs: list[tuple[str, str, str]] = field(default_factory=list)
    want_borrowers: list[tuple[str, int]] | None = None  # amounts in milli-cpu
    want_in_paragraph: list[str] = field(default_factory=list)


CASES = [
    pytest.param(Case(
        objects=[*_world(), _borrowing_10(), _wl("waiting", "b", 4, 2000)],
        key="ns/waiting", want_status="pending", want_position=1,
        want_needs=[("cpu", "on-demand", "4")], want_borrowers=[("team-a-cq", 4000)],
        want_in_paragraph=["ns/waiting is pending in ClusterQueue team-b-cq at position 1 since",
                           "To be admitted it needs 4 more cpu in on-demand; team-a-cq is borrowing 4 cpu in "
                           "on-demand."],
    ), id="pending behind a borrower: says how much more it needs and who borrows it"),
    pytest.param(Case(
        objects=[*_world(), _borrowing_10(), _wl("first", "b", 4, 2000), _wl("second", "b", 1, 3000)],
        key="ns/second", want_status="pending", want_position=2,
        want_in_paragraph=["at position 2"],
    ), id="pending second in line: its position counts the one ahead"),
    pytest.param(Case(
        objects=[*_world(), _wl("huge", "b", 20, 1000)],
        key="ns/huge", want_status="pending", want_needs=[("cpu", "on-demand", "10")],
        want_in_paragraph=["more cpu than the ClusterQueue can ever get (at most 10; raise the quota) in on-demand"],
    ), id="pending beyond what the cohort could ever lend: says raise the quota"),
    pytest.param(Case(
        objects=[*_world(), _wl("fits", "a", 2, 1000)],
        key="ns/fits", want_status="admitted",
        want_in_paragraph=["ns/fits is admitted to ClusterQueue team-a-cq since", "on main[1]:cpu=on-demand"],
    ), id="admitted: where, since when, on which flavors"),
    pytest.param(Case(
        objects=[*_world(), _wl("done", "a", 2, 1000)], key="ns/done", finish=("done",),
        want_status="finished", want_in_paragraph=["ns/done finished since", "(Succeeded: all good)"],
    ), id="finished: since when and with what message"),
    pytest.param(Case(
        objects=[*_world(), _wl("again", "a", 2, 1000)], key="ns/again",
        evicted=Eviction(time=5000, reason="Preempted", preemption_reason="InCohortReclamation",
                         preemptor="ns/taker"),
        want_status="admitted",
        want_in_paragraph=["It was last evicted at 1970-01-01T00:00:05Z: Preempted (InCohortReclamation) by ns/taker."],
    ), id="admitted again after an eviction: the history's eviction is told with its preemptor"),
    pytest.param(Case(
        objects=[*_world(), _wl("x", "a", 1, 1000)], key="ns/nobody", want_status="deleted",
        want_in_paragraph=["ns/nobody is gone: it was deleted."],
    ), id="a workload no longer in the state: deleted"),
]


@pytest.mark.parametrize("case", CASES)
def test_answer(case: Case) -> None:
    out = simulate(*case.objects, cycles=case.cycles)
    for name in case.finish:
        fold(out.state, WorkloadFinished(time=9_000, namespace="ns", name=name, message="all good"))
    got = answer(out.state, case.key, evicted=case.evicted)
    assert got.status == case.want_status
    if case.want_position is not None:
        assert got.position == case.want_position
    if case.want_needs:
        assert [(s.resource, s.flavor, s.amount) for s in got.needs] == case.want_needs
    if case.want_borrowers is not None:
        assert [(b.cluster_queue, b.amount) for b in got.borrowers] == case.want_borrowers
    paragraph = got.paragraph()
    for want in case.want_in_paragraph:
        assert want in paragraph, paragraph
    doc: dict[str, Any] = got.to_json()
    assert doc["status"] == case.want_status and doc["summary"] == paragraph


def test_an_evicting_workload_says_why_and_since_when() -> None:
    out = simulate(a_flavor("f"), a_namespace("ns"),
                   a_cluster_queue("cq").flavor("f", cpu=4).preemption(within="LowerPriority"),
                   a_local_queue("ns", "q", "cq"),
                   a_workload("ns", "low").queue("q").request(cpu="4").priority(0).created(1000)
                   .admitted("cq", {"cpu": "f"}, at_seconds=1),
                   a_workload("ns", "high").queue("q").request(cpu="4").priority(10).created(2000),
                   cycles=1)
    got = answer(out.state, "ns/low")
    assert got.status == "evicting"
    assert got.reason == "Preempted" and got.since is not None
    assert got.paragraph().startswith("ns/low is being evicted from ClusterQueue cq since")
    high = answer(out.state, "ns/high")
    assert high.status == "pending" and high.position == 1


def test_shortfalls_read_every_flavor_the_message_names_once() -> None:
    msg = ("couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, 7 more "
           "needed, insufficient unused quota for cpu in flavor spot, 6 more needed, insufficient unused quota for "
           "memory in flavor spot, 24Gi more needed")
    assert [(s.resource, s.flavor, s.amount) for s in shortfalls(msg)] == [
        ("cpu", "on-demand", "7"), ("cpu", "spot", "6"), ("memory", "spot", "24Gi")]
    assert shortfalls("Workload no longer fits after processing another workload") == ()


def test_borrowers_and_pending_order_are_empty_for_a_queue_without_a_cohort() -> None:
    out = simulate(a_flavor("f"), a_namespace("ns"), a_cluster_queue("solo").flavor("f", cpu=1),
                   a_local_queue("ns", "q", "solo"), _wl("a", "q", 1, 1000), _wl("b", "q", 1, 2000),
                   _wl("c", "q", 1, 3000))
    assert borrowing(out.state, "solo", ("f", "cpu")) == []
    assert [r.key for r in pending_order(out.state, "solo")] == ["ns/b", "ns/c"]
    assert answer(out.state, "ns/c").position == 2


def test_one_phrase_per_borrower_and_flavor() -> None:
    out = simulate(a_flavor("f"), a_namespace("ns"),
                   a_cluster_queue("a").flavor("f", cpu=2, memory="2Gi").cohort("co"),
                   a_cluster_queue("b").flavor("f", cpu=2, memory="2Gi").cohort("co")
                   .preemption(within="Never", reclaim="Never"),
                   a_local_queue("ns", "qa", "a"), a_local_queue("ns", "qb", "b"),
                   a_workload("ns", "big").queue("qa").request(cpu="4", memory="4Gi").created(1)
                   .admitted("a", {"cpu": "f", "memory": "f"}, at_seconds=1),
                   a_workload("ns", "wait").queue("qb").request(cpu="1", memory="1Gi").created(2))
    got = answer(out.state, "ns/wait")
    assert "To be admitted it needs 1 more cpu and 1Gi more memory in f; a is borrowing 2 cpu and 2Gi memory " \
           "in f." in got.paragraph(), got.paragraph()


def test_a_workload_holding_quota_before_its_checks_pass_reads_as_a_sentence() -> None:
    a = Answer(workload="ns/wl", status="quota-reserved", since=0, cluster_queue="team-a-cq",
               flavors="main[1]:cpu=on-demand")
    assert a.paragraph() == ("ns/wl holds quota in ClusterQueue team-a-cq (not yet admitted: admission checks "
                             "pending) since 1970-01-01T00:00:00Z, on main[1]:cpu=on-demand.")
