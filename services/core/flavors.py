"""Flavor assignment: which ResourceFlavor each podSet's resources get, and how well it fits.

For each podSet and each resource group of the ClusterQueue, flavors are tried
in the order the ClusterQueue lists them. A flavor is eligible when its taints
are tolerated and its node labels satisfy the podSet's node selector and
required node affinity (only on label keys that some flavor of the group uses).
Each requested resource then gets a mode — Fit (fits unused quota, borrowing
if allowed), Preempt (would fit if others were preempted) or NoFit — and
flavor fungibility decides whether to stop at this flavor or try the next.
Follows Kueue's ``pkg/scheduler/flavorassigner/flavorassigner.go``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from events import objects as o
from events.messages import PendingReason
from events.quantity import format_amount
from services.core.quota import FR, Node
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


def _affinity_matches(ps: o.PodSet, labels: dict[str, str], keys: frozenset[str]) -> bool:
    """The podSet's node selector and required affinity, restricted to ``keys``
    (Kueue's ``flavorSelector``: keys no flavor of the group sets are ignored)."""
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
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


# --- quota fit --------------------------------------------------------------------------------


@dataclass(slots=True)
class Policy:
    """What the ClusterQueue's policies allow the assigner to consider."""

    can_preempt_while_borrowing: bool
    fair_sharing: bool


Oracle = Callable[[FR, int], tuple[Mode, int]]
"""Simulated preemption for one (flavor, resource) and amount: (mode, borrowing level after)."""


def fits_resource_quota(node: Node, fr: FR, value: int, quota: o.Quota, policy: Policy,
                        oracle: Oracle, assumed: int) -> tuple[Mode, int, str]:
    """(mode, borrowing level, reason) for ``value`` of ``fr`` in the ClusterQueue ``node``
    (Kueue's ``fitsResourceQuota``; ``assumed`` is what earlier podSets already take)."""
    flavor, res = fr
    max_capacity = node.potential_available(fr)
    if value > max_capacity:
        return (
            Mode.NO_FIT,
            0,
            f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests "
            f"({format_amount(res, assumed)}) + current podset request ({format_amount(res, value - assumed)}) "
            f"> maximum capacity ({format_amount(res, max_capacity)})",
        )
    borrow, may_reclaim_in_hierarchy = node.lowest_subtree_that_fits(fr, value)
    available = max(0, node.available(fr))
    if value <= available:
        return Mode.FIT, borrow, ""
    reason = (
        f"insufficient unused quota for {res} in flavor {flavor}, "
        f"{format_amount(res, value - available)} more needed"
    )
    if value <= quota.nominal or may_reclaim_in_hierarchy or policy.can_preempt_while_borrowing:
        mode, borrow_after = oracle(fr, value)
        return mode, borrow_after, reason
    return Mode.NO_FIT, borrow, reason


def should_try_next_flavor(mode: Mode, borrowing: int, ff: o.FlavorFungibility) -> bool:
    """Kueue's ``shouldTryNextFlavor`` (v1beta2 semantics; ``Borrow``/``Preempt`` = MayStopSearch)."""
    if mode in (Mode.NO_FIT, Mode.NO_CANDIDATES):
        return True
    if mode in (Mode.PREEMPT, Mode.RECLAIM) and ff.when_can_preempt == o.WhenCanPreempt.TRY_NEXT_FLAVOR:
        return True
    return borrowing > 0 and ff.when_can_borrow == o.WhenCanBorrow.TRY_NEXT_FLAVOR


def is_preferred(a: Mode, a_borrow: int, b: Mode | None, b_borrow: int, ff: o.FlavorFungibility) -> bool:
    """Kueue's ``isPreferred``: whether (mode, borrowing level) ``a`` beats ``b``."""
    if a == Mode.NO_FIT:
        return False
    if b is None or b == Mode.NO_FIT:
        return True
    if ff.preference == o.FungibilityPreference.BORROWING_OVER_PREEMPTION:
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
    mode: Mode
    borrowing: int
    tried: int = -1


def _find_flavor(
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
) -> _FlavorTry:
    """Try the group's flavors from index ``start``; the result records the last index tried
    (-1 once the search reached the last flavor), which the next attempt resumes after.
    ``pinned`` (resource, flavor): only that flavor may be taken (Kueue's NominationMapping)."""
    keys = frozenset(
        k for fq in group.flavors if fq.name in state.flavors for k, _ in state.flavors[fq.name].node_labels
    )
    best: _FlavorTry | None = None
    attempted = start
    for attempted in range(start, len(group.flavors)):
        fq = group.flavors[attempted]
        if pinned is not None and fq.name != pinned[1]:
            reasons.append(f"skipping flavor {fq.name} as it is not found in the nomination mapping "
                           f"for resource {pinned[0]}")
            continue
        flavor = state.flavors.get(fq.name)
        if flavor is None:
            reasons.append(f"flavor {fq.name} not found")
            continue
        taint = untolerated_taint(flavor, ps.tolerations)
        if taint is not None:
            reasons.append(f"untolerated taint {_taint_text(taint)} in flavor {fq.name}")
            continue
        if not _affinity_matches(ps, dict(flavor.node_labels), keys):
            reasons.append(f"flavor {fq.name} doesn't match node affinity")
            continue
        quotas = dict(fq.resources)
        mode, borrowing = Mode.FIT, 0
        chosen: dict[str, str] = {}
        modes: dict[str, Mode] = {}
        for res in group.covered_resources:
            if res not in requests:
                continue
            fr = (fq.name, res)
            assumed = usage_so_far.get(fr, 0)
            res_mode, res_borrow, reason = fits_resource_quota(
                node, fr, requests[res] + assumed, quotas[res], policy, oracle, assumed
            )
            if reason:
                reasons.append(reason)
            # The flavor is as good as its worst resource.
            mode = min(mode, res_mode)
            borrowing = max(borrowing, res_borrow)
            if mode == Mode.NO_FIT:
                break
            chosen[res] = fq.name
            modes[res] = res_mode
        attempt = _FlavorTry(chosen, modes, mode, borrowing)
        if mode == Mode.NO_FIT:
            continue
        if not should_try_next_flavor(mode, borrowing, cq.flavor_fungibility):
            best = attempt
            break
        if best is None or is_preferred(mode, borrowing, best.mode, best.borrowing, cq.flavor_fungibility):
            best = attempt
    tried = -1 if attempted >= len(group.flavors) - 1 else attempted
    if best is None:
        return _FlavorTry({}, {}, Mode.NO_FIT, 0, tried)
    best.tried = tried
    return best


def pod_set_requests(state: State, cq: o.ClusterQueue, ps: o.PodSet, count: int) -> dict[str, int]:
    excluded = state.config.exclude_resource_prefixes
    out = {
        res: per_pod * count
        for res, per_pod in ps.requests
        if per_pod > 0 and not any(res.startswith(p) for p in excluded)
    }
    if any("pods" in g.covered_resources for g in cq.resource_groups):
        out["pods"] = count
    return out


Nomination = dict[tuple[int, str], str]
"""(podSet index, resource) -> flavor of an earlier assignment: Kueue's NominationMapping."""


def assign(
    state: State, cq: o.ClusterQueue, rec: WorkloadRecord, policy: Policy, oracle: Oracle,
    counts: list[int] | None = None, resume: dict[tuple[int, int], int] | None = None,
    nomination: Nomination | None = None,
) -> Assignment:
    """Kueue's ``FlavorAssigner.Assign`` for one workload in one ClusterQueue. With a
    ``nomination``, each resource group keeps the flavor it was nominated with (Kueue's
    ``shouldSkipBasedOnNominationMapping``, used when an assignment is recomputed in a cycle)."""
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
            found = _find_flavor(state, cq, node, group, ps, wanted, usage, policy, oracle, psa.reasons, start,
                                 pinned)
            tried[(i, gi)] = found.tried
            psa.mode = min(psa.mode, found.mode)
            psa.borrowing = max(psa.borrowing, found.borrowing)
            if found.mode == Mode.NO_FIT:
                # Kueue reports only the resource group that failed.
                del psa.reasons[:before]
                reason = _classify(psa.reasons)
                break
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


def _classify(reasons: list[str]) -> PendingReason:
    if any("more needed" in r for r in reasons):
        return PendingReason.WAITING_FOR_QUOTA
    if reasons and all("maximum capacity" in r for r in reasons):
        return PendingReason.EXCEEDS_MAX_QUOTA
    if any("maximum capacity" in r for r in reasons) and not any(
        "node affinity" in r or "taint" in r or "not found" in r for r in reasons
    ):
        return PendingReason.EXCEEDS_MAX_QUOTA
    return PendingReason.NO_MATCHING_FLAVOR
