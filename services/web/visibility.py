"""Kueue's visibility API (``visibility.kueue.x-k8s.io``): the pending workloads of a
ClusterQueue or a LocalQueue, in the order the ClusterQueue's queue takes them, with their
positions — the JSON Kueue's ``pendingworkloads`` subresource answers, from our state.

Positions start at 0, as in Kueue (``positionInClusterQueue`` counts every pending workload of
the ClusterQueue ahead, ``positionInLocalQueue`` those of the same LocalQueue); ``offset`` and
``limit`` page the list as Kueue's options do (limit 1000 by default, at most 100,000). Why each
waits goes where Kueue's shape has room for it, in ``metadata.annotations``
(``kueuelog.io/pending-reason`` and ``kueuelog.io/pending-message``).
"""

from __future__ import annotations

from typing import Any

from events.cluster import KUEUE_VISIBILITY_GROUP, PENDING_MESSAGE_ANNOTATION, PENDING_REASON_ANNOTATION
from events.manifests import format_time
from services.core.answer import pending_order
from services.core.render import summary_row
from services.core.state import State, WorkloadRecord

GROUP = KUEUE_VISIBILITY_GROUP
VERSIONS = ("v1beta2", "v1beta1")
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


class NotFound(LookupError):
    pass


def bounded(limit: int | None, offset: int | None) -> tuple[int, int]:
    """Kueue's ``boundedLimitOffset``."""
    lim = DEFAULT_LIMIT if limit is None else limit
    return min(max(lim, 0), MAX_LIMIT), max(offset or 0, 0)


def _item(state: State, rec: WorkloadRecord, in_cq: int, in_lq: int) -> dict[str, Any]:
    wl = rec.obj
    meta: dict[str, Any] = {"name": wl.name, "namespace": wl.namespace,
                            "creationTimestamp": format_time(wl.creation_time) if wl.creation_time else None}
    if wl.owner is not None:
        meta["ownerReferences"] = [{"apiVersion": wl.owner.api_version, "kind": wl.owner.kind,
                                    "name": wl.owner.name, "uid": wl.owner.uid}]
    reason, _, message = summary_row(state, rec)[5].partition(": ")
    if reason:
        meta["annotations"] = {PENDING_REASON_ANNOTATION: reason, PENDING_MESSAGE_ANNOTATION: message}
    return {"metadata": meta, "priority": rec.priority, "localQueueName": wl.queue_name,
            "positionInClusterQueue": in_cq, "positionInLocalQueue": in_lq}


def _summary(version: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "PendingWorkloadsSummary", "apiVersion": f"{GROUP}/{version}",
            "metadata": {"creationTimestamp": None}, "items": items}


def cluster_queue_pending(state: State, name: str, *, limit: int | None = None, offset: int | None = None,
                          version: str = VERSIONS[0]) -> dict[str, Any]:
    state.ensure_indexed()
    if name not in state.index.queues:
        raise NotFound(f'clusterqueues.{GROUP} "{name}" not found')
    lim, off = bounded(limit, offset)
    items = []
    in_lq: dict[str, int] = {}
    for index, rec in enumerate(pending_order(state, name)):
        if index >= off + lim:
            break
        lq = f"{rec.obj.namespace}/{rec.obj.queue_name}"
        position = in_lq.get(lq, 0)
        in_lq[lq] = position + 1
        if index >= off:
            items.append(_item(state, rec, index, position))
    return _summary(version, items)


def local_queue_pending(state: State, namespace: str, name: str, *, limit: int | None = None,
                        offset: int | None = None, version: str = VERSIONS[0]) -> dict[str, Any]:
    state.ensure_indexed()
    lq = state.local_queues.get(f"{namespace}/{name}")
    if lq is None or lq.cluster_queue not in state.index.queues:
        raise NotFound(f'localqueues.{GROUP} "{name}" not found')
    lim, off = bounded(limit, offset)
    items: list[dict[str, Any]] = []
    skipped = 0
    for index, rec in enumerate(pending_order(state, lq.cluster_queue)):
        if len(items) >= lim:
            break
        if rec.obj.namespace != namespace or rec.obj.queue_name != name:
            continue
        if skipped < off:
            skipped += 1
            continue
        items.append(_item(state, rec, index, len(items) + off))
    return _summary(version, items)
