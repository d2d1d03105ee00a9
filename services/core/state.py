"""Scheduler state and ``fold``: what the log has said so far, ready for a cycle.

A :class:`State` has three parts, and who may change each is fixed:

- the **canonical** state — the fields of :class:`State` itself: the objects
  last applied, one :class:`~services.core.records.WorkloadRecord` per Workload,
  the simulated clock, the input and cycle counters, anomalies, held workloads
  and the generations a resumed flavor search is checked against. Snapshots
  hold exactly these fields; equality of states is about them alone. Changed
  by :func:`fold` and the functions below it (this module; ``finish_eviction``
  is also called by ``kueuelog simulate``, where evictions complete at once),
  and by a cycle's outcomes: ``effects`` (admissions, evictions, pending
  conditions, requeues), called from ``cycle`` and ``apply``, which also count
  the cycle and release held workloads (``cycle.restart_held``).
- ``state.index`` — the **derived indices** (:class:`~services.core.derived.Index`):
  the quota tree, the queues, the admitted workloads per ClusterQueue, and
  each record's ``queued_in``. Built from the canonical state by
  ``index.rebuild`` whenever configuration changes; in between kept current by
  workload events here and by a cycle's outcomes (``effects``, ``cycle``,
  ``apply``). Unparking a queue (``derived.ClusterQueueQueue.unpark_all``)
  clears the records' canonical ``inadmissible`` with it.
- ``state.cache`` — the cycle's **caches** (:class:`~services.core.derived.Cache`):
  remembered nominations and the cohort-tree versions they are valid at. Only
  ``cycle`` reads and fills them; :func:`touch_tree` (called here and by
  ``effects``) invalidates.

``fold`` is total: a legal but odd history (a finish for an unknown workload)
is recorded as an anomaly, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from events import conditions as cond
from events import objects as o
from events import t9k
from events.cluster import WORKLOAD_PRIORITY_CLASS_SOURCE, ConditionType, EvictionReason
from events.messages import (
    ActuationFailed,
    AdmissionCheckUpdated,
    ClockTicked,
    ClusterEvent,
    DecisionApplied,
    EvictionCompleted,
    ObjectApplied,
    ObjectDeleted,
    PendingReason,
    PodsNotReady,
    PodsReady,
    ProvisioningRequestObserved,
    TreeAdopted,
    TreeHandOver,
    WorkloadActivation,
    WorkloadFinished,
)
from services.core import admissionfair
from services.core.admissionfair import LocalQueueUsage
from services.core.derived import Cache, ClusterQueueQueue, Index
from services.core.mkstate import MultiKueueState
from services.core.quota import Node, NodeKey
from services.core.reasons import queue_problem_reason
from services.core.records import DERIVED, WorkloadRecord, admission_usage

__all__ = ["ClusterQueueQueue", "State", "WorkloadRecord", "admission_usage", "fold"]


@dataclass(slots=True, eq=False, repr=False)  # a repr of every workload helps no one
class State:
    """Everything the scheduler knows: the canonical fields below, then ``index`` and ``cache``."""

    now: int = 0
    seq: int = 0
    cycles: int = 0
    flavors: dict[str, o.ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, o.ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, o.Cohort] = field(default_factory=dict)
    local_queues: dict[str, o.LocalQueue] = field(default_factory=dict)
    namespaces: dict[str, o.Namespace] = field(default_factory=dict)
    workload_priority_classes: dict[str, o.WorkloadPriorityClass] = field(default_factory=dict)
    priority_classes: dict[str, o.PriorityClass] = field(default_factory=dict)
    admission_checks: dict[str, o.AdmissionCheck] = field(default_factory=dict)
    provisioning_configs: dict[str, o.ProvisioningRequestConfig] = field(default_factory=dict)
    config: o.Configuration = field(default_factory=o.Configuration)
    workloads: dict[str, WorkloadRecord] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)  # the most recent MAX_ANOMALIES odd facts
    anomaly_count: int = 0
    held: dict[str, None] = field(default_factory=dict)  # drained by a stopped queue, waiting for it to restart
    # Bumped when a ClusterQueue's quota or usage shape changes (configuration, a workload
    # leaving it): a remembered flavor search is stale after that (Kueue's generation).
    epoch: int = 0  # every ClusterQueue at once: configuration changed
    generations: dict[str, int] = field(default_factory=dict)  # per ClusterQueue: a workload left it
    # Inactive workloads still holding quota: the next cycle evicts them (services.core.deactivation).
    deactivating: dict[str, None] = field(default_factory=dict)
    # Evicted after a PodsReady timeout and waiting for their back-off (requeue_at) to pass.
    backing_off: dict[str, None] = field(default_factory=dict)
    # A workload with maximumExecutionTimeSeconds has been seen: cycles look for execution deadlines
    # (without it and without waitForPodsReady they need not walk the admitted workloads).
    timed: bool = False
    checks_changed: dict[str, None] = field(default_factory=dict)  # admission checks to settle in the next cycle
    afs: dict[str, LocalQueueUsage] = field(default_factory=dict)  # admission fair sharing's ledger by LocalQueue
    multikueue: MultiKueueState = field(default_factory=MultiKueueState)  # services.core.placement
    # Scaled-up elastic workloads: first slice's key -> its newest slice's key (services.core.scaleup).
    slices: dict[str, str] = field(default_factory=dict)
    # --- not canonical ---
    index: Index = field(default_factory=Index, metadata=DERIVED)
    cache: Cache = field(default_factory=Cache, metadata=DERIVED)
    workers: dict[str, State] = field(default_factory=dict, metadata=DERIVED)  # placement's fit per worker
    # Cohort trees handed over to another shard since the scheduler last wrote (hand-over id, their
    # parts in the snapshot encoding): services.core.handover.
    released: list[tuple[str, bytes]] = field(default_factory=list, metadata=DERIVED)

    def cq_node(self, name: str) -> Node:
        return self.index.cluster_queue_nodes[name]

    def ensure_indexed(self) -> None:
        if self.index.dirty:
            from services.core.index import rebuild

            rebuild(self)

    def mark_dirty(self) -> None:
        """Configuration changed: the indices are rebuilt before next use, and every remembered
        flavor search and nomination is stale."""
        self.index.dirty = True
        self.epoch += 1
        for rec in self.workloads.values():
            rec.inadmissible = False  # configuration changed: every parked workload gets another try

    def cluster_queue_for(self, wl: o.Workload) -> tuple[str, str]:
        """(cluster queue, problem): where a workload queues, or why it cannot."""
        if t9k.is_t9k_workload(wl):  # a T9k Queue is its own ClusterQueue (events.t9k)
            cq = self.cluster_queues.get(wl.queue_name)
            return (wl.queue_name, "") if cq is not None and cq.t9k is not None else (
                "", f"Queue {wl.queue_name} doesn't exist")
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if not wl.queue_name:
            return "", "Workload has no queue name"
        if lq is None:
            return "", f"LocalQueue {wl.queue_name} doesn't exist"
        if lq.cluster_queue not in self.cluster_queues:
            return "", f"ClusterQueue {lq.cluster_queue} doesn't exist"
        if lq.stop_policy != o.StopPolicy.NONE:
            return "", f"LocalQueue {lq.name} is inactive"
        return lq.cluster_queue, ""


MAX_ANOMALIES = 100


def note_anomaly(state: State, message: str) -> None:
    """A legal but odd fact (a finish for an unknown workload, a duplicate): counted, the latest kept."""
    state.anomaly_count += 1
    state.anomalies.append(message)
    if len(state.anomalies) > MAX_ANOMALIES:
        del state.anomalies[0]


def resolve_priority(state: State, wl: o.Workload) -> tuple[int, str]:
    """(priority, error): spec.priority, else the named class, else the default PriorityClass."""
    if wl.priority is not None:
        return wl.priority, ""
    ref = wl.priority_ref
    if ref is not None:
        if ref.source == t9k.PRIORITY_SOURCE:  # a T9k workload has its Queue's priority
            queue = state.cluster_queues.get(ref.name)
            if queue is None or queue.t9k is None:
                return 0, f"Queue {ref.name} doesn't exist"
            return queue.t9k.priority, ""
        if ref.source == WORKLOAD_PRIORITY_CLASS_SOURCE:
            wpc = state.workload_priority_classes.get(ref.name)
            if wpc is None:
                return 0, f"WorkloadPriorityClass {ref.name} doesn't exist"
            return wpc.value, ""
        pc = state.priority_classes.get(ref.name)
        if pc is None:
            return 0, f"PriorityClass {ref.name} doesn't exist"
        return pc.value, ""
    # Several global defaults: Kueue takes the lowest value.
    defaults = sorted((pc.value, pc.name) for pc in state.priority_classes.values() if pc.global_default)
    return (defaults[0][0], "") if defaults else (0, "")


def fold(state: State, event: ClusterEvent) -> State:
    """Apply one event to the state (in place) and return it."""
    state.now = max(state.now, event.time)
    state.seq += 1
    if state.index.dirty and not _is_configuration(event):
        # Workload events update the indices incrementally, so they must be current (after a
        # configuration change or a snapshot load they are rebuilt here, once).
        state.ensure_indexed()
    if state.afs:
        admissionfair.advance(state, state.now)  # samples due before this event see the usage before it
    if state.slices:
        from services.core.scaleup import retarget

        event = retarget(state, event)  # a Job's news once a newer workload slice replaced its first
    _FOLD[type(event)](state, event)
    if state.slices:
        from services.core.scaleup import drop_pending_slice

        drop_pending_slice(state, event)
    if state.afs or state.config.admission_fair_sharing:
        admissionfair.after_fold(state)
    return state


def _fold_applied(state: State, event: ObjectApplied) -> None:
    _apply(state, event.object)


def _fold_pods_ready(state: State, event: PodsReady | PodsNotReady) -> None:
    rec = state.workloads.get(f"{event.namespace}/{event.name}")
    if rec is None:
        note_anomaly(state, f"pods ready for unknown Workload {event.namespace}/{event.name}")
        return
    if rec.admission is not None:
        from services.core.podsready import on_readiness

        on_readiness(state, rec, ready=isinstance(event, PodsReady))


def _fold_activation(state: State, event: WorkloadActivation) -> None:
    """A Job's Workload set back to ``spec.active: true`` re-activates it; ``false`` on it is the
    actuator writing back a deactivation the scheduler already decided (nothing to do)."""
    rec = state.workloads.get(f"{event.namespace}/{event.name}")
    if rec is None or not event.active or rec.active or not rec.obj.active:
        return
    from services.core.deactivation import reactivate

    reactivate(state, rec)
    _unqueue(state, rec)
    _enqueue(state, rec)


def _fold_applied_decision(state: State, event: DecisionApplied) -> None:
    if f"{event.namespace}/{event.name}" not in state.workloads:
        _note(state, event.namespace, event.name, f"decision {event.decision_id} applied{_on(event.cluster)}")


def _fold_actuation_failed(state: State, event: ActuationFailed) -> None:
    _note(state, event.namespace, event.name, f"decision {event.decision_id} failed{_on(event.cluster)}: {event.error}")
    note_anomaly(state, f"actuation of {event.decision_id} failed: {event.error}")


def _fold_check(state: State, event: AdmissionCheckUpdated) -> None:
    from services.core.checks import fold_update  # it builds on this module

    fold_update(state, event)


def _fold_observed(state: State, event: ProvisioningRequestObserved) -> None:
    from services.core.checks import fold_observed  # it builds on this module

    fold_observed(state, event)


def _fold_tick(state: State, event: ClockTicked) -> None:
    """Time moved on; nothing else (time-based rules read ``state.now``)."""


def _fold_hand_over(state: State, event: TreeHandOver) -> None:
    from services.core.handover import release  # it builds on this module

    release(state, event)


def _fold_adopted(state: State, event: TreeAdopted) -> None:
    from services.core.handover import adopt  # it builds on this module

    adopt(state, event)


def _is_configuration(event: ClusterEvent) -> bool:
    if isinstance(event, ObjectApplied):
        return not isinstance(event.object, o.Workload)
    if isinstance(event, ObjectDeleted):
        return event.kind != "Workload"
    return isinstance(event, ClockTicked)


def _on(cluster: str) -> str:
    return f" on cluster {cluster}" if cluster else ""


def _note(state: State, namespace: str, name: str, what: str) -> None:
    rec = state.workloads.get(f"{namespace}/{name}")
    if rec is None:
        note_anomaly(state, f"{what} for unknown Workload {namespace}/{name}")


def _apply(state: State, obj: o.AnyObject) -> None:
    if isinstance(obj, o.Workload):
        _apply_workload(state, obj)
        return
    if isinstance(obj, o.ResourceFlavor):
        state.flavors[obj.name] = obj
    elif isinstance(obj, o.ClusterQueue):
        state.cluster_queues[obj.name] = obj
        if obj.t9k is not None:
            _resolve_queue_priorities(state, obj.name)
    elif isinstance(obj, o.Cohort):
        state.cohorts[obj.name] = obj
    elif isinstance(obj, o.LocalQueue):
        state.local_queues[f"{obj.namespace}/{obj.name}"] = obj
    elif isinstance(obj, o.Namespace):
        state.namespaces[obj.name] = obj
    elif isinstance(obj, o.WorkloadPriorityClass):
        state.workload_priority_classes[obj.name] = obj
        _resolve_waiting_priorities(state)
        return
    elif isinstance(obj, o.PriorityClass):
        state.priority_classes[obj.name] = obj
        _resolve_waiting_priorities(state)
        return
    elif isinstance(obj, o.AdmissionCheck):
        state.admission_checks[obj.name] = obj
    elif isinstance(obj, o.ProvisioningRequestConfig):
        state.provisioning_configs[obj.name] = obj
    elif isinstance(obj, o.Configuration):
        state.config = obj
    elif isinstance(obj, o.MultiKueueConfig | o.MultiKueueCluster):
        from services.core.placement import fold_object  # it builds on this module

        fold_object(state, obj)
    state.mark_dirty()


def _resolve_waiting_priorities(state: State) -> None:
    """A priority class arrived: workloads that named it get their priority now (Kueue
    resolves the class when it creates the Workload; a later class unblocks it)."""
    for rec in state.workloads.values():
        if rec.priority_error:
            priority, error = resolve_priority(state, rec.obj)
            if not error:
                _requeue_with(state, rec, priority)
                rec.priority_error = ""


def _resolve_queue_priorities(state: State, queue: str) -> None:
    """A T9k Queue arrived or changed: its workloads take its priority (``events.t9k``)."""
    for rec in state.workloads.values():
        ref = rec.obj.priority_ref
        if ref is None or ref.source != t9k.PRIORITY_SOURCE or ref.name != queue:
            continue
        priority, error = resolve_priority(state, rec.obj)
        if not error and (priority != rec.priority or rec.priority_error):
            _requeue_with(state, rec, priority)
            rec.priority_error = ""


def _requeue_with(state: State, rec: WorkloadRecord, priority: int) -> None:
    queue = state.index.queues.get(rec.queued_in) if not state.index.dirty else None
    if queue is not None:
        queue.remove(rec)
    rec.priority = priority
    if rec.admission is not None:
        touch_tree(state, rec.admission.cluster_queue)
    if queue is not None and rec.pending:
        queue.push(rec)


def _apply_workload(state: State, wl: o.Workload) -> None:
    from services.core.scaleup import route

    wl = route(state, wl)  # an elastic workload scaled up: its new slice (services/core/scaleup.py)
    key = f"{wl.namespace}/{wl.name}"
    if wl.maximum_execution_time_seconds is not None:
        state.timed = True
    old = state.workloads.get(key)
    priority, error = resolve_priority(state, wl)
    if old is not None:
        # An update: keep what the scheduler decided; take the new spec. Priority, once
        # resolved, only changes through spec.priority.
        _unqueue(state, old)
        if wl.priority is None and not old.priority_error:
            priority, error = old.priority, ""
        # Kueue rebuilds a workload's Info on every update, dropping its flavor scan progress;
        # FlavorFungibilityPreserveScanProgress carries it over while the scheduling shape
        # (podSets, priority) and ClusterQueue stay the same (pkg/cache/queue/manager.go).
        keep_scan = (state.config.flavor_fungibility_preserve_scan_progress
                     and old.obj.pod_sets == wl.pod_sets and old.priority == priority
                     and state.cluster_queue_for(old.obj)[0] == state.cluster_queue_for(wl)[0])
        was_active, old.obj = old.obj.active, wl
        old.priority, old.priority_error = priority, error
        if old.admission is not None:
            _rescale_usage(state, old)  # an elastic Job scaled down frees quota (services/core/slices.py)
            touch_tree(state, old.admission.cluster_queue)  # a preemption candidate may have changed
        if wl.admission is not None and old.admission is None:
            _take_admission(state, old, wl.admission, wl.reserved_at if wl.reserved_at is not None else state.now)
        if was_active != wl.active:
            from services.core.deactivation import observe_spec

            observe_spec(state, old, was_active)
        _enqueue(state, old)
        if not keep_scan:
            old.last_tried = None
        return
    queue_time = wl.creation_time if wl.creation_time is not None else state.now
    rec = WorkloadRecord(obj=wl, seq=state.seq, queue_time=queue_time, priority=priority, priority_error=error)
    rec.checks = {c.name: c for c in sorted(wl.admission_checks, key=lambda c: c.name)}
    state.workloads[key] = rec
    if wl.admission is not None:
        at = wl.reserved_at if wl.reserved_at is not None else wl.creation_time
        _take_admission(state, rec, wl.admission, at if at is not None else state.now)
        if not wl.active and not rec.evicting:
            state.deactivating[key] = None  # arrived inactive but holding quota: the next cycle evicts it
    _enqueue(state, rec)


def _rescale_usage(state: State, rec: WorkloadRecord) -> None:
    """``rec``'s usage recounted from its admission and its podSets' counts now."""
    adm = rec.admission
    assert adm is not None
    usage = admission_usage(adm, rec.obj.pod_sets)
    if usage == rec.usage:
        return
    state.generations[adm.cluster_queue] = state.generations.get(adm.cluster_queue, 0) + 1
    if not state.index.dirty and adm.cluster_queue in state.cluster_queues:
        node = state.cq_node(adm.cluster_queue)
        for fr, v in sorted(rec.usage.items()):
            node.remove_usage(fr, v)
        for fr, v in sorted(usage.items()):
            node.add_usage(fr, v)
    rec.usage = usage
    requeue_inadmissible(state, adm.cluster_queue)  # Kueue: QueueAssociatedInadmissibleWorkloadsAfter


def _take_admission(state: State, rec: WorkloadRecord, adm: o.Admission, at: int) -> None:
    """A workload that arrives holding quota: its usage counts even above today's quota. If it
    arrives already being evicted, it keeps that quota until its eviction completes."""
    reserve_quota(state, rec, adm, at)
    rec.set_condition(cond.quota_reserved(adm.cluster_queue, at))
    if rec.checks:  # checks given with it: admitted once all are Ready (settled by the next cycle)
        state.checks_changed[rec.key] = None
    ready = all(c.state == o.CheckState.READY for c in rec.checks.values())
    rec.set_condition(cond.admitted(at) if ready else cond.pending_admission_checks(at))
    ev = rec.obj.eviction
    if ev is not None:
        rec.evicting = True
        rec.set_condition(cond.evicted(ev.reason, ev.message, ev.time if ev.time is not None else at))


def reserve_quota(state: State, rec: WorkloadRecord, adm: o.Admission, at: int) -> None:
    """``rec`` holds quota from now on. Its usage enters the tree now if the ClusterQueue is
    indexed; otherwise (a ClusterQueue not applied yet) the next rebuild counts it."""
    rec.admission = adm
    rec.usage = admission_usage(adm, rec.obj.pod_sets)
    rec.reserved_at = at
    if not state.index.dirty and adm.cluster_queue in state.cluster_queues:
        node = state.cq_node(adm.cluster_queue)
        for fr, v in sorted(rec.usage.items()):
            node.add_usage(fr, v)
        state.index.admitted.setdefault(adm.cluster_queue, {})[rec.key] = None
        touch_tree(state, adm.cluster_queue)


def touch_tree(state: State, cq_name: str) -> None:
    """Something a nomination reads changed under ``cq_name``'s cohort tree: nominations
    remembered there are stale. (While the indices are dirty the configuration epoch, which
    moves with every rebuild, already says so.)"""
    if state.index.dirty or cq_name not in state.cluster_queues:
        return
    root = state.cq_node(cq_name).root().key
    versions = state.cache.tree_versions
    versions[root] = versions.get(root, 0) + 1


def tree_version(state: State, cq_name: str) -> tuple[NodeKey, tuple[int, int]]:
    """(root of ``cq_name``'s tree, its version together with the configuration epoch)."""
    root = state.cq_node(cq_name).root().key
    return root, (state.epoch, state.cache.tree_versions.get(root, 0))


def generation(state: State, cq: str) -> tuple[int, int]:
    return state.epoch, state.generations.get(cq, 0)


def release_usage(state: State, rec: WorkloadRecord) -> None:
    adm = rec.admission
    if adm is not None:
        state.generations[adm.cluster_queue] = state.generations.get(adm.cluster_queue, 0) + 1
    if adm is not None and not state.index.dirty and adm.cluster_queue in state.cluster_queues:
        node = state.cq_node(adm.cluster_queue)
        for fr, v in sorted(rec.usage.items()):
            node.remove_usage(fr, v)
        state.index.admitted.get(adm.cluster_queue, {}).pop(rec.key, None)
        touch_tree(state, adm.cluster_queue)
    rec.admission = None
    rec.usage = {}
    rec.reserved_at = None


def requeue_inadmissible(state: State, cq_name: str) -> None:
    """Quota was freed under ``cq_name``'s cohort tree: parked workloads there get another try
    (Kueue's ``QueueInadmissibleWorkloads`` for the whole cohort)."""
    if state.index.dirty or cq_name not in state.cluster_queues:
        return
    root = state.cq_node(cq_name).root()
    index = state.index
    known = index.tree_queues.get(root.key)
    if known is None or known[0] != len(index.queues):  # queues are only ever added between rebuilds
        names = index.tree_members.get(root.key)
        if names is None:
            names = index.tree_members[root.key] = _cluster_queues_under(root)
        known = index.tree_queues[root.key] = (len(index.queues), [q for n in names
                                                                   if (q := index.queues.get(n)) is not None])
    for queue in known[1]:
        if queue.inadmissible:  # most of a large cohort's queues have nothing parked
            queue.unpark_all(state.workloads)


def _cluster_queues_under(node: Node) -> list[str]:
    if node.is_cluster_queue:
        return [node.name]
    out: list[str] = []
    for child in node.children:
        out.extend(_cluster_queues_under(child))
    return out


def unqueue(state: State, rec: WorkloadRecord) -> None:
    """Take a workload out of its ClusterQueue's queue (a replaced workload slice, say)."""
    _unqueue(state, rec)


def _unqueue(state: State, rec: WorkloadRecord) -> None:
    if rec.queued_in and not state.index.dirty:
        queue = state.index.queues.get(rec.queued_in)
        if queue is not None:
            queue.remove(rec)
    rec.queued_in = ""


def _enqueue(state: State, rec: WorkloadRecord) -> None:
    """Put a pending workload in its ClusterQueue's queue, or record why it has none."""
    if not rec.pending:
        return  # finished
    if not rec.active:
        rec.pending_reason = PendingReason.INACTIVE  # deactivated: not queued until re-activated
        return
    if rec.requeue_at is not None:
        if rec.requeue_at > state.now:
            # Evicted after a PodsReady timeout or by an admission check's Retry: podsready.release queues it.
            state.backing_off[rec.key] = None
            rec.pending_reason = PendingReason.BACKING_OFF
            return
        # The back-off passed before the eviction completed: queued at once, as Kueue does.
        rec.requeue_at = None
        rec.set_condition(cond.backoff_finished(state.now))
    cq, problem = state.cluster_queue_for(rec.obj)
    if problem:
        lq = state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}")
        stopped = lq is not None and lq.cluster_queue in state.cluster_queues and lq.stop_policy != o.StopPolicy.NONE
        rec.set_condition(cond.pending_as(queue_problem_reason(state.config, stopped), problem, state.now))
        rec.pending_reason = PendingReason.QUEUE_NOT_FOUND
        return
    if state.index.dirty:
        rec.queued_in = cq
        return  # the rebuild will place it
    rec.queued_in = cq
    queue = state.index.queues.setdefault(cq, ClusterQueueQueue())
    if rec.inadmissible:
        queue.inadmissible[rec.key] = None
    else:
        queue.push(rec)


def enqueue(state: State, rec: WorkloadRecord) -> None:
    """Put a pending workload in its queue (or record why it has none)."""
    _enqueue(state, rec)


class _Table(Protocol):
    """A table of configuration objects by key, as far as a delete needs it."""

    def pop(self, key: str, default: None, /) -> object: ...


def _delete(state: State, ev: ObjectDeleted) -> None:
    if ev.kind == "Workload":
        key = f"{ev.namespace}/{ev.name}"
        rec = state.workloads.pop(key, None)
        if rec is None:
            note_anomaly(state, f"delete of unknown Workload {key}")
            return
        _unqueue(state, rec)
        cq = rec.admission.cluster_queue if rec.admission else ""
        release_usage(state, rec)
        if cq:
            requeue_inadmissible(state, cq)
        return
    tables: dict[str, _Table] = {
        "ResourceFlavor": state.flavors,
        "ClusterQueue": state.cluster_queues,
        "Cohort": state.cohorts,
        "LocalQueue": state.local_queues,
        "Namespace": state.namespaces,
        "WorkloadPriorityClass": state.workload_priority_classes,
        "PriorityClass": state.priority_classes,
        "AdmissionCheck": state.admission_checks,
        "ProvisioningRequestConfig": state.provisioning_configs,
    }
    if ev.kind in ("MultiKueueConfig", "MultiKueueCluster"):
        from services.core.placement import delete_object  # it builds on this module

        delete_object(state, ev.kind, ev.name)
        return
    table = tables.get(ev.kind)
    key = f"{ev.namespace}/{ev.name}" if ev.kind == "LocalQueue" else ev.name
    if table is None or table.pop(key, None) is None:
        note_anomaly(state, f"delete of unknown {ev.kind} {key}")
        return
    state.mark_dirty()


def _finish(state: State, ev: WorkloadFinished) -> None:
    key = f"{ev.namespace}/{ev.name}"
    rec = state.workloads.get(key)
    if rec is None or rec.finished:
        note_anomaly(state, f"finish of unknown or finished Workload {key}")
        return
    _unqueue(state, rec)
    cq = rec.admission.cluster_queue if rec.admission else ""
    release_usage(state, rec)
    rec.finished = True
    rec.set_condition(cond.finished(ev.succeeded, ev.message, ev.time or state.now))
    if cq:
        requeue_inadmissible(state, cq)


def _eviction_completed(state: State, ev: EvictionCompleted) -> None:
    key = f"{ev.namespace}/{ev.name}"
    rec = state.workloads.get(key)
    if rec is None or not rec.evicting:
        note_anomaly(state, f"eviction completion for {key}, which is not being evicted")
        return
    finish_eviction(state, rec)


def finish_eviction(state: State, rec: WorkloadRecord) -> None:
    """The evicted workload's pods are gone: release its quota and put it back in its queue."""
    cq = rec.admission.cluster_queue if rec.admission else ""
    release_usage(state, rec)
    rec.evicting = False
    evicted = rec.conditions.get(ConditionType.EVICTED)
    for c in cond.eviction_completed(evicted, state.now):
        rec.set_condition(c)
    # A workload drained by a stopped queue waits for the queue to restart (Requeued=False).
    if evicted is not None and evicted.reason in (EvictionReason.CLUSTER_QUEUE_STOPPED,
                                                  EvictionReason.LOCAL_QUEUE_STOPPED):
        state.held[rec.key] = None
    rec.inadmissible = False
    _enqueue(state, rec)
    if cq:
        requeue_inadmissible(state, cq)


_FOLD: dict[type, Callable[[State, Any], None]] = {
    ObjectApplied: _fold_applied,
    ObjectDeleted: _delete,
    WorkloadFinished: _finish,
    EvictionCompleted: _eviction_completed,
    PodsReady: _fold_pods_ready,
    PodsNotReady: _fold_pods_ready,
    WorkloadActivation: _fold_activation,
    DecisionApplied: _fold_applied_decision,
    ActuationFailed: _fold_actuation_failed,
    ClockTicked: _fold_tick,
    AdmissionCheckUpdated: _fold_check,
    ProvisioningRequestObserved: _fold_observed,
    TreeHandOver: _fold_hand_over,
    TreeAdopted: _fold_adopted,
}
