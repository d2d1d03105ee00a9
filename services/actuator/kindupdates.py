"""An admission check's podSetUpdates on the workload kinds besides Job, per podSet, pure.

Kueue merges each Ready check's podSetUpdates into the podSet they name (``podset.Merge``): the
nodeSelector with the flavors' node labels (a key with two values is a conflict), tolerations
appended unless present, labels and annotations onto the pod template's metadata. A Job has one
podSet (``checkplan``); a JobSet, a PyTorchJob, a RayJob have several, each its own template.

- :func:`with_updates`: each podSet's scheduling with its updates' nodeSelector and tolerations;
- :func:`metadata_ops`: the JSON Patch operations writing the updates' labels and annotations into
  each podSet's template, and what those keys were before (None: absent), to restore them;
- :func:`restore_ops`: those values back on eviction (absent keys removed), as Kueue restores the
  templates.

What was there before is kept per podSet in the original-scheduling annotation, under
``templateMetadata`` (``{labels: {key: old or null}, annotations: {...}}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from events import jobkinds
from events import objects as o
from events.checkstatus import toleration_json
from events.jobkinds.base import PathPart, pointer
from events.jobkinds.patches import Scheduling, lookup
from events.podspec import Where
from services.actuator.kubeapi import InvalidObject

Json = dict[str, Any]
KINDS = ("labels", "annotations")
METADATA_KEY = "templateMetadata"


def with_updates(wanted: Mapping[str, Scheduling], updates: Sequence[o.PodSetUpdate],
                 shown: str) -> dict[str, Scheduling]:
    """Each podSet's scheduling with its podSetUpdates' nodeSelector and tolerations merged in."""
    out = dict(wanted)
    for u in updates:
        base = out.get(u.name)
        if base is None:
            continue  # a podSet the admission does not name
        selector = dict(base.node_selector)
        for k, v in u.node_selector:
            if selector.get(k, v) != v:
                raise InvalidObject(shown, f"podSets.{u.name}.template.spec.nodeSelector.{k}",
                                    f"conflict for key={k}, value1={selector[k]}, value2={v} "
                                    "(an admission check's podSetUpdate)")
            selector[k] = v
        tolerations = [dict(t) for t in base.tolerations]
        for t in u.tolerations:
            tj = toleration_json(t)
            if tj not in tolerations:
                tolerations.append(tj)
        out[u.name] = Scheduling(selector, tolerations)
    return out


def _changes(updates: Sequence[o.PodSetUpdate]) -> dict[str, dict[str, dict[str, str]]]:
    out: dict[str, dict[str, dict[str, str]]] = {}
    for u in updates:
        for which, pairs in (("labels", u.labels), ("annotations", u.annotations)):
            if pairs:
                out.setdefault(u.name, {}).setdefault(which, {}).update(dict(pairs))
    return out


Remembered = Mapping[str, Mapping[str, Mapping[str, str | None]]]
"""podSet -> labels / annotations -> key -> its value before the podSetUpdates (None: absent)."""


def metadata_ops(where: Where, kind: jobkinds.JobKind, body: Mapping[str, Any], updates: Sequence[o.PodSetUpdate],
                 remembered: Remembered) -> tuple[list[Json], dict[str, Json]]:
    """(operations, what to remember per podSet): keys already remembered keep their first value."""
    changes = _changes(updates)
    ops: list[Json] = []
    memory: dict[str, Json] = {}
    for source in kind.pod_sets(where, body):
        wanted = changes.get(source.name)
        template = lookup(body, source.path)
        if not wanted or not isinstance(template, Mapping):
            continue
        meta_path: tuple[PathPart, ...] = (*source.path, "metadata")
        meta = template.get("metadata")
        if not isinstance(meta, Mapping):
            ops.append({"op": "add", "path": pointer(meta_path), "value": {}})
            meta = {}
        kept: Json = {}
        for which, values in wanted.items():
            current = meta.get(which)
            if not isinstance(current, Mapping):
                ops.append({"op": "add", "path": pointer((*meta_path, which)), "value": {}})
                current = {}
            before: dict[str, str | None] = dict((remembered.get(source.name) or {}).get(which) or {})
            for key, value in values.items():
                before.setdefault(key, current.get(key))
                ops.append({"op": "add", "path": pointer((*meta_path, which, key)), "value": value})
            kept[which] = before
        memory[source.name] = kept
    return ops, memory


def restore_ops(where: Where, kind: jobkinds.JobKind, body: Mapping[str, Any], remembered: Remembered) -> list[Json]:
    """The remembered labels and annotations back on each podSet's template (None: removed)."""
    ops: list[Json] = []
    for source in kind.pod_sets(where, body):
        kept = remembered.get(source.name)
        template = lookup(body, source.path)
        if not kept or not isinstance(template, Mapping):
            continue
        found = template.get("metadata")
        meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        for which in KINDS:
            values = meta.get(which)
            current = values if isinstance(values, Mapping) else None
            for key, old in (kept.get(which) or {}).items():
                path = pointer((*source.path, "metadata", which, key))
                if old is None:
                    if current is not None and key in current:
                        ops.append({"op": "remove", "path": path})
                elif current is not None:
                    ops.append({"op": "add", "path": path, "value": old})
    return ops


def remembered_of(raw: Mapping[str, Any]) -> dict[str, dict[str, dict[str, str | None]]]:
    """The ``templateMetadata`` of each podSet in the decoded original-scheduling annotation."""
    out: dict[str, dict[str, dict[str, str | None]]] = {}
    for name, entry in raw.items():
        kept = entry.get(METADATA_KEY) if isinstance(entry, Mapping) else None
        if not isinstance(kept, Mapping):
            continue
        out[str(name)] = {which: {str(k): (None if v is None else str(v)) for k, v in values.items()}
                          for which, values in kept.items() if which in KINDS and isinstance(values, Mapping)}
    return out
