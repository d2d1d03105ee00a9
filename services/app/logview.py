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
from typing import Final

from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import format_time, parse_time
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    CycleCompleted,
    EvictWorkload,
    MarkPending,
    PlacementWaiting,
    PlaceWorkload,
    RemovePlacement,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from services.app.explainer import decision_text
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


def explain(log: Log, topics: Topics, key: str, *, at: int | None = None, full: bool = False) -> list[str]:
    """The answer, then the history of one workload (``ns/workload`` or ``ns/job``) up to input
    offset ``at``, as lines (:mod:`services.app.explainer` has the structure)."""
    from services.app.explainer import explain as explanation

    lines = explanation(log, topics, key, at=at).lines(full=full)
    if lines and lines[0].startswith("no Workload") and at is not None:
        lines[0] += f" before input offset {at}"
    return lines


# --- tail -------------------------------------------------------------------------------------


def format_decision(d: object) -> str | None:
    if isinstance(d, CycleCompleted):
        return None
    ns_name = f"{d.namespace}/{d.name}"  # type: ignore[attr-defined]
    return f"{format_time(d.time)} cycle {d.cycle} {type(d).__name__:<14} {ns_name}: {decision_text(d)}"  # type: ignore[attr-defined]


TAIL_TYPES: Final[dict[str, type[AnyDecision]]] = {
    "Admit": AdmitWorkload, "Evict": EvictWorkload, "Pending": MarkPending, "AdmitChecked": AdmitChecked,
    "Status": UpdateWorkloadStatus, "Place": PlaceWorkload, "PlacementWaiting": PlacementWaiting,
    "RemovePlacement": RemovePlacement, "LocalQueueStatus": UpdateLocalQueueFairSharing,
}
"""``kueuelog tail --type`` names, and the decisions each selects (Evict includes deactivations)."""


async def tail(log: Log, topics: Topics, *, types: set[str], queue: str | None, from_start: bool,
               emit: Callable[[str], None], stop: asyncio.Event) -> None:
    start = 0 if from_start else log.end_offset(topics.decisions)
    wanted = tuple(TAIL_TYPES[t] for t in types) if types else tuple(TAIL_TYPES.values())
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
