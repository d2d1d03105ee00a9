"""The answer ``explain`` gives first: one workload's state now, why, since when, and what would
unblock it — computed from the folded state alone (pure: the caller adds what only the history
knows, such as who evicted it).

"What would unblock it" reads the shortfall the flavor assigner wrote into the pending message
("insufficient unused quota for cpu in flavor on-demand, 4 more needed") and looks in the
ClusterQueue's cohort tree for the ClusterQueues that use more of that flavor and resource than
their own nominal quota (they borrow: reclaiming it, or giving them less, frees it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from events.cluster import ConditionType
from events.conditions import is_true
from events.manifests import format_time
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    EvictWorkload,
    MarkPending,
    PlacementWaiting,
    PlaceWorkload,
    RemovePlacement,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from events.quantity import format_amount
from services.core import admissionfair, workload_status
from services.core.quota import FR, Node
from services.core.render import summary_row
from services.core.state import State, WorkloadRecord

_UNUSED = re.compile(r"insufficient unused quota for (?P<res>[^ ,]+) in flavor (?P<flavor>[^ ,]+), "
                     r"(?P<amount>[^ ,]+) more needed")
_MAX = re.compile(r"insufficient quota for (?P<res>[^ ,]+) in flavor (?P<flavor>[^ ,]+),.*?"
                  r"> maximum capacity \((?P<cap>[^)]+)\)")


@dataclass(frozen=True)
class Shortfall:
    resource: str
    flavor: str
    amount: str  # as the message says it ("4", "8Gi")
    beyond_capacity: bool = False  # more than the ClusterQueue could ever get: a quota change, not a wait


@dataclass(frozen=True)
class Borrower:
    cluster_queue: str
    flavor: str
    resource: str
    amount: int  # what it uses beyond its nominal quota


@dataclass(frozen=True)
class Eviction:
    """The last eviction the history shows (the state keeps only its condition)."""

    time: int
    reason: str
    preemption_reason: str = ""
    preemptor: str = ""


@dataclass(frozen=True)
class Answer:
    workload: str
    status: str  # pending | admitted | quota-reserved | evicting | finished | deleted | handed-over
    since: int | None = None  # ms
    local_queue: str = ""
    cluster_queue: str = ""
    reason: str = ""
    message: str = ""
    position: int | None = None  # 1-based, in its ClusterQueue's pending order
    flavors: str = ""
    needs: tuple[Shortfall, ...] = ()
    borrowers: tuple[Borrower, ...] = ()
    evicted: Eviction | None = None
    fair_share: str = ""  # why it waits behind a lighter LocalQueue (admission fair sharing)

    def paragraph(self) -> str:
        return " ".join(_sentences(self))

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "status": self.status,
            "since": format_time(self.since) if self.since is not None else None,
            "localQueue": self.local_queue, "clusterQueue": self.cluster_queue,
            "reason": self.reason, "message": self.message, "position": self.position,
            "flavors": self.flavors,
            "needs": [{"resource": s.resource, "flavor": s.flavor, "amount": s.amount,
                       "beyondCapacity": s.beyond_capacity} for s in self.needs],
            "borrowers": [{"clusterQueue": b.cluster_queue, "flavor": b.flavor, "resource": b.resource,
                           "amount": format_amount(b.resource, b.amount)} for b in self.borrowers],
            "lastEviction": None if self.evicted is None else {
                "time": format_time(self.evicted.time), "reason": self.evicted.reason,
                "preemptionReason": self.evicted.preemption_reason, "preemptor": self.evicted.preemptor},
            "admissionFairSharing": self.fair_share,
            "summary": self.paragraph(),
        }


def answer(state: State, key: str, *, evicted: Eviction | None = None) -> Answer:
    """The answer for workload ``key`` (``namespace/name``) in ``state``."""
    rec = state.workloads.get(key)
    if rec is None:
        return Answer(workload=key, status="deleted", evicted=evicted)
    state.ensure_indexed()
    _, lq, cq, _, flavors, reason_text = summary_row(state, rec)
    base: dict[str, Any] = {"workload": key, "local_queue": lq, "cluster_queue": cq, "flavors": flavors,
                            "evicted": evicted}
    if rec.finished:
        fin = rec.conditions.get(ConditionType.FINISHED)
        return Answer(status="finished", since=_time(fin), reason=fin.reason if fin else "",
                      message=fin.message if fin else "", **base)
    if rec.evicting:
        ev = rec.conditions.get(ConditionType.EVICTED)
        return Answer(status="evicting", since=_time(ev), reason=ev.reason if ev else "",
                      message=ev.message if ev else "", **base)
    if rec.admission is not None:
        adm = rec.conditions.get(ConditionType.ADMITTED)
        admitted = is_true(adm)
        return Answer(status="admitted" if admitted else "quota-reserved", since=rec.reserved_at,
                      reason=str(ConditionType.ADMITTED if admitted else ConditionType.QUOTA_RESERVED), **base)
    return _pending(state, rec, reason_text, base)


def _pending(state: State, rec: WorkloadRecord, reason_text: str, base: dict[str, Any]) -> Answer:
    qr = rec.conditions.get(ConditionType.QUOTA_RESERVED)
    reason, _, message = reason_text.partition(": ")
    since = rec.queue_time
    if qr is not None and qr.last_transition_time:
        since = qr.last_transition_time
    needs = shortfalls(message)
    borrowers = tuple(b for need in needs for b in borrowing(state, rec.queued_in, (need.flavor, need.resource)))
    return Answer(status="pending", since=since, reason=reason or str(rec.pending_reason), message=message,
                  position=position(state, rec), needs=needs, borrowers=borrowers,
                  fair_share=admissionfair.explain_wait(state, rec), **base)


def _time(c: Any) -> int | None:
    return c.last_transition_time if c is not None else None


def shortfalls(message: str) -> tuple[Shortfall, ...]:
    """What the pending message says is missing, per (resource, flavor), in the message's order."""
    out: list[Shortfall] = []
    seen: list[tuple[str, str]] = []
    for m in _UNUSED.finditer(message):
        if (m["res"], m["flavor"]) not in seen:
            seen.append((m["res"], m["flavor"]))
            out.append(Shortfall(m["res"], m["flavor"], m["amount"]))
    for m in _MAX.finditer(message):
        if (m["res"], m["flavor"]) not in seen:
            seen.append((m["res"], m["flavor"]))
            out.append(Shortfall(m["res"], m["flavor"], m["cap"], beyond_capacity=True))
    return tuple(out)


def borrowing(state: State, cluster_queue: str, fr: FR) -> list[Borrower]:
    """The other ClusterQueues of ``cluster_queue``'s cohort tree that use more of ``fr`` than
    their nominal quota, most first (ties by name)."""
    node = state.index.cluster_queue_nodes.get(cluster_queue)
    if node is None or node.parent is None:
        return []
    out = []
    for leaf in _leaves(node.root()):
        if leaf.name == cluster_queue:
            continue
        over = leaf.usage.get(fr, 0) - leaf.subtree.get(fr, 0)
        if over > 0:
            out.append(Borrower(leaf.name, fr[0], fr[1], over))
    out.sort(key=lambda b: (-b.amount, b.cluster_queue))
    return out


def _leaves(root: Node) -> list[Node]:
    out: list[Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_cluster_queue:
            out.append(node)
        stack.extend(node.children)
    return out


def pending_order(state: State, cluster_queue: str) -> list[WorkloadRecord]:
    """The pending workloads of a ClusterQueue in the order its queue takes them (queued and
    parked together, as Kueue's visibility API lists them)."""
    state.ensure_indexed()
    queue = state.index.queues.get(cluster_queue)
    if queue is None:
        return []
    recs = [state.workloads[k] for _, k in queue.active]
    recs.extend(state.workloads[k] for k in queue.inadmissible)
    recs.sort(key=WorkloadRecord.queue_key)
    return [state.workloads[k] for k in admissionfair.ordered(state, cluster_queue, [r.key for r in recs])]


def position(state: State, rec: WorkloadRecord) -> int | None:
    if not rec.queued_in:
        return None
    for i, other in enumerate(pending_order(state, rec.queued_in), start=1):
        if other.key == rec.key:
            return i
    return None


# --- the paragraph ----------------------------------------------------------------------------


def _since(a: Answer) -> str:
    return f" since {format_time(a.since)}" if a.since is not None else ""


def _sentences(a: Answer) -> list[str]:
    if a.status == "deleted":
        return [f"{a.workload} is gone: it was deleted."]
    if a.status == "handed-over":  # its cohort tree moved to another shard (events.shardmap)
        return [f"{a.workload} is no longer decided here: {a.message}."]
    if a.status == "finished":
        out = [f"{a.workload} finished{_since(a)} ({a.reason}: {a.message})." if a.message
               else f"{a.workload} finished{_since(a)}."]
    elif a.status == "evicting":
        out = [f"{a.workload} is being evicted from ClusterQueue {a.cluster_queue}{_since(a)}: {a.message}."]
    elif a.status in ("admitted", "quota-reserved"):
        what = "is admitted to" if a.status == "admitted" else "holds quota in"
        note = "" if a.status == "admitted" else " (not yet admitted: admission checks pending)"
        out = [f"{a.workload} {what} ClusterQueue {a.cluster_queue}{note}{_since(a)}, on {a.flavors}."]
    else:
        out = _pending_sentences(a)
    if a.evicted is not None and a.status != "evicting":
        by = f" by {a.evicted.preemptor}" if a.evicted.preemptor else ""
        why = f" ({a.evicted.preemption_reason})" if a.evicted.preemption_reason else ""
        out.append(f"It was last evicted at {format_time(a.evicted.time)}: {a.evicted.reason}{why}{by}.")
    return out


def _pending_sentences(a: Answer) -> list[str]:
    where = f"ClusterQueue {a.cluster_queue}" if a.cluster_queue else f"LocalQueue {a.local_queue}"
    pos = f" at position {a.position}" if a.position is not None else ""
    out = [f"{a.workload} is pending in {where}{pos}{_since(a)}: {a.reason}."]
    message = a.message
    if a.needs and message.startswith("couldn't assign flavors"):
        _, _, message = message.partition(". ")  # the shortfall is said below, in fewer words
    if message:
        out.append(message.rstrip(".") + ".")
    if a.fair_share:
        out.append(a.fair_share[0].upper() + a.fair_share[1:] + ".")
    if a.needs:
        by_flavor: dict[str, list[str]] = {}
        for s in a.needs:
            by_flavor.setdefault(s.flavor, []).append(
                f"more {s.resource} than the ClusterQueue can ever get (at most {s.amount}; raise the quota)"
                if s.beyond_capacity else f"{s.amount} more {s.resource}")
        options = [f"{' and '.join(parts)} in {flavor}" for flavor, parts in by_flavor.items()]
        needs = options[0] if len(options) == 1 else "either " + ", or ".join(options)
        lenders = "; ".join(_borrowing_text(a.borrowers))
        out.append(f"To be admitted it needs {needs}" + (f"; {lenders}." if lenders else "."))
    return out


def _borrowing_text(borrowers: tuple[Borrower, ...]) -> list[str]:
    """One phrase per (ClusterQueue, flavor): "team-a-cq is borrowing 4 cpu and 16Gi memory in spot"."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for b in borrowers:
        grouped.setdefault((b.cluster_queue, b.flavor), []).append(
            f"{format_amount(b.resource, b.amount)} {b.resource}")
    return [f"{cq} is borrowing {' and '.join(parts)} in {flavor}" for (cq, flavor), parts in grouped.items()]


# --- decisions in words -----------------------------------------------------------------------


def decision_text(d: object) -> str:
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
    if isinstance(d, UpdateWorkloadStatus):
        return workload_status.text(d)
    if isinstance(d, PlaceWorkload | PlacementWaiting | RemovePlacement):
        return placement_text(d)
    if isinstance(d, UpdateLocalQueueFairSharing):
        used = ", ".join(f"{r}={q}" for r, q in d.consumed_resources) or "nothing"
        return f"LocalQueue admission fair sharing status: consumed {used}"
    if isinstance(d, AdmitChecked):  # in words, not its repr (the web view's stream; explain says more)
        if d.failed_to_start:
            return f"every admission check Ready, but the Job fails to start: {d.failed_to_start}"
        return "admitted: every admission check is Ready"
    return str(d)


def placement_text(d: PlaceWorkload | PlacementWaiting | RemovePlacement) -> str:
    """A MultiKueue placement decision in words (``services.core.placement``)."""
    if isinstance(d, PlaceWorkload):
        flavors = "; ".join(f"{psa.name}: " + ", ".join(f"{r}={f}" for r, f in psa.flavors) + f" x{psa.count}"
                            for psa in d.admission.pod_set_assignments)
        return (f"placed on worker cluster {d.cluster} (its ClusterQueue {d.admission.cluster_queue}: {flavors}); "
                f"check {d.check} Ready")
    if isinstance(d, PlacementWaiting):
        return f"waiting for a worker cluster (check {d.check} Pending): {d.message}"
    why = f": {d.message}" if d.message else ""
    return f"removed from worker cluster {d.cluster} ({d.reason}){why}"
