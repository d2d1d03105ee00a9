"""A cohort tree leaving one shard's state and joining another's (``events.shardmap`` has the
protocol around it).

:func:`release` runs when a shard folds the :class:`~events.messages.TreeHandOver` marker for a
tree: every part of the state that belongs to the tree — its Cohorts, ClusterQueues, LocalQueues,
the Workloads queued in or admitted to it (with their admissions, conditions, queue order and
back-off, where MultiKueue placed them and an elastic Job's chain of slices), their admission fair
sharing ledgers and the ClusterQueues' generations — is taken out
of the state, with no decision, and returned as a partial state in the snapshot encoding. From
that event on this shard cannot decide for the tree: it no longer knows it.

:func:`adopt` runs when the new shard folds the :class:`~events.messages.TreeAdopted` event that
carries that partial state: the parts are put into its state as they were, so its cycles go on
deciding for the tree where the old shard stopped. A workload's place in its queue is kept: the
shard's event counter (``seq``, the last tie-breaker of queue order) moves past the tree's, so
what arrives later queues after what was handed over, as it would have on the old shard.

Both only rebuild the indices and drop the cycle's caches (derived, rebuilt from the canonical
state); neither touches the other trees (no epoch bump, nothing unparked), so the trees that stay
decide exactly as before.
"""

from __future__ import annotations

import msgspec

from events import objects as o
from events.messages import TreeAdopted, TreeHandOver
from services.core.derived import Cache
from services.core.state import State, note_anomaly


def root_of_cohort(state: State, cohort: str) -> str:
    seen: list[str] = []
    while (parent := _parent(state, cohort)) and cohort not in seen:
        seen.append(cohort)
        cohort = parent
    return cohort


def _parent(state: State, cohort: str) -> str:
    spec = state.cohorts.get(cohort)
    return "" if spec is None else spec.parent


def root_of_cluster_queue(state: State, name: str) -> str:
    cq = state.cluster_queues.get(name)
    return root_of_cohort(state, cq.cohort) if cq is not None and cq.cohort else name


def _workload_cluster_queue(state: State, wl: o.Workload, admitted_to: str) -> str:
    """Where a workload counts: the ClusterQueue holding its quota, else its LocalQueue's."""
    if admitted_to:
        return admitted_to
    lq = state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
    if lq is not None:
        return lq.cluster_queue
    cq = state.cluster_queues.get(wl.queue_name)
    return wl.queue_name if cq is not None and cq.t9k is not None else ""


def tree_parts(state: State, root: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """(Cohorts, ClusterQueues, LocalQueue keys, Workload keys) of the tree, each sorted."""
    cohorts = sorted(name for name in state.cohorts if root_of_cohort(state, name) == root)
    cqs = sorted(name for name in state.cluster_queues if root_of_cluster_queue(state, name) == root)
    members = set(cqs)
    lqs = sorted(key for key, lq in state.local_queues.items() if lq.cluster_queue in members)
    workloads = sorted(key for key, rec in state.workloads.items()
                       if _workload_cluster_queue(state, rec.obj, "" if rec.admission is None
                                                  else rec.admission.cluster_queue) in members)
    return cohorts, cqs, lqs, workloads


def release(state: State, event: TreeHandOver) -> None:
    """Take the tree out of ``state`` (see the module docstring); its encoded parts wait in
    ``state.released`` for the scheduler to write them out."""
    from services.core.snapshot import encode_state  # it builds on the state module, as this does

    cohorts, cqs, lqs, workloads = tree_parts(state, event.root)
    part = State(now=state.now, seq=state.seq, epoch=state.epoch, timed=state.timed)
    part.cohorts = {name: state.cohorts.pop(name) for name in cohorts}
    part.cluster_queues = {name: state.cluster_queues.pop(name) for name in cqs}
    part.generations = {name: state.generations.pop(name) for name in cqs if name in state.generations}
    part.local_queues = {key: state.local_queues.pop(key) for key in lqs}
    part.afs = {key: state.afs.pop(key) for key in lqs if key in state.afs}
    part.workloads = {key: state.workloads.pop(key) for key in workloads}
    for name in ("held", "deactivating", "backing_off", "checks_changed"):
        mine, theirs = getattr(part, name), getattr(state, name)
        for key in [k for k in theirs if k in part.workloads]:
            mine[key] = theirs.pop(key)
    # An elastic Job's slice chain (first slice -> newest) lives where its slices do.
    part.slices = {k: state.slices.pop(k) for k in [k for k, v in state.slices.items()
                                                     if k in part.workloads or v in part.workloads]}
    mk, part_mk = state.multikueue, part.multikueue  # where its workloads run (the workers are everyone's)
    part_mk.placements = {k: mk.placements.pop(k) for k in workloads if k in mk.placements}
    part_mk.cluster_names = {k: mk.cluster_names.pop(k) for k in workloads if k in mk.cluster_names}
    _reindex(state)
    state.released.append((event.handover, encode_state(part)))


def adopt(state: State, event: TreeAdopted) -> None:
    """Put a released tree's parts into ``state`` (see the module docstring)."""
    from services.core.snapshot import decode_state

    try:
        part = decode_state(bytes(event.state))
    except (msgspec.DecodeError, ValueError) as e:
        note_anomaly(state, f"hand-over {event.handover} of tree {event.root}: unreadable state: {e}")
        return
    clash = sorted({*part.cluster_queues} & {*state.cluster_queues})
    if clash:  # a second copy of the same hand-over, or a tree this shard already has
        note_anomaly(state, f"hand-over {event.handover} of tree {event.root}: ClusterQueue {clash[0]} "
                            "is already here: not adopted again")
        return
    for rec in part.workloads.values():
        # A flavor search that could resume on the old shard (its ClusterQueue unchanged since)
        # can resume here: the generation it was recorded at is restated in this shard's epoch.
        name = _workload_cluster_queue(part, rec.obj, "" if rec.admission is None else rec.admission.cluster_queue)
        if rec.last_generation == (part.epoch, part.generations.get(name, 0)):
            rec.last_generation = (state.epoch, part.generations.get(name, 0))
    state.cohorts.update(part.cohorts)
    state.cluster_queues.update(part.cluster_queues)
    state.generations.update(part.generations)
    state.local_queues.update(part.local_queues)
    state.afs.update(part.afs)
    state.workloads.update(part.workloads)
    for name in ("held", "deactivating", "backing_off", "checks_changed"):
        getattr(state, name).update(getattr(part, name))
    state.slices.update(part.slices)
    state.multikueue.placements.update(part.multikueue.placements)
    state.multikueue.cluster_names.update(part.multikueue.cluster_names)
    state.timed = state.timed or part.timed
    state.seq = max(state.seq, part.seq)
    _reindex(state)


def _reindex(state: State) -> None:
    state.index.dirty = True  # rebuilt before the next use; the canonical state is complete
    state.cache = Cache()
