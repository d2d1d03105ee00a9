"""MultiKueue placement as a scheduler decision: one log, many clusters, each workload placed once.

Kueue's MultiKueue copies a workload to every worker and lets the first admission win
(``pkg/controller/admissionchecks/multikueue``). Here the single scheduler sees every worker's own
queues — folded from that worker's watcher (:func:`route`: an event whose envelope names a
MultiKueueCluster belongs to that worker, namespaced by cluster in ``state.multikueue``) — and
decides where a workload goes, so there is nothing to race:

1. Quota is reserved on the manager as for any workload; the ClusterQueue's AdmissionCheck with
   ``controllerName: kueue.x-k8s.io/multikueue`` is Pending.
2. At the end of the cycle (:func:`run`) each such workload, oldest reservation first, is tried on
   the MultiKueueConfig's clusters: a worker fits when its LocalQueue of the same namespace and
   name leads to an active ClusterQueue that can admit it now without preemption (Kueue's flavor
   assignment on the worker's quota, counting what is already placed there). Policy ``Ordered``
   (the default, Kueue's ``spec.clusters`` preference order) takes the first that fits;
   ``MostFreeQuota`` (annotation ``kueuelog.io/placement-policy`` on the MultiKueueConfig) the one
   whose ClusterQueue keeps the largest share of its nominal quota free after it, ties in
   ``spec.clusters`` order. :class:`PlaceWorkload` records the choice with the worker's admission:
   the check is Ready ("The workload was admitted on "w1""), ``status.clusterName`` is the worker,
   and the next cycle admits the workload on the manager (AdmitChecked). If no worker fits, the
   check stays Pending and :class:`PlacementWaiting` says why, per cluster.
3. A placement ends (:class:`RemovePlacement`) when the workload finishes (reported by the worker,
   or on the manager), is evicted on the manager, or when its worker is lost: silent (nothing from
   its watcher, heartbeats included) for longer than ``multiKueue.workerLostTimeout`` (log time;
   15 minutes by default), or its MultiKueueCluster deleted or not Active. A lost worker's
   workloads get their check set to Retry ("Admitting remote lost"), so they are evicted and
   requeued on the manager and placed elsewhere; a late report from the lost worker is about a
   workload no longer placed there and changes nothing; a copy it still reports of such a
   workload is removed (``StaleCopy``) once it is reachable again.

Pure: time is ``state.now``; every iteration is over sorted keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import msgspec

from events import objects as o
from events.messages import (
    ActuationFailed,
    AnyDecision,
    ClockTicked,
    ClusterEvent,
    DecisionApplied,
    ObjectApplied,
    ObjectDeleted,
    PlacementEnd,
    PlacementWaiting,
    PlaceWorkload,
    PodsNotReady,
    PodsReady,
    RemovePlacement,
    WorkloadFinished,
)
from events.multikueue_manifest import MULTIKUEUE_CONTROLLER
from services.core.flavors import Mode, Policy, assign, selector_matches
from services.core.mkstate import Placement, WorkerView
from services.core.quota import FR, Node
from services.core.records import WorkloadRecord
from services.core.state import State, fold, note_anomaly, release_usage, reserve_quota

PLACEMENT_DECISIONS = (PlaceWorkload, PlacementWaiting, RemovePlacement)
LOST_MESSAGE = "Admitting remote lost"
_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
_WORKER_KINDS: dict[type, str] = {o.ResourceFlavor: "flavors", o.ClusterQueue: "cluster_queues",
                                  o.Cohort: "cohorts", o.LocalQueue: "local_queues", o.Namespace: "namespaces"}
_KIND_FIELDS = {"ResourceFlavor": "flavors", "ClusterQueue": "cluster_queues", "Cohort": "cohorts",
                "LocalQueue": "local_queues", "Namespace": "namespaces"}


# --- folding: the manager's MultiKueue objects, and what each worker says ----------------------


def fold_object(state: State, obj: o.MultiKueueConfig | o.MultiKueueCluster) -> None:
    mk = state.multikueue
    if isinstance(obj, o.MultiKueueConfig):
        mk.configs[obj.name] = obj
        return
    mk.clusters[obj.name] = obj
    if obj.name not in mk.workers:
        mk.workers[obj.name] = WorkerView(last_seen=state.now)  # the silence is measured from here


def delete_object(state: State, kind: str, name: str) -> None:
    """A deleted MultiKueueCluster is no candidate any more (its placements end at the next cycle);
    its view stays, so that its watcher's events still stay out of the manager's queues."""
    table: dict[str, o.MultiKueueConfig] | dict[str, o.MultiKueueCluster] = (
        state.multikueue.configs if kind == "MultiKueueConfig" else state.multikueue.clusters)
    if table.pop(name, None) is None:
        note_anomaly(state, f"delete of unknown {kind} {name}")


def is_worker(state: State, cluster: str) -> bool:
    return bool(cluster) and cluster in state.multikueue.workers


def route(state: State, cluster: str, event: ClusterEvent) -> State:
    """Fold one event from ``cluster`` (the envelope's cluster name): a worker's into that worker's
    view, everything else into the manager's state as before."""
    if not is_worker(state, cluster):
        return fold(state, event)
    state.now = max(state.now, event.time)
    state.seq += 1
    view = state.multikueue.workers[cluster]
    if state.now - view.last_seen > state.config.multikueue_worker_lost_timeout_ms:
        view.gc_requested.clear()  # back after being lost: what it still runs elsewhere's is removed again
    view.last_seen = state.now  # it spoke when its event reached the log, whatever the event's own time
    if isinstance(event, ObjectApplied) and isinstance(event.object, o.Workload):
        view.copies[f"{event.object.namespace}/{event.object.name}"] = None
    elif isinstance(event, ObjectDeleted) and event.kind == "Workload":
        key = f"{event.namespace}/{event.name}"
        view.copies.pop(key, None)
        view.gc_requested.pop(key, None)
    elif isinstance(event, ObjectApplied):
        table = _WORKER_KINDS.get(type(event.object))
        if table is not None:
            obj = event.object
            assert isinstance(obj, o.ResourceFlavor | o.ClusterQueue | o.Cohort | o.LocalQueue | o.Namespace)
            key = f"{obj.namespace}/{obj.name}" if isinstance(obj, o.LocalQueue) else obj.name
            getattr(view, table)[key] = obj
            state.workers.pop(cluster, None)
    elif isinstance(event, ObjectDeleted):
        table = _KIND_FIELDS.get(event.kind)
        if table is not None:
            key = f"{event.namespace}/{event.name}" if event.kind == "LocalQueue" else event.name
            getattr(view, table).pop(key, None)
            state.workers.pop(cluster, None)
    elif isinstance(event, WorkloadFinished | PodsReady | PodsNotReady):
        _report(state, cluster, event)
    elif isinstance(event, DecisionApplied | ActuationFailed):
        fold(state, msgspec.structs.replace(event, cluster=event.cluster or cluster))
    return state


def heartbeat(state: State) -> None:
    """Every worker speaks now (a ticker per worker cluster): the simulated clusters of ``simulate``,
    whose watchers are never silent."""
    for cluster in sorted(state.multikueue.workers):
        route(state, cluster, ClockTicked(time=state.now))


def _report(state: State, cluster: str, event: WorkloadFinished | PodsReady | PodsNotReady) -> None:
    """A worker's news about a workload counts only while the workload is placed there: a report
    from a worker it was taken from (lost, evicted) cannot bring it back."""
    key = f"{event.namespace}/{event.name}"
    placed = state.multikueue.placements.get(key)
    if placed is None or placed.cluster != cluster:
        note_anomaly(state, f"report from cluster {cluster} about {key}, which is not placed there")
        return
    fold(state, event)


# --- the worker's own admission: can it admit the workload now? ---------------------------------


def worker_state(state: State, cluster: str) -> State:
    """The worker's queues as a scheduler state of their own, with what is placed there as its
    admitted workloads (derived; rebuilt when the worker's objects change)."""
    ws = state.workers.get(cluster)
    if ws is not None:
        return ws
    ws = State()
    view = state.multikueue.workers[cluster]
    for table in ("namespaces", "flavors", "cohorts", "cluster_queues", "local_queues"):
        objs: dict[str, o.AnyObject] = getattr(view, table)
        for key in sorted(objs):
            fold(ws, ObjectApplied(time=0, object=objs[key]))
    ws.ensure_indexed()
    for key in sorted(state.multikueue.placements):
        p = state.multikueue.placements[key]
        if p.cluster == cluster:
            _reserve_on_worker(state, ws, key, p)
    state.workers[cluster] = ws
    return ws


def _reserve_on_worker(state: State, ws: State, key: str, p: Placement) -> None:
    rec = state.workloads.get(key)
    namespace, _, name = key.partition("/")
    wl = rec.obj if rec is not None else o.Workload(namespace=namespace, name=name, uid="", queue_name="", pod_sets=())
    wrec = WorkloadRecord(obj=wl, seq=0, queue_time=0)
    ws.workloads[key] = wrec
    if p.admission.cluster_queue in ws.cluster_queues:
        reserve_quota(ws, wrec, p.admission, p.at)


def _release_on_worker(state: State, cluster: str, key: str) -> None:
    ws = state.workers.get(cluster)
    if ws is None:
        return
    wrec = ws.workloads.pop(key, None)
    if wrec is not None:
        release_usage(ws, wrec)


def _namespace_labels(ws: State, namespace: str) -> dict[str, str]:
    ns = ws.namespaces.get(namespace)
    return dict(ns.labels) if ns is not None else {_NAMESPACE_NAME_LABEL: namespace}


def fit(ws: State, rec: WorkloadRecord) -> tuple[o.Admission | None, str, int]:
    """(the worker's admission, why not, free share in per mille after it) for ``rec`` on a worker."""
    ws.ensure_indexed()
    wl = rec.obj
    lq = ws.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
    if lq is None:
        return None, f"LocalQueue {wl.namespace}/{wl.queue_name} doesn't exist", 0
    cq = ws.cluster_queues.get(lq.cluster_queue)
    if cq is None:
        return None, f"ClusterQueue {lq.cluster_queue} doesn't exist", 0
    if cq.name in ws.index.inactive or cq.stop_policy != o.StopPolicy.NONE or lq.stop_policy != o.StopPolicy.NONE:
        return None, f"ClusterQueue {cq.name} is inactive", 0
    if not selector_matches(cq.namespace_selector, _namespace_labels(ws, wl.namespace)):
        return None, f"ClusterQueue {cq.name}: workload namespace doesn't match ClusterQueue selector", 0
    node = ws.cq_node(cq.name)
    trial = WorkloadRecord(obj=wl, seq=rec.seq, queue_time=rec.queue_time, priority=rec.priority)
    a = assign(ws, cq, trial, Policy(can_preempt_while_borrowing=False, fair_sharing=False),
               lambda fr, v: (Mode.NO_CANDIDATES, node.lowest_subtree_that_fits(fr, v)[0]))
    if a.mode != Mode.FIT:
        return None, f"ClusterQueue {cq.name}: {a.message() or 'insufficient quota'}", 0
    return a.to_admission(cq.name), "", _free_share(node, a.usage)


def _free_share(node: Node, usage: dict[FR, int]) -> int:
    """The smallest share (per mille) of the ClusterQueue's nominal quota left unused after the
    workload, over the (flavor, resource) pairs it uses."""
    share = 1000
    for fr in sorted(usage):
        nominal = node.subtree.get(fr, 0)
        if nominal <= 0:
            return 0
        left = nominal - node.usage.get(fr, 0) - usage[fr]
        share = min(share, max(0, left * 1000 // nominal))
    return share


# --- the cycle's MultiKueue step ------------------------------------------------------------------


class Out(Protocol):
    cycle: int
    time: int
    out: list[AnyDecision]

    def next_id(self) -> str: ...


def multikueue_check(state: State, rec: WorkloadRecord) -> tuple[str, o.MultiKueueConfig | None]:
    """(the workload's multikueue check, its MultiKueueConfig) or ("", None)."""
    for name in sorted(rec.checks):
        ac = state.admission_checks.get(name)
        if ac is not None and ac.controller_name == MULTIKUEUE_CONTROLLER:
            return name, state.multikueue.configs.get(ac.parameters_name)
    return "", None


def worker_lost(state: State, cluster: str) -> bool:
    mk = state.multikueue
    mkc, view = mk.clusters.get(cluster), mk.workers.get(cluster)
    if mkc is None or view is None or mkc.active is False:
        return True
    return state.now - view.last_seen > state.config.multikueue_worker_lost_timeout_ms


def run(state: State, out: Out) -> int:
    """The MultiKueue step at the end of a cycle: end placements that must end, then place what
    waits. Returns the decisions made (each is also applied, as :func:`apply` would)."""
    if not state.multikueue.placements and not state.multikueue.configs:
        return 0
    before = len(out.out)
    for key in sorted(state.multikueue.placements):
        removal = _removal(state, out, key)
        if removal is not None:
            apply(state, removal)
            out.out.append(removal)
    for cluster in sorted(state.multikueue.workers):
        for stale in _stale_copies(state, out, cluster):
            apply(state, stale)
            out.out.append(stale)
    waiting = sorted((rec.reserved_at or 0, key) for key, rec in state.workloads.items()
                     if key not in state.multikueue.placements and _waits(rec))
    for _, key in waiting:
        d = _place(state, out, state.workloads[key])
        if d is not None:
            apply(state, d)
            out.out.append(d)
    return len(out.out) - before


def _waits(rec: WorkloadRecord) -> bool:
    return (rec.admission is not None and not rec.evicting and not rec.finished and bool(rec.checks)
            and any(c.state == o.CheckState.PENDING for c in rec.checks.values()))


def _stale_copies(state: State, out: Out, cluster: str) -> list[RemovePlacement]:
    """Copies a reachable worker reports of manager workloads not placed there, not yet asked to go
    (a worker back after being lost still runs what was placed elsewhere meanwhile)."""
    view = state.multikueue.workers[cluster]
    if not view.copies or worker_lost(state, cluster):
        return []
    found: list[RemovePlacement] = []
    for key in sorted(view.copies):
        placed = state.multikueue.placements.get(key)
        if key in view.gc_requested or key not in state.workloads or (placed is not None and placed.cluster == cluster):
            continue
        ns, _, name = key.partition("/")
        found.append(RemovePlacement(id=f"c{out.cycle}-{len(out.out) + len(found)}", cycle=out.cycle, time=out.time,
                                     namespace=ns, name=name, cluster=cluster, check="",
                                     reason=PlacementEnd.STALE_COPY))
    return found


def _removal(state: State, out: Out, key: str) -> RemovePlacement | None:
    p = state.multikueue.placements[key]
    rec = state.workloads.get(key)
    message = ""
    if rec is None or rec.finished:
        reason = PlacementEnd.WORKLOAD_FINISHED
    elif (rec.admission is None or rec.evicting or p.check not in rec.checks
          or rec.checks[p.check].state != o.CheckState.READY):
        reason = PlacementEnd.EVICTED_ON_MANAGER
    elif worker_lost(state, p.cluster):
        gone = p.cluster not in state.multikueue.clusters
        reason = PlacementEnd.CLUSTER_REMOVED if gone else PlacementEnd.WORKER_LOST
        message = LOST_MESSAGE
    else:
        return None
    ns, _, name = key.partition("/")
    return RemovePlacement(id=out.next_id(), cycle=out.cycle, time=out.time, namespace=ns, name=name,
                           cluster=p.cluster, check=p.check, reason=reason, message=message)


def _place(state: State, out: Out, rec: WorkloadRecord) -> PlaceWorkload | PlacementWaiting | None:
    check, cfg = multikueue_check(state, rec)
    if not check or rec.checks[check].state != o.CheckState.PENDING:
        return None
    if cfg is None:
        ac = state.admission_checks[check]
        return _waiting(state, out, rec, check, f"MultiKueueConfig {ac.parameters_name} doesn't exist")
    fits: list[tuple[int, int, str, o.Admission]] = []
    why: list[str] = []
    for i, cluster in enumerate(cfg.clusters):
        if cluster not in state.multikueue.clusters:
            why.append(f'"{cluster}": MultiKueueCluster {cluster} doesn\'t exist')
            continue
        if worker_lost(state, cluster):
            why.append(f'"{cluster}": the cluster is not active or its watcher is silent')
            continue
        adm, reason, free = fit(worker_state(state, cluster), rec)
        if adm is None:
            why.append(f'"{cluster}": {reason}')
            continue
        fits.append((-free if cfg.policy == o.PlacementPolicy.MOST_FREE_QUOTA else 0, i, cluster, adm))
        if cfg.policy == o.PlacementPolicy.ORDERED:
            break
    if not fits:
        return _waiting(state, out, rec, check, "No worker cluster can admit the workload now: " + "; ".join(why))
    _, _, cluster, adm = min(fits)
    return PlaceWorkload(id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace,
                         name=rec.obj.name, cluster_queue=_cq(rec), cluster=cluster, check=check, admission=adm,
                         message=f'The workload was admitted on "{cluster}"',
                         pod_set_updates=worker_scheduling(state.multikueue.workers[cluster], adm))


def worker_scheduling(view: WorkerView, adm: o.Admission) -> tuple[o.PodSetUpdate, ...]:
    """Each podSet's node selector and tolerations from the worker's flavors it was assigned
    (what Kueue injects into an admitted job's pod template), flavors in name order."""
    out = []
    for psa in adm.pod_set_assignments:
        selector: dict[str, str] = {}
        tolerations: list[o.Toleration] = []
        for name in sorted({f for _, f in psa.flavors}):
            flavor = view.flavors.get(name)
            if flavor is not None:
                selector.update(flavor.node_labels)
                tolerations.extend(t for t in flavor.tolerations if t not in tolerations)
        out.append(o.PodSetUpdate(name=psa.name, node_selector=tuple(sorted(selector.items())),
                                  tolerations=tuple(tolerations)))
    return tuple(out)


def _cq(rec: WorkloadRecord) -> str:
    return rec.admission.cluster_queue if rec.admission is not None else ""


def _waiting(state: State, out: Out, rec: WorkloadRecord, check: str, message: str) -> PlacementWaiting | None:
    if rec.checks[check].message == message:
        return None  # said already: nothing changed
    return PlacementWaiting(id=out.next_id(), cycle=out.cycle, time=out.time, namespace=rec.obj.namespace,
                            name=rec.obj.name, cluster_queue=_cq(rec), check=check, message=message,
                            nominated=tuple(nominated_cluster_names(state, rec)))


# --- applying a placement decision (live and in replay) ------------------------------------------


def apply(state: State, d: AnyDecision) -> None:
    _APPLY[type(d)](state, d)


def _apply_place(state: State, d: PlaceWorkload) -> None:
    key = f"{d.namespace}/{d.name}"
    rec = state.workloads[key]
    p = Placement(cluster=d.cluster, check=d.check, admission=d.admission, at=d.time)
    state.multikueue.placements[key] = p
    state.multikueue.cluster_names[key] = d.cluster
    if d.cluster in state.workers:
        _reserve_on_worker(state, state.workers[d.cluster], key, p)
    _set_check(state, rec, d.check, o.CheckState.READY, d.message, d.time)


def _apply_waiting(state: State, d: PlacementWaiting) -> None:
    rec = state.workloads[f"{d.namespace}/{d.name}"]
    _set_check(state, rec, d.check, o.CheckState.PENDING, d.message, d.time)


def _apply_remove(state: State, d: RemovePlacement) -> None:
    key = f"{d.namespace}/{d.name}"
    view = state.multikueue.workers.get(d.cluster)
    if view is not None:
        view.gc_requested[key] = None  # its copy there goes (the worker's actuator deletes it)
    if d.reason == PlacementEnd.STALE_COPY:
        return  # a copy, not the placement: where it is placed now stays as it is
    state.multikueue.placements.pop(key, None)
    _release_on_worker(state, d.cluster, key)
    rec = state.workloads.get(key)
    if d.reason != PlacementEnd.WORKLOAD_FINISHED or rec is None:
        state.multikueue.cluster_names.pop(key, None)
    lost = d.reason in (PlacementEnd.WORKER_LOST, PlacementEnd.CLUSTER_REMOVED)
    if lost and rec is not None and d.check in rec.checks:
        _set_check(state, rec, d.check, o.CheckState.RETRY, d.message, d.time)


def _set_check(state: State, rec: WorkloadRecord, check: str, st: o.CheckState, message: str, now: int) -> None:
    cur = rec.checks.get(check) or o.AdmissionCheckState(name=check)
    at = cur.last_transition_time if cur.state == st else now
    rec.checks[check] = msgspec.structs.replace(cur, state=st, message=message, last_transition_time=at)
    state.checks_changed[rec.key] = None


_APPLY: dict[type, Callable[[State, AnyDecision], None]] = {
    PlaceWorkload: _apply_place,  # type: ignore[dict-item]
    PlacementWaiting: _apply_waiting,  # type: ignore[dict-item]
    RemovePlacement: _apply_remove,  # type: ignore[dict-item]
}


def nominated_cluster_names(state: State, rec: WorkloadRecord) -> list[str]:
    """``status.nominatedClusterNames`` where Kueue shows it: Kueue's default dispatcher
    (AllAtOnce) nominates every connected worker of the MultiKueueConfig, in name order, once the
    workload holds quota and its other admission checks are Ready, and clears the list when a
    worker admits it (``status.clusterName``; the two never show together). Here: the clusters
    the workload is being tried on while it waits (those that exist and are not lost); none once
    it is placed. Kueue copies the workload to each of them; we copy it nowhere until placed."""
    if rec.key in state.multikueue.placements or rec.key in state.multikueue.cluster_names or not _waits(rec):
        return []
    check, cfg = multikueue_check(state, rec)
    if not check or cfg is None or rec.checks[check].state != o.CheckState.PENDING:
        return []
    if any(c.state != o.CheckState.READY for name, c in sorted(rec.checks.items()) if name != check):
        return []
    return sorted(c for c in cfg.clusters if c in state.multikueue.clusters and not worker_lost(state, c))


def cluster_name(state: State, key: str) -> str:
    """``status.clusterName``: the worker the workload is placed on (or finished on), or ""."""
    return state.multikueue.cluster_names.get(key, "")
