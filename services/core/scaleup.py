"""An elastic Job scaled up: a new workload slice that replaces the admitted one once admitted.

Kueue (ElasticJobsViaWorkloadSlices, ``pkg/workloadslicing`` and the scheduler) does not grow an
admitted workload in place. The Job's reconciler creates a new Workload, the *slice*, with the new
counts and the annotation ``kueue.x-k8s.io/workload-slice-replacement-for: <old namespace/name>``.
The scheduler treats the old slice's quota as the new slice's own (``ReplacedWorkloadSlice``):

- each podSet must take the flavors the old slice holds, resource by resource (a flavor that
  differs does not fit: "could not assign F flavor since the original workload is assigned: G");
- what is checked against the quota, and counted for the rest of the cycle, is only the
  difference, new requests minus the old slice's (``findFlavorForPodSets``, ``Assignment.append``);
- the old slice is not a preemption target of its own replacement (Kueue filters it out of the
  targets, ``FindReplacedSliceTarget``; here it is never a candidate);
- once the new slice is admitted the old one is finished, reason ``WorkloadSliceReplaced``
  (``replaceWorkloadSlice``). Here that is part of the admission decision itself
  (``AdmitWorkload.replaced_slice``), so no state ever counts both slices' quota.

A later version of the same Workload (a later document in ``simulate``, a Workload the watcher
republishes for a running Job) whose counts grow while it holds quota becomes such a slice, as
Kueue's ``EnsureWorkloadSlices`` decides: the same podSets, counts not equal and not a scale-down,
the current slice holding quota. ``State.slices`` remembers, per first slice, the newest one, so
later versions (and the Job's news: finished, pods ready, deleted) reach the slice that stands for
the Job now. A pending slice is updated in place, as Kueue does.

The slice's name is ours: the first slice's name, then ``-slice-<n>`` (Kueue hashes the Job's
generation into it; the fold does not know the Job).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec

from events import conditions as cond
from events import objects as o
from events.cluster import (
    ELASTIC_JOB_ANNOTATION,
    WORKLOAD_SLICE_NAME_ANNOTATION,
    WORKLOAD_SLICE_REPLACEMENT_FOR,
    ConditionReason,
    ConditionType,
)
from events.messages import (
    ClusterEvent,
    EvictionCompleted,
    ObjectDeleted,
    PodsNotReady,
    PodsReady,
    WorkloadActivation,
    WorkloadFinished,
)
from services.core.slices import scaled_down, scaled_usage

if TYPE_CHECKING:
    from services.core.records import WorkloadRecord
    from services.core.state import State

E = TypeVar("E", bound=ClusterEvent)

MAX_BASE: Final = 230
"""The first slice's name is cut to this many characters in a slice's name (a name is at most 253)."""


@dataclass(frozen=True, slots=True)
class OldSlice:
    """What a new slice takes over from the slice it replaces, per podSet name: the flavor of each
    resource and the requests its admission counts (``TotalRequests`` of Kueue's ``workload.Info``)."""

    key: str
    flavors: dict[str, dict[str, str]]
    requests: dict[str, dict[str, int]]

    def mismatch(self, pod_set: str, flavor: str, resources: list[str]) -> str:
        """Why ``flavor`` cannot serve ``resources`` of ``pod_set`` ("" when it can)."""
        held = self.flavors.get(pod_set, {})
        for res in sorted(resources):
            original = held.get(res, "")
            if original != flavor:
                return f"could not assign {flavor} flavor since the original workload is assigned: {original}"
        return ""

    def delta(self, pod_set: str, requests: dict[str, int]) -> dict[str, int]:
        """``requests`` less what the old slice's podSet already holds."""
        held = self.requests.get(pod_set, {})
        return {res: v - held.get(res, 0) for res, v in requests.items()}


def replacement_for(wl: o.Workload) -> str:
    return dict(wl.annotations).get(WORKLOAD_SLICE_REPLACEMENT_FOR, "")


def is_elastic(wl: o.Workload) -> bool:
    return dict(wl.annotations).get(ELASTIC_JOB_ANNOTATION) == "true"


def replaced_slice(state: State, rec: WorkloadRecord, cq_name: str) -> WorkloadRecord | None:
    """The admitted slice ``rec`` replaces, if it holds quota in ``cq_name`` (Kueue looks it up
    among the ClusterQueue's workloads, in the same namespace); None: ``rec`` is an ordinary workload."""
    key = replacement_for(rec.obj)
    if not key or key == rec.key:
        return None
    old = state.workloads.get(key)
    if old is None or old.finished or old.admission is None or old.admission.cluster_queue != cq_name:
        return None
    if old.obj.namespace != rec.obj.namespace:
        return None
    return old


def old_slice(old: WorkloadRecord) -> OldSlice:
    adm = old.admission
    assert adm is not None
    counts = {ps.name: ps.count for ps in old.obj.pod_sets}
    return OldSlice(
        key=old.key,
        flavors={psa.name: dict(psa.flavors) for psa in adm.pod_set_assignments},
        requests={psa.name: dict(scaled_usage(psa, counts.get(psa.name, psa.count)))
                  for psa in adm.pod_set_assignments},
    )


def finish_replaced(state: State, old: WorkloadRecord, by: str) -> None:
    """The old slice is done: its quota goes back and it is ``Finished`` (WorkloadSliceReplaced)."""
    from services.core.state import release_usage, requeue_inadmissible, unqueue

    if old.finished:
        return
    unqueue(state, old)
    cq = old.admission.cluster_queue if old.admission is not None else ""
    release_usage(state, old)
    old.finished = True
    old.set_condition(cond.condition(
        ConditionType.FINISHED, True, ConditionReason.SLICE_REPLACED,
        f"Replaced to accommodate the workload slice {by} due to workload slice aggregation", state.now))
    if cq:
        requeue_inadmissible(state, cq)


# --- the fold: which slice a Workload applied stands for -----------------------------------------


def newest_slice(state: State, key: str) -> str:
    """The key of the newest slice of the chain that ``key`` started (``key`` itself if none)."""
    return state.slices.get(key, key)


def route(state: State, wl: o.Workload) -> o.Workload:
    """The Workload to fold for ``wl``: itself; renamed to the newest slice of its chain; or, for
    an elastic workload scaled up while its newest slice holds quota, a new slice replacing it."""
    origin = f"{wl.namespace}/{wl.name}"
    current_key = newest_slice(state, origin)
    current = state.workloads.get(current_key)
    if current is None or current.finished:
        return wl
    if current_key != origin:
        wl = msgspec.structs.replace(wl, name=current.obj.name, uid=current.obj.uid,
                                     annotations=current.obj.annotations, creation_time=current.obj.creation_time,
                                     admission=None, reserved_at=None, eviction=None)
    if not _scaled_up(current, wl):
        return wl
    n = 2
    while state.workloads.get(f"{wl.namespace}/{_slice_name(origin, n)}") is not None:
        n += 1
    name = _slice_name(origin, n)
    annotations = dict(wl.annotations)
    annotations[WORKLOAD_SLICE_REPLACEMENT_FOR] = current_key
    annotations[WORKLOAD_SLICE_NAME_ANNOTATION] = origin.split("/", 1)[1]
    state.slices[origin] = f"{wl.namespace}/{name}"
    uid = hashlib.sha1(f"{wl.namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32]  # as a manifest's
    return msgspec.structs.replace(wl, name=name, uid=uid, annotations=tuple(sorted(annotations.items())),
                                   creation_time=state.now, admission=None, reserved_at=None, eviction=None,
                                   admission_checks=())


_ABOUT_A_WORKLOAD: Final = (WorkloadFinished, EvictionCompleted, PodsReady, PodsNotReady, WorkloadActivation)


def retarget(state: State, event: E) -> E:
    """A Job's news about its first slice, once a newer slice replaced it, is news about the
    newest slice (the watcher names the Job's Workload; the slices are the fold's): its pods
    ready, its eviction completed, finished, deactivated, deleted."""
    if not isinstance(event, _ABOUT_A_WORKLOAD) and not (
            isinstance(event, ObjectDeleted) and event.kind == "Workload"):
        return event
    origin = f"{getattr(event, 'namespace', '')}/{getattr(event, 'name', '')}"
    newest = state.slices.get(origin)
    first = state.workloads.get(origin)
    if newest is None or first is None or not first.finished:
        return event
    current = state.workloads.get(newest)
    if current is not None and current.admission is None and not current.finished:
        # Still waiting to replace the slice that runs: the news is the running slice's.
        current = state.workloads.get(replacement_for(current.obj))
    if current is None:
        return event
    return msgspec.structs.replace(event, name=current.obj.name)


def drop_pending_slice(state: State, event: ClusterEvent) -> None:
    """The Job finished, or its Workload went, while its newest slice still waited to replace the
    admitted one: the waiting slice goes too (it would otherwise be admitted for a Job that is over).
    The admitted one was evicted instead: it is finished as replaced, as Kueue's
    ``normalizeActiveSlices`` finishes an evicted slice, and the waiting slice, holding nothing to
    take over, is admitted as a workload of its own."""
    if not isinstance(event, WorkloadFinished | ObjectDeleted | EvictionCompleted):
        return
    gone = f"{event.namespace}/{event.name}"
    waiting = [state.workloads[k] for k in sorted(state.slices.values()) if k in state.workloads]
    rec = next((r for r in waiting if replacement_for(r.obj) == gone), None)
    if rec is None or rec.finished or rec.admission is not None:
        return
    if isinstance(event, EvictionCompleted):
        old = state.workloads.get(gone)
        if old is not None and old.admission is None and not old.finished:
            finish_replaced(state, old, rec.key)
        return
    from services.core.state import unqueue

    unqueue(state, rec)
    rec.finished = True
    rec.set_condition(cond.condition(ConditionType.FINISHED, True, ConditionReason.OUT_OF_SYNC,
                                     "The workload slice is out of sync with its parent job", state.now))


def _slice_name(origin: str, n: int) -> str:
    return f"{origin.split('/', 1)[1][:MAX_BASE]}-slice-{n}"


def _scaled_up(current: WorkloadRecord, wl: o.Workload) -> bool:
    """Kueue's ``EnsureWorkloadSlices``: a new slice for an elastic workload whose slice holds quota
    when its podSets are the same by name and their counts changed other than by a scale-down."""
    if current.admission is None or current.evicting or not is_elastic(wl) or wl.admission is not None:
        return False
    before, after = current.obj.pod_sets, wl.pod_sets
    if sorted(ps.name for ps in before) != sorted(ps.name for ps in after):
        return False
    if {ps.name: ps.count for ps in before} == {ps.name: ps.count for ps in after}:
        return False
    return not scaled_down(before, after)
