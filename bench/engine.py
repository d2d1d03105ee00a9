"""Benchmark of the pure quota engine: the baseline scenario decided cycle by cycle.

All workloads are submitted at t=0; a cycle takes no simulated time; admitted
workloads finish after their runtime, and when a cycle admits nothing the clock
jumps to the next finish. Reports CPU seconds, cycles/s, decisions/s, peak RSS
and the average simulated time to admission per class.
"""

from __future__ import annotations

import heapq
import resource
import time
from dataclasses import dataclass

from bench.scenarios import Scenario, baseline, deep_queue, large_scale
from events import objects as o
from events.messages import AdmitWorkload, ClockTicked, EvictWorkload, ObjectApplied, WorkloadFinished
from services.core.cycle import run_cycle
from services.core.state import State, finish_eviction, fold


@dataclass
class EngineResult:
    name: str
    workloads: int
    cycles: int
    decisions: int
    admissions: int
    evictions: int
    cpu_seconds: float
    peak_rss_mib: float
    simulated_seconds: float
    wait_by_class: dict[str, float]
    cycle_ms: list[float]  # CPU per cycle
    heads: int = 1


    def lines(self) -> list[str]:
        waits = ", ".join(f"{k} {v:.1f}s" for k, v in self.wait_by_class.items())
        ordered = sorted(self.cycle_ms)
        p99 = ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] if ordered else float("nan")
        return [
            f"{self.name}{'' if self.heads == 1 else f', {self.heads} heads per ClusterQueue'}: "
            f"{self.workloads} workloads, {self.cycles} cycles, {self.decisions} decisions "
            f"({self.admissions} admissions, {self.evictions} evictions)",
            f"  CPU {self.cpu_seconds:.2f} s -> {self.cycles / self.cpu_seconds:,.0f} cycles/s, "
            f"{self.decisions / self.cpu_seconds:,.0f} decisions/s; CPU per cycle p50 "
            f"{ordered[len(ordered) // 2] if ordered else float('nan'):.1f} ms, p99 {p99:.1f} ms; "
            f"peak RSS {self.peak_rss_mib:.0f} MiB",
            f"  simulated makespan {self.simulated_seconds:.1f} s; average time to admission: {waits}",
        ]


def _advance(state: State, now: int, arrivals: list[tuple[int, int, o.Workload]],
             finishing: list[tuple[int, str]]) -> int:
    """Fold the arrivals and finishes due by ``now``; returns how many workloads finished."""
    finished = 0
    while arrivals and arrivals[-1][0] <= now:
        at, _, wl = arrivals.pop()
        fold(state, ObjectApplied(time=at, object=wl))
    while finishing and finishing[0][0] <= now:
        _, key = heapq.heappop(finishing)
        rec = state.workloads[key]
        if rec.admission is None or rec.evicting:
            continue  # evicted before it finished; it will be admitted (and timed) again
        ns, wl = key.split("/", 1)
        fold(state, WorkloadFinished(time=now, namespace=ns, name=wl))
        finished += 1
    return finished


def run_engine(name: str, scenario: Scenario, heads: int = 1, cycle_cost_ms: int = 0) -> EngineResult:
    """``cycle_cost_ms``: each cycle takes that much simulated time (a scheduler whose cycles are
    slow, as in a large production cluster); 0: cycles take no time."""
    start = time.process_time()
    state = State()
    if heads != 1:
        fold(state, ObjectApplied(time=0, object=o.Configuration(heads_per_cluster_queue=heads)))
    cycle_ms: list[float] = []
    arrivals: list[tuple[int, int, o.Workload]] = []
    for i, obj in enumerate(scenario.objects):
        if isinstance(obj, o.Workload) and scenario.arrival_ms[f"{obj.namespace}/{obj.name}"] > 0:
            arrivals.append((scenario.arrival_ms[f"{obj.namespace}/{obj.name}"], i, obj))
        else:
            fold(state, ObjectApplied(time=0, object=obj))
    arrivals.reverse()  # pop() from the end gives the earliest
    finishing: list[tuple[int, str]] = []
    admitted_at: dict[str, int] = {}
    cycles = decisions = admissions = evictions = 0
    evicting: list[str] = []
    remaining = len(scenario.runtime_ms)
    while remaining:
        for key in evicting:
            rec = state.workloads.get(key)
            if rec is not None and rec.evicting:
                finish_eviction(state, rec)
        t = time.process_time()
        result = run_cycle(state)
        cycle_ms.append((time.process_time() - t) * 1000)
        cycles += 1
        decisions += len(result.decisions)
        evicting = []
        for d in result.decisions:
            key = f"{d.namespace}/{d.name}"
            if isinstance(d, AdmitWorkload):
                admissions += 1
                admitted_at.setdefault(key, state.now)
                heapq.heappush(finishing, (state.now + scenario.runtime_ms[key], key))
            elif isinstance(d, EvictWorkload):
                evictions += 1
                evicting.append(key)
        if cycle_cost_ms:
            fold(state, ClockTicked(time=state.now + cycle_cost_ms))
            remaining -= _advance(state, state.now, arrivals, finishing)
        if result.admitted or evicting:
            continue
        if not finishing and not arrivals:
            break
        now = min(finishing[0][0] if finishing else arrivals[-1][0], arrivals[-1][0] if arrivals else finishing[0][0])
        remaining -= _advance(state, max(now, state.now), arrivals, finishing)
    cpu = time.process_time() - start
    waits: dict[str, list[int]] = {}
    for key, at in admitted_at.items():
        waits.setdefault(scenario.klass[key], []).append(at - scenario.arrival_ms[key])
    return EngineResult(
        name=name, workloads=len(scenario.runtime_ms), cycles=cycles, decisions=decisions,
        admissions=admissions, evictions=evictions, cpu_seconds=cpu,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        simulated_seconds=state.now / 1000,
        wait_by_class={k: sum(v) / len(v) / 1000 for k, v in sorted(waits.items())},
        cycle_ms=cycle_ms, heads=heads,
    )


def main() -> list[str]:
    lines: list[str] = []
    lines += run_engine("baseline (quota engine)", baseline()).lines()
    lines += run_engine("baseline, timed arrivals, with preemption (quota engine)",
                        baseline(preemption=True, timed=True)).lines()
    lines += run_engine("baseline, timed arrivals, with preemption (quota engine)",
                        baseline(preemption=True, timed=True), heads=4).lines()
    lines += run_engine("large-scale (quota engine)", large_scale()).lines()
    lines += run_engine("large-scale (quota engine)", large_scale(), heads=4).lines()
    for heads in (1, 8, 64):  # Kueue issue 14477: one ClusterQueue 536 deep, cycles of ~6 s there
        lines += run_engine("deep queue, 536 x 1 cpu in 64 cpu, 60 s each, cycles of 6 s (quota engine)",
                            deep_queue(), heads=heads, cycle_cost_ms=6000).lines()
    return lines
