"""Classical preemption: which admitted workloads to evict so that a pending one fits.

Follows Kueue's ``pkg/scheduler/preemption`` (classical strategy with
hierarchical cohorts): candidates are classified by policy
(``withinClusterQueue``, ``reclaimWithinCohort``, ``borrowWithinCohort`` with
its ``maxPriorityThreshold``), ordered (already evicted first, other
ClusterQueues first, lower priority first, most recently admitted first), then
removed one by one from a simulated tree until the preemptor fits; the set is
then made minimal by trying to give each back. One or two attempts are made,
with and without letting the preemptor borrow, in Kueue's order.

Simulated removals mutate the live quota tree and are always undone before
returning; nothing here changes the state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from events import objects as o
from events.cluster import PreemptionReason
from services.core import admissionfair
from services.core.quota import FR, Node
from services.core.state import State, WorkloadRecord

HUMAN_REASONS: dict[PreemptionReason, str] = {
    PreemptionReason.IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    PreemptionReason.IN_COHORT_RECLAMATION: "reclamation within the cohort",
    PreemptionReason.IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}


class PreemptionVerdict(StrEnum):
    """The preemption oracle's answer for one resource: nothing to preempt, preemption within
    the ClusterQueue, or reclamation from the cohort (Kueue's ``preemptionoracle``)."""

    NONE = "none"
    PREEMPT = "preempt"
    RECLAIM = "reclaim"


class Variant(IntEnum):
    WITHIN_CQ = 0
    HIERARCHICAL_RECLAIM = 1
    RECLAIM_WITHOUT_BORROWING = 2
    RECLAIM_WHILE_BORROWING = 3


_REASON = {
    Variant.WITHIN_CQ: PreemptionReason.IN_CLUSTER_QUEUE,
    Variant.HIERARCHICAL_RECLAIM: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WITHOUT_BORROWING: PreemptionReason.IN_COHORT_RECLAMATION,
    Variant.RECLAIM_WHILE_BORROWING: PreemptionReason.IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(frozen=True, slots=True)
class Target:
    key: str
    reason: PreemptionReason


Searches = dict[tuple[object, ...], tuple[Target, ...]]
"""Preemption searches remembered by their request (see :class:`Preemptor`)."""


@dataclass(slots=True)
class _Candidate:
    rec: WorkloadRecord
    variant: Variant
    lca: Node | None  # lowest common ancestor with the preemptor (None: same ClusterQueue)


def satisfies(policy: o.WithinClusterQueue | o.ReclaimWithinCohort, preemptor: WorkloadRecord,
              candidate: WorkloadRecord) -> bool:
    """Whether ``policy`` (withinClusterQueue or reclaimWithinCohort) lets ``preemptor`` take ``candidate``'s place."""
    if policy in (o.WithinClusterQueue.LOWER_PRIORITY, o.ReclaimWithinCohort.LOWER_PRIORITY):
        return preemptor.priority > candidate.priority
    if policy == o.WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY:
        return preemptor.priority > candidate.priority or (
            preemptor.priority == candidate.priority and preemptor.queue_time < candidate.queue_time
        )
    return policy == o.ReclaimWithinCohort.ANY


CandidateKey = tuple[int, int, float, int, int, str, str]


def candidate_order(preemptor_cq: str, now: int,
                    lq_usage: Callable[[WorkloadRecord], float] | None = None) -> Callable[[_Candidate], CandidateKey]:
    """Kueue's ``CandidatesOrdering`` as a sort key, with the key as final tie-break. With
    admission fair sharing (``lq_usage``), candidates of the preemptor's ClusterQueue from the
    LocalQueue with the higher usage come first (``services.core.admissionfair``)."""

    def key(c: _Candidate) -> CandidateKey:
        rec = c.rec
        evicted = 0 if rec.evicting else 1
        same_cq = 1 if rec.admission is not None and rec.admission.cluster_queue == preemptor_cq else 0
        reserved = rec.reserved_at if rec.reserved_at is not None else now
        heavier = -lq_usage(rec) if lq_usage is not None else 0.0
        return (evicted, same_cq, heavier, rec.priority, -reserved, rec.obj.uid, rec.key)

    return key


def _uses(rec: WorkloadRecord, frs: frozenset[FR]) -> bool:
    return not frs.isdisjoint(rec.usage)


def _within_nominal(node: Node, frs: frozenset[FR]) -> bool:
    usage, subtree = node.usage, node.subtree
    for fr in frs:  # noqa: SIM110 - a loop, not all(): called for every queue of the cohort per search
        if usage.get(fr, 0) > subtree.get(fr, 0):
            return False
    return True


def _fits_in_quota(node: Node, request: dict[FR, int]) -> tuple[bool, dict[FR, int]]:
    usage, subtree = node.usage, node.subtree
    fits = True
    remaining: dict[FR, int] = {}
    for fr, v in request.items():
        if usage.get(fr, 0) + v > subtree.get(fr, 0):
            fits = False
        remaining[fr] = max(0, v - node.local_available(fr))
    return fits, remaining


class Simulation:
    """Removes workloads from the quota tree and puts them back, in reverse order."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.removed: list[WorkloadRecord] = []

    def remove(self, rec: WorkloadRecord) -> None:
        assert rec.admission is not None
        node = self.state.cq_node(rec.admission.cluster_queue)
        for fr, v in sorted(rec.usage.items()):
            node.remove_usage(fr, v)
        self.removed.append(rec)

    def restore_last(self) -> None:
        rec = self.removed.pop()
        assert rec.admission is not None
        node = self.state.cq_node(rec.admission.cluster_queue)
        for fr, v in sorted(rec.usage.items()):
            node.add_usage(fr, v)

    def restore_all(self) -> None:
        while self.removed:
            self.restore_last()


class Preemptor:
    """Finds preemption targets for one pending workload in one ClusterQueue."""

    PRUNES_UNBORROWABLE = True
    """Candidates that only an attempt without borrowing could take are left out when no such
    attempt is made (the straightforward reference in tests/property/test_scale_properties.py
    keeps them)."""

    def __init__(self, state: State, cq: o.ClusterQueue, rec: WorkloadRecord, *, permissive: bool = False,
                 memo: Searches | None = None) -> None:
        """``permissive`` ignores the ClusterQueue's policies: used only to explain what they forbid.
        ``memo`` remembers searches by their request; share it only among preemptors of the same
        workload and ClusterQueue while the state does not change (one nomination)."""
        self.state, self.cq, self.rec, self.permissive = state, cq, rec, permissive
        self.node = state.cq_node(cq.name)
        self.memo = memo

    # --- candidates ----------------------------------------------------------------------

    def _classify(self, cand: WorkloadRecord, frs: frozenset[FR], advantage: bool) -> Variant | None:
        if not _uses(cand, frs):
            return None
        p = self.cq.preemption
        same = cand.admission is not None and cand.admission.cluster_queue == self.cq.name
        if not same and cand.admission is not None:
            owner = self.state.cluster_queues.get(cand.admission.cluster_queue)
            if owner is not None and owner.t9k is not None and not owner.t9k.preemptible:
                return None  # T9k's spec.preemptible: false, whatever the policies (explanations too)
        policy = p.within_cluster_queue if same else p.reclaim_within_cohort
        if not self.permissive and not satisfies(policy, self.rec, cand):
            return None
        if same:
            return Variant.WITHIN_CQ
        if advantage:
            return Variant.HIERARCHICAL_RECLAIM
        if self.permissive:
            return Variant.RECLAIM_WHILE_BORROWING
        if p.borrow_within_cohort == o.BorrowWithinCohortPolicy.NEVER:
            return Variant.RECLAIM_WITHOUT_BORROWING
        threshold = p.borrow_max_priority_threshold
        if cand.priority >= self.rec.priority or (threshold is not None and cand.priority > threshold):
            return Variant.RECLAIM_WITHOUT_BORROWING
        return Variant.RECLAIM_WHILE_BORROWING

    def _workloads_of(self, cq_name: str) -> list[WorkloadRecord]:
        return [self.state.workloads[k] for k in self.state.index.admitted.get(cq_name, {})]

    def _collect(self, node: Node, skip: Node | None, frs: frozenset[FR], advantage: bool,
                 lca: Node, out: list[_Candidate]) -> None:
        # Only children over their nominal quota of one of ``frs`` can be taken from (the others
        # are within nominal): the tree keeps them, so idle ClusterQueues are not visited.
        for child in node.children_over(frs):
            if child is skip:
                continue
            if child.is_cluster_queue:
                if child.name == self.cq.name:
                    continue
                for cand in self._workloads_of(child.name):
                    variant = self._classify(cand, frs, advantage)
                    if variant is not None:
                        out.append(_Candidate(cand, variant, lca))
            else:
                self._collect(child, None, frs, advantage, lca, out)

    def _candidates(self, frs: frozenset[FR], usage: dict[FR, int],
                    borrowing_only: bool) -> tuple[list[_Candidate], bool, bool]:
        """(ordered candidates, none from other queues, none for hierarchical reclaim);
        ``borrowing_only``: the search makes only the attempt that lets the preemptor borrow."""
        p = self.cq.preemption
        same_queue: list[_Candidate] = []
        if self.permissive or p.within_cluster_queue != o.WithinClusterQueue.NEVER:
            for cand in self._workloads_of(self.cq.name):
                variant = self._classify(cand, frs, False)
                if variant is not None:
                    same_queue.append(_Candidate(cand, variant, None))
        hierarchy: list[_Candidate] = []
        priority: list[_Candidate] = []
        # Without the advantage, borrowWithinCohort=Never makes every other queue's workload a
        # candidate only for an attempt without borrowing; when the search makes no such attempt
        # (see _search) none of them could be chosen, so they are not collected.
        unborrowable = borrowing_only and self.PRUNES_UNBORROWABLE
        if self.node.parent is not None and (self.permissive or p.reclaim_within_cohort != o.ReclaimWithinCohort.NEVER):
            advantage, remaining = _fits_in_quota(self.node, usage)
            prev: Node | None = None
            level: Node | None = self.node.parent
            while level is not None:
                if advantage or not unborrowable:
                    self._collect(level, prev, frs, advantage, level, hierarchy if advantage else priority)
                fits, remaining = _fits_in_quota(level, remaining)
                # Kueue: quota the level holds (an idle sibling's, say) is the preemptor's to reclaim
                # too; with reclaim_within_nominal only the ClusterQueue's own nominal quota is.
                advantage = advantage or (fits and not p.reclaim_within_nominal)
                prev = level
                level = level.parent
        order = candidate_order(self.cq.name, self.state.now, admissionfair.candidate_usage(self.state, self.cq.name))
        groups = [sorted(g, key=order) for g in (hierarchy, priority, same_queue)]
        evicted = [c for g in groups for c in g if c.rec.evicting]
        rest = [c for g in groups for c in g if not c.rec.evicting]
        return evicted + rest, not hierarchy and not priority, not hierarchy

    def _valid(self, c: _Candidate, borrowing: bool, frs: frozenset[FR]) -> bool:
        if c.variant == Variant.WITHIN_CQ:
            return True
        if borrowing and c.variant == Variant.RECLAIM_WITHOUT_BORROWING:
            return False
        assert c.rec.admission is not None
        node: Node | None = self.state.cq_node(c.rec.admission.cluster_queue)
        while node is not None and node is not c.lca:
            if _within_nominal(node, frs):
                return False
            node = node.parent
        return True

    # --- search --------------------------------------------------------------------------

    def _fits(self, usage: dict[FR, int], allow_borrowing: bool) -> bool:
        node = self.node
        for fr, v in usage.items():
            if not allow_borrowing and node.borrowing_with(fr, v):
                return False
            if v > max(0, node.available(fr)):
                return False
        return True

    def targets(self, frs: frozenset[FR], usage: dict[FR, int]) -> list[Target]:
        if self.memo is None:
            return self._search(frs, usage)
        key = (self.permissive, frs, tuple(sorted(usage.items())))
        known = self.memo.get(key)
        if known is None:
            known = self.memo[key] = tuple(self._search(frs, usage))
        return list(known)

    def _search(self, frs: frozenset[FR], usage: dict[FR, int]) -> list[Target]:
        if not frs:
            return []
        forbidden = self.cq.preemption.borrow_within_cohort == o.BorrowWithinCohortPolicy.NEVER and not self.permissive
        under_nominal = all(
            self.node.usage.get(fr, 0) < self.node.quotas[fr].nominal if fr in self.node.quotas else False
            for fr in frs
        )
        # borrowWithinCohort=Never for a ClusterQueue at or above its nominal quota: whatever the
        # candidates, only the attempt that lets the preemptor borrow is made.
        borrowing_only = forbidden and not under_nominal
        candidates, none_from_others, none_hierarchical = self._candidates(frs, usage, borrowing_only)
        if not candidates:
            return []
        if none_from_others or borrowing_only:
            attempts = [True]
        elif forbidden and none_hierarchical:
            attempts = [False, True]
        else:
            attempts = [True, False]
        for allow_borrowing in attempts:
            found = self._attempt(candidates, frs, usage, allow_borrowing)
            if found:
                return found
        return []

    def _attempt(self, candidates: list[_Candidate], frs: frozenset[FR], usage: dict[FR, int],
                 allow_borrowing: bool) -> list[Target]:
        sim = Simulation(self.state)
        chosen: list[_Candidate] = []
        try:
            for c in candidates:
                if not self._valid(c, allow_borrowing, frs):
                    continue
                sim.remove(c.rec)
                chosen.append(c)
                if self._fits(usage, allow_borrowing):
                    chosen = self._fill_back(sim, chosen, usage, allow_borrowing)
                    return [Target(c.rec.key, _REASON[c.variant]) for c in chosen]
            return []
        finally:
            sim.restore_all()

    def _fill_back(self, sim: Simulation, chosen: list[_Candidate], usage: dict[FR, int],
                   allow_borrowing: bool) -> list[_Candidate]:
        """Give back every target (but the last) that is not needed after all."""
        keep = list(chosen)
        for i in range(len(keep) - 2, -1, -1):
            c = keep[i]
            adm = c.rec.admission
            assert adm is not None  # a candidate holds quota
            node = self.state.cq_node(adm.cluster_queue)
            for fr, v in sorted(c.rec.usage.items()):
                node.add_usage(fr, v)
            if self._fits(usage, allow_borrowing):
                del keep[i]
                _remove_identical(sim.removed, c.rec)
            else:
                for fr, v in sorted(c.rec.usage.items()):
                    node.remove_usage(fr, v)
        return keep

    def simulate(self, fr: FR, value: int) -> tuple[PreemptionVerdict, int]:
        """Kueue's preemption oracle for one resource: (its verdict, borrowing after)."""
        frs = frozenset({fr})
        targets = self.targets(frs, {fr: value})
        if not targets:
            return PreemptionVerdict.NONE, self.node.lowest_subtree_that_fits(fr, value)[0]
        sim = Simulation(self.state)
        try:
            for t in targets:
                sim.remove(self.state.workloads[t.key])
            borrow = self.node.lowest_subtree_that_fits(fr, value)[0]
        finally:
            sim.restore_all()
        same = any(
            (w := self.state.workloads[t.key]).admission is not None and w.admission.cluster_queue == self.cq.name
            for t in targets
        )
        return (PreemptionVerdict.PREEMPT if same else PreemptionVerdict.RECLAIM), borrow


def _remove_identical(records: list[WorkloadRecord], rec: WorkloadRecord) -> None:
    """Remove ``rec`` itself (the last occurrence: the most recent removal) from ``records``; by identity,
    not by comparing every field of records, as ``list.remove`` would."""
    for i in range(len(records) - 1, -1, -1):
        if records[i] is rec:
            del records[i]
            return
    raise ValueError(f"{rec.key} was not removed in this simulation")


def preemption_message(preemptor: WorkloadRecord, reason: PreemptionReason) -> str:
    job_uid = preemptor.obj.owner.uid if preemptor.obj.owner is not None and preemptor.obj.owner.uid else "UNKNOWN"
    uid = preemptor.obj.uid or "UNKNOWN"
    return f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {HUMAN_REASONS[reason]}"
