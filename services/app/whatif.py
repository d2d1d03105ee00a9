"""``kueuelog simulate --from-log``: what would have happened from a point of a real log on, with
changed manifests (more quota, a new flavor, another priority).

1. The state at ``--at`` (an input offset or a time; default the end of the log) is the one
   replay reaches there: what really happened before it is kept as it was.
2. The changed manifests are applied to it at that moment.
3. Simulated time then runs forward with the recorded arrivals — every object applied or deleted
   after ``--at`` arrives at its recorded time — and the recorded run lengths: a workload runs
   as long as its recorded run that finished did (from its last admission to its finish), else
   its ``kueuelog.io/sim-duration``, else ``default_duration_ms``. A workload running at ``--at``
   finishes when it really finished. Evictions complete at once, as in ``kueuelog simulate``.
   Outcomes recorded after ``--at`` (admissions applied, pods ready, finishes, evictions
   completed) are not replayed: the simulation makes its own.
4. The report compares, for every workload pending at ``--at`` or arriving before the horizon,
   when it was admitted for real and in the what-if, per workload and per ClusterQueue, and the
   time-weighted usage per ClusterQueue over the window.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import format_time, load
from events.messages import (
    AdmitWorkload,
    ClusterEvent,
    CycleCompleted,
    EvictWorkload,
    ObjectApplied,
    ObjectDeleted,
    WorkloadFinished,
)
from events.objects import Workload
from services.app.follow import Follower
from services.app.logview import replay
from services.core.cycle import run_cycle
from services.core.orbit import ScanOrbit
from services.core.state import State, finish_eviction, fold
from services.runtime.log import Log
from services.runtime.manifestfiles import read_manifests
from services.simcluster.durations import DurationError, parse_duration

MAX_CYCLES_PER_STEP = 10_000


@dataclass
class Recorded:
    """What the log says happened: arrivals after the start, admissions, finishes, run lengths."""

    arrivals: list[tuple[int, int, ClusterEvent]] = field(default_factory=list)  # (time, offset, event)
    first_admit_after: dict[str, int] = field(default_factory=dict)  # workload -> first admission at/after start
    finishes_after: dict[str, int] = field(default_factory=dict)  # workload -> first finish after start
    durations: dict[str, int] = field(default_factory=dict)  # workload -> last finished run's length
    created: dict[str, int] = field(default_factory=dict)
    end_time: int = 0


@dataclass
class Usage:
    """Time-weighted usage per ClusterQueue and (flavor, resource) between two times."""

    start: int
    last: int = 0
    current: dict[str, dict[str, int]] = field(default_factory=dict)
    area: dict[str, dict[str, int]] = field(default_factory=dict)

    def sample(self, state: State) -> None:
        t = max(state.now, self.start)
        self._accumulate(t)
        if state.index.dirty:
            state.ensure_indexed()
        self.current = {cq: {f"{f}/{r}": v for (f, r), v in sorted(node.usage.items()) if v}
                        for cq, node in sorted(state.index.cluster_queue_nodes.items())}

    def _accumulate(self, t: int) -> None:
        if self.last and t > self.last:
            for cq, usage in self.current.items():
                for fr, v in usage.items():
                    per = self.area.setdefault(cq, {})
                    per[fr] = per.get(fr, 0) + v * (t - self.last)
        self.last = max(self.last, t) or t

    def averages(self, end: int) -> dict[str, dict[str, float]]:
        self._accumulate(end)
        span = max(1, end - self.start)
        return {cq: {fr: a / span for fr, a in sorted(per.items())} for cq, per in sorted(self.area.items())}


@dataclass
class WhatIfResult:
    start_offset: int
    start_time: int
    end_time: int
    changes: list[str]
    real_admit: dict[str, int]
    whatif_admit: dict[str, int]
    created: dict[str, int]
    queue_of: dict[str, str]
    real_usage: dict[str, dict[str, float]]
    whatif_usage: dict[str, dict[str, float]]
    before_start: int  # workloads admitted before the start, left as they were
    state: State | None = None


def _recorded(log: Log, topics: Topics, start: int) -> Recorded:
    rec = Recorded()
    offset = 0
    while batch := log.read(topics.cluster_events, offset, 5000):
        for r in batch:
            try:
                ev = decode_envelope(r.value).event
            except (MalformedRecord, UnknownEventType):
                continue
            rec.end_time = max(rec.end_time, ev.time)
            if isinstance(ev, ObjectApplied) and isinstance(ev.object, Workload) and ev.object.creation_time:
                rec.created.setdefault(f"{ev.object.namespace}/{ev.object.name}", ev.object.creation_time)
            if r.offset < start:
                continue
            if isinstance(ev, ObjectApplied | ObjectDeleted):
                rec.arrivals.append((ev.time, r.offset, ev))
            elif isinstance(ev, WorkloadFinished):
                rec.finishes_after.setdefault(f"{ev.namespace}/{ev.name}", ev.time)
        offset = batch[-1].offset + 1
    _admissions(log, topics, start, rec)
    return rec


def _admissions(log: Log, topics: Topics, start: int, rec: Recorded) -> None:
    admits: dict[str, list[int]] = {}
    pending: list[AdmitWorkload] = []  # this cycle's, placed once its record says at which input
    offset = 0
    while batch := log.read(topics.decisions, offset, 5000):
        for r in batch:
            try:
                d = decode_decision(r.value)
            except (MalformedRecord, UnknownEventType):
                continue
            if isinstance(d, AdmitWorkload):
                pending.append(d)
            elif isinstance(d, CycleCompleted):
                for a in pending:
                    key = f"{a.namespace}/{a.name}"
                    admits.setdefault(key, []).append(a.time)
                    if d.input_offset >= start:
                        rec.first_admit_after.setdefault(key, a.time)
                pending = []
        offset = batch[-1].offset + 1
    # A run's length: from the last admission before its (first recorded) finish to that finish.
    for key, t in rec.finishes_after.items():
        starts = [a for a in admits.get(key, []) if a <= t]
        if starts:
            rec.durations[key] = t - starts[-1]


def _duration(state: State, recorded: Recorded, key: str, default_ms: int) -> int:
    if key in recorded.durations:
        return recorded.durations[key]
    rec = state.workloads.get(key)
    if rec is not None:
        text = dict(rec.obj.annotations).get(SIM_DURATION_ANNOTATION)
        if text:
            try:
                return parse_duration(text)
            except DurationError:
                pass
    return default_ms


class _Sim:
    """The event loop of the what-if: arrivals and finishes in time order, cycles until quiet."""

    def __init__(self, state: State, recorded: Recorded, default_ms: int) -> None:
        self.state = state
        self.recorded = recorded
        self.default_ms = default_ms
        self.heap: list[tuple[int, int, int, str, int]] = []  # (time, kind order, seq, key, run)
        self.arrivals = {i: ev for i, (_, _, ev) in enumerate(recorded.arrivals)}
        self.runs: dict[str, int] = {}
        self.admitted: dict[str, int] = {}
        self.seq = 0

    def push(self, time: int, kind: int, key: str, run: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, kind, self.seq, key, run))

    def start(self, start_time: int) -> None:
        for i, (t, _, _) in enumerate(self.recorded.arrivals):
            self.push(t, 1, str(i), 0)
        for key, rec in sorted(self.state.workloads.items()):
            if rec.evicting:
                finish_eviction(self.state, rec)
            elif rec.admission is not None and not rec.finished:
                # Running at the start: it finishes when it really did (if it did in the log).
                finish = self.recorded.finishes_after.get(key)
                if finish is not None:
                    self.runs[key] = 1
                    self.push(max(finish, start_time), 0, key, 1)

    def run(self, end: int, usage: Usage) -> None:
        self.cycles(usage)
        while self.heap and self.heap[0][0] <= end:
            t = self.heap[0][0]
            while self.heap and self.heap[0][0] == t:
                _, kind, _, key, run = heapq.heappop(self.heap)
                if kind == 1:
                    fold(self.state, self.arrivals[int(key)])
                elif self.runs.get(key) == run and key in self.state.workloads:
                    ns, name = key.split("/", 1)
                    fold(self.state, WorkloadFinished(time=t, namespace=ns, name=name, message="what-if run"))
            self.cycles(usage)

    def cycles(self, usage: Usage) -> None:
        orbit = ScanOrbit()  # a step folds events first: nothing seen before it counts
        for _ in range(MAX_CYCLES_PER_STEP):
            result = run_cycle(self.state)
            for d in result.decisions:
                key = f"{d.namespace}/{d.name}"
                if isinstance(d, AdmitWorkload):
                    self.admitted.setdefault(key, d.time)
                    run = self.runs.get(key, 0) + 1
                    self.runs[key] = run
                    self.push(d.time + _duration(self.state, self.recorded, key, self.default_ms), 0, key, run)
                elif isinstance(d, EvictWorkload):
                    self.runs[key] = self.runs.get(key, 0) + 1  # its finish is off
            evicted = [f"{d.namespace}/{d.name}" for d in result.decisions if isinstance(d, EvictWorkload)]
            for key in evicted:
                rec = self.state.workloads.get(key)
                if rec is not None and rec.evicting:
                    finish_eviction(self.state, rec)
            if not orbit.progressed(result) and not evicted:
                break
        usage.sample(self.state)


def what_if(log: Log, topics: Topics, *, at: int | None, changes: Sequence[str], for_ms: int | None,
            default_duration_ms: int = 60_000) -> WhatIfResult:
    report = replay(log, topics, verify=False, until=at)
    assert report.scheduler is not None
    state = report.scheduler.state
    start = report.input_offset
    objects = load(read_manifests(changes)) if changes else []  # validated before anything is applied
    recorded = _recorded(log, topics, start)
    # From the very start of a log the clock has not begun: the window opens with the first arrival.
    start_time = state.now or min((t for t, _, _ in recorded.arrivals if t), default=0)
    end = start_time + for_ms if for_ms is not None else max(recorded.end_time, start_time)
    before = sum(1 for r in state.workloads.values() if r.admission is not None or r.finished)
    compared = {k for k, r in state.workloads.items() if r.pending}
    compared.update(f"{ev.object.namespace}/{ev.object.name}" for t, _, ev in recorded.arrivals
                    if t <= end and isinstance(ev, ObjectApplied) and isinstance(ev.object, Workload))
    real_usage = _real_usage(log, topics, start, start_time, end)
    for _, obj in objects:
        fold(state, ObjectApplied(time=start_time, object=obj))
    sim = _Sim(state, recorded, default_duration_ms)
    sim.start(start_time)
    usage = Usage(start=start_time)
    sim.run(end, usage)
    queue_of = {}
    for key in compared:
        rec = state.workloads.get(key)
        lq = state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}") if rec is not None else None
        queue_of[key] = lq.cluster_queue if lq is not None else ""
    return WhatIfResult(
        start_offset=start, start_time=start_time, end_time=end, changes=list(changes),
        real_admit={k: t for k, t in recorded.first_admit_after.items() if k in compared and t <= end},
        whatif_admit={k: t for k, t in sim.admitted.items() if k in compared and t <= end},
        created={k: recorded.created.get(k, start_time) for k in compared}, queue_of=queue_of,
        real_usage=real_usage, whatif_usage=usage.averages(end), before_start=before, state=state)


def _real_usage(log: Log, topics: Topics, start: int, start_time: int, end: int) -> dict[str, dict[str, float]]:
    usage = Usage(start=start_time)
    follower = Follower(log, topics)
    follower.until_input = start
    follower.catch_up()
    usage.sample(follower.state)
    follower.until_input = None

    def sample(state: State) -> None:
        if state.now <= end:
            usage.sample(state)

    while True:
        before = follower.decisions_offset
        follower.advance(sample)
        if follower.decisions_offset == before or follower.state.now > end:
            break
    return usage.averages(end)


# --- the report -------------------------------------------------------------------------------


def _wait(result: WhatIfResult, admits: dict[str, int], key: str) -> int | None:
    t = admits.get(key)
    return None if t is None else t - result.created.get(key, result.start_time)


def queue_table(result: WhatIfResult) -> list[dict[str, Any]]:
    rows = []
    for cq in sorted({q for q in result.queue_of.values() if q}):
        keys = sorted(k for k, q in result.queue_of.items() if q == cq)
        real = [w for k in keys if (w := _wait(result, result.real_admit, k)) is not None]
        what = [w for k in keys if (w := _wait(result, result.whatif_admit, k)) is not None]
        rows.append({"clusterQueue": cq, "workloads": len(keys),
                     "admittedReal": len(real), "admittedWhatIf": len(what),
                     "averageWaitReal": sum(real) / len(real) / 1000 if real else None,
                     "averageWaitWhatIf": sum(what) / len(what) / 1000 if what else None,
                     "longestWaitReal": max(real) / 1000 if real else None,
                     "longestWaitWhatIf": max(what) / 1000 if what else None})
    return rows


def workload_table(result: WhatIfResult) -> list[dict[str, Any]]:
    rows = []
    for key in sorted(result.queue_of):
        real, what = result.real_admit.get(key), result.whatif_admit.get(key)
        if real == what:
            continue
        rows.append({"workload": key, "clusterQueue": result.queue_of[key],
                     "admittedReal": format_time(real) if real is not None else None,
                     "admittedWhatIf": format_time(what) if what is not None else None,
                     "deltaSeconds": (what - real) / 1000 if real is not None and what is not None else None})
    rows.sort(key=lambda r: (r["deltaSeconds"] is None, r["deltaSeconds"] or 0, r["workload"]))
    return rows


def to_json(result: WhatIfResult) -> dict[str, Any]:
    return {"from": {"inputOffset": result.start_offset, "time": format_time(result.start_time)},
            "until": format_time(result.end_time), "changes": result.changes,
            "admittedBeforeStart": result.before_start,
            "queues": queue_table(result), "workloads": workload_table(result),
            "usage": {"real": result.real_usage, "whatIf": result.whatif_usage}}


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} s"


def report_lines(result: WhatIfResult, *, limit: int = 20) -> list[str]:
    out = [f"what-if from input offset {result.start_offset} ({format_time(result.start_time)}) until "
           f"{format_time(result.end_time)}, with {', '.join(result.changes) or 'no changes'}",
           f"{result.before_start} workload(s) admitted before the start are left as they were; "
           f"{len(result.queue_of)} compared",
           f"{'CLUSTERQUEUE':<16} {'ADMITTED real→what-if':>22} {'AVG WAIT real→what-if':>24} "
           f"{'LONGEST real→what-if':>24}"]
    out.extend(f"{r['clusterQueue']:<16} {str(r['admittedReal']) + ' → ' + str(r['admittedWhatIf']):>22} "
               f"{_secs(r['averageWaitReal']) + ' → ' + _secs(r['averageWaitWhatIf']):>24} "
               f"{_secs(r['longestWaitReal']) + ' → ' + _secs(r['longestWaitWhatIf']):>24}"
               for r in queue_table(result))
    rows = workload_table(result)
    out.append(f"{len(rows)} workload(s) admitted at another time (the {min(limit, len(rows))} that moved most):")
    moved = sorted(rows, key=lambda r: -abs(r["deltaSeconds"] or 1e18))[:limit]
    out.extend(f"  {r['workload']:<40} {r['admittedReal'] or 'not admitted'} → {r['admittedWhatIf'] or 'not admitted'}"
               + (f" ({r['deltaSeconds']:+.0f} s)" if r["deltaSeconds"] is not None else "") for r in moved)
    out.append("usage over the window, time-weighted average (real → what-if):")
    for cq in sorted(set(result.real_usage) | set(result.whatif_usage)):
        frs = sorted(set(result.real_usage.get(cq, {})) | set(result.whatif_usage.get(cq, {})))
        parts = [f"{fr} {result.real_usage.get(cq, {}).get(fr, 0) / _unit(fr):.1f} → "
                 f"{result.whatif_usage.get(cq, {}).get(fr, 0) / _unit(fr):.1f}" for fr in frs]
        out.append(f"  {cq}: " + "; ".join(parts))
    return out


def _unit(fr: str) -> float:
    """cpu in cores (kept in milli), memory in GiB, others as they are."""
    res = fr.split("/", 1)[1]
    return 1000.0 if res == "cpu" else float(2**30) if res == "memory" else 1.0
