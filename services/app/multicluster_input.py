"""``simulate``'s input over several clusters: which worker cluster each object belongs to.

An object with the annotation ``kueuelog.io/cluster: NAME`` is that worker's (as if the worker's
watcher had published it); every other object is the manager's. Every MultiKueueCluster of the
input is folded first, so that a worker's objects may come before or after it; an annotation that
names no MultiKueueCluster of the input is refused (exit 2) with the document and field.
"""

from __future__ import annotations

from collections.abc import Sequence

from events import objects as o
from events.manifests import Document, ManifestError
from events.messages import ObjectApplied
from events.multikueue_manifest import CLUSTER_ANNOTATION
from services.core.placement import heartbeat, route
from services.core.state import State, fold


def clusters_of(documents: Sequence[tuple[Document, o.AnyObject]]) -> dict[int, str]:
    """``id(object) -> cluster`` for the objects marked as a worker's (checked against the input)."""
    names = {obj.name for _, obj in documents if isinstance(obj, o.MultiKueueCluster)}
    out: dict[int, str] = {}
    for doc, obj in documents:
        meta = doc.body.get("metadata") if isinstance(doc.body, dict) else None
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        cluster = annotations.get(CLUSTER_ANNOTATION) if isinstance(annotations, dict) else None
        if cluster is None:
            continue
        field = f"metadata.annotations.{CLUSTER_ANNOTATION}"
        what = f"{doc.body.get('kind', '')} {meta.get('name', '') if isinstance(meta, dict) else ''}".strip()
        if not isinstance(cluster, str) or cluster not in names:
            raise ManifestError(doc.file, doc.index, what, field,
                                f"no MultiKueueCluster named {cluster!r} in the input "
                                f"(the worker clusters are: {', '.join(sorted(names)) or 'none'})")
        if isinstance(obj, o.MultiKueueCluster | o.MultiKueueConfig):
            raise ManifestError(doc.file, doc.index, what, field, "MultiKueue objects are the manager's")
        out[id(obj)] = cluster
    return out


def fold_objects(state: State, objects: Sequence[o.AnyObject], clusters: dict[int, str]) -> None:
    """Fold in input order, each object into its cluster (MultiKueueClusters first)."""
    if not clusters:
        for obj in objects:
            fold(state, ObjectApplied(time=_time(obj), object=obj))
        return
    first = [obj for obj in objects if isinstance(obj, o.MultiKueueCluster)]
    for obj in first:
        fold(state, ObjectApplied(time=0, object=obj))
    for obj in objects:
        if not isinstance(obj, o.MultiKueueCluster):
            route(state, clusters.get(id(obj), ""), ObjectApplied(time=_time(obj), object=obj))
    heartbeat(state)  # simulated workers are alive at the input's time


def _time(obj: o.AnyObject) -> int:
    return (obj.creation_time or 0) if isinstance(obj, o.Workload) else 0
