"""Admission fair sharing: a ClusterQueue's LocalQueues take turns by their decayed usage.

Kueue's ``AdmissionFairSharing`` (feature gate, beta, on by default; configured by the
Configuration's ``admissionFairSharing`` block, asked for by a ClusterQueue's
``spec.admissionScope.admissionMode: UsageBasedAdmissionFairSharing``). Restated from
Kueue's ``pkg/util/admissionfairsharing``, ``pkg/cache/queue/afs`` (the usage ledger),
``pkg/cache/queue/cluster_queue.go`` (``queueOrderingFunc``),
``pkg/controller/core/localqueue_controller.go`` (sampling),
``pkg/controller/core/workload_controller.go`` (settlement) and ``pkg/scheduler/scheduler.go``
(the entry penalty):

- **The ledger**: one entry per LocalQueue while the Configuration has the block
  (``State.afs``): ``consumed`` (the decayed history), the entry ``penalties`` still pending
  per workload, and ``last_update``. Amounts are exact integers in nano-units (Kueue keeps
  decimal quantities rounded down to 9 decimals: ``resource.MulByFloat``).
- **Decay** over ``elapsed`` with half-life ``H``: ``alpha = 1 - 0.5 ** (elapsed / H)``
  (0 when ``H`` is 0); ``consumed' = consumed * (1 - alpha) + admitted * alpha``, each product
  rounded down to a nano-unit, where ``admitted`` is what the LocalQueue's admitted workloads
  (``Admitted=True``, holding quota) use, summed over flavors.
- **Sampling**: every ``usageSamplingInterval`` after the entry's ``last_update`` the
  LocalQueue is sampled (decayed to then). Time is the log's: samples due before an event are
  taken, in time order, before the event is folded, so each sees the admitted usage of its
  moment. With ``H`` = 0 a sample forgets the history.
- **Entry penalty**: when a workload of a UsageBased ClusterQueue reserves quota, its LocalQueue
  is charged ``alpha(interval, H)`` times what the workload requests (the resources of its
  admission, over its pods) at once, as pending; when it becomes ``Admitted`` the entry is
  decayed to now and the penalty moves into ``consumed``. A penalty whose workload can no longer
  be admitted (finished, deleted, moved, deactivated without quota) is dropped.
- **Order**: a LocalQueue's usage is ``sum(weight(r) * (consumed + penalties)(r)) / lqWeight``
  (``resourceWeights``, default 1 per resource; a LocalQueue weight of 0 makes it +inf).
  The ClusterQueue's next head is the workload with the lowest usage of its LocalQueue, then
  Kueue's usual order (sticky preemptor, priority, queue time, input order). The visibility
  API lists pending workloads in that order.
- **Preemption**: among candidates of the same ClusterQueue and different LocalQueues, those
  of the LocalQueue with the higher usage go first (``CandidatesOrdering``).

Without the Configuration block nothing here runs and ``State.afs`` stays empty, so the
default path is untouched. Kueue's own artefacts of concurrency (a heap not rebuilt between
two penalty settlements, reconciles triggered by status writes) have no counterpart: the
order is always the exact minimum. Floats (``alpha``, the usage) use IEEE doubles as Go does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

import msgspec

from events import conditions as cond
from events import objects as o
from events.cluster import KUEUE_GROUP, ConditionType
from events.quantity import MILLI_RESOURCES, _decimal_si

if TYPE_CHECKING:
    from services.core.derived import ClusterQueueQueue
    from services.core.state import State, WorkloadRecord

NANO = 10**9


class LocalQueueUsage(msgspec.Struct, kw_only=True):
    """One LocalQueue's entry in the ledger (Kueue's ``UsageLedgerEntry``); amounts in nano-units."""

    consumed: dict[str, int] = msgspec.field(default_factory=dict)
    penalties: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)  # workload key -> pending penalty
    last_update: int = 0  # ms, the log's time
    # What the last UpdateLocalQueueFairSharing decision said (last_update, consumed): the status
    # is news again once a sample moves either (status_news).
    said_update: int = -1
    said: dict[str, int] = msgspec.field(default_factory=dict)


# --- arithmetic ----------------------------------------------------------------------------------


def _seconds(ms: int) -> float:
    """Go's ``Duration.Seconds()`` of a duration of ``ms`` milliseconds, computed as Go computes it."""
    ns = ms * 1_000_000
    return float(ns // NANO) + float(ns % NANO) / 1e9


def alpha(elapsed_ms: int, half_life_ms: int) -> float:
    """Kueue's ``calculateAlphaRate``: the share of the new sample after ``elapsed``."""
    if half_life_ms == 0:
        return 0.0
    return 1.0 - math.pow(0.5, _seconds(elapsed_ms) / _seconds(half_life_ms))


def mul(amounts: Mapping[str, int], factor: float) -> dict[str, int]:
    """Kueue's ``MulByFloat``: each amount times the float's shortest decimal form, rounded down."""
    f = Fraction(repr(factor))
    return {name: math.floor(Fraction(v) * f) for name, v in amounts.items()}


def merge(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for name, v in b.items():
        out[name] = out.get(name, 0) + v
    return out


def decayed(old: Mapping[str, int], new: Mapping[str, int], elapsed_ms: int, half_life_ms: int) -> dict[str, int]:
    """Kueue's ``CalculateDecayedConsumed``."""
    a = alpha(elapsed_ms, half_life_ms)
    return merge(mul(old, 1 - a), mul(new, a))


def to_nano(resource: str, amount: int) -> int:
    """An internal amount (milli-units for cpu, whole units otherwise) in nano-units."""
    return amount * (10**6 if resource in MILLI_RESOURCES else NANO)


def quantity(nano: int) -> str:
    """A nano amount as Kubernetes' canonical DecimalSI quantity (``31999m``, ``3``)."""
    return _decimal_si(nano, -9)


def usage_value(cfg: o.Configuration, entry: LocalQueueUsage | None, weight_milli: int) -> float:
    """Kueue's ``CalculateUsage``: the weighted sum of consumed and pending, over the LocalQueue's weight."""
    total: dict[str, int] = {}
    if entry is not None:
        total = dict(entry.consumed)
        for pen in entry.penalties.values():
            total = merge(total, pen)
    weights = dict(cfg.afs_resource_weights)
    value = 0.0
    for name in sorted(total):
        value += weights.get(name, 1.0) * (total[name] / NANO)
    if weight_milli <= 0:
        return math.inf
    return value / (weight_milli / 1000)


# --- who takes part --------------------------------------------------------------------------------


def uses_afs(state: State, cq_name: str) -> bool:
    """The ClusterQueue orders its LocalQueues by usage: it asks for it and the Configuration enables it."""
    if not state.config.admission_fair_sharing:
        return False
    cq = state.cluster_queues.get(cq_name)
    return cq is not None and cq.admission_fair_sharing


def lq_key(rec: WorkloadRecord) -> str:
    return f"{rec.obj.namespace}/{rec.obj.queue_name}"


def lq_usage(state: State, key: str) -> float:
    lq = state.local_queues.get(key)
    return usage_value(state.config, state.afs.get(key), lq.fair_sharing_weight if lq is not None else 1000)


def _is_admitted(rec: WorkloadRecord) -> bool:
    return rec.admission is not None and cond.is_true(rec.conditions.get(ConditionType.ADMITTED))


def admitted_usage(state: State) -> dict[str, dict[str, int]]:
    """Per LocalQueue, what its admitted workloads use, summed over flavors (nano-units)."""
    out: dict[str, dict[str, int]] = {}
    for rec in state.workloads.values():
        if not _is_admitted(rec):
            continue
        per = out.setdefault(lq_key(rec), {})
        for (_, res), v in rec.usage.items():
            per[res] = per.get(res, 0) + to_nano(res, v)
    return out


def _lq_admitted_usage(state: State, key: str, cq_name: str) -> dict[str, int]:
    """What the LocalQueue's admitted workloads use now (those holding ``cq_name``'s quota)."""
    if state.index.dirty:
        holders = [rec for rec in state.workloads.values() if rec.admission is not None]
    else:
        holders = [state.workloads[k] for k in state.index.admitted.get(cq_name, {})]
    per: dict[str, int] = {}
    for rec in holders:
        if lq_key(rec) == key and _is_admitted(rec):
            for (_, res), v in rec.usage.items():
                per[res] = per.get(res, 0) + to_nano(res, v)
    return per


# --- the ledger over time (called by the fold) --------------------------------------------------


def advance(state: State, until: int) -> None:
    """Take every sample due up to ``until`` (ms) before the next event is folded. Between two
    events nothing is admitted or released, so each LocalQueue's samples depend on its own entry
    alone; once a sample changes nothing, the rest of the gap is skipped in one step."""
    if not state.afs:
        return
    interval = max(state.config.afs_usage_sampling_interval_ms, 1)
    usage: dict[str, dict[str, int]] | None = None
    for key in sorted(state.afs):
        entry = state.afs[key]
        if entry.last_update + interval > until:
            continue
        if usage is None:
            usage = admitted_usage(state)
        admitted, start = usage.get(key, {}), entry.consumed
        while entry.last_update + interval <= until:
            before = entry.consumed
            _sample(state, entry, admitted, entry.last_update + interval)
            if entry.consumed == before:
                entry.last_update += interval * ((until - entry.last_update) // interval)
                break
        if entry.consumed != start:
            _touch(state, key)


def _touch(state: State, key: str) -> None:
    """The LocalQueue's usage changed: preemption searches remembered in its cohort tree, which
    order candidates by it, are stale."""
    from services.core.state import touch_tree  # the state module builds on this one

    lq = state.local_queues.get(key)
    if lq is not None and uses_afs(state, lq.cluster_queue) and not state.index.dirty:
        touch_tree(state, lq.cluster_queue)


def _sample(state: State, entry: LocalQueueUsage, admitted: Mapping[str, int], at: int) -> None:
    """Kueue's ``reconcileConsumedUsage``."""
    half_life = state.config.afs_usage_half_life_ms
    if half_life == 0:
        entry.consumed = {}
    else:
        entry.consumed = _tidy(decayed(entry.consumed, admitted, max(0, at - entry.last_update), half_life))
    entry.last_update = at


def _tidy(amounts: Mapping[str, int]) -> dict[str, int]:
    return {name: amounts[name] for name in sorted(amounts)}


def after_fold(state: State) -> None:
    """Keep one entry per LocalQueue while the feature is configured (a new LocalQueue starts
    its history now; a deleted one loses it), and drop penalties that can no longer settle."""
    if not state.config.admission_fair_sharing:
        if state.afs:
            state.afs.clear()
        return
    for key in sorted(state.local_queues):
        if key not in state.afs:  # seeded from the history the LocalQueue's status brings, as Kueue does
            state.afs[key] = LocalQueueUsage(consumed=dict(state.local_queues[key].afs_consumed),
                                             last_update=state.now)
    for key in sorted(state.afs):
        if key not in state.local_queues:
            del state.afs[key]
            continue
        entry = state.afs[key]
        for wl in sorted(entry.penalties):
            if not _can_settle(state, wl, key):
                del entry.penalties[wl]


def _can_settle(state: State, wl_key: str, key: str) -> bool:
    rec = state.workloads.get(wl_key)
    if rec is None or rec.finished or lq_key(rec) != key:
        return False
    return rec.active or rec.admission is not None


# --- admissions (called by effects, live and in replay) ---------------------------------------------


def on_reserved(state: State, rec: WorkloadRecord, adm: o.Admission) -> None:
    """Quota reserved by the scheduler: charge the entry penalty (Kueue's ``updateEntryPenalty``)."""
    if not uses_afs(state, adm.cluster_queue):
        return
    requests: dict[str, int] = {}
    for psa in adm.pod_set_assignments:
        for res, amount in psa.resource_usage:
            requests[res] = requests.get(res, 0) + to_nano(res, amount)
    cfg = state.config
    penalty = _tidy(mul(requests, alpha(cfg.afs_usage_sampling_interval_ms, cfg.afs_usage_half_life_ms)))
    key = lq_key(rec)
    entry = state.afs.get(key)
    if entry is None:
        entry = state.afs[key] = LocalQueueUsage(last_update=state.now)
    entry.penalties[rec.key] = penalty


def on_admitted(state: State, rec: WorkloadRecord) -> None:
    """Admitted=True: decay to now with the workload counted, then settle its penalty
    (Kueue's ``updateAfsConsumedUsage``)."""
    if rec.admission is None or not uses_afs(state, rec.admission.cluster_queue):
        return
    key = lq_key(rec)
    entry = state.afs.get(key)
    if entry is None:
        entry = state.afs[key] = LocalQueueUsage(last_update=state.now)
    elapsed = max(0, state.now - entry.last_update)
    now_consumed = decayed(entry.consumed, _lq_admitted_usage(state, key, rec.admission.cluster_queue), elapsed,
                           state.config.afs_usage_half_life_ms)
    entry.consumed = _tidy(merge(now_consumed, entry.penalties.pop(rec.key, {})))
    entry.last_update = max(entry.last_update, state.now)


# --- order -----------------------------------------------------------------------------------------


def pop_head(state: State, cq_name: str, queue: ClusterQueueQueue) -> str:
    """Take the ClusterQueue's next head: the front of its queue, or with admission fair
    sharing the front workload of the LocalQueue with the lowest usage."""
    if not uses_afs(state, cq_name):
        return queue.active.pop(0)[1]
    best, best_usage = 0, math.inf
    seen: dict[str, None] = {}
    for i, (_, key) in enumerate(queue.active):
        lq = lq_key(state.workloads[key])
        if lq in seen:
            continue
        seen[lq] = None
        u = lq_usage(state, lq)
        if i == 0 or u < best_usage:
            best, best_usage = i, u
    return queue.active.pop(best)[1]


def ordered(state: State, cq_name: str, keys: Iterable[str]) -> list[str]:
    """Pending workloads (given in queue order) in the order the ClusterQueue takes them."""
    keys = list(keys)
    if not uses_afs(state, cq_name):
        return keys
    usage: dict[str, float] = {}
    for key in keys:
        lq = lq_key(state.workloads[key])
        if lq not in usage:
            usage[lq] = lq_usage(state, lq)
    position = {key: i for i, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (usage[lq_key(state.workloads[k])], position[k]))


def candidate_usage(state: State, preemptor_cq: str) -> Callable[[WorkloadRecord], float] | None:
    """For preemption ordering (Kueue's ``CandidatesOrdering``): a candidate's LocalQueue usage
    when the preemptor's ClusterQueue uses admission fair sharing and the candidate is one of its
    workloads (0 for the others, which Kueue does not compare by usage), else None."""
    if not uses_afs(state, preemptor_cq):
        return None
    cache: dict[str, float] = {}

    def usage(victim: WorkloadRecord) -> float:
        adm = victim.admission
        if adm is None or adm.cluster_queue != preemptor_cq:
            return 0.0
        key = lq_key(victim)
        if key not in cache:
            cache[key] = lq_usage(state, key)
        return cache[key]

    return usage


# --- what is shown -------------------------------------------------------------------------------


def status(state: State, key: str) -> dict[str, object] | None:
    """The LocalQueue's ``status.fairSharing.admissionFairSharingStatus`` (None without the feature)."""
    entry = state.afs.get(key)
    if entry is None:
        return None
    return {"consumedResources": {name: quantity(v) for name, v in sorted(entry.consumed.items()) if v},
            "lastUpdate": entry.last_update}


def status_news(state: State) -> list[tuple[str, LocalQueueUsage]]:
    """The LocalQueues whose status is news since it was last said (a sample taken since), by key:
    Kueue's LocalQueue controller writes ``status.fairSharing.admissionFairSharingStatus`` once per
    ``usageSamplingInterval``, and so, at most, do the decisions. Each is marked as said."""
    out: list[tuple[str, LocalQueueUsage]] = []
    for key in sorted(state.afs):
        entry = state.afs[key]
        if entry.said_update == entry.last_update and entry.said == entry.consumed:
            continue
        mark_said(entry)
        out.append((key, entry))
    return out


def mark_said(entry: LocalQueueUsage) -> None:
    entry.said_update, entry.said = entry.last_update, dict(entry.consumed)


def consumed_quantities(entry: LocalQueueUsage) -> tuple[tuple[str, str], ...]:
    return tuple((name, quantity(v)) for name, v in sorted(entry.consumed.items()) if v)


def local_queue_object(state: State, key: str, format_time: Callable[[int], str]) -> dict[str, object] | None:
    """The LocalQueue as Kueue shows it with ``status.fairSharing.admissionFairSharingStatus``
    (``kubectl get lq -o yaml``), for ``simulate``'s output; None without the feature."""
    lq = state.local_queues.get(key)
    afs = status(state, key)
    if lq is None or afs is None:
        return None
    spec: dict[str, object] = {"clusterQueue": lq.cluster_queue}
    if lq.fair_sharing_weight != 1000:
        spec["fairSharing"] = {"weight": quantity(lq.fair_sharing_weight * 10**6)}
    afs["lastUpdate"] = format_time(int(str(afs["lastUpdate"])))
    return {"apiVersion": f"{KUEUE_GROUP}/v1beta2", "kind": "LocalQueue",
            "metadata": {"namespace": lq.namespace, "name": lq.name}, "spec": spec,
            "status": {"fairSharing": {"weightedShare": 0, "admissionFairSharingStatus": afs}}}


def explain_wait(state: State, rec: WorkloadRecord) -> str:
    """Why a pending workload of an admission-fair-sharing ClusterQueue waits behind another
    LocalQueue's workload, or "" when it does not."""
    cq_name = rec.queued_in
    if not cq_name or not uses_afs(state, cq_name):
        return ""
    queue = state.index.queues.get(cq_name)
    if queue is None:
        return ""
    mine = lq_key(rec)
    my_usage = lq_usage(state, mine)
    others = sorted(dict.fromkeys(lq for lq in (lq_key(state.workloads[k]) for _, k in queue.active) if lq != mine))
    ahead = [(u, lq) for u, lq in ((lq_usage(state, lq), lq) for lq in others) if u < my_usage]
    if not ahead:
        return ""
    usage, lq = min(ahead)
    return (f"admission fair sharing: its LocalQueue {mine} has usage {my_usage:.6g}, LocalQueue {lq} "
            f"has {usage:.6g} and goes first")
