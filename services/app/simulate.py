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
from dataclasses import dataclass

from events import objects as o
from events.manifests import load
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


def fold_files(files: dict[str, str]) -> State:
    """Every manifest of every file, folded in order (raises ManifestError on bad input)."""
    objects = load(files)  # validate everything before folding anything
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


def simulate(paths: Sequence[str], cycles: int | None, until_ms: int | None = None,
             pods: int | None = None) -> SimulationResult:
    state = fold_files(read_manifests(paths))
    if until_ms is None:
        return run(state, cycles)
    from services.app.timeline import run_until

    limit = cycles if cycles is not None else 20 * (len(state.workloads) + 10) * 10
    timed = run_until(state, until_ms, limit, pods)
    return SimulationResult(state=state, cycles=timed.cycles, decisions=timed.decisions,
                            converged=timed.cycles < limit)
