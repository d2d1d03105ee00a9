"""Properties of the scale work (issue 23) over arbitrary histories (hypothesis), reusing the
worlds and histories of ``test_engine_properties``:

- the quota tree's ``over`` index (the children over their subtree quota, which preemption
  searches visit instead of every ClusterQueue of a cohort) always equals a recomputation from
  the usage, after every step;
- with ``headsPerClusterQueue`` N > 1 every invariant of the engine still holds, and applying a
  recorded cycle (replay) gives exactly the state running it gave;
- ``headsPerClusterQueue: 1`` decides byte for byte what a Configuration without it decides;
- the fast paths (preemption candidates from the ``over`` index; the fit check after earlier
  preemptions computed from the victims' usage summed per node, ``services.core.victims``,
  without moving the tree; a recomputation after overlapping targets moving only the victims
  of the head's cohort tree) decide byte for byte what the straightforward paths (every child
  scanned; every victim removed from the tree and put back) decide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from hypothesis import given
from hypothesis import strategies as st

from events import objects as o
from events.codec import encode
from services.core import cycle as cycle_module
from services.core.cycle import run_cycle
from services.core.preemption import Preemptor, Simulation
from services.core.quota import FR, Node
from services.core.snapshot import encode_state
from services.core.state import State, WorkloadRecord, finish_eviction
from services.core.victims import Victims
from tests.property.test_engine_properties import SETTINGS, Cycle, Finish, Run, Submit, _play, actions, worlds


def _over_by_scan(node: Node) -> dict[object, list[str]]:
    """The reference: every child compared on every (flavor, resource) it uses."""
    out: dict[object, list[str]] = {}
    for child in node.children:
        for fr, used in child.usage.items():
            if used > child.subtree.get(fr, 0):
                out.setdefault(fr, []).append(child.name)
    return {fr: sorted(names) for fr, names in sorted(out.items())}


def _over_indexed(node: Node) -> dict[object, list[str]]:
    return {fr: sorted(c.name for c in kids) for fr, kids in sorted(node.over.items()) if kids}


class OverRun(Run):
    def check(self) -> None:
        super().check()
        for node in self.state.index.nodes.values():
            assert _over_indexed(node) == _over_by_scan(node), f"{node}: over index out of date"
            for frs in ({fr} for fr in node.over):
                assert [c.name for c in node.children_over(frs)] == [
                    c.name for c in node.children if any(c.usage.get(fr, 0) > c.subtree.get(fr, 0) for fr in frs)]


def _with_heads(world: list[o.AnyObject], heads: int | None) -> list[o.AnyObject]:
    cfg = o.Configuration(wait_for_pods_ready=False) if heads is None else o.Configuration(
        wait_for_pods_ready=False, heads_per_cluster_queue=heads)
    return [cfg, *world]


class Recording(Run):
    def __init__(self, world: list[o.AnyObject]) -> None:
        self.cycles: list[bytes] = []
        super().__init__(world)

    def cycle(self) -> None:
        s = self.state
        for key in sorted(k for k, r in s.workloads.items() if r.evicting):
            finish_eviction(s, s.workloads[key])
        result = run_cycle(s)
        self.cycles.append(encode((result.decisions, result.heads)))


@SETTINGS
@given(worlds(), actions)
def test_the_over_index_matches_a_scan_of_the_children(world: list[o.AnyObject], history: list[object]) -> None:
    _play(OverRun(world), history)


@SETTINGS
@given(worlds(), actions, st.integers(2, 4))
def test_several_heads_per_cluster_queue_keep_every_invariant_and_replay_exactly(
        world: list[o.AnyObject], history: list[object], heads: int) -> None:
    _play(OverRun(_with_heads(world, heads)), history)  # Run.cycle checks apply == run after each cycle


def test_a_second_head_admitted_after_a_reclaim_within_nominal_in_the_same_cycle() -> None:
    """A case Hypothesis found: cq1 (reclaimWithinNominal) reclaims for one head within its
    nominal quota, and its second head is then admitted borrowing beside that reservation. The
    reclaim was right as the queue stood when the cycle began, which is what the check reads."""
    cpu = (("cpu", o.Quota(nominal=2000)),)
    world: list[o.AnyObject] = [
        o.ResourceFlavor(name="f0"), o.ResourceFlavor(name="f1"),
        o.Cohort(name="left", parent="root"), o.Cohort(name="right", parent="root"),
        o.ClusterQueue(name="cq0", cohort="root", namespace_selector=o.LabelSelector(),
                       queueing_strategy=o.QueueingStrategy.STRICT_FIFO,
                       resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                           o.FlavorQuotas(name="f0", resources=cpu), o.FlavorQuotas(name="f1", resources=cpu))),)),
        o.LocalQueue(namespace="ns", name="lq0", cluster_queue="cq0"),
        o.ClusterQueue(name="cq1", cohort="root", namespace_selector=o.LabelSelector(),
                       preemption=o.PreemptionPolicy(reclaim_within_cohort=o.ReclaimWithinCohort.ANY,
                                                     reclaim_within_nominal=True),
                       resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                           o.FlavorQuotas(name="f0", resources=(("cpu", o.Quota(nominal=5000)),)),)),)),
        o.LocalQueue(namespace="ns", name="lq1", cluster_queue="cq1"),
    ]
    history: list[object] = [
        Submit(0, 1, 1, 0), Cycle(), Finish(56), Submit(0, 1, 2, 0), Submit(0, 5, 1, 10), Submit(1, 1, 1, 0),
        Cycle(), Finish(955), Submit(3, 5, 1, 0), Submit(0, 1, 1, 0), Submit(1, 1, 1, 0), Cycle(),
    ]
    run = _play(OverRun(_with_heads(world, 2)), history)
    assert run.within_nominal_reclaims >= 1  # the reclaim the case is about happened and was checked


@SETTINGS
@given(worlds(), actions)
def test_one_head_per_cluster_queue_is_the_default(world: list[o.AnyObject], history: list[object]) -> None:
    explicit = _play(Recording(_with_heads(world, 1)), history)
    default = _play(Recording(_with_heads(world, None)), history)
    assert explicit.cycles == default.cycles
    assert encode_state(explicit.state).replace(b'"heads_per_cluster_queue":1', b"") == encode_state(
        default.state).replace(b'"heads_per_cluster_queue":1', b"")


def _children_over_by_scan(node: Node, frs: Iterable[FR]) -> list[Node]:
    wanted = list(frs)
    return [c for c in node.children if any(c.usage.get(fr, 0) > c.subtree.get(fr, 0) for fr in wanted)]


def _fits_removing_every_victim(state: State, node: Node, usage: dict[FR, int], preempted: Victims,
                                targets: list[WorkloadRecord]) -> bool:
    """The reference: every victim so far and every target removed from the tree, the fit read
    from it, everything put back."""
    sim = Simulation(state)
    try:
        for w in [*preempted.values(), *targets]:
            if w.admission is not None:
                sim.remove(w)
        return all(v <= max(0, node.available(fr)) for fr, v in usage.items())
    finally:
        sim.restore_all()


def _every_victim(state: State, e: object, preempted: Victims) -> list[WorkloadRecord]:
    """The reference of a recomputation after overlapping targets: every victim so far moves."""
    del state, e
    return [w for w in preempted.values() if w.admission is not None]


@contextlib.contextmanager
def _straightforward() -> Iterator[None]:
    fits, over = cycle_module._fits_with_removals, Node.children_over
    recompute = cycle_module._victims_for_recompute
    Preemptor.PRUNES_UNBORROWABLE = False
    cycle_module._fits_with_removals = _fits_removing_every_victim  # type: ignore[assignment]
    cycle_module._victims_for_recompute = _every_victim  # type: ignore[assignment]
    Node.children_over = _children_over_by_scan  # type: ignore[method-assign]
    try:
        yield
    finally:
        cycle_module._fits_with_removals = fits  # type: ignore[assignment]
        cycle_module._victims_for_recompute = recompute  # type: ignore[assignment]
        Node.children_over = over  # type: ignore[method-assign]
        Preemptor.PRUNES_UNBORROWABLE = True


@SETTINGS
@given(worlds(), actions, st.sampled_from([1, 1, 3]))
def test_the_fast_paths_decide_as_the_straightforward_ones(world: list[o.AnyObject], history: list[object],
                                                           heads: int) -> None:
    fast = _play(Recording(_with_heads(world, heads)), history)
    with _straightforward():
        reference = _play(Recording(_with_heads(world, heads)), history)
    assert reference.cycles == fast.cycles
    assert encode_state(reference.state) == encode_state(fast.state)


@SETTINGS
@given(worlds(), actions, st.sampled_from([1, 3]))
def test_every_fit_check_after_preemptions_answers_as_removing_the_victims(
        world: list[o.AnyObject], history: list[object], heads: int) -> None:
    """Each call, not only the decisions: the summed usage of ``Victims`` and the removal from the
    tree agree on every fit check the histories make (nested cohorts, lending limits included)."""
    fast = cycle_module._fits_with_removals
    checks: list[bool] = []

    def both(state: State, node: Node, usage: dict[FR, int], preempted: Victims,
             targets: list[WorkloadRecord]) -> bool:
        answer = fast(state, node, usage, preempted, targets)
        assert answer == _fits_removing_every_victim(state, node, usage, preempted, targets)
        checks.append(answer)
        return answer

    cycle_module._fits_with_removals = both  # type: ignore[assignment]
    try:
        _play(Recording(_with_heads(world, heads)), history)
    finally:
        cycle_module._fits_with_removals = fast  # type: ignore[assignment]
