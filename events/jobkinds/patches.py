"""Suspend and resume patch shapes for any workload kind, pure.

- :func:`suspend_patch`: the JSON merge patch that holds (or releases) the object, at its kind's
  suspend path (``spec.suspend``, ``spec.runPolicy.suspend``).
- :func:`scheduling_ops`: the JSON Patch (RFC 6902) operations that write each podSet's node
  selector and tolerations into the pod template the podSet came from (templates sit in lists,
  as a JobSet's replicated Jobs, so a merge patch cannot reach them). With ``merge`` (admission)
  the flavor's node labels are merged into the template's ``nodeSelector`` (a key already set to
  another value is a conflict, as in Kueue's ``PodSetInfo.Merge``) and its tolerations appended
  unless present; without it (eviction) the given values replace what is there, restoring the
  originals. A template the object does not have (a RayJob's default submitter) is written whole.
- :func:`resume_ops` / :func:`evict_ops`: release plus the admission's scheduling, or hold plus the
  originals, each in one patch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from events.jobkinds.base import JobKind, PathPart, PodSetSource, pointer
from events.podspec import Where

Json = dict[str, Any]


class PatchConflict(ValueError):
    """The admission's node selector contradicts the podSet's own."""


@dataclass(frozen=True)
class Scheduling:
    """What a podSet's pods get: node selector and tolerations (tolerations as JSON objects)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    """Labels and annotations for the pod template (a check's podSetUpdates); when restoring, a
    ``None`` value removes the key the admission added."""


def suspend_patch(kind: JobKind, suspended: bool) -> Json:
    """The merge patch setting the kind's suspend flag."""
    patch: Json = {}
    at = patch
    for key in kind.suspend_path[:-1]:
        at[key] = {}
        at = at[key]
    at[kind.suspend_path[-1]] = suspended
    return patch


def lookup(body: Mapping[str, Any], path: Sequence[PathPart]) -> Any:
    """What is at ``path`` in ``body``; ``None`` when any step is missing."""
    at: Any = body
    for part in path:
        if isinstance(part, int):
            if not isinstance(at, list) or part >= len(at):
                return None
            at = at[part]
        else:
            if not isinstance(at, Mapping):
                return None
            at = at.get(part)
    return at


def _merged(name: str, spec: Mapping[str, Any], want: Scheduling, merge: bool) -> tuple[Json, list[Json]]:
    if not merge:
        return dict(want.node_selector), [dict(t) for t in want.tolerations]
    selector = dict(spec.get("nodeSelector") or {})
    for key, value in want.node_selector.items():
        if selector.get(key, value) != value:
            raise PatchConflict(f"podSet {name}: nodeSelector {key}: the template has {selector[key]!r}, "
                                f"the admission needs {value!r}")
        selector[key] = value
    tolerations = [dict(t) for t in spec.get("tolerations") or []]
    tolerations += [dict(t) for t in want.tolerations if dict(t) not in tolerations]
    return selector, tolerations


def info_json(want: Scheduling) -> Json:
    """A podSet's admission as a PodSetInfo (an AppWrapper's ``podSetInfos`` entry), empty fields left out."""
    out: Json = {"labels": {k: v for k, v in want.labels.items() if v is not None},
                 "annotations": {k: v for k, v in want.annotations.items() if v is not None},
                 "nodeSelector": dict(want.node_selector), "tolerations": [dict(t) for t in want.tolerations]}
    return {k: v for k, v in out.items() if v}


def _info_ops(sources: Sequence[PodSetSource], body: Mapping[str, Any], per_pod_set: Mapping[str, Scheduling],
              merge: bool) -> list[Json]:
    """For a kind that takes its admission in podSetInfos lists: on admission each list written whole
    (one entry per podSet, in order), otherwise the lists removed (as Kueue clears them)."""
    lists: dict[tuple[PathPart, ...], list[Json]] = {}
    for source in sources:
        assert source.info_at is not None
        entries = lists.setdefault(source.info_at[:-1], [])
        entries.append(info_json(per_pod_set.get(source.name, Scheduling())))
    if merge:
        return [{"op": "add", "path": pointer(at), "value": entries} for at, entries in lists.items()]
    return [{"op": "remove", "path": pointer(at)} for at in lists if lookup(body, at) is not None]


def scheduling_ops(where: Where, kind: JobKind, body: Mapping[str, Any], per_pod_set: Mapping[str, Scheduling],
                   *, merge: bool) -> list[Json]:
    ops: list[Json] = []
    sources = kind.pod_sets(where, body)
    if any(s.info_at is not None for s in sources):
        return _info_ops(sources, body, per_pod_set, merge)
    for source in sources:
        want = per_pod_set.get(source.name)
        if want is None:
            continue
        written = lookup(body, source.path)
        if source.flat:
            ops += _flat_ops(source, written, want, merge)
            continue
        spec = (written or source.template).get("spec") or {}
        selector, tolerations = _merged(source.name, spec, want, merge)
        if written is None:
            template = copy.deepcopy(dict(source.template))
            template["spec"] = {**template.get("spec", {}), "nodeSelector": selector, "tolerations": tolerations}
            meta = dict(template.get("metadata") or {})
            for key, values in (("labels", want.labels), ("annotations", want.annotations)):
                added = {k: v for k, v in values.items() if v is not None}
                if added:
                    meta[key] = {**(meta.get(key) or {}), **added}
            if meta:
                template["metadata"] = meta
            ops.append({"op": "add", "path": pointer(source.path), "value": template})
            continue
        base = pointer((*source.path, "spec"))
        ops.append({"op": "add", "path": f"{base}/nodeSelector", "value": selector})
        ops.append({"op": "add", "path": f"{base}/tolerations", "value": tolerations})
        ops += _metadata_ops(source.name, source.path, written, want, merge)
    return ops


def _flat_ops(source: PodSetSource, written: Any, want: Scheduling, merge: bool) -> list[Json]:
    """The admission written into the object at the podSet's path itself (a Spark role)."""
    ops: list[Json] = []
    if not isinstance(written, Mapping):
        ops.append({"op": "add", "path": pointer(source.path), "value": {}})
        written = {}
    selector, tolerations = _merged(source.name, written, want, merge)
    ops.append({"op": "add", "path": pointer((*source.path, "nodeSelector")), "value": selector})
    ops.append({"op": "add", "path": pointer((*source.path, "tolerations")), "value": tolerations})
    flat = {"metadata": written}  # labels and annotations sit beside nodeSelector
    return ops + _metadata_ops(source.name, source.path, flat, want, merge, meta_at=())


def _metadata_ops(name: str, path: tuple[PathPart, ...], template: Mapping[str, Any], want: Scheduling,
                  merge: bool, meta_at: tuple[PathPart, ...] = ("metadata",)) -> list[Json]:
    """A podSet's labels and annotations (a check's podSetUpdates) into its template; a value of
    ``None`` (when restoring) removes the key. On admission a key the template already sets to
    another value is a conflict, as in Kueue's ``PodSetInfo.Merge``."""
    if not want.labels and not want.annotations:
        return []
    ops: list[Json] = []
    meta = template.get("metadata")
    if not isinstance(meta, Mapping):
        ops.append({"op": "add", "path": pointer((*path, *meta_at)), "value": {}})
        meta = {}
    for key, values in (("labels", want.labels), ("annotations", want.annotations)):
        if not values:
            continue
        current = meta.get(key)
        if not isinstance(current, Mapping):
            ops.append({"op": "add", "path": pointer((*path, *meta_at, key)), "value": {}})
            current = {}
        for k, v in values.items():
            if merge and current.get(k, v) != v:
                raise PatchConflict(f"podSet {name}: {key} {k}: the template has {current[k]!r}, "
                                    f"the admission needs {v!r}")
            if v is not None:
                ops.append({"op": "add", "path": pointer((*path, *meta_at, key, k)), "value": v})
            elif k in current:
                ops.append({"op": "remove", "path": pointer((*path, *meta_at, key, k))})
    return ops


def resume_ops(where: Where, kind: JobKind, body: Mapping[str, Any],
               per_pod_set: Mapping[str, Scheduling]) -> list[Json]:
    """Release the object with each podSet's admitted scheduling merged into its template."""
    ops = scheduling_ops(where, kind, body, per_pod_set, merge=True)
    return [*_suspend_ops(kind, body, False), *ops]


def _suspend_ops(kind: JobKind, body: Mapping[str, Any], suspended: bool) -> list[Json]:
    """The suspend flag as JSON Patch: missing parents are added (``runPolicy`` may be absent)."""
    ops: list[Json] = []
    path: list[PathPart] = []
    for key in kind.suspend_path[:-1]:
        path.append(key)
        if lookup(body, path) is None:
            ops.append({"op": "add", "path": pointer(path), "value": {}})
    ops.append({"op": "add", "path": pointer(kind.suspend_path), "value": suspended})
    return ops


def evict_ops(where: Where, kind: JobKind, body: Mapping[str, Any],
              originals: Mapping[str, Scheduling]) -> list[Json]:
    """Hold the object again with each podSet's original scheduling restored."""
    return [*_suspend_ops(kind, body, True), *scheduling_ops(where, kind, body, originals, merge=False)]
