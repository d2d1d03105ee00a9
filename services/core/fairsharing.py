"""Fair sharing: dominant resource shares, the admission tournament and fair preemption.

Enabled by Kueue's ``Configuration.fairSharing``. A node's dominant resource
share (DRS) is, over its resources, the largest ratio of what it borrows above
its own quota to what its parent could lend, divided by its fair-sharing weight.
Kueue computes it in floating point; here it is an exact fraction, so ties and
comparisons are exact (a weight of 0 makes any borrowing infinitely unfair).

- ``iterate``: the order in which a cycle's heads are tried — a tournament at
  every cohort of a tree, lowest share (with the head's usage added) first,
  then higher priority, then older (Kueue's ``fair_sharing_iterator.go``).
- ``targets``: preemption guided by shares, with the configured strategies
  ``LessThanOrEqualToFinalShare`` and ``LessThanInitialShare``
  (Kueue's ``preemption/fairsharing``); a preemptor that stays within its
  nominal quota reclaims without comparing shares (``FairSharingPreemptWithinNominal``).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import TYPE_CHECKING

from events import objects as o
from events.cluster import PreemptionReason
from services.core.preemption import (
    PreemptionVerdict,
    Preemptor,
    Simulation,
    Target,
    Variant,
    _Candidate,
    _uses,
    candidate_order,
    satisfies,
)
from services.core.quota import FR, Node, NodeKey
from services.core.state import State, WorkloadRecord

if TYPE_CHECKING:
    from services.core.cycle import Entry

Share = tuple[int, Fraction]
"""(1 if weight 0 and borrowing else 0, share): compares as Kueue's ``CompareDRS``."""

ZERO: Share = (0, Fraction(0))


def weight_of(state: State, node: Node) -> int:
    if node.is_cluster_queue:
        cq = state.cluster_queues.get(node.name)
        return cq.fair_sharing_weight if cq is not None else 1000
    cohort = state.cohorts.get(node.name)
    return cohort.fair_sharing_weight if cohort is not None else 1000


def drs(state: State, node: Node, extra: dict[FR, int] | None = None) -> Share:
    """The dominant resource share of ``node`` (plus ``extra`` usage, for a CQ)."""
    parent = node.parent
    if parent is None:
        return ZERO
    borrowed: dict[str, int] = {}
    for fr, quota in sorted(node.subtree.items()):
        over = (extra or {}).get(fr, 0) + node.usage.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
    if not borrowed:
        return ZERO
    root = node.root()
    lendable: dict[str, int] = {}
    for fr in sorted(root.subtree):
        if fr[1] in borrowed:
            lendable[fr[1]] = lendable.get(fr[1], 0) + parent.potential_available(fr)
    ratio = Fraction(0)
    for res in sorted(borrowed):
        if lendable.get(res, 0) > 0:
            ratio = max(ratio, Fraction(borrowed[res] * 1000, lendable[res]))
    if ratio == 0:
        return ZERO
    weight = weight_of(state, node)
    if weight == 0:
        return (1, ratio)
    return (0, ratio * 1000 / weight)


def _path_to_root(node: Node) -> list[Node]:
    out = [node]
    while out[-1].parent is not None:
        out.append(out[-1].parent)
    return out


# --- the admission tournament ------------------------------------------------------------------


def iterate(state: State, entries: list[Entry]) -> Iterator[Entry]:
    """Yield a cycle's entries in fair-sharing order; usage admitted by earlier entries counts."""
    remaining = {e.cq.name: e for e in entries}
    while remaining:
        first = remaining[min(remaining)]
        node = state.cq_node(first.cq.name)
        if node.parent is None:
            del remaining[first.cq.name]
            yield first
            continue
        root = node.root()
        shares = _shares(state, root, remaining)
        winner = _tournament(root, remaining, shares)
        assert winner is not None
        del remaining[winner.cq.name]
        yield winner


def _shares(state: State, root: Node, remaining: dict[str, Entry]) -> dict[tuple[str, str], Share]:
    """For each entry under ``root`` and each cohort on its path: the share of the cohort's
    child on that path, with the entry's usage added."""
    out: dict[tuple[str, str], Share] = {}
    for cq_name in sorted(remaining):
        node = state.cq_node(cq_name)
        if node.root() is not root:
            continue
        e = remaining[cq_name]
        usage = e.assignment.usage if e.assignment is not None else {}
        added: list[tuple[FR, int]] = []
        for fr, v in sorted(usage.items()):
            node.add_usage(fr, v)
            added.append((fr, v))
        try:
            value = drs(state, node)
            walk = node.parent
            while walk is not None:
                out[(walk.name, cq_name)] = value
                value = drs(state, walk)
                walk = walk.parent
        finally:
            for fr, v in reversed(added):
                node.remove_usage(fr, v)
    return out


def _tournament(cohort: Node, remaining: dict[str, Entry], shares: dict[tuple[str, str], Share]) -> Entry | None:
    candidates: list[Entry] = []
    for child in cohort.children:
        if child.is_cluster_queue:
            if child.name in remaining:
                candidates.append(remaining[child.name])
        else:
            best = _tournament(child, remaining, shares)
            if best is not None:
                candidates.append(best)
    if not candidates:
        return None

    def key(e: Entry) -> tuple[Share, int, int, int, str]:
        return (shares[(cohort.name, e.cq.name)], -e.rec.priority, e.rec.queue_time, e.rec.seq, e.rec.key)

    return min(candidates, key=key)


# --- fair preemption ---------------------------------------------------------------------------


def _almost_lca(a: Node, b: Node) -> tuple[Node, Node]:
    """The ancestors (or selves) of ``a`` and ``b`` whose parent is their lowest common ancestor."""
    pa, pb = _path_to_root(a), _path_to_root(b)
    common = {id(n) for n in pb}
    lca = next(n for n in pa if id(n) in common)
    ia = next(i for i, n in enumerate(pa) if n is lca)
    ib = next(i for i, n in enumerate(pb) if n is lca)
    return pa[max(ia - 1, 0)], pb[max(ib - 1, 0)]


class _FairPreemptor:
    def __init__(self, state: State, cq: o.ClusterQueue, rec: WorkloadRecord, frs: frozenset[FR],
                 usage: dict[FR, int]) -> None:
        self.state, self.cq, self.rec, self.frs, self.usage = state, cq, rec, frs, usage
        self.node = state.cq_node(cq.name)
        self.classical = Preemptor(state, cq, rec)

    def candidates(self) -> dict[str, list[WorkloadRecord]]:
        """Per ClusterQueue, its candidates in Kueue's candidate order."""
        p = self.cq.preemption
        out: dict[str, list[WorkloadRecord]] = {}
        order = candidate_order(self.cq.name, self.state.now)
        if p.within_cluster_queue != o.WithinClusterQueue.NEVER:
            own = [w for w in self.classical._workloads_of(self.cq.name)
                   if _uses(w, self.frs) and satisfies(p.within_cluster_queue, self.rec, w)]
            if own:
                out[self.cq.name] = own
        if p.reclaim_within_cohort != o.ReclaimWithinCohort.NEVER and self.node.parent is not None:
            for name in _cluster_queues(self.node.root()):
                if name == self.cq.name:
                    continue
                other = self.state.cq_node(name)
                if not any(other.usage.get(fr, 0) > other.subtree.get(fr, 0) for fr in self.frs):
                    continue
                found = [w for w in self.classical._workloads_of(name)
                         if _uses(w, self.frs) and satisfies(p.reclaim_within_cohort, self.rec, w)]
                if found:
                    out[name] = found
        for found in out.values():
            found.sort(key=lambda w: order(_Candidate(w, Variant.WITHIN_CQ, None)))  # the variant is not in the key
        return out

    def fits(self) -> bool:
        node = self.node
        for fr, v in sorted(self.usage.items()):
            node.remove_usage(fr, v)
        try:
            return all(v <= max(0, node.available(fr)) for fr, v in self.usage.items())
        finally:
            for fr, v in sorted(self.usage.items()):
                node.add_usage(fr, v)

    def within_nominal(self) -> bool:
        """Whether the preemptor's ClusterQueue, with the incoming workload's usage already added,
        borrows none of the resources that need preemption. It then reclaims its nominal quota from
        borrowers without comparing shares (Kueue's ``FairSharingPreemptWithinNominal``, beta and on
        by default: ``queueWithinNominalInResourcesNeedingPreemption`` in ``runFirstFsStrategy``,
        ``pkg/scheduler/preemption/preemption.go``); such targets are ``InCohortReclamation``."""
        node = self.node
        for fr in sorted(self.frs):
            q = node.quotas.get(fr)
            if node.usage.get(fr, 0) > (q.nominal if q is not None else 0):
                return False
        return True

    def _next_target(self, cands: dict[str, list[WorkloadRecord]], pruned: set[NodeKey]) -> str | None:
        root = self.node.root()
        on_path = {id(n) for n in _path_to_root(self.node)}
        if self.node.parent is None:
            return self.cq.name if cands.get(self.cq.name) else None
        while root.key not in pruned:
            found = self._descend(root, cands, pruned, on_path)
            if found is not None:
                return found
        return None

    def _descend(self, cohort: Node, cands: dict[str, list[WorkloadRecord]], pruned: set[NodeKey],
                 on_path: set[int]) -> str | None:
        best_cq: tuple[Share, str] | None = None
        best_cohort: tuple[Share, Node] | None = None
        for child in cohort.children:
            tag = child.key
            if tag in pruned:
                continue
            share = drs(self.state, child)
            if child.is_cluster_queue:
                if (share == ZERO and child.name != self.cq.name) or not cands.get(child.name):
                    pruned.add(tag)
                    continue
                if best_cq is None or share >= best_cq[0]:
                    best_cq = (share, child.name)
            else:
                if share == ZERO and id(child) not in on_path:
                    pruned.add(tag)
                    continue
                if best_cohort is None or share >= best_cohort[0]:
                    best_cohort = (share, child)
        if best_cq is None and best_cohort is None:
            pruned.add(cohort.key)
            return None
        if best_cohort is not None and (best_cq is None or best_cohort[0] >= best_cq[0]):
            return self._descend(best_cohort[1], cands, pruned, on_path)
        assert best_cq is not None
        return best_cq[1]

    def run(self, strategies: tuple[str, ...]) -> list[Target]:
        """Kueue's fair preemption (preemption.go ``fairPreemptions``) as a recipe: with the
        preemptor's usage added to its ClusterQueue, (1) take candidates under the first strategy,
        (2) give the ClusterQueues that were passed over one try under the second, then, with the
        usage taken off again, (3) keep the targets only if the preemptor then fits, and give back
        every one but the last that it does not need after all."""
        cands = self.candidates()
        if not cands:
            return []
        sim = Simulation(self.state)
        chosen: list[tuple[WorkloadRecord, PreemptionReason]] = []
        for fr, v in sorted(self.usage.items()):
            self.node.add_usage(fr, v)
        try:
            done, retry = self._first_strategy(strategies[0], cands, sim, chosen)
            if not done and len(strategies) > 1:
                done = self._second_strategy(strategies[1], retry, sim, chosen)
        finally:
            for fr, v in sorted(self.usage.items()):
                self.node.remove_usage(fr, v)
        try:
            if not done or not self._fits_after_release():
                return []
            self._fill_back(chosen, sim)
            return [Target(w.key, reason) for w, reason in chosen]
        finally:
            sim.restore_all()

    def _first_strategy(self, strategy: str, cands: dict[str, list[WorkloadRecord]], sim: Simulation,
                        chosen: list[tuple[WorkloadRecord, PreemptionReason]],
                        ) -> tuple[bool, dict[str, list[WorkloadRecord]]]:
        """(1): candidates of the preemptor's own ClusterQueue, or of any when it stays within its
        nominal quota (``runFirstFsStrategy``), are taken as they come; others only when the strategy
        says the preemptor's share stays fair. Returns whether it fits, and the candidates passed over."""
        retry: dict[str, list[WorkloadRecord]] = {}
        pruned: set[NodeKey] = set()
        within_nominal = self.within_nominal()
        while (target_cq := self._next_target(cands, pruned)) is not None:
            if target_cq == self.cq.name or within_nominal:
                w = cands[target_cq].pop(0)
                sim.remove(w)
                chosen.append((w, PreemptionReason.IN_CLUSTER_QUEUE if target_cq == self.cq.name
                               else PreemptionReason.IN_COHORT_RECLAMATION))
                if self.fits():
                    return True, retry
                continue
            p_side, t_side = _almost_lca(self.node, self.state.cq_node(target_cq))
            p_new, t_old = drs(self.state, p_side), drs(self.state, t_side)
            while cands[target_cq]:
                w = cands[target_cq].pop(0)
                sim.remove(w)
                if _strategy(strategy, p_new, t_old, drs(self.state, t_side)):
                    chosen.append((w, PreemptionReason.IN_COHORT_FAIR_SHARING))
                    if self.fits():
                        return True, retry
                    break
                sim.restore_last()
                retry.setdefault(target_cq, []).append(w)
        return False, retry

    def _second_strategy(self, strategy: str, retry: dict[str, list[WorkloadRecord]], sim: Simulation,
                         chosen: list[tuple[WorkloadRecord, PreemptionReason]]) -> bool:
        """(2): each ClusterQueue passed over gets one try, under the second strategy."""
        pruned: set[NodeKey] = set()
        while (target_cq := self._next_target(retry, pruned)) is not None:
            p_side, t_side = _almost_lca(self.node, self.state.cq_node(target_cq))
            if _strategy(strategy, drs(self.state, p_side), drs(self.state, t_side), ZERO):
                w = retry[target_cq].pop(0)
                sim.remove(w)
                chosen.append((w, PreemptionReason.IN_COHORT_FAIR_SHARING))
                if self.fits():
                    return True
            retry[target_cq] = []
        return False

    def _fits_after_release(self) -> bool:
        return all(v <= max(0, self.node.available(fr)) for fr, v in self.usage.items())

    def _fill_back(self, chosen: list[tuple[WorkloadRecord, PreemptionReason]], sim: Simulation) -> None:
        """(3): give back every target but the last that is not needed after all."""
        for i in range(len(chosen) - 2, -1, -1):
            w = chosen[i][0]
            adm = w.admission
            assert adm is not None  # a target holds quota
            node = self.state.cq_node(adm.cluster_queue)
            for fr, v in sorted(w.usage.items()):
                node.add_usage(fr, v)
            if self._fits_after_release():
                sim.removed.remove(w)
                del chosen[i]
            else:
                for fr, v in sorted(w.usage.items()):
                    node.remove_usage(fr, v)


def _strategy(name: str, p_new: Share, t_old: Share, t_new: Share) -> bool:
    if name == "LessThanOrEqualToFinalShare":
        return p_new <= t_new
    return p_new < t_old  # LessThanInitialShare


def _cluster_queues(node: Node) -> list[str]:
    if node.is_cluster_queue:
        return [node.name]
    return [name for child in node.children for name in _cluster_queues(child)]


def targets(state: State, cq: o.ClusterQueue, rec: WorkloadRecord, frs: frozenset[FR],
            usage: dict[FR, int]) -> list[Target]:
    return _FairPreemptor(state, cq, rec, frs, usage).run(state.config.fair_sharing_strategies)


def simulate(state: State, cq: o.ClusterQueue, rec: WorkloadRecord, fr: FR, value: int
             ) -> tuple[PreemptionVerdict, int]:
    """The preemption oracle under fair sharing: (its verdict, borrowing after)."""
    node = state.cq_node(cq.name)
    found = targets(state, cq, rec, frozenset({fr}), {fr: value})
    if not found:
        return PreemptionVerdict.NONE, node.lowest_subtree_that_fits(fr, value)[0]
    sim = Simulation(state)
    try:
        for t in found:
            sim.remove(state.workloads[t.key])
        borrow = node.lowest_subtree_that_fits(fr, value)[0]
    finally:
        sim.restore_all()
    same = any(t.reason == PreemptionReason.IN_CLUSTER_QUEUE for t in found)
    return (PreemptionVerdict.PREEMPT if same else PreemptionVerdict.RECLAIM), borrow
