"""``kueuelog simulate``: Kueue manifests in, Workloads with status out, in simulated time.

The shell around the pure core: it reads the files, folds every object as an
``ObjectApplied`` event in input order, runs scheduling cycles (exactly N, or
until nothing changes, completing evictions at once between cycles, those of
workloads that arrived being evicted included) and hands
the state to a renderer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from events import objects as o
from events.cluster import KUEUE_GROUP
from events.manifests import Document, load
from events.messages import EvictWorkload, ObjectApplied
from services.core.cycle import run_cycle
from services.core.state import State, finish_eviction, fold
from services.runtime.manifestfiles import read_manifests


@dataclass
class SimulationResult:
    state: State
    cycles: int
    decisions: int
    converged: bool
    # ns/name -> the Kueue API version to render each Workload at (v1beta1 when absent).
    versions: dict[str, str] = field(default_factory=dict)


def fold_files(files: dict[str, str]) -> State:
    """Every manifest of every file, folded in order (raises ManifestError on bad input)."""
    return _fold(load(files))  # load validates everything before anything is folded


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


def _fold(objects: Sequence[tuple[Document, o.AnyObject]]) -> State:
    state = State()
    for _, obj in objects:
        time = obj.creation_time or 0 if isinstance(obj, o.Workload) else 0
        fold(state, ObjectApplied(time=time, object=obj))
    return state


def run(state: State, cycles: int | None, max_cycles: int | None = None) -> SimulationResult:
    limit = cycles if cycles is not None else (max_cycles or 20 * (len(state.workloads) + 10))
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
        ran += 1
        decisions += len(result.decisions)
        pending_evictions = [f"{d.namespace}/{d.name}" for d in result.decisions if isinstance(d, EvictWorkload)]
        if ran == 1:
            pending_evictions += arrived_evicting
        if cycles is None and not result.changed and not pending_evictions:
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


def simulate(paths: Sequence[str], cycles: int | None) -> SimulationResult:
    objects = load(read_manifests(paths))
    result = run(_fold(objects), cycles)
    result.versions = workload_versions(objects)
    return result
