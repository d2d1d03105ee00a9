"""``kueuelog explain``: the answer first, then the history.

One workload (``ns/workload`` or the ``ns/job`` that owns it) is followed through the log: the
cluster events about it (input offsets) and the decisions about it (cycles), merged into one
timeline in the order the scheduler saw them — a cycle computed at input offset X comes after
input X-1 and before input X. Then the state folded up to the same point gives the answer
(:mod:`services.core.answer`): what it is now, why, since when and what would unblock it.

By default the timeline is folded: runs of identical outcomes become one line ("cycles 12-40
(29 times)") and the actuator's echoes of decisions (``DecisionApplied``) are left out; ``full``
keeps every entry. Evictions this workload caused appear in its own timeline, with the victim,
so a reader can follow preemptor and victims both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import format_time
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    CycleCompleted,
    DeactivateWorkload,
    EvictWorkload,
    HeadOutcome,
    MarkPending,
    ObjectApplied,
    PlaceWorkload,
    RemovePlacement,
    TreeAdopted,
    TreeHandOver,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from events.objects import ClusterQueue, Cohort, LocalQueue, Workload
from events.shardmap import handed_workloads
from services.app import checkview
from services.core import podsready
from services.core.answer import Answer, Eviction, answer
from services.core.answer import decision_text as plain_decision_text
from services.core.state import State, WorkloadRecord
from services.core.treeview import pending_in_tree_terms, preempted_in_tree_terms
from services.runtime.log import Log

NOISE = frozenset({"DecisionApplied"})  # the actuator's echo of a decision already in the timeline


@dataclass(frozen=True)
class Entry:
    order: tuple[int, int, int]  # (input position, 0 for a cycle / 1 for an input, sequence)
    time: int
    kind: str  # submitted, updated, an event type, admitted, evicted, preempted, pending, considered, unreadable
    text: str
    offset: int | None = None  # input offset, for input entries
    cycle: int | None = None  # the (first) cycle, for decisions
    last_cycle: int | None = None
    count: int = 1
    related: str = ""  # the preemptor (for evicted) or the victim (for preempted)
    group: str = ""  # entries of one run share it: the pending reason, a head outcome's text

    def where(self) -> str:
        if self.offset is not None:
            return f"input {self.offset}"
        if self.cycle is None:
            return "decisions"
        if self.count > 1:
            return f"cycles {self.cycle}-{self.last_cycle} ({self.count} times)"
        return f"cycle {self.cycle}"

    def line(self) -> str:
        if self.cycle is None and self.offset is None:
            return self.text
        return f"{self.where()} @ {format_time(self.time)}: {self.text}"

    def to_json(self) -> dict[str, Any]:
        return {"time": format_time(self.time), "kind": self.kind, "text": self.text, "inputOffset": self.offset,
                "cycle": self.cycle, "lastCycle": self.last_cycle, "count": self.count,
                "related": self.related or None}


@dataclass
class Explanation:
    key: str
    names: list[str]
    input_offset: int = 0
    answer: Answer | None = None
    timeline: list[Entry] = field(default_factory=list)
    status: list[str] = field(default_factory=list)

    def entries(self, *, full: bool) -> list[Entry]:
        if full:
            return list(self.timeline)
        return fold_runs([e for e in self.timeline if e.kind not in NOISE])

    def lines(self, *, full: bool = False) -> list[str]:
        if not self.names:
            return [f"no Workload {self.key} in the log"]
        out = []
        if self.answer is not None:
            out.extend([self.answer.paragraph(), ""])
        out.extend(e.line() for e in self.entries(full=full))
        return out + self.status

    def to_json(self, *, full: bool = False) -> dict[str, Any]:
        return {"workload": self.key, "names": self.names, "inputOffset": self.input_offset,
                "answer": self.answer.to_json() if self.answer else None,
                "timeline": [e.to_json() for e in self.entries(full=full)]}


def fold_runs(entries: list[Entry]) -> list[Entry]:
    """Consecutive decisions that say the same thing become one entry that counts them: a head
    considered again with the same outcome, or kept pending for the same reason (the entry then
    says the reason and the latest message, whose numbers change as quota comes and goes). A
    head outcome in a cycle that also marked the workload pending says nothing more: left out."""
    pending_cycles = {e.cycle for e in entries if e.kind == "pending"}
    out: list[Entry] = []
    for e in entries:
        if e.kind == "considered" and e.cycle in pending_cycles:
            continue
        prev = out[-1] if out else None
        same = prev is not None and e.kind == prev.kind and e.group == prev.group
        waiting = prev is not None and prev.kind == "pending" and e.kind == "considered" and not e.group.count("parked")
        if (prev is not None and e.cycle is not None and prev.cycle is not None
                and ((same and e.kind in ("considered", "pending")) or waiting)):
            text = e.text if e.kind == prev.kind else prev.text
            out[-1] = replace(prev, last_cycle=e.cycle, count=prev.count + e.count, text=text)
            continue
        out.append(e)
    return out


def explain(log: Log, topics: Topics, key: str, *, at: int | None = None,
            now: tuple[State, int] | None = None) -> Explanation:
    """The explanation of one workload up to input offset ``at`` (default: the end of the log).
    ``now``: a state already folded to an input offset (a follower's), used instead of replaying
    the log for the answer; the history then stops at that offset too."""
    from services.app.logview import replay

    if now is not None:
        at = now[1]
    trees = _Trees()
    entries, names = _input_history(log, topics, key, at, trees)
    exp = Explanation(key=key, names=names)
    if not names:
        return exp
    last_eviction = _decision_history(log, topics, set(names), at, entries)
    entries.sort(key=lambda e: e.order)
    exp.timeline = entries
    if now is None:
        report = replay(log, topics, verify=False, until=at)
        assert report.scheduler is not None
        now = report.scheduler.state, report.input_offset
    state = now[0]
    exp.input_offset = now[1]
    exp.answer = answer(state, names[-1], evicted=last_eviction)
    exp.status = _status(state, names, exp.input_offset)
    gone = trees.handed.get(names[-1])
    if gone is not None and names[-1] not in state.workloads:
        where = f"its cohort tree {gone.root} was handed over to shard {gone.to_shard} ({gone.handover})"
        exp.answer = Answer(workload=names[-1], status="handed-over",
                            message=f"{where}; ask that shard (--shard {gone.to_shard}, or --shard all)")
        exp.status = [f"now: {names[-1]} is decided by shard {gone.to_shard}: {where}"]
    return exp


@dataclass
class _Trees:
    """What the history needs to know of cohort trees: which one a workload's queue is in, and
    the workloads whose tree was handed over to another shard (the marker, by workload key)."""

    lq: dict[str, str] = field(default_factory=dict)  # "ns/name" -> ClusterQueue
    cohort: dict[str, str] = field(default_factory=dict)  # ClusterQueue -> cohort
    parent: dict[str, str] = field(default_factory=dict)  # Cohort -> parent
    queue: dict[str, str] = field(default_factory=dict)  # workload -> its LocalQueue "ns/name"
    handed: dict[str, TreeHandOver] = field(default_factory=dict)

    def learn(self, obj: object) -> None:
        if isinstance(obj, LocalQueue):
            self.lq[f"{obj.namespace}/{obj.name}"] = obj.cluster_queue
        elif isinstance(obj, ClusterQueue):
            self.cohort[obj.name] = obj.cohort
        elif isinstance(obj, Cohort):
            self.parent[obj.name] = obj.parent

    def root(self, workload: str) -> str:
        cq = self.lq.get(self.queue.get(workload, ""), "")
        node, seen = self.cohort.get(cq, "") or cq, []
        while self.parent.get(node) and node not in seen:
            seen.append(node)
            node = self.parent[node]
        return node


def _matches(wl_key: str, namespace: str, name: str, owner: str) -> bool:
    ns, _, wanted = wl_key.partition("/")
    return ns == namespace and wanted in (name, owner)


def _hand_over_entry(ev: TreeHandOver | TreeAdopted, key: str, names: list[str], trees: _Trees,
                     order: tuple[int, int, int], offset: int) -> Entry | None:
    """A tree the workload is in leaving this shard, or arriving on it."""
    if isinstance(ev, TreeHandOver):
        mine = [n for n in names if trees.root(n) == ev.root]
        for name in mine:
            trees.handed[name] = ev
        return Entry(order, ev.time, "HandedOver", f"handed over with its cohort tree {ev.root} to shard "
                                                   f"{ev.to_shard} ({ev.handover})", offset=offset) if mine else None
    arrived = [wl for wl in handed_workloads(ev.state)
               if _matches(key, wl.namespace, wl.name, wl.owner.name if wl.owner else "")]
    for wl in arrived:
        if wl.key not in names:
            names.append(wl.key)
        trees.queue[wl.key] = f"{wl.namespace}/{wl.queue_name}"
        trees.handed.pop(wl.key, None)
    return Entry(order, ev.time, "Adopted", f"taken over with its cohort tree {ev.root} from shard {ev.from_shard} "
                                            f"({ev.handover}), as it was there", offset=offset) if arrived else None


def _input_history(log: Log, topics: Topics, key: str, at: int | None,
                   trees: _Trees | None = None) -> tuple[list[Entry], list[str]]:
    """Entries for the cluster events about the workload, and the names it had (a Job's Workloads)."""
    trees = trees or _Trees()
    entries: list[Entry] = []
    names: list[str] = []
    offset = 0
    end = log.end_offset(topics.cluster_events) if at is None else at
    while offset < end and (batch := log.read(topics.cluster_events, offset, min(5000, end - offset))):
        for rec in batch:
            try:
                ev = decode_envelope(rec.value).event
            except (MalformedRecord, UnknownEventType):
                continue  # the scheduler dead-lettered it: it is not part of the history
            order = (rec.offset, 1, 0)
            if isinstance(ev, TreeHandOver | TreeAdopted):
                entry = _hand_over_entry(ev, key, names, trees, order, rec.offset)
                if entry is not None:
                    entries.append(entry)
                continue
            if isinstance(ev, ObjectApplied):
                trees.learn(ev.object)
            if isinstance(ev, ObjectApplied) and isinstance(ev.object, Workload):
                wl = ev.object
                if _matches(key, wl.namespace, wl.name, wl.owner.name if wl.owner else ""):
                    wl_key = f"{wl.namespace}/{wl.name}"
                    trees.queue[wl_key] = f"{wl.namespace}/{wl.queue_name}"
                    what = "submitted" if not entries else "updated"
                    if wl_key not in names:
                        names.append(wl_key)
                    owner = f" ({wl.owner.kind} {wl.namespace}/{wl.owner.name})" if wl.owner else ""
                    entries.append(Entry(order, ev.time, what, f"{what} as Workload {wl_key}{owner} to LocalQueue "
                                                               f"{wl.queue_name}", offset=rec.offset))
                continue
            about = checkview.event_key(ev)
            if about is not None:  # a ProvisioningRequest or an admission check, about a workload
                if about in names:
                    kind = type(ev).__name__
                    entries.append(Entry(order, ev.time, kind, checkview.event_text(ev),  # type: ignore[arg-type]
                                         offset=rec.offset))
                continue
            ns, name = getattr(ev, "namespace", None), getattr(ev, "name", None)
            if ns is not None and f"{ns}/{name}" in names:
                kind = type(ev).__name__
                entries.append(Entry(order, ev.time, kind, f"{kind} {_event_detail(ev)}".rstrip(),
                                     offset=rec.offset))
        offset = batch[-1].offset + 1
    return entries, names


def _event_detail(ev: object) -> str:
    for attr in ("decision_id", "error", "message"):
        value = getattr(ev, attr, "")
        if value:
            return f"({attr.replace('_', ' ')} {value})"
    return ""


def _decision_history(log: Log, topics: Topics, names: set[str], at: int | None,
                      entries: list[Entry]) -> Eviction | None:
    """Appends an entry per decision about ``names`` (and per eviction they caused) and per cycle
    that considered them, up to the first cycle computed after input offset ``at``; returns the
    last eviction of the workload."""
    cycle_entries: list[Entry] = []  # this cycle's, placed once its record says at which input
    last: Eviction | None = None
    this_cycle: Eviction | None = None
    seq = 0
    offset = 0
    while batch := log.read(topics.decisions, offset, 5000):
        for rec in batch:
            seq += 1
            try:
                d = decode_decision(rec.value)
            except (MalformedRecord, UnknownEventType) as e:
                cycle_entries.append(Entry((0, 0, seq), 0, "unreadable",
                                           f"decision record {rec.offset}: unreadable, skipped ({e})"))
                continue
            if isinstance(d, CycleCompleted):
                if at is not None and d.input_offset > at:
                    return last
                cycle_entries.extend(Entry((0, 0, seq), d.time, "considered", _head_text(h), cycle=d.cycle,
                                           last_cycle=d.cycle, group=_head_text(h))
                                     for h in d.heads if h.key in names)
                entries.extend(replace(e, order=(d.input_offset, 0, e.order[2])) for e in cycle_entries)
                cycle_entries = []
                last, this_cycle = this_cycle or last, None
                continue
            entry = _decision_entry(d, names, seq)
            if entry is not None:
                cycle_entries.append(entry)
                if isinstance(d, EvictWorkload) and entry.kind == "evicted":
                    this_cycle = Eviction(d.time, str(d.reason), d.preemption_reason, d.preemptor)
        offset = batch[-1].offset + 1
    entries.extend(cycle_entries)
    return last


def decision_text(d: object) -> str:
    """A decision in words, admission checks and deactivation included (``tail`` and ``explain``)."""
    if isinstance(d, AdmitWorkload | AdmitChecked):
        flavors = "; ".join(
            f"{psa.name}: " + ", ".join(f"{r}={f}" for r, f in psa.flavors) + f" x{psa.count}"
            for psa in d.admission.pod_set_assignments
        )
        if isinstance(d, AdmitChecked) or d.admission_checks:
            return checkview.decision_text(d, flavors)
    if isinstance(d, DeactivateWorkload):
        cause = f" ({d.underlying_cause})" if d.underlying_cause else ""
        return f"evicted and deactivated: {d.reason}{cause}: {d.message}"
    if isinstance(d, EvictWorkload):
        return plain_decision_text(d) + checkview.eviction_suffix(d)
    return plain_decision_text(d)


def _kind(d: object) -> str:
    if isinstance(d, AdmitWorkload | AdmitChecked):
        return "admitted"
    if isinstance(d, PlaceWorkload | RemovePlacement):
        return "placement"  # MultiKueue (services.core.placement)
    return "evicted" if isinstance(d, EvictWorkload) else "pending"


def _decision_entry(d: AdmitWorkload | AdmitChecked | EvictWorkload | MarkPending, names: set[str],
                    seq: int) -> Entry | None:
    key = f"{d.namespace}/{d.name}"
    order = (0, 0, seq)
    if isinstance(d, UpdateWorkloadStatus | UpdateLocalQueueFairSharing):
        return None  # status news: the checks' history (checkview) and the back-off tell it already
    if key in names:
        kind = _kind(d)
        related = d.preemptor if isinstance(d, EvictWorkload) else ""
        group = str(d.reason) if isinstance(d, MarkPending) else ""
        return Entry(order, d.time, kind, decision_text(d), cycle=d.cycle, last_cycle=d.cycle, related=related,
                     group=group)
    if isinstance(d, EvictWorkload) and d.preemptor in names:
        kind_of = f" ({d.preemption_reason})" if d.preemption_reason else ""
        return Entry(order, d.time, "preempted", f"preempted {key}{kind_of} to make room", cycle=d.cycle,
                     last_cycle=d.cycle, related=key)
    return None


def _head_text(h: HeadOutcome) -> str:
    if h.parked:
        return "considered as its queue's head, not admitted, parked until quota is freed in its cohort"
    if h.sticky:
        return "considered as its queue's head, waiting for the workloads it preempted to stop"
    return "considered as its queue's head, not admitted, back in its queue"


def _status(state: State, names: list[str], input_offset: int) -> list[str]:
    out = []
    for key in names:
        rec = state.workloads.get(key)
        if rec is None:
            out.append(f"now: {key} is gone (deleted)")
            continue
        where = f" in ClusterQueue {rec.admission.cluster_queue}" if rec.admission else ""
        status = ("finished" if rec.finished else "being evicted" if rec.evicting else
                  "admitted" if rec.admission else "pending")
        out.append(f"now (input offset {input_offset}): {key} is {status}{where}")
        out.extend(f"  {c.type}={c.status} {c.reason}: {c.message}" for c in rec.conditions.values())
        out.extend(_in_tree_terms(state, rec))
        out.extend(_timers(state, rec))
        out.extend(checkview.status_lines(rec))
    return out


def _in_tree_terms(state: State, rec: WorkloadRecord) -> list[str]:
    """For a workload of an ElasticQuotaTree leaf: the same, in the tree's words."""
    lines = [f"  tree: {line}" for line in pending_in_tree_terms(state, rec)]
    reclaimed = preempted_in_tree_terms(state, rec)
    return [*lines, f"  tree: {reclaimed}"] if reclaimed else lines


def _timers(state: State, rec: WorkloadRecord) -> list[str]:
    """waitForPodsReady, back-off and maximum execution time, each with the time it falls due."""
    out = [f"  {what} {format_time(when)}" for what, when in podsready.deadlines_of(state, rec)]
    if rec.requeue_count:
        out.append(f"  requeueState: count {rec.requeue_count}"
                   + (f", requeueAt {format_time(rec.requeue_at)}" if rec.requeue_at is not None else ""))
    if rec.past_execution_ms:
        out.append(f"  accumulated past execution time: {rec.past_execution_ms // 1000}s")
    if not rec.active:
        why = f" ({rec.deactivation_cause}: {rec.deactivation_message})" if rec.deactivation_cause else ""
        out.append(f"  deactivated{why}: set spec.active back to true to start it over")
    return out
