"""T9k Queues in ``kueuelog simulate``: what the engine needs besides the Queues themselves.

``events.t9k`` maps each Queue onto a ClusterQueue; here the input is completed the way the
cluster completes it: the flavor ``t9k`` and, unless the input declares the cohort ``t9k``
(the cluster's capacity), a pool with room for every queue's full quota; each Queue's
``status.allocated`` becomes a Workload that arrives admitted (usage already held); and every
T9k workload is screened as the validating webhook screens it at creation
(``services.core.t9k``): one that is refused is not queued, and is reported with a
``QuotaReserved=False`` condition of reason ``Rejected`` and the webhook's message. ``simulate``
has no requesting user, so only the webhook checks users and groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from events import conditions as cond
from events import objects as o
from events import t9k
from events.cluster import PENDING_REASON_ANNOTATION, ConditionType
from services.app.exits import UsageError
from services.core.render import workload_object
from services.core.state import State, WorkloadRecord, resolve_priority
from services.core.t9k import creation_refusal, workload_requests

REJECTED = "Rejected"

Refusal = tuple[o.Workload, str]


def prepare(objects: Sequence[o.AnyObject]) -> tuple[list[o.AnyObject], list[Refusal]]:
    """(objects to fold, refused workloads with the reason), in input order."""
    queues = [ob for ob in objects if isinstance(ob, o.ClusterQueue) and ob.t9k is not None]
    kept: list[o.AnyObject] = [ob for ob in objects if not isinstance(ob, o.ResourceShapes)]
    if not queues and not any(isinstance(ob, o.Workload) and t9k.is_t9k_workload(ob) for ob in kept):
        return kept, []
    names = {cq.name for cq in queues}
    clash = sorted({ob.name for ob in kept if isinstance(ob, o.ClusterQueue) and ob.t9k is None} & names)
    if clash:
        raise UsageError(f"ClusterQueue {clash[0]} and Queue {t9k.NAMESPACE}/{clash[0]} share a name: a T9k Queue "
                         "is the ClusterQueue of its name to the engine; rename one of them")
    shapes = next((ob for ob in reversed(objects) if isinstance(ob, o.ResourceShapes)), None)
    out: list[o.AnyObject] = []
    if queues and not any(isinstance(ob, o.ResourceFlavor) and ob.name == t9k.FLAVOR for ob in objects):
        out.append(o.ResourceFlavor(name=t9k.FLAVOR))
    refused: list[Refusal] = []
    current: dict[str, o.ClusterQueue] = {}
    allocated: dict[str, dict[str, int]] = {}
    labels: dict[str, dict[str, str]] = {}
    for ob in kept:
        if isinstance(ob, o.Namespace):
            labels[ob.name] = dict(ob.labels)
        elif isinstance(ob, o.ClusterQueue) and ob.t9k is not None:
            current[ob.name] = ob
            allocated[ob.name] = dict(ob.t9k.allocated)
            held = t9k.allocated_workload(ob.name, ob.t9k)
            out.append(ob)
            if held is not None:
                out.append(held)
            continue
        elif isinstance(ob, o.Workload) and t9k.is_t9k_workload(ob) and ob.admission is None:
            ns_labels = labels.get(ob.namespace, {"kubernetes.io/metadata.name": ob.namespace})
            why = creation_refusal(current.get(ob.queue_name), ob.queue_name, ob, ns_labels=ns_labels,
                                   allocated=allocated.get(ob.queue_name, {}), shapes=shapes)
            if why is not None:
                refused.append((ob, why))
                continue
        elif isinstance(ob, o.Workload) and t9k.is_t9k_workload(ob):
            held_now = allocated.setdefault(ob.queue_name, {})
            for r, v in workload_requests(ob).items():
                held_now[r] = held_now.get(r, 0) + v
        out.append(ob)
    if queues and not any(isinstance(ob, o.Cohort) and ob.name == t9k.COHORT for ob in objects):
        out.append(t9k.default_pool(queues))
    return out, refused


def refused_object(state: State, wl: o.Workload, why: str) -> dict[str, Any]:
    """A refused workload as ``simulate`` prints it: never queued, with the webhook's message."""
    at = wl.creation_time or 0
    rec = WorkloadRecord(obj=wl, seq=0, queue_time=at, priority=resolve_priority(state, wl)[0],
                         pending_reason=REJECTED)
    rec.conditions[ConditionType.QUOTA_RESERVED] = cond.condition(
        ConditionType.QUOTA_RESERVED, False, REJECTED, f"admission webhook denied the request: {why}", at)
    obj = workload_object(state, rec)
    obj["metadata"].setdefault("annotations", {})[PENDING_REASON_ANNOTATION] = REJECTED
    return obj


def summary(wl: o.Workload, why: str) -> tuple[str, str, str, str, str, str]:
    name = f"{wl.namespace}/{wl.owner.name if wl.owner else wl.name}"
    return name, wl.queue_name, "", REJECTED, "", why
