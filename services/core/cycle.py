"""One Kueue scheduling cycle, as a recipe (Kueue's ``pkg/scheduler/scheduler.go``).

1. Take the head of every active ClusterQueue's queue.
2. Nominate each head: namespace selector, flavor assignment (with the
   preemption oracle), preemption targets, partial admission.
3. Order the entries: not borrowing before borrowing (by borrowing level), then
   higher priority, then older; the workload key makes ties total. With fair
   sharing, a tournament on dominant resource shares decides instead.
4. Walk the entries: skip what does not fit; quota taken by an earlier entry is
   counted for later ones; a preemptor evicts its victims and waits (it is never
   admitted in the cycle that evicts them); the rest are admitted.
5. Requeue what was not admitted: back into the queue, or parked as
   inadmissible (BestEffortFIFO) until quota is freed in its cohort.

``run_cycle`` mutates the state it is given and returns the decisions it made;
it is deterministic (no clock, no randomness, no unordered iteration).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import msgspec

from events import conditions as cond
from events import objects as o
from events.cluster import (
    NAMESPACE_NAME_LABEL,
    ConditionType,
    DeactivationCause,
    EvictionReason,
    PendingConditionReason,
)
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    DeactivateWorkload,
    EvictWorkload,
    HeadOutcome,
    MarkPending,
    PendingReason,
    UpdateLocalQueueFairSharing,
)
from services.core import (
    admissionfair,
    checks,
    deactivation,
    effects,
    fairsharing,
    placement,
    podsready,
    scaleup,
    workload_status,
)
from services.core.derived import Memo
from services.core.dra import dra_error
from services.core.flavors import Assignment, Mode, Nomination, Oracle, Policy, assign, selector_matches
from services.core.heads import heads_to_take, take_heads
from services.core.preemption import PreemptionVerdict, Preemptor, Searches, Target, preemption_message
from services.core.quota import FR, Node
from services.core.reasons import quota_reserved_reason
from services.core.state import State, WorkloadRecord, generation, tree_version
from services.core.t9k import expired_admissions
from services.core.victims import Victims


class EntryStatus(StrEnum):
    """Where a head is in the cycle (Kueue's ``entryStatus``)."""

    NOT_NOMINATED = "notNominated"
    NOMINATED = "nominated"
    SKIPPED = "skipped"
    ASSUMED = "assumed"


class RequeueReason(StrEnum):
    """Why a head goes back (Kueue's ``RequeueReason``): decides whether it is parked."""

    GENERIC = ""
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    FAILED_AFTER_NOMINATION = "FailedAfterNomination"
    PENDING_PREEMPTION = "PendingPreemption"


_ORACLE_MODE = {
    PreemptionVerdict.NONE: Mode.NO_CANDIDATES,
    PreemptionVerdict.PREEMPT: Mode.PREEMPT,
    PreemptionVerdict.RECLAIM: Mode.RECLAIM,
}


@dataclass(slots=True)
class Entry:
    rec: WorkloadRecord
    cq: o.ClusterQueue
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)
    status: EntryStatus = EntryStatus.NOT_NOMINATED
    message: str = ""
    requeue_reason: RequeueReason = RequeueReason.GENERIC
    pending_reason: PendingReason = PendingReason.WAITING_FOR_QUOTA
    forget_flavors: bool = False  # the next attempt tries every flavor again (preempting; skipped, gate off)
    nominated_at: tuple[int, int] | None = None  # the tree's version when nominated (if remembered)
    deferred: bool = False  # fits once the victims of earlier preemptors in the cycle are gone (DeferredFit)

    @property
    def mode(self) -> Mode:
        return self.assignment.mode if self.assignment is not None else Mode.NO_FIT


class _Decisions:
    def __init__(self, state: State) -> None:
        self.cycle = state.cycles
        self.time = state.now
        self.out: list[AnyDecision] = []
        self.admitted_heads: list[str] = []

    def next_id(self) -> str:
        return f"c{self.cycle}-{len(self.out)}"


def namespace_labels(state: State, namespace: str) -> dict[str, str]:
    ns = state.namespaces.get(namespace)
    if ns is None:
        return {NAMESPACE_NAME_LABEL: namespace}
    return dict(ns.labels)


def _oracle_for(state: State, cq: o.ClusterQueue, rec: WorkloadRecord, searches: Searches | None = None) -> Oracle:
    p = cq.preemption
    trivially_none = (
        p.within_cluster_queue == o.WithinClusterQueue.NEVER
        and p.reclaim_within_cohort == o.ReclaimWithinCohort.NEVER
    )
    preemptor = Preemptor(state, cq, rec, memo=searches)

    def oracle(fr: FR, value: int) -> tuple[Mode, int]:
        if trivially_none:
            return Mode.NO_CANDIDATES, preemptor.node.lowest_subtree_that_fits(fr, value)[0]
        verdict, borrow = (fairsharing.simulate(state, cq, rec, fr, value) if state.config.fair_sharing
                           else preemptor.simulate(fr, value))
        return _ORACLE_MODE[verdict], borrow

    return oracle


def _targets(state: State, cq: o.ClusterQueue, rec: WorkloadRecord, a: Assignment,
             searches: Searches | None = None) -> list[Target]:
    frs = frozenset(
        (flavor, res)
        for ps in a.pod_sets
        for res, flavor in ps.flavors.items()
        if ps.modes.get(res, Mode.FIT) != Mode.FIT
    )
    if not frs:
        return []
    if state.config.fair_sharing:
        return fairsharing.targets(state, cq, rec, frs, a.usage)
    return Preemptor(state, cq, rec, memo=searches).targets(frs, a.usage)


def _policy(state: State, cq: o.ClusterQueue) -> Policy:
    p = cq.preemption
    return Policy(
        can_preempt_while_borrowing=(
            p.borrow_within_cohort != o.BorrowWithinCohortPolicy.NEVER
            or (state.config.fair_sharing and p.reclaim_within_cohort != o.ReclaimWithinCohort.NEVER)
        ),
        fair_sharing=state.config.fair_sharing,
    )


def scan_resume(state: State, cq_name: str, rec: WorkloadRecord) -> dict[tuple[int, int], int] | None:
    """Where the workload's flavor scan resumes (per podSet and resource group, the last flavor
    index tried), or None to start at the first flavor (Kueue's ``lastAssignmentOutdated``,
    scheduler.go). The recorded progress holds while the ClusterQueue's generation is unchanged;
    with FlavorFungibilityPreserveScanProgress, also whatever the generation in the cycle right
    after the one that recorded it, which is where a skipped head is tried again."""
    if rec.last_tried is None:
        return None
    if state.config.flavor_fungibility_preserve_scan_progress and state.cycles - rec.last_cycle <= 1:
        return rec.last_tried
    return rec.last_tried if rec.last_generation == generation(state, cq_name) else None


def _get_assignments(state: State, e: Entry, nomination: Nomination | None = None) -> None:
    """Kueue's ``getAssignments``: full assignment, preemption, then partial admission.
    Nothing changes the state meanwhile, so the preemption searches of the flavor oracle and of
    the targets are shared: for a single resource the oracle's search is the targets' search.
    A recomputation (``nomination`` given) starts from the first flavor and keeps the nominated ones.
    A workload slice replacing an admitted one keeps its flavors, asks only for what it adds, and
    does not see the old slice among the preemption candidates (services/core/scaleup.py)."""
    old = scaleup.replaced_slice(state, e.rec, e.cq.name)
    if old is None:
        _assign_entry(state, e, nomination, None)
        return
    admitted = state.index.admitted
    kept = admitted.get(e.cq.name)
    admitted[e.cq.name] = {k: None for k in kept or {} if k != old.key}
    try:
        _assign_entry(state, e, nomination, scaleup.old_slice(old))
    finally:
        if kept is None:
            del admitted[e.cq.name]
        else:
            admitted[e.cq.name] = kept


def _assign_entry(state: State, e: Entry, nomination: Nomination | None, replacing: scaleup.OldSlice | None) -> None:
    cq, rec = e.cq, e.rec
    searches: Searches = {}
    policy, oracle = _policy(state, cq), _oracle_for(state, cq, rec, searches)
    resume = scan_resume(state, cq.name, rec) if nomination is None else None
    full = assign(state, cq, rec, policy, oracle, resume=resume, nomination=nomination, replacing=replacing)
    e.targets = []
    e.assignment, e.pending_reason = full, full.pending_reason
    if full.mode == Mode.FIT:
        return
    if full.mode != Mode.NO_FIT:
        targets = _targets(state, cq, rec, full, searches)
        if targets:
            e.targets = targets
            return
    if not any(ps.min_count is not None and ps.min_count < ps.count for ps in rec.obj.pod_sets):
        return
    counts_full = [ps.count for ps in rec.obj.pod_sets]
    deltas = [ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in rec.obj.pod_sets]
    total = sum(deltas)
    results: dict[int, tuple[Assignment, list[Target]]] = {}
    lo, hi = 0, total + 1  # the smallest k in [0, total] whose reduced counts fit (Kueue's sort.Search)
    while lo < hi:
        k = (lo + hi) // 2
        counts = [counts_full[i] - (deltas[i] * k) // total for i in range(len(counts_full))]
        a = assign(state, cq, rec, policy, oracle, counts, resume=resume, nomination=nomination, replacing=replacing)
        if a.mode == Mode.FIT:
            results[k] = (a, [])
            hi = k
            continue
        t = _targets(state, cq, rec, a, searches) if a.mode != Mode.NO_FIT else []
        if t:
            results[k] = (a, t)
            hi = k
        else:
            lo = k + 1
    if lo in results:
        e.assignment, e.targets = results[lo]


def _nominate(state: State, e: Entry) -> None:
    rec, cq = e.rec, e.cq
    unmapped = dra_error(state.config, rec.obj)  # Kueue never queues it (services/core/dra.py)
    if unmapped:
        e.message, e.pending_reason = unmapped, PendingReason.MISCONFIGURED
        return
    if rec.checks and checks.has_failed_checks(rec):
        e.message = checks.FAILED_CHECKS
        e.pending_reason = PendingReason.FAILED_ADMISSION_CHECKS
        return
    if not selector_matches(cq.namespace_selector, namespace_labels(state, rec.obj.namespace)):
        e.message = "workload namespace doesn't match ClusterQueue selector"
        e.requeue_reason = RequeueReason.NAMESPACE_MISMATCH
        e.pending_reason = PendingReason.NAMESPACE_MISMATCH
        return
    invalid = resources_validation_error(rec.obj)
    if invalid:
        e.message = invalid
        e.pending_reason = PendingReason.MISCONFIGURED
        return
    if rec.priority_error:
        e.message = rec.priority_error
        e.pending_reason = PendingReason.MISCONFIGURED
        return
    memo, key = _memo_slot(state, e)
    if memo is not None:
        known = memo.get(key)
        if known is not None:
            state.cache.hits += 1
            e.assignment, targets, e.pending_reason, e.message = known
            e.targets = list(targets)
            return
    _get_assignments(state, e)
    assert e.assignment is not None
    e.message = e.assignment.message()
    if e.mode not in (Mode.FIT, Mode.NO_FIT) and not e.targets:
        # Explained against the tree the nomination read, as the message it completes was: not
        # against the reservations and admissions of heads processed before it in the cycle.
        _explain_no_targets(state, e)
    if memo is not None:
        memo[key] = (e.assignment, tuple(e.targets), e.pending_reason, e.message)


def resources_validation_error(wl: o.Workload) -> str:
    """Kueue's ``ValidateResources`` as ``ValidateAdmissibility`` reports it: a container whose
    requests exceed its limits keeps the workload pending (``pkg/workload/resources.go``). The
    message is Kueue's: field errors as Go's ``field.Invalid``, aggregated as ``utilerrors`` does."""
    errors = [
        f"spec.podSets[{i}].template.spec.{c.container}: Invalid value: "
        f"[{','.join(_quoted(r) for r in c.resources)}]: requests must not exceed its limits"
        for i, ps in enumerate(wl.pod_sets)
        for c in ps.over_limits
    ]
    if not errors:
        return ""
    joined = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return f"resources validation failed: {joined}"


def _quoted(name: str) -> str:
    return f'"{name}"'


def _memo_slot(state: State, e: Entry) -> tuple[Memo | None, tuple[object, ...]]:
    """Where a nomination is remembered, and under which key.

    A nomination reads the workload's podSets, priority (and, for LowerOrNewerEqualPriority,
    its queue time) and resumed flavor search, the ClusterQueue's configuration and, in its
    cohort tree, usage and the admitted workloads. The tree's version moves whenever any of the
    latter changes, so two heads of one ClusterQueue with the same podSets and priority get the
    same answer until then, in this cycle or a later one: with saturated queues most heads are
    exactly that, and the flavor search and preemption simulation run once per shape. The clock
    is read only where admission fair sharing orders the candidates (their LocalQueues' usage
    decays with time): there it is part of the key. (Candidate order reads it otherwise only
    for a candidate without a reservation time, and every workload holding quota has one:
    ``state.reserve_quota`` sets both.)
    Fair sharing reads shares across the tree and is not remembered; nor is anything while
    ``state.cache.memo_enabled`` is off.
    """
    if state.config.fair_sharing or not state.cache.memo_enabled or scaleup.replacement_for(e.rec.obj):
        return None, ()  # a workload slice's nomination depends on the slice it replaces
    cq, rec = e.cq, e.rec
    root, version = tree_version(state, cq.name)
    if e.nominated_at is None:
        e.nominated_at = version
    elif e.nominated_at != version:
        return None, ()  # the tree changed since this head was nominated: its nomination is not the key's
    slot = state.cache.nominations.get(root)
    if slot is None or slot[0] != version:
        slot = (version, {})
        state.cache.nominations[root] = slot
    resume = scan_resume(state, cq.name, rec)
    newer = (rec.queue_time
             if cq.preemption.within_cluster_queue == o.WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY else None)
    key = (cq.name, rec.obj.pod_sets, rec.priority, newer, tuple(sorted(resume.items())) if resume else None,
           state.now if admissionfair.uses_afs(state, cq.name) else None)
    return slot[1], key


def _order_key(e: Entry) -> tuple[int, int, int, int, str]:
    a = e.assignment
    return (a.borrowing if a is not None else 0, -e.rec.priority, e.rec.queue_time, e.rec.seq, e.rec.key)


def _fits_with_removals(state: State, node: Node, usage: dict[FR, int], preempted: Victims,
                        targets: list[WorkloadRecord]) -> bool:
    """Whether ``usage`` fits ``node`` once this cycle's victims so far and ``targets`` are gone
    (counted without moving the tree: ``services.core.victims``)."""
    del state
    return preempted.fits(node, usage, targets)


def _resources_to_reserve(e: Entry, node: Node) -> dict[FR, int]:
    """What a preemptor without candidates holds back for the rest of the cycle, so that
    lower-ordered workloads do not take the quota it is waiting for (Kueue's ``resourcesToReserve``)."""
    assert e.assignment is not None
    out: dict[FR, int] = {}
    for fr, v in e.assignment.usage.items():
        q = node.quotas.get(fr)
        nominal = q.nominal if q is not None else 0
        used = node.usage.get(fr, 0)
        if e.assignment.borrowing > 0:
            if q is None or q.borrowing_limit is None:
                out[fr] = v
            else:
                out[fr] = max(0, min(v, nominal + q.borrowing_limit - used))
        else:
            out[fr] = max(0, min(v, nominal - used))
    return out


class _Overlay:
    """Usage added to the tree for this cycle only (preemptors and reservations)."""

    def __init__(self) -> None:
        self.added: list[tuple[Node, FR, int]] = []

    def add(self, node: Node, usage: dict[FR, int]) -> None:
        for fr, v in sorted(usage.items()):
            if v:
                node.add_usage(fr, v)
                self.added.append((node, fr, v))

    def undo(self) -> None:
        for node, fr, v in reversed(self.added):
            node.remove_usage(fr, v)
        self.added.clear()


def evict(state: State, out: _Decisions, rec: WorkloadRecord, reason: EvictionReason, message: str,
          preemption_reason: str = "", preemptor: str = "", *, underlying_cause: str = "",
          deactivate: bool = False) -> None:
    requests = checks.plans_for(state, rec, pending_only=False) if rec.checks else ()
    assert rec.admission is not None
    cq_name = rec.admission.cluster_queue
    requeue_before = workload_status.requeue_state(rec)
    effects.mark_evicted(state, rec, reason, message, preemption_reason, underlying_cause=underlying_cause,
                         deactivate=deactivate)
    d = EvictWorkload(
        id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace, name=rec.obj.name,
        cluster_queue=cq_name, reason=reason, message=message,
        preemption_reason=preemption_reason, preemptor=preemptor, provisioning_requests=requests or msgspec.UNSET,
        admission_checks=tuple(c for _, c in sorted(rec.checks.items())) or msgspec.UNSET,
    )
    if deactivate:
        d = DeactivateWorkload(**msgspec.structs.asdict(d), underlying_cause=underlying_cause)
    out.out.append(d)
    if workload_status.requeue_state(rec) != requeue_before:  # a back-off set (or cleared): status news
        _status(out, rec, cq_name)


def _status(out: _Decisions, rec: WorkloadRecord, cluster_queue: str) -> None:
    """Status only (``services.core.workload_status``): the checks and requeueState as they are now."""
    out.out.append(workload_status.decision(rec, id=out.next_id(), cycle=out.cycle, time=out.time,
                                            cluster_queue=cluster_queue))


def _evict_timed_out(state: State, out: _Decisions) -> None:
    """waitForPodsReady timeouts and maximum execution times (``services.core.podsready``)."""
    for t in podsready.due(state):
        message = deactivation.eviction_message(t.cause, t.message) if t.cause else t.message
        evict(state, out, t.rec, t.reason, message, underlying_cause=t.cause, deactivate=bool(t.cause))


def _evict_deactivated(state: State, out: _Decisions) -> None:
    """Inactive workloads give their quota back (Kueue's workload controller evicts them)."""
    for e in deactivation.take_evictions(state):
        evict(state, out, e.rec, e.reason, e.message, underlying_cause=e.underlying_cause, deactivate=True)


def _admit(state: State, out: _Decisions, e: Entry) -> None:
    assert e.assignment is not None
    rec = e.rec
    adm = e.assignment.to_admission(e.cq.name)
    old = scaleup.replaced_slice(state, rec, e.cq.name)
    names = effects.commit_admission(state, rec, adm, old.key if old is not None else "")
    out.admitted_heads.append(rec.key)
    out.out.append(AdmitWorkload(
        id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace, name=rec.obj.name,
        cluster_queue=e.cq.name, admission=adm, admission_checks=names or msgspec.UNSET,
        provisioning_requests=checks.plans_for(state, rec) or msgspec.UNSET,
        replaced_slice=old.key if old is not None else msgspec.UNSET,
    ))


def release_and_settle(state: State, out: _Decisions | None) -> None:
    """The admission-check phase at the start of a cycle: each workload whose checks changed gets
    what they call for (admitted, evicted, deactivated). Replay (``out`` None) forgets the changes:
    the recorded decisions carry them. (Back-offs end in ``podsready.release``, just before.)"""
    changed = sorted(state.checks_changed)
    state.checks_changed.clear()
    if out is None:
        return
    for key in changed:
        found = state.workloads.get(key)
        if found is None:
            continue
        what, reason, message = checks.verdict(found)
        cq_name = found.admission.cluster_queue if found.admission is not None else found.queued_in
        if what == "admit":
            _admit_checked(state, out, found)
            continue
        if what or workload_status.news(found):  # the reported states, before what they call for
            _status(out, found, cq_name)
        if what == "reject":  # deactivated (services.core.deactivation), carried by the decision
            evict(state, out, found, EvictionReason.DEACTIVATED, message,
                  underlying_cause=DeactivationCause.ADMISSION_CHECK, deactivate=True)
        elif reason is not None:
            evict(state, out, found, reason, message)


def _admit_checked(state: State, out: _Decisions, rec: WorkloadRecord) -> None:
    adm = rec.admission
    assert adm is not None
    updates = checks.pod_set_updates(rec)
    conflict = checks.update_conflict(state, rec, updates)
    effects.admit_checked(state, rec, conflict)
    out.out.append(AdmitChecked(
        id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace, name=rec.obj.name,
        cluster_queue=adm.cluster_queue, admission=adm, pod_set_updates=updates, failed_to_start=conflict,
        admission_checks=tuple(found for _, found in sorted(rec.checks.items())),
    ))


def _drain_stopped(state: State, out: _Decisions) -> None:
    """HoldAndDrain on a ClusterQueue or LocalQueue evicts what it has admitted."""
    draining_lqs = {lq.cluster_queue for lq in state.local_queues.values()
                    if lq.stop_policy == o.StopPolicy.HOLD_AND_DRAIN}
    draining = sorted(name for name, cq in state.cluster_queues.items()
                      if cq.stop_policy == o.StopPolicy.HOLD_AND_DRAIN or name in draining_lqs)
    for cq_name in draining:
        if cq_name not in state.index.admitted:
            continue
        cq = state.cluster_queues.get(cq_name)
        for key in list(state.index.admitted[cq_name]):
            rec = state.workloads[key]
            if rec.evicting:
                continue
            lq = state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}")
            if cq is not None and cq.stop_policy == o.StopPolicy.HOLD_AND_DRAIN:
                evict(state, out, rec, EvictionReason.CLUSTER_QUEUE_STOPPED, "The ClusterQueue is stopped")
            elif lq is not None and lq.stop_policy == o.StopPolicy.HOLD_AND_DRAIN:
                evict(state, out, rec, EvictionReason.LOCAL_QUEUE_STOPPED, "The LocalQueue is stopped")


def restart_held(state: State) -> None:
    """Workloads drained by a stopped queue go back once the queue runs again."""
    for key in list(state.held):
        rec = state.workloads.get(key)
        if rec is None or not rec.pending:
            del state.held[key]
            continue
        cq = state.cluster_queues.get(rec.queued_in) if rec.queued_in else None
        lq = state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}")
        requeued = rec.conditions.get(ConditionType.REQUEUED)
        reason = requeued.reason if requeued else ""
        if reason == EvictionReason.CLUSTER_QUEUE_STOPPED and cq is not None and cq.stop_policy == o.StopPolicy.NONE:
            rec.set_condition(cond.restarted("ClusterQueue", state.now))
            del state.held[key]
        elif reason == EvictionReason.LOCAL_QUEUE_STOPPED and lq is not None and lq.stop_policy == o.StopPolicy.NONE:
            rec.set_condition(cond.restarted("LocalQueue", state.now))
            del state.held[key]


def _mark_inactive(state: State, out: _Decisions) -> None:
    for cq_name in sorted(state.index.inactive):
        queue = state.index.queues.get(cq_name)
        if queue is None:
            continue
        keys = [k for _, k in queue.active] + list(queue.inadmissible)
        for key in keys:
            _set_pending(state, out, state.workloads[key], f"ClusterQueue {cq_name} is inactive",
                         PendingReason.ON_HOLD if state.cluster_queues[cq_name].stop_policy != o.StopPolicy.NONE
                         else PendingReason.CLUSTER_QUEUE_INACTIVE, inadmissible=True,
                         kueue_reason=PendingConditionReason.INADMISSIBLE)


def _set_pending(state: State, out: _Decisions, rec: WorkloadRecord, message: str, reason: PendingReason,
                 *, inadmissible: bool, kueue_reason: PendingConditionReason = PendingConditionReason.PENDING) -> None:
    kueue_reason = quota_reserved_reason(state.config, reason, kueue_reason)
    if not effects.mark_pending(state, rec, message, reason, kueue_reason):
        return
    out.out.append(MarkPending(
        id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace, name=rec.obj.name,
        cluster_queue=rec.queued_in, reason=reason, message=message, inadmissible=inadmissible,
        condition_reason=kueue_reason,
    ))


@dataclass(slots=True)
class CycleResult:
    decisions: list[AnyDecision]
    admitted: int
    evicted: int
    parked: int  # heads moved to the inadmissible list
    admitted_heads: list[str]
    heads: list[HeadOutcome]
    placed: int = 0  # MultiKueue placement decisions (services.core.placement)

    @property
    def changed(self) -> bool:
        """Whether another cycle could decide differently: something was admitted, evicted, parked
        or placed, or a head will resume its flavor search further down the list."""
        return bool(self.admitted or self.evicted or self.parked or self.placed) or any(
            h.last_tried is not None and any(i != -1 for _, _, i in h.last_tried) for h in self.heads
        )


def run_cycle(state: State) -> CycleResult:
    state.ensure_indexed()
    state.cycles += 1
    out = _Decisions(state)
    _drain_stopped(state, out)
    for rec, message in expired_admissions(state):
        evict(state, out, rec, EvictionReason.MAX_DURATION_EXCEEDED, message)
    _evict_timed_out(state, out)
    _evict_deactivated(state, out)
    restart_held(state)
    backing_off = workload_status.backing_off(state)
    podsready.release(state)
    for rec in workload_status.released(state, backing_off):  # requeueAt cleared: status news
        _status(out, rec, rec.queued_in)
    release_and_settle(state, out)
    _mark_inactive(state, out)
    entries: list[Entry] = []
    for cq_name in sorted(state.index.queues):
        queue = state.index.queues[cq_name]
        if cq_name in state.index.inactive or not queue.active:
            continue
        cq = state.cluster_queues[cq_name]
        n = heads_to_take(state.config, cq)
        if n == 1 or admissionfair.uses_afs(state, cq_name):  # one head: Kueue's cycle (fair: its LocalQueue's turn)
            taken = [admissionfair.pop_head(state, cq_name, queue)]
        else:
            taken = take_heads(queue, n)
        entries.extend(Entry(rec=state.workloads[key], cq=cq) for key in taken)
    for e in entries:
        _nominate(state, e)
    if state.config.fair_sharing:
        ordered = fairsharing.iterate(state, entries)
    else:
        ordered = iter(sorted(entries, key=_order_key))
    overlay = _Overlay()
    preempted = Victims(state)
    admitted = 0
    try:
        for e in ordered:
            _process(state, out, e, overlay, preempted)
            if e.status == EntryStatus.ASSUMED:
                admitted += 1
    finally:
        overlay.undo()
    heads = [_requeue(state, out, e) for e in entries if e.status != EntryStatus.ASSUMED]
    placed = placement.run(state, out)  # MultiKueue: where workloads holding quota here run
    _fair_sharing_status(state, out)
    evicted = sum(1 for d in out.out if isinstance(d, EvictWorkload))
    return CycleResult(decisions=out.out, admitted=admitted, evicted=evicted, parked=sum(h.parked for h in heads),
                       admitted_heads=out.admitted_heads, heads=heads, placed=placed)


def _fair_sharing_status(state: State, out: _Decisions) -> None:
    """Each LocalQueue's admission fair sharing status, when a sample changed it (Kueue's cadence)."""
    for key, entry in admissionfair.status_news(state):
        namespace, _, name = key.partition("/")
        lq = state.local_queues.get(key)
        out.out.append(UpdateLocalQueueFairSharing(
            id=out.next_id(), cycle=out.cycle, time=out.time, namespace=namespace, name=name,
            cluster_queue=lq.cluster_queue if lq is not None else "",
            consumed_resources=admissionfair.consumed_quantities(entry), last_update=entry.last_update))


def _process(state: State, out: _Decisions, e: Entry, overlay: _Overlay, preempted: Victims) -> None:
    recomputed = any(t.key in preempted for t in e.targets)
    if recomputed:
        _recompute_after_overlap(state, e, preempted)
    mode = e.mode
    if e.assignment is None or mode == Mode.NO_FIT:
        return
    node = state.cq_node(e.cq.name)
    if mode != Mode.FIT and not e.targets:
        if e.cq.preemption.reclaim_within_cohort != o.ReclaimWithinCohort.ANY:
            overlay.add(node, _resources_to_reserve(e, node))
        return
    if e.deferred:
        e.message = ("Workload has overlapping preemption targets with another workload, "
                     "but will fit after these preemptions complete")
        e.forget_flavors = True
        e.requeue_reason = RequeueReason.PENDING_PREEMPTION
        e.pending_reason = PendingReason.PREEMPTION_PENDING
        overlay.add(node, e.assignment.usage)
        return
    if any(t.key in preempted for t in e.targets):
        _skip(state, e, "Workload has overlapping preemption targets with another workload")
        return
    usage = e.assignment.usage
    if not _fits_with_removals(state, node, usage, preempted, [state.workloads[t.key] for t in e.targets]):
        _skip(state, e, "Workload no longer fits after processing another workload")
        return
    for t in e.targets:
        preempted[t.key] = state.workloads[t.key]
    if mode != Mode.FIT:
        overlay.add(node, usage)
        count = 0
        for t in e.targets:
            victim = state.workloads[t.key]
            count += 1
            if victim.evicting:
                continue
            evict(state, out, victim, EvictionReason.PREEMPTED, preemption_message(e.rec, t.reason), t.reason,
                  e.rec.key)
        e.message += f". Pending the preemption of {count} workload(s)"
        e.forget_flavors = True
        e.requeue_reason = RequeueReason.PENDING_PREEMPTION
        e.pending_reason = PendingReason.PREEMPTION_PENDING
        return
    if podsready.blocks_admission(state):
        # Kueue's scheduler waits here until every admitted workload is ready; so does this head.
        e.message = podsready.WAITING_FOR_PODS_READY
        e.pending_reason = PendingReason.WAITING_FOR_PODS_READY
        e.requeue_reason = RequeueReason.FAILED_AFTER_NOMINATION
        return
    e.status = EntryStatus.NOMINATED
    _admit(state, out, e)
    e.status = EntryStatus.ASSUMED


def _victims_for_recompute(state: State, e: Entry, preempted: Victims) -> list[WorkloadRecord]:
    """The victims so far that can change the head's assignment: those of its cohort tree (a
    nomination reads nothing outside it), so that a recomputation does not move every victim
    of the cycle."""
    return [w for w in preempted.in_tree(state.cq_node(e.cq.name)) if w.admission is not None]


def _recompute_after_overlap(state: State, e: Entry, preempted: Victims) -> None:
    """Kueue's ``updateAssignmentIfNeeded`` (gate RecomputeAssignmentUponPreemptionTargetsOverlap,
    beta and on by default; ``pkg/scheduler/scheduler.go``): a head whose targets overlap those of
    an earlier head is assigned again as if the earlier victims were gone (their usage and their
    place among the candidates), from the first flavor but keeping the nominated flavors. If it
    then fits, it waits for those preemptions (DeferredFit); else it may preempt other workloads."""
    assert e.assignment is not None
    nomination = {(i, res): flavor for i, ps in enumerate(e.assignment.pod_sets) for res, flavor in ps.flavors.items()}
    victims = _victims_for_recompute(state, e, preempted)
    admitted = state.index.admitted
    kept: dict[str, dict[str, None]] = {}
    # Their usage leaves the tree summed per ClusterQueue and (flavor, resource): one walk up the
    # tree per ClusterQueue rather than per victim, to the same usages (removals commute).
    gone: dict[tuple[str, FR], int] = {}
    for w in victims:
        assert w.admission is not None
        cq_name = w.admission.cluster_queue
        if cq_name not in kept:
            kept[cq_name] = admitted[cq_name]
            admitted[cq_name] = dict(kept[cq_name])
        admitted[cq_name].pop(w.key, None)
        for fr, v in sorted(w.usage.items()):
            gone[cq_name, fr] = gone.get((cq_name, fr), 0) + v
    removed: list[tuple[Node, FR, int]] = []
    try:
        for (cq_name, fr), v in gone.items():
            node = state.cq_node(cq_name)
            node.remove_usage(fr, v)
            removed.append((node, fr, v))
        _get_assignments(state, e, nomination)
    finally:
        for node, fr, v in reversed(removed):
            node.add_usage(fr, v)
        admitted.update(kept)
    assert e.assignment is not None
    e.message, e.pending_reason = e.assignment.message(), e.assignment.pending_reason
    e.deferred = e.assignment.mode == Mode.FIT


def _explain_no_targets(state: State, e: Entry) -> None:
    """Preemption found nothing: say whether the policy is what stops it (and which part),
    by searching again as if every policy allowed everything."""
    p = e.cq.preemption
    assert e.assignment is not None
    if p.within_cluster_queue == o.WithinClusterQueue.NEVER and p.reclaim_within_cohort == o.ReclaimWithinCohort.NEVER:
        e.pending_reason = PendingReason.WAITING_FOR_QUOTA
        return
    _explain_search(state, e)


def _explain_search(state: State, e: Entry) -> None:
    p = e.cq.preemption
    assert e.assignment is not None
    frs = frozenset((f, r) for ps in e.assignment.pod_sets for r, f in ps.flavors.items()
                    if ps.modes.get(r, Mode.FIT) != Mode.FIT)
    would = Preemptor(state, e.cq, e.rec, permissive=True).targets(frs, e.assignment.usage)
    if not would:
        e.pending_reason = PendingReason.WAITING_FOR_QUOTA
        return
    # ClusterQueues, not workloads, are named: which workloads would go changes with every
    # admission, and a message that changed with it would be a new pending decision every time.
    queues = sorted({_cluster_queue_of(state, t.key) for t in would})
    others = [q for q in queues if q != e.cq.name]
    stopped: list[str] = []
    if e.cq.name in queues:
        stopped.append(f"withinClusterQueue={p.within_cluster_queue} does not allow preempting workloads "
                       f"of this ClusterQueue")
    if others:
        stopped.append(
            f"reclaimWithinCohort={p.reclaim_within_cohort} and borrowWithinCohort={p.borrow_within_cohort} "
            f"do not allow preempting workloads of ClusterQueue(s) {', '.join(others)}"
        )
    e.pending_reason = PendingReason.PREEMPTION_NOT_ALLOWED
    e.message = f"{e.message}. It would fit by preemption, but {'; '.join(stopped)}"


def _cluster_queue_of(state: State, key: str) -> str:
    adm = state.workloads[key].admission
    return adm.cluster_queue if adm is not None else ""


def _skip(state: State, e: Entry, message: str) -> None:
    """Kueue's ``markSkipped``: skipped on contention, not on the flavor itself, so with
    FlavorFungibilityPreserveScanProgress the next cycle resumes the scan where this one stopped."""
    e.forget_flavors = not state.config.flavor_fungibility_preserve_scan_progress
    e.status = EntryStatus.SKIPPED
    e.message = message
    e.pending_reason = PendingReason.SKIPPED_IN_CYCLE


def _requeue(state: State, out: _Decisions, e: Entry) -> HeadOutcome:
    """Kueue's ``requeueAndUpdate``: back in the queue at once, or parked as inadmissible."""
    if e.status != EntryStatus.NOT_NOMINATED and e.requeue_reason == RequeueReason.GENERIC:
        e.requeue_reason = RequeueReason.FAILED_AFTER_NOMINATION
    keep_flavors = e.assignment is not None and not e.forget_flavors
    pending_flavors = keep_flavors and e.assignment is not None and e.assignment.pending_flavors()
    if e.cq.queueing_strategy == o.QueueingStrategy.STRICT_FIFO:
        immediate = e.requeue_reason != RequeueReason.NAMESPACE_MISMATCH
    else:
        immediate = (e.requeue_reason in (RequeueReason.FAILED_AFTER_NOMINATION, RequeueReason.PENDING_PREEMPTION)
                     or pending_flavors)
    outcome = HeadOutcome(
        key=e.rec.key, cluster_queue=e.cq.name, parked=not immediate,
        sticky=(e.requeue_reason == RequeueReason.PENDING_PREEMPTION
                and e.cq.queueing_strategy == o.QueueingStrategy.BEST_EFFORT_FIFO),
        last_tried=(tuple(sorted((ps, g, i) for (ps, g), i in e.assignment.tried.items()))
                    if keep_flavors and e.assignment is not None else None),
    )
    _set_pending(state, out, e.rec, e.message, e.pending_reason, inadmissible=not immediate)
    effects.requeue(state, e.rec, outcome)
    return outcome
