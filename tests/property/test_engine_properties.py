"""Properties of the quota engine over arbitrary histories (hypothesis).

A history is a random small world — flavors, ClusterQueues in flat or nested
cohorts with random nominal quotas and borrowing / lending limits, preemption
policies — and a random sequence of submissions, cycles, finishes and eviction
completions. Whatever happens:

- folding the same events twice gives byte-identical state;
- a snapshot (encode, decode) restores the state byte for byte;
- no node of the cohort tree ever uses more than its quota allows, once the workloads being
  evicted have released theirs;
- the incrementally maintained usage equals a recomputation from scratch;
- a workload is admitted at most once per stay in its queue;
- a ClusterQueue within its nominal quota never loses a workload to a borrower;
- a remembered nomination decides exactly as a fresh flavor search and preemption simulation.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import objects as o
from events.codec import encode
from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload, ObjectApplied, WorkloadFinished
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.derived import Cache
from services.core.index import rebuild
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, finish_eviction, fold, release_usage

FLAVORS = ("f0", "f1")
WITHIN = [o.WithinClusterQueue.NEVER, o.WithinClusterQueue.LOWER_PRIORITY,
          o.WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY]
RECLAIM = [o.ReclaimWithinCohort.NEVER, o.ReclaimWithinCohort.LOWER_PRIORITY, o.ReclaimWithinCohort.ANY]


@st.composite
def quotas(draw: st.DrawFn, in_cohort: bool) -> o.Quota:
    nominal = draw(st.integers(1, 8)) * 1000
    borrowing = draw(st.one_of(st.none(), st.integers(0, 8).map(lambda v: v * 1000))) if in_cohort else None
    lending = draw(st.one_of(st.none(), st.integers(0, nominal // 1000).map(lambda v: v * 1000))) if in_cohort else None
    return o.Quota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


@st.composite
def worlds(draw: st.DrawFn) -> list[o.AnyObject]:
    objs: list[o.AnyObject] = [o.ResourceFlavor(name=f) for f in FLAVORS]
    nested = draw(st.booleans())
    if nested:
        objs.append(o.Cohort(name="left", parent="root"))
        objs.append(o.Cohort(name="right", parent="root"))
    n = draw(st.integers(1, 4))
    for i in range(n):
        cohort = draw(st.sampled_from(["", "root", "left", "right"] if nested else ["", "root"]))
        flavors = tuple(
            o.FlavorQuotas(name=f, resources=(("cpu", draw(quotas(bool(cohort)))),))
            for f in FLAVORS[: draw(st.integers(1, 2))]
        )
        reclaim = draw(st.sampled_from(RECLAIM + RECLAIM[1:])) if cohort else o.ReclaimWithinCohort.NEVER
        borrow = o.BorrowWithinCohortPolicy.NEVER
        if reclaim != o.ReclaimWithinCohort.NEVER and draw(st.booleans()):
            borrow = o.BorrowWithinCohortPolicy.LOWER_PRIORITY
        # kueuelog's ElasticQuotaTree rule (kueuelog.io/reclaim-within: NominalQuota) on some queues that
        # reclaim; derived, not drawn, so that the examples drawn stay those drawn without it.
        within_nominal = (reclaim == o.ReclaimWithinCohort.ANY and borrow == o.BorrowWithinCohortPolicy.NEVER
                          and i % 2 == 1)
        objs.append(o.ClusterQueue(
            name=f"cq{i}", cohort=cohort, namespace_selector=o.LabelSelector(),
            resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=flavors),),
            queueing_strategy=draw(st.sampled_from(list(o.QueueingStrategy))),
            preemption=o.PreemptionPolicy(within_cluster_queue=draw(st.sampled_from(WITHIN + WITHIN[1:])),
                                          reclaim_within_cohort=reclaim, borrow_within_cohort=borrow,
                                          reclaim_within_nominal=within_nominal),
        ))
        objs.append(o.LocalQueue(namespace="ns", name=f"lq{i}", cluster_queue=f"cq{i}"))
    return objs


@dataclass(frozen=True)
class Submit:
    queue: int
    cpu: int
    count: int
    priority: int


@dataclass(frozen=True)
class Cycle:
    pass


@dataclass(frozen=True)
class Finish:
    pick: int


submit = st.builds(Submit, st.integers(0, 3), st.integers(1, 6), st.integers(1, 2), st.sampled_from([0, 10, 100]))
actions = st.lists(
    st.one_of(submit, submit, st.just(Cycle()), st.just(Cycle()), st.builds(Finish, st.integers(0, 1000))),
    min_size=8,
    max_size=60,
)


def _queues(state: State) -> dict[str, tuple[list[str], list[str]]]:
    return {name: ([k for _, k in q.active], sorted(q.inadmissible)) for name, q in sorted(state.index.queues.items())}


class Run:
    """Plays a history, checking the invariants after every step."""

    def __init__(self, world: list[o.AnyObject]) -> None:
        self.state = State()
        self.shadow = State()  # follows by applying recorded cycles instead of running them
        self.events: list[object] = []
        self.admitted_now: set[str] = set()
        self.n = 0
        self.checks = 0
        self.within_nominal_reclaims = 0  # reclaims by a ClusterQueue with reclaim_within_nominal, checked
        for obj in world:
            self.apply(ObjectApplied(time=0, object=obj))
        self.queues = sum(1 for obj in world if isinstance(obj, o.LocalQueue))

    def apply(self, ev: object) -> None:
        self.events.append(ev)
        fold(self.state, ev)  # type: ignore[arg-type]
        fold(self.shadow, ev)  # type: ignore[arg-type]

    def step(self, action: object) -> None:
        s = self.state
        if isinstance(action, Submit):
            self.n += 1
            wl = o.Workload(namespace="ns", name=f"w{self.n}", uid=f"w{self.n}",
                            queue_name=f"lq{action.queue % self.queues}",
                            pod_sets=(o.PodSet(name="main", count=action.count,
                                               requests=(("cpu", action.cpu * 1000),)),),
                            creation_time=self.n, priority=action.priority)
            self.apply(ObjectApplied(time=self.n, object=wl))
        elif isinstance(action, Finish):
            holders = sorted(k for k, r in s.workloads.items() if r.admission is not None and not r.evicting)
            if holders:
                key = holders[action.pick % len(holders)]
                self.apply(WorkloadFinished(time=s.now, namespace="ns", name=key.split("/")[1]))
                self.admitted_now.discard(key)
        else:
            self.cycle()
        self.check()

    def cycle(self) -> None:
        s = self.state
        for key in sorted(k for k, r in s.workloads.items() if r.evicting):
            finish_eviction(s, s.workloads[key])
            finish_eviction(self.shadow, self.shadow.workloads[key])
            self.admitted_now.discard(key)
        before = {k: (r.admission.cluster_queue if r.admission else None) for k, r in s.workloads.items()}
        result = run_cycle(s)
        record = CycleCompleted(cycle=s.cycles, input_offset=0, time=s.now, decisions=len(result.decisions),
                                admitted_heads=tuple(result.admitted_heads), heads=tuple(result.heads))
        apply_cycle(self.shadow, result.decisions, record)
        encoded = encode_state(s)
        assert encode_state(self.shadow) == encoded, "applying the recorded cycle differs from running it"
        assert encode_state(decode_state(encoded)) == encoded, "a snapshot does not restore the state"
        assert _queues(self.shadow) == _queues(s)
        for d in result.decisions:
            key = f"{d.namespace}/{d.name}"
            if isinstance(d, AdmitWorkload):
                assert key not in self.admitted_now, f"{key} admitted twice"
                self.admitted_now.add(key)
            elif isinstance(d, EvictWorkload) and d.reason == "Preempted":
                self.check_victim(key, before)

    def check_victim(self, key: str, before: dict[str, str | None]) -> None:
        """A ClusterQueue within its nominal quota never loses a workload to a borrower."""
        s = self.state
        victim = s.workloads[key]
        preemptor_key = victim.conditions["Preempted"]
        cq = before[key]
        assert cq is not None
        if preemptor_key.reason in ("InCohortReclamation", "InCohortReclaimWhileBorrowing"):
            node = s.cq_node(cq)
            # The victim's ClusterQueue must have been borrowing on some flavor it uses.
            assert any(node.usage.get(fr, 0) > node.subtree.get(fr, 0) for fr in victim.usage), (
                f"{key} preempted from {cq}, which was within its nominal quota")
            self.check_reclaim_within_nominal(key, preemptor_key.message, before)

    def check_reclaim_within_nominal(self, key: str, message: str, before: dict[str, str | None]) -> None:
        """A ClusterQueue with reclaim_within_nominal reclaims only for a workload that fits in its own
        nominal quota on some flavor (its own workloads being evicted left out), as the ClusterQueue
        stood when the cycle began: with several heads per ClusterQueue, another head of it may be
        admitted later in the same cycle, borrowing beside the preemptor's reservation."""
        s = self.state
        preemptor = next((r for r in s.workloads.values() if f"(UID: {r.obj.uid}," in message), None)
        if preemptor is None or preemptor.queued_in not in s.cluster_queues:
            return
        cq = s.cluster_queues[preemptor.queued_in]
        if not cq.preemption.reclaim_within_nominal:
            return
        request = sum(v * ps.count for ps in preemptor.obj.pod_sets for r, v in ps.requests if r == "cpu")
        used: dict[str, int] = {}
        for r in s.workloads.values():
            if (r.admission is not None and not r.evicting and r.admission.cluster_queue == cq.name
                    and before.get(r.key) == cq.name):
                for (flavor, resource), v in r.usage.items():
                    if resource == "cpu":
                        used[flavor] = used.get(flavor, 0) + v
        nominal = {fq.name: q.nominal for g in cq.resource_groups for fq in g.flavors for res, q in fq.resources
                   if res == "cpu"}
        assert any(used.get(f, 0) + request <= n for f, n in nominal.items()), (
            f"{key} reclaimed for {preemptor.key} although {cq.name} would exceed its nominal quota")
        self.within_nominal_reclaims += 1

    def check(self) -> None:
        s = self.state
        s.ensure_indexed()
        # Kueue admits a workload that fits once the victims preempted earlier in the cycle are
        # gone (``fits`` in pkg/scheduler/scheduler.go removes them), so until their evictions
        # complete a node may hold more than its quota: the quota holds without them.
        settled = deepcopy(s)
        for key in sorted(k for k, r in settled.workloads.items() if r.evicting):
            release_usage(settled, settled.workloads[key])
        for node in settled.index.nodes.values():
            for fr, used in node.usage.items():
                if node.parent is None:
                    assert used <= node.subtree.get(fr, 0), f"{node} uses {used} of {fr} > its subtree"
                q = node.quotas.get(fr)
                if q is not None and q.borrowing_limit is not None:
                    assert used <= node.subtree.get(fr, 0) + q.borrowing_limit, f"{node} exceeds its borrowing limit"
        live = {key: {fr: v for fr, v in node.usage.items() if v} for key, node in s.index.nodes.items()}
        copy = deepcopy(s)
        rebuild(copy)
        fresh = {key: {fr: v for fr, v in node.usage.items() if v} for key, node in copy.index.nodes.items()}
        assert live == fresh
        self.checks += 1


R = TypeVar("R", bound="Run")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _play(run: R, history: list[object]) -> R:
    for action in history:
        run.step(action)
    return run


@SETTINGS
@given(worlds(), actions)
def test_quota_invariants_hold_for_any_history(world: list[o.AnyObject], history: list[object]) -> None:
    _play(Run(world), history)


@SETTINGS
@given(worlds(), actions)
def test_fold_and_cycles_are_deterministic(world: list[o.AnyObject], history: list[object]) -> None:
    first, second = Run(world), Run(world)
    for action in history:
        first.step(action)
        second.step(action)
    assert encode_state(first.state) == encode_state(second.state)


def test_histories_exercise_admission_and_preemption() -> None:
    """Guard against a generator that never reaches the interesting paths."""
    seen = {"admit": 0, "preempt": 0}

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(worlds(), actions)
    def play(world: list[o.AnyObject], history: list[object]) -> None:
        run = Run(world)
        for action in history:
            run.step(action)
        for rec in run.state.workloads.values():
            if "Admitted" in rec.conditions:
                seen["admit"] += 1
            if "Preempted" in rec.conditions:
                seen["preempt"] += 1

    play()
    assert seen["admit"] > 100
    assert seen["preempt"] > 0, seen


class RecordingRun(Run):
    """A run that keeps every cycle's decisions and head outcomes, encoded; ``remember=False``
    switches the nomination memo off."""

    def __init__(self, world: list[o.AnyObject], *, remember: bool = True) -> None:
        self.cycles: list[bytes] = []
        super().__init__(world)
        if not remember:
            self.state.cache = Cache.disabled()

    def cycle(self) -> None:
        s = self.state
        for key in sorted(k for k, r in s.workloads.items() if r.evicting):
            finish_eviction(s, s.workloads[key])
        result = run_cycle(s)
        self.cycles.append(encode((result.decisions, result.heads)))


@SETTINGS
@given(worlds(), actions)
def test_remembered_nominations_decide_as_a_fresh_search(world: list[o.AnyObject], history: list[object]) -> None:
    """Nominations remembered per cohort-tree version give exactly what searching again gives."""
    remembering = _play(RecordingRun(world), history)
    fresh = _play(RecordingRun(world, remember=False), history)
    assert fresh.state.cache.hits == 0
    assert fresh.cycles == remembering.cycles
    assert encode_state(fresh.state) == encode_state(remembering.state)


def test_histories_reuse_remembered_nominations() -> None:
    """Guard: the histories above do reach a remembered nomination."""
    hits = 0

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(worlds(), actions)
    def play(world: list[o.AnyObject], history: list[object]) -> None:
        nonlocal hits
        hits += _play(Run(world), history).state.cache.hits

    play()
    assert hits > 20


@st.composite
def tree_worlds(draw: st.DrawFn) -> list[o.AnyObject]:
    """An ElasticQuotaTree as kueuelog translates it: a Cohort tree whose leaves all reclaim only
    within their nominal quota (reclaimWithinCohort Any, no borrowWithinCohort), one flavor."""
    objs: list[o.AnyObject] = [o.ResourceFlavor(name="f0"), o.Cohort(name="left", parent="root"),
                               o.Cohort(name="right", parent="root")]
    for i in range(draw(st.integers(2, 4))):
        quota = o.Quota(nominal=draw(st.integers(1, 6)) * 1000,
                        borrowing_limit=draw(st.one_of(st.none(), st.integers(0, 8).map(lambda v: v * 1000))))
        objs.append(o.ClusterQueue(
            name=f"cq{i}", cohort="left" if i % 2 == 0 else "right", namespace_selector=o.LabelSelector(),
            resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                o.FlavorQuotas(name="f0", resources=(("cpu", quota),)),)),),
            preemption=o.PreemptionPolicy(within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY,
                                          reclaim_within_cohort=o.ReclaimWithinCohort.ANY,
                                          reclaim_within_nominal=True),
        ))
        objs.append(o.LocalQueue(namespace="ns", name=f"lq{i}", cluster_queue=f"cq{i}"))
    return objs


def test_a_tree_leaf_reclaims_only_within_its_nominal_quota() -> None:
    """Over random histories in translated trees, every reclaim by a leaf fits in the leaf's own
    nominal quota (``Run.check_reclaim_within_nominal``); and some reclaims happen."""
    checked = [0]

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(tree_worlds(), actions)
    def play(world: list[o.AnyObject], history: list[object]) -> None:
        checked[0] += _play(Run(world), history).within_nominal_reclaims

    play()
    assert checked[0] > 0
