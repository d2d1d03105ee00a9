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

import msgspec

from events import objects as o
from events.manifests import load
from events.messages import (
    AdmitWorkload,
    AnyDecision,
    ClockTicked,
    EvictWorkload,
    ObjectApplied,
    ProvisioningRequestObserved,
)
from events.simautoscaler import Behaviour, answers
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

    def advance(self, state: State) -> bool:
        """Fold what is due next (a request's answer, else the end of a back-off); False if nothing is."""
        if self.due:
            at, _, ev = heapq.heappop(self.due)
            fold(state, msgspec.structs.replace(ev, time=max(at, state.now)))
            while self.due and self.due[0][0] <= state.now:
                _, _, ev = heapq.heappop(self.due)
                fold(state, msgspec.structs.replace(ev, time=state.now))
            return True
        waits = [r.requeue_at for k in state.backoffs if (r := state.workloads.get(k)) and r.requeue_at is not None]
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


def simulate(paths: Sequence[str], cycles: int | None,
             behaviours: dict[str, Behaviour] | None = None) -> SimulationResult:
    return run(fold_files(read_manifests(paths)), cycles, behaviours=behaviours)
