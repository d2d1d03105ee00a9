"""Reading a log after the fact: replay (with verification), explain and tail.

All three work on any log backend through the ``Log`` port. Replay rebuilds the
scheduler's state by folding the input log and re-running every recorded cycle
at the input offset it ran at; ``--verify`` compares each re-derived decision
with the recorded one byte for byte. Explain follows one workload through the
inputs and decisions. Tail prints decisions as they are committed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import format_time, parse_time
from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload, HeadOutcome, MarkPending, ObjectApplied
from events.objects import Workload
from services.core.state import State, WorkloadRecord
from services.core.treeview import pending_in_tree_terms, preempted_in_tree_terms
from services.runtime.log import Log
from services.scheduler.service import Scheduler, bulk_fold

Progress = Callable[[int, int], None]


@dataclass
class ReplayReport:
    events: int = 0
    cycles: int = 0
    decisions: int = 0
    dead_letters: int = 0
    unreadable_decisions: int = 0  # damaged decision records; their cycles were re-run instead
    mismatches: list[tuple[int, str]] = field(default_factory=list)
    input_offset: int = 0
    scheduler: Scheduler | None = None


def resolve_until(log: Log, topics: Topics, until: str | None) -> int | None:
    """``--until``: an input offset, or an RFC 3339 time (the first event after it is excluded)."""
    if until is None:
        return None
    if until.isdigit():
        return int(until)
    limit = parse_time(until)
    offset = 0
    while True:
        batch = log.read(topics.cluster_events, offset, 5000)
        if not batch:
            return offset
        for rec in batch:
            try:
                env = decode_envelope(rec.value)
            except (MalformedRecord, UnknownEventType):
                continue
            if env.event.time > limit:
                return rec.offset
        offset = batch[-1].offset + 1


def replay(log: Log, topics: Topics, *, verify: bool, until: int | None = None,
           progress: Progress | None = None) -> ReplayReport:
    """The state at input offset ``until`` (default: the end of the log), cycles applied or re-run."""
    sched = Scheduler(log, topics, batch_size=20_000)
    total = log.end_offset(topics.cluster_events) if until is None else until

    def tick() -> None:
        if progress is not None:
            progress(sched.next_input, total)

    with bulk_fold():
        mismatches = list(sched.replay(0, verify=verify, until_input=until, on_cycle=tick))
        sched.fold_until(total)
    tick()
    return ReplayReport(events=sched.stats.events, cycles=sched.stats.cycles, decisions=sched.stats.decisions,
                        dead_letters=sched.stats.dead_letters,
                        unreadable_decisions=sched.stats.unreadable_decisions, mismatches=mismatches,
                        input_offset=sched.next_input, scheduler=sched)


# --- explain ----------------------------------------------------------------------------------


def _matches(wl_key: str, namespace: str, name: str, owner: str) -> bool:
    ns, _, wanted = wl_key.partition("/")
    return ns == namespace and wanted in (name, owner)


def explain(log: Log, topics: Topics, key: str, *, at: int | None = None) -> list[str]:
    """The history of one workload (``ns/workload`` or ``ns/job``) up to input offset ``at``: what
    the input says of it, then what each cycle decided or made of it, then its status."""
    lines, names = _input_history(log, topics, key, at)
    if not names:
        return [f"no Workload {key} in the log" + (f" before input offset {at}" if at is not None else "")]
    _decision_history(log, topics, names, at, lines)
    return lines + _status(log, topics, names, at)


def _input_history(log: Log, topics: Topics, key: str, at: int | None) -> tuple[list[str], set[str]]:
    """Lines for the cluster events about the workload, and the names it had (a Job's Workload)."""
    lines: list[str] = []
    names: set[str] = set()
    offset = 0
    end = log.end_offset(topics.cluster_events) if at is None else at
    while offset < end and (batch := log.read(topics.cluster_events, offset, min(5000, end - offset))):
        for rec in batch:
            try:
                ev = decode_envelope(rec.value).event
            except (MalformedRecord, UnknownEventType):
                continue  # the scheduler dead-lettered it: it is not part of the history
            if isinstance(ev, ObjectApplied) and isinstance(ev.object, Workload):
                wl = ev.object
                if _matches(key, wl.namespace, wl.name, wl.owner.name if wl.owner else ""):
                    names.add(f"{wl.namespace}/{wl.name}")
                    what = "submitted" if len(names) == 1 and not lines else "updated"
                    owner = f" ({wl.owner.kind} {wl.namespace}/{wl.owner.name})" if wl.owner else ""
                    lines.append(f"input {rec.offset} @ {format_time(ev.time)}: {what} as Workload "
                                 f"{wl.namespace}/{wl.name}{owner} to LocalQueue {wl.queue_name}")
                continue
            ns, name = getattr(ev, "namespace", None), getattr(ev, "name", None)
            if ns is not None and f"{ns}/{name}" in names:
                lines.append(f"input {rec.offset} @ {format_time(ev.time)}: {type(ev).__name__} "
                             f"{_event_detail(ev)}".rstrip())
        offset = batch[-1].offset + 1
    return lines, names


def _decision_history(log: Log, topics: Topics, names: set[str], at: int | None, lines: list[str]) -> None:
    """Appends each decision about ``names`` and the cycles that considered them (runs of the same
    outcome folded into one line), up to the first cycle computed after input offset ``at``."""
    considered = _Considered(lines)
    offset = 0
    while batch := log.read(topics.decisions, offset, 5000):
        for rec in batch:
            try:
                d = decode_decision(rec.value)
            except (MalformedRecord, UnknownEventType) as e:
                lines.append(f"decision record {rec.offset}: unreadable, skipped ({e})")
                continue
            if isinstance(d, CycleCompleted):
                if at is not None and d.input_offset > at:
                    considered.flush()
                    return
                for h in d.heads:
                    if h.key in names:
                        considered.note(d.cycle, d.time, _head_text(h))
            elif f"{d.namespace}/{d.name}" in names:
                considered.flush()
                lines.append(f"cycle {d.cycle} @ {format_time(d.time)}: {_decision_text(d)}")
        offset = batch[-1].offset + 1
    considered.flush()


def _head_text(h: HeadOutcome) -> str:
    if h.parked:
        return "considered as its queue's head, not admitted, parked until quota is freed in its cohort"
    if h.sticky:
        return "considered as its queue's head, waiting for the workloads it preempted to stop"
    return "considered as its queue's head, not admitted, back in its queue"


class _Considered:
    """Folds runs of identical head outcomes into one line: "cycles 12-40: considered 9 times, ..."."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.run: tuple[int, int, int, str, int] | None = None  # first, last cycle, first time, text, count

    def note(self, cycle: int, time: int, text: str) -> None:
        if self.run is not None and self.run[3] == text:
            first, _, t0, _, n = self.run
            self.run = (first, cycle, t0, text, n + 1)
            return
        self.flush()
        self.run = (cycle, cycle, time, text, 1)

    def flush(self) -> None:
        if self.run is None:
            return
        first, last, t0, text, n = self.run
        where = f"cycle {first}" if n == 1 else f"cycles {first}-{last} ({n} times)"
        self.lines.append(f"{where} @ {format_time(t0)}: {text}")
        self.run = None


def _event_detail(ev: object) -> str:
    for attr in ("decision_id", "error", "message"):
        value = getattr(ev, attr, "")
        if value:
            return f"({attr.replace('_', ' ')} {value})"
    return ""


def _decision_text(d: object) -> str:
    if isinstance(d, AdmitWorkload):
        flavors = "; ".join(
            f"{psa.name}: " + ", ".join(f"{r}={f}" for r, f in psa.flavors) + f" x{psa.count}"
            for psa in d.admission.pod_set_assignments
        )
        return f"admitted to ClusterQueue {d.cluster_queue} ({flavors})"
    if isinstance(d, EvictWorkload):
        by = f" by {d.preemptor}" if d.preemptor else ""
        kind = f" ({d.preemption_reason})" if d.preemption_reason else ""
        return f"evicted: {d.reason}{kind}{by}: {d.message}"
    if isinstance(d, MarkPending):
        return f"pending ({d.reason}): {d.message}"
    return str(d)


def _status(log: Log, topics: Topics, names: set[str], at: int | None) -> list[str]:
    report = replay(log, topics, verify=False, until=at)
    assert report.scheduler is not None
    state = report.scheduler.state
    out = []
    for key in sorted(names):
        rec = state.workloads.get(key)
        if rec is None:
            out.append(f"now: {key} is gone (deleted)")
            continue
        where = f" in ClusterQueue {rec.admission.cluster_queue}" if rec.admission else ""
        status = ("finished" if rec.finished else "being evicted" if rec.evicting else
                  "admitted" if rec.admission else "pending")
        out.append(f"now (input offset {report.input_offset}): {key} is {status}{where}")
        out.extend(f"  {c.type}={c.status} {c.reason}: {c.message}" for c in rec.conditions.values())
        out.extend(_in_tree_terms(state, rec))
    return out


def _in_tree_terms(state: State, rec: WorkloadRecord) -> list[str]:
    """For a workload of an ElasticQuotaTree leaf: the same, in the tree's words."""
    lines = [f"  tree: {line}" for line in pending_in_tree_terms(state, rec)]
    reclaimed = preempted_in_tree_terms(state, rec)
    return [*lines, f"  tree: {reclaimed}"] if reclaimed else lines


# --- tail -------------------------------------------------------------------------------------


def format_decision(d: object) -> str | None:
    if isinstance(d, CycleCompleted):
        return None
    ns_name = f"{d.namespace}/{d.name}"  # type: ignore[attr-defined]
    return f"{format_time(d.time)} cycle {d.cycle} {type(d).__name__:<14} {ns_name}: {_decision_text(d)}"  # type: ignore[attr-defined]


async def tail(log: Log, topics: Topics, *, types: set[str], queue: str | None, from_start: bool,
               emit: Callable[[str], None], stop: asyncio.Event) -> None:
    start = 0 if from_start else log.end_offset(topics.decisions)
    kinds = {"Admit": AdmitWorkload, "Evict": EvictWorkload, "Pending": MarkPending}
    wanted = tuple(kinds[t] for t in types) if types else tuple(kinds.values())
    offset = start
    while not stop.is_set():
        batch = log.read(topics.decisions, offset, 1000)
        if not batch:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
            continue
        for rec in batch:
            try:
                d = decode_decision(rec.value)
            except (MalformedRecord, UnknownEventType) as e:
                emit(f"decision record {rec.offset}: unreadable, skipped ({e})")
                continue
            if not isinstance(d, wanted):
                continue
            if queue and d.cluster_queue != queue:
                continue
            line = format_decision(d)
            if line:
                emit(line)
        offset = batch[-1].offset + 1
