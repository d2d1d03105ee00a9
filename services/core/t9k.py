"""T9k Queue admission at creation: the rules that refuse a workload before it exists.

Pure functions over the Queue (as the ClusterQueue it maps to, ``events.t9k``), the workload,
the namespace's labels and the requesting user; used by the validating webhook and by
``kueuelog simulate``. The checks run in this order and the first refusal is the answer:
the Queue exists; it is not closed; the user, one of their groups, or the namespace may use
it; every pod fits a shape of its resourceShapeProfile; its requests keep ``status.allocated``
within ``spec.quota.requests``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from events import objects as o
from events import t9k
from events.cluster import T9K_ALLOCATED_ANNOTATION
from events.quantity import format_amount
from services.core.flavors import selector_matches
from services.core.state import State, WorkloadRecord


@dataclass(frozen=True)
class Requester:
    """Who asks (the admission request's userInfo); ``None`` in ``simulate``, which has no user."""

    user: str
    groups: tuple[str, ...] = ()


def workload_requests(wl: o.Workload) -> dict[str, int]:
    total: dict[str, int] = {}
    for ps in wl.pod_sets:
        for r, v in ps.requests:
            total[r] = total.get(r, 0) + v * ps.count
    return total


def _permission(name: str, queue: o.T9kQueue, namespace: str, ns_labels: Mapping[str, str],
                who: Requester | None) -> str | None:
    if who is None:
        return None
    if who.user in queue.users or any(g in queue.groups for g in who.groups):
        return None
    if queue.namespace_selector is not None and selector_matches(queue.namespace_selector, dict(ns_labels)):
        return None
    return (f"user {who.user!r} may not use Queue {name} in namespace {namespace}: neither the user nor any of "
            "their groups has permission, and the namespace does not match the Queue's spec.namespaceSelector")


def _shape(name: str, queue: o.T9kQueue, wl: o.Workload, shapes: o.ResourceShapes | None) -> str | None:
    profile = queue.resource_shape_profile
    if not profile:
        return None
    found = dict((shapes or o.ResourceShapes()).profiles).get(profile)
    if found is None:
        return (f"Queue {name}: resource shape profile {profile!r} is not in ConfigMap "
                f"{t9k.NAMESPACE}/{t9k.SHAPES_CONFIGMAP}")
    for ps in wl.pod_sets:
        asked = dict(ps.requests)
        if any(all(asked.get(r, 0) <= v for r, v in shape.requests) for shape in found):
            continue
        shown = ", ".join(f"{r} {format_amount(r, v)}" for r, v in ps.requests) or "nothing"
        names = ", ".join(s.name for s in found) or "none"
        return (f"Queue {name}: a pod of podSet {ps.name} requests {shown}, larger than every shape of "
                f"profile {profile!r} ({names})")
    return None


def _quota(name: str, queue: o.T9kQueue, wl: o.Workload, allocated: Mapping[str, int]) -> str | None:
    asked = workload_requests(wl)
    for r, limit in queue.quota:
        have, want = allocated.get(r, 0), asked.get(r, 0)
        if want and have + want > limit:
            return (f"Queue {name}: {r} quota {format_amount(r, limit)}, allocated {format_amount(r, have)}, "
                    f"request {format_amount(r, want)}: {format_amount(r, have + want)} would exceed the quota")
    return None


def creation_refusal(
    cq: o.ClusterQueue | None,
    queue_name: str,
    wl: o.Workload,
    *,
    ns_labels: Mapping[str, str],
    allocated: Mapping[str, int],
    who: Requester | None = None,
    shapes: o.ResourceShapes | None = None,
) -> str | None:
    """Why creating ``wl`` on Queue ``queue_name`` is refused, or ``None`` when it may be created."""
    if cq is None or cq.t9k is None:
        return f"Queue {queue_name} does not exist in namespace {t9k.NAMESPACE}"
    queue = cq.t9k
    if queue.closed:
        return f"Queue {queue_name} is closed (spec.closed: true): new workloads are refused"
    return (_permission(queue_name, queue, wl.namespace, ns_labels, who)
            or _shape(queue_name, queue, wl, shapes)
            or _quota(queue_name, queue, wl, allocated))


def expired(queue: o.T9kQueue, created: int, now: int) -> bool:
    """Whether a pod created at ``created`` (ms) has outlived the Queue's maxDuration at ``now``."""
    return queue.max_duration_ms is not None and now - created > queue.max_duration_ms


def expired_admissions(state: State) -> list[tuple[WorkloadRecord, str]]:
    """The admitted workloads whose pods have outlived their Queue's ``spec.maxDuration``, with why.

    A pod's age is ``now - creation time``, both from the log: ``now`` is the state's clock and a
    workload's pods are created when it is admitted, so their creation time is its admission's
    (``reserved_at``). T9k deletes such a pod; here its workload is evicted (its pods go) and,
    like a pod its controller creates again, queued again, with a fresh age once readmitted.
    Usage given as a Queue's ``status.allocated`` (``simulate``) has no pods and never expires."""
    out: list[tuple[WorkloadRecord, str]] = []
    for name in sorted(n for n, cq in state.cluster_queues.items()
                       if cq.t9k is not None and cq.t9k.max_duration_ms is not None):
        queue = state.cluster_queues[name].t9k
        assert queue is not None and queue.max_duration_ms is not None
        for key in sorted(state.index.admitted.get(name, {})):
            rec = state.workloads[key]
            if (rec.evicting or rec.reserved_at is None or not expired(queue, rec.reserved_at, state.now)
                    or any(k == T9K_ALLOCATED_ANNOTATION for k, _ in rec.obj.annotations)):
                continue
            age = state.now - rec.reserved_at
            out.append((rec, f"Pods older than the maxDuration of Queue {name} ({queue.max_duration_ms} ms): "
                             f"admitted {age} ms ago"))
    return out
