"""``kueuelog simulate --until D``: simulated time advances, so timeouts and back-offs can be tried.

Without ``--until`` time stands still (the ``simulate`` contract). With it, admitted workloads
run in a tiny simulated cluster, in simulated time from the newest time in the input up to
``D`` later:

- its pods become ready ``kueuelog.io/sim-ready-after`` after each admission (a duration; ``never``:
  a gang whose pods never all start; default: at once);
- it finishes ``kueuelog.io/sim-duration`` after admission (default: it runs past ``--until``);
- an eviction completes at once, and stops the run;
- with admission checks it starts once they are all Ready (``AdmitChecked``), not at the
  reservation; the simulated autoscaler (``--provisioning``) answers each ProvisioningRequest on
  the same timeline (its ETA, its failures and the Retry back-offs play out).

Time jumps from one due moment to the next: a pod readiness, a finish, an autoscaler's answer, or
whatever the scheduler waits for (``podsready.next_deadline``: a PodsReady timeout, a back-off, a maximum execution
time); at each, the due facts are folded and cycles run until nothing changes. Everything is
deterministic: no wall clock, ties in key order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from events.cluster import SIM_DURATION_ANNOTATION
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    ClockTicked,
    ClusterEvent,
    EvictWorkload,
    PodsReady,
    WorkloadFinished,
)
from services.core import podsready
from services.core.cycle import run_cycle
from services.core.placement import heartbeat
from services.core.state import State, finish_eviction, fold
from services.simcluster.durations import DurationError, parse_duration, ready_after_of


def ready_after_ms(annotations: tuple[tuple[str, str], ...]) -> int | None:
    """How long after a start the pods become ready (None: never); at once by default."""
    return ready_after_of(annotations, 0)


def _duration_ms(annotations: tuple[tuple[str, str], ...]) -> int | None:
    raw = dict(annotations).get(SIM_DURATION_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_duration(raw)
    except DurationError:
        return None


@dataclass(slots=True)
class _Run:
    pods: int
    ready_after: int | None  # None: never ready
    duration: int | None  # None: runs past --until
    placed: int = 0
    ready_at: int | None = None
    end_at: int | None = None
    reported_ready: bool = False


@dataclass
class _Cluster:
    """The running workloads, and the cluster's pod slots (None: room for every pod).

    Pods are placed when the moment's cycles are over, one pod per running workload in turn
    (in admission order), as a scheduler placing the pods of several Jobs created at once: two
    gangs started together can each end up with part of their pods (the all-or-nothing deadlock).
    A workload whose pods are all placed is ready ``sim-ready-after`` later and finishes
    ``sim-duration`` after that."""

    slots: int | None = None
    runs: dict[str, _Run] = field(default_factory=dict)  # in admission order

    def start(self, state: State, key: str) -> None:
        rec = state.workloads[key]
        annotations = rec.obj.annotations
        adm = rec.admission
        pods = sum(psa.count for psa in adm.pod_set_assignments) if adm is not None else 0
        self.runs.pop(key, None)
        self.runs[key] = _Run(pods, ready_after_ms(annotations), _duration_ms(annotations))

    def stop(self, key: str) -> None:
        self.runs.pop(key, None)

    def place(self, now: int) -> None:
        free = None if self.slots is None else self.slots - sum(r.placed for r in self.runs.values())
        waiting = [r for r in self.runs.values() if r.placed < r.pods]
        while waiting and (free is None or free > 0):
            for r in waiting:
                if free is not None and free <= 0:
                    break
                take = r.pods - r.placed if free is None else 1
                r.placed += take
                free = None if free is None else free - take
            waiting = [r for r in waiting if r.placed < r.pods]
        for r in self.runs.values():
            if r.placed == r.pods and r.ready_at is None and r.ready_after is not None:
                r.ready_at = now + r.ready_after
                r.end_at = None if r.duration is None else r.ready_at + r.duration

    def next_due(self) -> int | None:
        times = [t for r in self.runs.values()
                 for t in ((None if r.reported_ready else r.ready_at), r.end_at) if t is not None]
        return min(times) if times else None

    def due(self, now: int) -> list[ClusterEvent]:
        """The facts due at ``now``, in key order; readiness before a finish."""
        out: list[ClusterEvent] = []
        for key in sorted(self.runs):
            r = self.runs[key]
            namespace, _, name = key.partition("/")
            if r.ready_at is not None and r.ready_at <= now and not r.reported_ready:
                out.append(PodsReady(time=now, namespace=namespace, name=name))
                r.reported_ready = True
            if r.end_at is not None and r.end_at <= now:
                out.append(WorkloadFinished(time=now, namespace=namespace, name=name,
                                            message="simulated run completed"))
                del self.runs[key]
        return out


class Autoscaler(Protocol):
    """The simulated autoscaler on the timeline (``services.app.simulate``): it learns of the
    requests from the decisions and answers them at their times."""

    def take(self, state: State, decisions: Sequence[AnyDecision]) -> None: ...

    def next_due(self) -> int | None: ...

    def fold_due(self, state: State, now: int) -> None: ...


class _NoAutoscaler:
    def take(self, state: State, decisions: Sequence[AnyDecision]) -> None:
        """No ProvisioningRequest is ever answered."""

    def next_due(self) -> int | None:
        return None

    def fold_due(self, state: State, now: int) -> None:
        """Nothing is ever due."""


def _starts(d: AnyDecision) -> bool:
    """Whether the decision starts the workload's pods: a reservation without admission checks,
    or the checks all Ready (unless the podSetUpdates make it fail to start)."""
    if isinstance(d, AdmitWorkload):
        return not d.admission_checks
    return isinstance(d, AdmitChecked) and not d.failed_to_start


@dataclass
class TimedResult:
    cycles: int
    decisions: int


def _settle(state: State, cluster: _Cluster, limit: int, scaler: Autoscaler) -> tuple[int, int]:
    """Cycles until nothing changes at this moment; evictions complete at once, admissions start runs."""
    cycles = decisions = 0
    while cycles < limit:
        result = run_cycle(state)
        scaler.take(state, result.decisions)
        cycles += 1
        decisions += len(result.decisions)
        evicted = sorted(f"{d.namespace}/{d.name}" for d in result.decisions if isinstance(d, EvictWorkload))
        for d in result.decisions:
            if _starts(d):
                cluster.start(state, f"{d.namespace}/{d.name}")
        for key in evicted:
            cluster.stop(key)
            rec = state.workloads.get(key)
            if rec is not None and rec.evicting:
                finish_eviction(state, rec)
        if not result.changed and not evicted and not state.checks_changed:
            break
    cluster.place(state.now)
    return cycles, decisions


def run_until(state: State, until_ms: int, max_cycles: int, slots: int | None = None,
              scaler: Autoscaler | None = None) -> TimedResult:
    """Advance simulated time by ``until_ms`` from the newest time in the input, on a cluster with
    ``slots`` pod slots (None: room for every pod), ProvisioningRequests answered by ``scaler``."""
    scaler = scaler or _NoAutoscaler()
    cluster = _Cluster(slots)
    # Workloads that arrived admitted are running: their pods count as just started.
    for key in sorted(state.workloads):
        rec = state.workloads[key]
        if rec.admission is not None and not rec.finished and not rec.evicting:
            cluster.start(state, key)
    end = state.now + until_ms
    cycles, decisions = _settle(state, cluster, max_cycles, scaler)
    while cycles < max_cycles:
        times = [t for t in (cluster.next_due(), podsready.next_deadline(state), scaler.next_due()) if t is not None]
        nxt = max(min(times), state.now) if times else None
        if nxt is None or nxt > end:
            break
        fold(state, ClockTicked(time=nxt))
        heartbeat(state)  # simulated worker clusters (MultiKueue) are never silent
        for ev in cluster.due(nxt):
            fold(state, ev)
        scaler.fold_due(state, nxt)
        c, d = _settle(state, cluster, max_cycles - cycles, scaler)
        cycles, decisions = cycles + c, decisions + d
    if state.now < end:
        fold(state, ClockTicked(time=end))
    return TimedResult(cycles=cycles, decisions=decisions)
