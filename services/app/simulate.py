"""``kueuelog simulate``: Kueue manifests in, Workloads with status out, in simulated time.

The shell around the pure core: it reads the files, folds every object as an
``ObjectApplied`` event in input order, runs scheduling cycles (exactly N, or
until nothing changes, completing evictions at once between cycles, those of
workloads that arrived being evicted included) and hands
the state to a renderer.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from events import objects as o
from events.cluster import KUEUE_GROUP, WORKLOAD_SLICE_REPLACEMENT_FOR
from events.manifests import Document, format_time, load
from events.messages import (
    AdmitWorkload,
    AnyDecision,
    ClockTicked,
    EvictWorkload,
    ProvisioningRequestObserved,
)
from events.simautoscaler import Behaviour, answers
from services.app import multicluster_input, t9k_input
from services.app.convert import expand
from services.core import admissionfair
from services.core.cycle import run_cycle
from services.core.render import workload_list
from services.core.state import State, finish_eviction, fold
from services.runtime.manifestfiles import read_manifests


@dataclass
class SimulationResult:
    state: State
    cycles: int
    decisions: int
    converged: bool
    refused: list[t9k_input.Refusal] = field(default_factory=list)  # T9k workloads refused at creation
    # ns/name -> the Kueue API version to render each Workload at (v1beta1 when absent).
    versions: dict[str, str] = field(default_factory=dict)


def fold_files(files: dict[str, str]) -> State:
    """Every manifest of every file, folded in order (raises ManifestError on bad input)."""
    return fold_files_screened(files)[0]


def workload_versions(objects: Sequence[tuple[Document, o.AnyObject]]) -> dict[str, str]:
    """The version each Workload is shown at: a Workload's own ``apiVersion``; one made from a
    Job, v1beta2 when the input writes any Kueue object at v1beta2, else v1beta1."""
    api_versions = {str(doc.body.get("apiVersion", "")) for doc, _ in objects}
    made_from_jobs = "v1beta2" if f"{KUEUE_GROUP}/v1beta2" in api_versions else "v1beta1"
    out: dict[str, str] = {}
    for doc, obj in objects:
        if isinstance(obj, o.Workload):
            group, _, version = str(doc.body.get("apiVersion", "")).rpartition("/")
            out[f"{obj.namespace}/{obj.name}"] = version if group == KUEUE_GROUP else made_from_jobs
    return out


def fold_files_screened(files: dict[str, str]) -> tuple[State, list[t9k_input.Refusal]]:
    """:func:`fold_files`, and the T9k workloads refused at creation (``t9k_input``)."""
    return _fold_screened(load(files, expand=expand))  # load validates everything before folding anything


def _fold_screened(documents: Sequence[tuple[Document, o.AnyObject]]) -> tuple[State, list[t9k_input.Refusal]]:
    clusters = multicluster_input.clusters_of(documents)  # worker clusters' objects (MultiKueue)
    objects, refused = t9k_input.prepare([obj for _, obj in documents])
    state = State()
    multicluster_input.fold_objects(state, objects, clusters)
    return state, refused


@dataclass
class _Autoscaler:
    """The simulated autoscaler inside ``simulate``: each ProvisioningRequest a cycle plans is
    answered at simulated times (``events.simautoscaler``); an eviction withdraws its requests."""

    behaviours: dict[str, Behaviour]
    due: list[tuple[int, int, ProvisioningRequestObserved]] = field(default_factory=list)
    seq: int = 0

    def take(self, state: State, decisions: Sequence[AnyDecision]) -> None:
        for d in decisions:
            if isinstance(d, AdmitWorkload):
                for plan in d.provisioning_requests or ():
                    for delay, ev in answers(plan, d.namespace, d.name, self.behaviours):
                        self.seq += 1
                        heapq.heappush(self.due, (state.now + delay, self.seq, ev))
            elif isinstance(d, EvictWorkload):
                self.due = [x for x in self.due if (x[2].namespace, x[2].workload) != (d.namespace, d.name)]
                heapq.heapify(self.due)

    def next_due(self) -> int | None:
        """When the next answer is due (``simulate --until``'s timeline), None: none is."""
        return self.due[0][0] if self.due else None

    def fold_due(self, state: State, now: int) -> None:
        """Fold every answer due by ``now`` (the timeline's clock is there already)."""
        while self.due and self.due[0][0] <= now:
            _, _, ev = heapq.heappop(self.due)
            fold(state, msgspec.structs.replace(ev, time=now))

    def advance(self, state: State) -> bool:
        """Fold what is due next (a request's answer, else the end of a back-off); False if nothing is."""
        if self.due:
            at, _, ev = heapq.heappop(self.due)
            fold(state, msgspec.structs.replace(ev, time=max(at, state.now)))
            while self.due and self.due[0][0] <= state.now:
                _, _, ev = heapq.heappop(self.due)
                fold(state, msgspec.structs.replace(ev, time=state.now))
            return True
        waits = [r.requeue_at for k in state.backing_off if (r := state.workloads.get(k)) and r.requeue_at is not None]
        if waits:
            fold(state, ClockTicked(time=max(min(waits), state.now)))
            return True
        return False


def run(state: State, cycles: int | None, max_cycles: int | None = None,
        behaviours: dict[str, Behaviour] | None = None) -> SimulationResult:
    limit = cycles if cycles is not None else (max_cycles or 20 * (len(state.workloads) + 10))
    scaler = _Autoscaler(behaviours or {})
    decisions = 0
    # Workloads that arrived already being evicted finish like those evicted in a cycle: after it.
    arrived_evicting = sorted(k for k, r in state.workloads.items() if r.evicting)
    pending_evictions: list[str] = []
    ran = 0
    converged = cycles is None
    while ran < limit:
        for key in pending_evictions:
            rec = state.workloads.get(key)
            if rec is not None and rec.evicting:
                finish_eviction(state, rec)
        pending_evictions = []
        result = run_cycle(state)
        scaler.take(state, result.decisions)
        ran += 1
        decisions += len(result.decisions)
        pending_evictions = [f"{d.namespace}/{d.name}" for d in result.decisions if isinstance(d, EvictWorkload)]
        if ran == 1:
            pending_evictions += arrived_evicting
        quiet = not result.changed and not pending_evictions and not state.checks_changed
        if cycles is None and quiet and not scaler.advance(state):
            break
    else:
        if cycles is None:
            converged = False
            print(f"warning: stopped after {limit} cycles without reaching a steady state", file=sys.stderr)
    if cycles is None:
        for key in pending_evictions:
            rec = state.workloads.get(key)
            if rec is not None and rec.evicting:
                finish_eviction(state, rec)
    return SimulationResult(state=state, cycles=ran, decisions=decisions, converged=converged)


def run_timed(state: State, until_ms: int, cycles: int | None = None, pods: int | None = None,
              behaviours: dict[str, Behaviour] | None = None) -> SimulationResult:
    """``--until``: simulated time runs (``services.app.timeline``), the simulated autoscaler
    answering ProvisioningRequests on the same timeline."""
    from services.app.timeline import run_until

    limit = cycles if cycles is not None else 20 * (len(state.workloads) + 10) * 10
    timed = run_until(state, until_ms, limit, pods, _Autoscaler(behaviours or {}))
    return SimulationResult(state=state, cycles=timed.cycles, decisions=timed.decisions,
                            converged=timed.cycles < limit)


def simulate(paths: Sequence[str], cycles: int | None, until_ms: int | None = None,
             pods: int | None = None, behaviours: dict[str, Behaviour] | None = None) -> SimulationResult:
    documents = load(read_manifests(paths), expand=expand)
    state, refused = _fold_screened(documents)
    if until_ms is None:
        result = run(state, cycles, behaviours=behaviours)
    else:
        result = run_timed(state, until_ms, cycles, pods, behaviours)
    result.refused = refused
    result.versions = workload_versions(documents)
    for first, newest in sorted(result.state.slices.items()):  # an elastic Job's slices: as its first Workload
        version = result.versions.get(first)
        key = newest
        while version is not None and key not in result.versions and key in result.state.workloads:
            result.versions[key] = version
            key = dict(result.state.workloads[key].obj.annotations).get(WORKLOAD_SLICE_REPLACEMENT_FOR, "")
    return result


def result_list(result: SimulationResult) -> dict[str, Any]:
    """Every Workload, refused ones included, sorted by namespace/name: ``simulate``'s output."""
    doc = workload_list(result.state, result.versions)
    if result.refused:
        doc["items"] = sorted(
            doc["items"] + [t9k_input.refused_object(result.state, wl, why) for wl, why in result.refused],
            key=lambda item: (item["metadata"]["namespace"], item["metadata"]["name"]))
    # With admission fair sharing configured, each LocalQueue's usage history follows the Workloads.
    lqs = [admissionfair.local_queue_object(result.state, key, format_time) for key in sorted(result.state.afs)]
    doc["items"].extend(lq for lq in lqs if lq is not None)
    return doc


def admission_fair_sharing_rows(state: State) -> list[tuple[str, str, str, str, str]]:
    """(LocalQueue, ClusterQueue, weight, consumed resources, usage) per LocalQueue when admission
    fair sharing is configured: the table ``simulate`` prints after the Workloads."""
    rows = []
    for key in sorted(state.afs):
        lq = state.local_queues.get(key)
        status = admissionfair.status(state, key)
        if lq is None or status is None:
            continue
        consumed = status["consumedResources"]
        assert isinstance(consumed, dict)
        rows.append((key, lq.cluster_queue, admissionfair.quantity(lq.fair_sharing_weight * 10**6),
                     ", ".join(f"{r}={v}" for r, v in consumed.items()) or "-",
                     f"{admissionfair.lq_usage(state, key):.6g}"))
    return rows
