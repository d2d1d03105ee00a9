"""Flavor assignment: which ResourceFlavor each podSet's resources get, and how well it fits.

For each podSet and each resource group of the ClusterQueue, flavors are tried
in the order the ClusterQueue lists them. A flavor is eligible when its taints
are tolerated and its node labels satisfy the podSet's node selector and
required node affinity (only on the flavor's own label keys). Each requested
resource then gets a mode — Fit (fits unused quota, borrowing if allowed),
Preempt (would fit if others were preempted) or NoFit — and a borrowing level;
the flavor is represented by its worst resource, and flavor fungibility decides
whether to stop at this flavor or try the next.
Follows Kueue's ``pkg/scheduler/flavorassigner/flavorassigner.go``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial

from events import objects as o
from events.messages import PendingReason
from events.quantity import format_amount
from events.validation import INT64_MAX
from services.core.dra import add_claims
from services.core.quota import FR, Node
from services.core.resources import per_pod_requests
from services.core.scaleup import OldSlice
from services.core.state import State, WorkloadRecord


class Mode(IntEnum):
    """How well an assignment fits; higher is better (Kueue's granular modes)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # would need preemption, but nothing may be preempted
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4

    @property
    def api(self) -> str:
        """Kueue's API-level mode: NoFit, Preempt or Fit."""
        if self == Mode.NO_FIT:
            return "NoFit"
        return "Fit" if self == Mode.FIT else "Preempt"


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    count: int
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> flavor
    modes: dict[str, Mode] = field(default_factory=dict)  # resource -> mode in its flavor
    requests: dict[str, int] = field(default_factory=dict)  # resource -> total for `count` pods
    mode: Mode = Mode.FIT
    borrowing: int = 0
    reasons: list[str] = field(default_factory=list)

    def message(self) -> str:
        return f"couldn't assign flavors to pod set {self.name}: {', '.join(sorted(self.reasons))}"


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetAssignment]
    mode: Mode
    borrowing: int
    usage: dict[FR, int]
    pending_reason: PendingReason = PendingReason.WAITING_FOR_QUOTA
    tried: dict[tuple[int, int], int] = field(default_factory=dict)  # (podSet, group) -> last flavor index

    def pending_flavors(self) -> bool:
        """Whether a later attempt would start past the first flavor somewhere (Kueue's PendingFlavors)."""
        return any(i != -1 for i in self.tried.values())

    def message(self) -> str:
        return "; ".join(ps.message() for ps in self.pod_sets if ps.mode != Mode.FIT and ps.reasons)

    def to_admission(self, cluster_queue: str) -> o.Admission:
        return o.Admission(
            cluster_queue=cluster_queue,
            pod_set_assignments=tuple(
                o.PodSetAssignment(
                    name=ps.name,
                    flavors=tuple(sorted(ps.flavors.items())),
                    resource_usage=tuple(sorted(ps.requests.items())),
                    count=ps.count,
                )
                for ps in self.pod_sets
            ),
        )


# --- node selection --------------------------------------------------------------------------


def _requirement_matches(req: o.Requirement, labels: dict[str, str]) -> bool:
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or not value.lstrip("-").isdigit():
            return False
        return int(value) > int(req.values[0]) if op == "Gt" else int(value) < int(req.values[0])
    return False


def selector_matches(sel: o.LabelSelector, labels: dict[str, str]) -> bool:
    """A label selector against labels; Kueue's null selector matches nothing."""
    if sel.matches_nothing:
        return False
    return all(labels.get(k) == v for k, v in sel.match_labels) and all(
        _requirement_matches(r, labels) for r in sel.match_expressions
    )


def _affinity_matches(ps: o.PodSet, labels: dict[str, str]) -> bool:
    """The podSet's node selector and required affinity against one flavor's node labels,
    restricted to that flavor's own label keys: a key the flavor does not set is ignored, even
    when another flavor of the group sets it (Kueue's ``checkFlavorForPodSets`` and
    ``flavorSelector``, per-flavor keys since kubernetes-sigs/kueue#12449, v0.19)."""
    keys = labels.keys()
    for k, v in ps.node_selector:
        if k in keys and labels.get(k) != v:
            return False
    if not ps.affinity_terms:
        return True
    terms: list[list[o.Requirement]] = []
    for term in ps.affinity_terms:
        exprs = [e for e in term.match_expressions if e.key in keys]
        if not exprs:
            return True  # a term with no relevant expression matches every flavor (terms are ORed)
        terms.append(exprs)
    return any(all(_requirement_matches(e, labels) for e in exprs) for exprs in terms)


def _tolerates(tol: o.Toleration, taint: o.Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def untolerated_taint(flavor: o.ResourceFlavor, tolerations: tuple[o.Toleration, ...]) -> o.Taint | None:
    every = tolerations + flavor.tolerations
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in every):
            return taint
    return None


def _taint_text(t: o.Taint) -> str:
    """A taint as Kueue's message prints it: ``%s`` of a corev1.Taint value, whose String() has a
    pointer receiver, so Go prints the struct's fields, TimeAdded (unset on a flavor) as <nil>."""
    return f"{{{t.key} {t.value} {t.effect} <nil>}}"


# --- quota fit --------------------------------------------------------------------------------


@dataclass(slots=True)
class Policy:
    """What the ClusterQueue's policies allow the assigner to consider."""

    can_preempt_while_borrowing: bool
    fair_sharing: bool


Oracle = Callable[[FR, int], tuple[Mode, int]]
"""Simulated preemption for one (flavor, resource) and amount: (mode, borrowing level after)."""


@dataclass(frozen=True, slots=True)
class ResourceFit:
    mode: Mode
    borrowing: int
    reason: str = ""
    blocker: PendingReason | None = None  # what a NoFit is for (Kueue's status.noFitReason)


def fits_resource_quota(node: Node, fr: FR, value: int, quota: o.Quota, policy: Policy,
                        oracle: Oracle, assumed: int) -> ResourceFit:
    """How ``value`` of ``fr`` fits the ClusterQueue ``node`` (Kueue's ``fitsResourceQuota``;
    ``assumed`` is what earlier podSets already take)."""
    flavor, res = fr
    max_capacity = node.potential_available(fr)
    if value > max_capacity:
        return ResourceFit(
            Mode.NO_FIT,
            0,
            f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests "
            f"({format_amount(res, assumed)}) + current podset request ({format_amount(res, value - assumed)}) "
            f"> maximum capacity ({format_amount(res, max_capacity)})",
            PendingReason.EXCEEDS_MAX_QUOTA,
        )
    borrow, may_reclaim_in_hierarchy = node.lowest_subtree_that_fits(fr, value)
    available = max(0, node.available(fr))
    if value <= available:
        return ResourceFit(Mode.FIT, borrow)
    reason = (
        f"insufficient unused quota for {res} in flavor {flavor}, "
        f"{format_amount(res, value - available)} more needed"
    )
    if value <= quota.nominal or may_reclaim_in_hierarchy or policy.can_preempt_while_borrowing:
        mode, borrow_after = oracle(fr, value)
        return ResourceFit(mode, borrow_after, reason)
    return ResourceFit(Mode.NO_FIT, borrow, reason, PendingReason.WAITING_FOR_QUOTA)


def should_try_next_flavor(mode: Mode, borrowing: int, ff: o.FlavorFungibility) -> bool:
    """Kueue's ``shouldTryNextFlavor`` for a flavor's representative (mode, borrowing level)
    (v1beta2 semantics; v1beta1's ``Borrow``/``Preempt`` are read as MayStopSearch)."""
    if mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if mode in (Mode.PREEMPT, Mode.RECLAIM) and ff.when_can_preempt == o.WhenCanPreempt.TRY_NEXT_FLAVOR:
        return True
    return borrowing > 0 and ff.when_can_borrow == o.WhenCanBorrow.TRY_NEXT_FLAVOR


def is_preferred(a: Mode, a_borrow: int, b: Mode | None, b_borrow: int, ff: o.FlavorFungibility) -> bool:
    """Kueue's ``isPreferred`` (``flavorassigner.go``): whether (mode, borrowing level) ``a`` beats ``b``.

    NoFit loses to everything. A mode without preemption candidates loses to any viable one
    whatever the preference (kubernetes-sigs/kueue#13616). Then ``BorrowingOverPreemption``
    (also the default) compares the mode first, so fitting by borrowing beats needing
    preemption, and breaks ties by the lower borrowing level; ``PreemptionOverBorrowing``
    compares the borrowing level first, so preempting without borrowing beats borrowing, and
    breaks ties by the better mode. (Kueue v0.15-v0.16 had the two swapped; fixed in
    kubernetes-sigs/kueue#9464, v0.17.)
    """
    if a == Mode.NO_FIT:
        return False
    if b is None or b == Mode.NO_FIT:
        return True
    if (a == Mode.NO_CANDIDATES) != (b == Mode.NO_CANDIDATES):
        return a != Mode.NO_CANDIDATES
    if ff.preference == o.FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a_borrow != b_borrow:
            return a_borrow < b_borrow
        return a > b
    if a != b:
        return a > b
    return a_borrow < b_borrow


@dataclass(slots=True)
class _FlavorTry:
    flavors: dict[str, str]
    modes: dict[str, Mode]
    mode: Mode  # the worst mode of its resources: what the assignment's mode is made of
    borrowing: int  # the highest borrowing level of its resources (Kueue's Assignment.Borrowing)
    rep: tuple[Mode, int] = (Mode.NO_FIT, 0)  # the representative (mode, borrowing level) fungibility uses
    tried: int = -1
    blocker: PendingReason | None = None  # a NoFit flavor: the most severe of its resources' blockers
    group_blocker: PendingReason | None = None  # a group's result: the least severe of its NoFit flavors'


def _try_flavor(
    node: Node,
    fq: o.FlavorQuotas,
    covered: tuple[str, ...],
    requests: dict[str, int],
    usage_so_far: dict[FR, int],
    policy: Policy,
    oracle: Oracle,
    ff: o.FlavorFungibility,
    reasons: list[str],
) -> _FlavorTry:
    """One flavor for the group's requested resources (the body of Kueue's ``findFlavorForPodSets``).

    The representative mode is the worst of the resources' (mode, borrowing level) pairs as
    ``is_preferred`` orders them, not the worst mode and the worst level taken apart: a flavor
    where one resource fits by borrowing and another needs preemption without borrowing is,
    under BorrowingOverPreemption, a preempting flavor that does not borrow. Once a resource
    does not fit, the others are still checked for the message and the blocker (Kueue's closure
    returns early per resource, it does not stop the loop), but not assigned."""
    quotas = dict(fq.resources)
    rep: tuple[Mode, int] = (Mode.FIT, 0)
    mode, borrowing = Mode.FIT, 0
    blocker: PendingReason | None = None
    chosen: dict[str, str] = {}
    modes: dict[str, Mode] = {}
    for res in covered:
        if res not in requests:
            continue
        fr = (fq.name, res)
        assumed = usage_so_far.get(fr, 0)
        fit = fits_resource_quota(node, fr, requests[res] + assumed, quotas[res], policy,
                                  oracle if rep[0] != Mode.NO_FIT else _no_simulation, assumed)
        if fit.reason:
            reasons.append(fit.reason)
        blocker = _most_severe(blocker, fit.blocker)
        if rep[0] == Mode.NO_FIT:
            continue
        borrowing = max(borrowing, fit.borrowing)
        if is_preferred(rep[0], rep[1], fit.mode, fit.borrowing, ff):
            rep = (fit.mode, fit.borrowing)
        if rep[0] == Mode.NO_FIT:
            continue
        mode = min(mode, fit.mode)
        chosen[res] = fq.name
        modes[res] = fit.mode
    if rep[0] == Mode.NO_FIT:
        return _FlavorTry({}, {}, Mode.NO_FIT, 0, rep, blocker=blocker)
    return _FlavorTry(chosen, modes, mode, borrowing, rep)


def _no_simulation(fr: FR, value: int) -> tuple[Mode, int]:
    """Stands in for the preemption oracle once the flavor failed: only the reason is wanted, and
    any mode the oracle returns would mean the same (a resource preemption could help blocks nothing)."""
    return Mode.NO_CANDIDATES, 0


_SEVERITY = {PendingReason.WAITING_FOR_QUOTA: 2, PendingReason.EXCEEDS_MAX_QUOTA: 3,
             PendingReason.NO_MATCHING_FLAVOR: 4}
"""Kueue's ``reasonSeverity`` (flavorassigner.go)."""


def _most_severe(a: PendingReason | None, b: PendingReason | None) -> PendingReason | None:
    if a is None or (b is not None and _SEVERITY[b] > _SEVERITY[a]):
        return b
    return a


def _least_severe(a: PendingReason | None, b: PendingReason | None) -> PendingReason | None:
    if a is None or (b is not None and _SEVERITY[b] < _SEVERITY[a]):
        return b
    return a


# Many arguments: Kueue's findFlavorForPodSetResource takes as many: each is used.
def _find_flavor(  # noqa: PLR0913
    state: State,
    cq: o.ClusterQueue,
    node: Node,
    group: o.ResourceGroup,
    ps: o.PodSet,
    requests: dict[str, int],
    usage_so_far: dict[FR, int],
    policy: Policy,
    oracle: Oracle,
    reasons: list[str],
    start: int = 0,
    pinned: tuple[str, str] | None = None,
    original: Callable[[str], str] | None = None,
) -> _FlavorTry:
    """Try the group's flavors from index ``start``; the result records the last index tried
    (-1 once the search reached the last flavor), which the next attempt resumes after.
    ``pinned`` (resource, flavor): only that flavor may be taken (Kueue's NominationMapping).
    ``original``: why a flavor is not the one the replaced workload slice holds ("" when it is;
    services/core/scaleup.py)."""
    ff = cq.flavor_fungibility
    best: _FlavorTry | None = None
    group_blocker: PendingReason | None = None  # Kueue's resolveNoFitReason: the least severe NoFit flavor
    attempted = start
    for attempted in range(start, len(group.flavors)):
        fq = group.flavors[attempted]
        if pinned is not None and fq.name != pinned[1]:
            reasons.append(f"skipping flavor {fq.name} as it is not found in the nomination mapping "
                           f"for resource {pinned[0]}")
            continue
        flavor = state.flavors.get(fq.name)
        mismatch = ""
        if flavor is None:
            mismatch = f"flavor {fq.name} not found"
        elif (taint := untolerated_taint(flavor, ps.tolerations)) is not None:
            mismatch = f"untolerated taint {_taint_text(taint)} in flavor {fq.name}"
        elif not _affinity_matches(ps, dict(flavor.node_labels)):
            mismatch = f"flavor {fq.name} doesn't match node affinity"
        elif original is not None:
            mismatch = original(fq.name)
        if mismatch:
            reasons.append(mismatch)
            group_blocker = _least_severe(group_blocker, PendingReason.NO_MATCHING_FLAVOR)
            continue
        attempt = _try_flavor(node, fq, group.covered_resources, requests, usage_so_far, policy, oracle, ff, reasons)
        rep_mode, rep_borrow = attempt.rep
        if rep_mode == Mode.NO_FIT:
            group_blocker = _least_severe(group_blocker, attempt.blocker)
            continue
        if not should_try_next_flavor(rep_mode, rep_borrow, ff):
            best = attempt
            break
        if best is None or is_preferred(rep_mode, rep_borrow, best.rep[0], best.rep[1], ff):
            best = attempt
    tried = -1 if attempted >= len(group.flavors) - 1 else attempted
    if best is None:
        best = _FlavorTry({}, {}, Mode.NO_FIT, 0, (Mode.NO_FIT, 0))
    best.tried, best.group_blocker = tried, group_blocker
    return best


def pod_set_requests(state: State, cq: o.ClusterQueue, ps: o.PodSet, count: int) -> dict[str, int]:
    """What the podSet asks of the ClusterQueue for ``count`` pods, excluded resources and
    resource transformations applied (services/core/resources.py). A zero request is dropped
    for a resource no group covers, but a covered one is assigned a flavor like any other
    (Kueue's assignFlavors, kubernetes-sigs/kueue#8079)."""
    per_pod = add_claims(state.config, ps, per_pod_requests(ps.requests, state.config.exclude_resource_prefixes,
                                                             state.config.resource_transformations))
    covered = {res for g in cq.resource_groups for res in g.covered_resources}
    out = {
        res: min(value * count, INT64_MAX)  # Kueue's saturating Mul; only a transformation can get there
        for res, value in per_pod.items()
        if value > 0 or ((value == 0 and res in covered)
        and (cq.t9k is None or res in covered))  # a T9k Queue limits only what it has quota for
    }
    if any("pods" in g.covered_resources for g in cq.resource_groups):
        out["pods"] = count
    return out


Nomination = dict[tuple[int, str], str]
"""(podSet index, resource) -> flavor of an earlier assignment: Kueue's NominationMapping."""


def assign(
    state: State, cq: o.ClusterQueue, rec: WorkloadRecord, policy: Policy, oracle: Oracle,
    counts: list[int] | None = None, resume: dict[tuple[int, int], int] | None = None,
    nomination: Nomination | None = None, replacing: OldSlice | None = None,
) -> Assignment:
    """Kueue's ``FlavorAssigner.Assign`` for one workload in one ClusterQueue. With a
    ``nomination``, each resource group keeps the flavor it was nominated with (Kueue's
    ``shouldSkipBasedOnNominationMapping``, used when an assignment is recomputed in a cycle).
    ``replacing``: the workload slice this one replaces; each podSet keeps its flavors and asks
    the quota only for what it adds to it (services/core/scaleup.py)."""
    node = state.cq_node(cq.name)
    usage: dict[FR, int] = {}
    result: list[PodSetAssignment] = []
    overall, borrowing = Mode.FIT, 0
    reason = PendingReason.WAITING_FOR_QUOTA
    group_of = {res: i for i, g in enumerate(cq.resource_groups) for res in g.covered_resources}
    tried: dict[tuple[int, int], int] = {}
    for i, ps in enumerate(rec.obj.pod_sets):
        count = counts[i] if counts is not None else ps.count
        requests = pod_set_requests(state, cq, ps, count)
        psa = PodSetAssignment(name=ps.name, count=count, requests=requests)
        result.append(psa)
        missing = [res for res in sorted(requests) if res not in group_of]
        if missing:
            psa.mode = Mode.NO_FIT
            psa.reasons.extend(f"resource {res} unavailable in ClusterQueue" for res in missing)
            overall = Mode.NO_FIT
            reason = PendingReason.NO_MATCHING_FLAVOR
            break
        blocker: PendingReason | None = None  # across groups, the most severe (Kueue's resolveNoFitReason)
        for gi, group in enumerate(cq.resource_groups):
            wanted = {res: v for res, v in requests.items() if group_of[res] == gi}
            if not wanted:
                continue
            before = len(psa.reasons)
            start = (resume or {}).get((i, gi), -1) + 1
            pinned = None
            if nomination:
                first = min(wanted)
                pinned = (first, nomination.get((i, first), ""))
            original = None
            if replacing is not None:
                wanted = replacing.delta(ps.name, wanted)
                original = partial(replacing.mismatch, ps.name, resources=sorted(wanted))
            found = _find_flavor(state, cq, node, group, ps, wanted, usage, policy, oracle, psa.reasons, start,
                                 pinned, original)
            tried[(i, gi)] = found.tried
            blocker = _most_severe(blocker, found.group_blocker)
            psa.mode = min(psa.mode, found.mode)
            psa.borrowing = max(psa.borrowing, found.borrowing)
            if found.mode == Mode.NO_FIT:
                # Kueue reports only the resource group that failed, and a podSet left without
                # flavors records no scan progress (Assignment.append): its groups start over.
                del psa.reasons[:before]
                for g in range(gi + 1):
                    tried.pop((i, g), None)
                reason = blocker or PendingReason.WAITING_FOR_QUOTA
                break
            if found.mode == Mode.FIT:
                del psa.reasons[before:]  # a group whose flavor fits returns no status in Kueue
            psa.flavors.update(found.flavors)
            psa.modes.update(found.modes)
            for res, flavor in found.flavors.items():
                fr = (flavor, res)
                usage[fr] = usage.get(fr, 0) + wanted[res]
        overall = min(overall, psa.mode)
        borrowing = max(borrowing, psa.borrowing)
        if psa.mode == Mode.NO_FIT:
            break  # Kueue stops at the first podSet that gets no flavor
    if overall == Mode.FIT:
        for psa in result:
            psa.reasons.clear()
    return Assignment(pod_sets=result, mode=overall, borrowing=borrowing, usage=usage, pending_reason=reason,
                      tried=tried)
