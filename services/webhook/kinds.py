"""The admission webhooks of the workload kinds besides Job (``events.jobkinds``: JobSet, the
Kubeflow jobs, MPIJob, Ray, AppWrapper, SparkApplication), as Kueue's job webhooks decide, pure.

- :func:`mutate_kind` (CREATE, Kueue's ``Default``): a queued object (``kueue.x-k8s.io/queue-name``
  label; Kueue's default ``manageJobsWithoutQueueName: false``) that its kind's integration manages
  and that no other integrated object owns is created held (its kind's suspend flag, e.g.
  ``spec.suspend`` or ``spec.runPolicy.suspend``: ``ApplyDefaultForSuspend``), so that no pod starts
  before admission; and when its LocalQueue's ClusterQueue has a MultiKueue admission check
  (``multikueue``: what the server looked up) and the kind is one MultiKueue places, its
  ``managedBy`` is set to ``kueue.x-k8s.io/multikueue`` unless it names another controller
  (``ApplyDefaultForManagedBy``).
- :func:`validate_kind` (CREATE and UPDATE, Kueue's ``ValidateJobOnCreate`` / ``OnUpdate``): a queued
  object is refused at creation with the message ``kueuelog simulate`` gives for it (queue name, the
  podSets its kind derives, a prebuilt Workload's name; ``events.manifests``), naming the object and
  the field (a TrainJob, whose podSets need its runtime, only for its queue and prebuilt names); on
  an update of an object that is not held, the queue name and the prebuilt Workload cannot change
  (``field is immutable``, as Kueue says).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import jobkinds
from events.cluster import MULTIKUEUE_CONTROLLER, PREBUILT_WORKLOAD_LABEL, QUEUE_NAME_LABEL
from events.jobkinds import managedby
from events.jobkinds.base import pointer
from events.jobkinds.naming import check_queue_name
from events.jobkinds.pods import obj_of
from events.jobkinds.prebuilt import check as check_prebuilt
from events.jobkinds.prebuilt import field_of, prebuilt_name
from events.jobkinds.trainjob import TRAINJOB
from events.manifests import Document, ManifestError, normalize
from services.webhook.review import Review, owned_by_workload_kind, response

FILE = "admission"


def _kind(obj: Mapping[str, Any]) -> jobkinds.JobKind | None:
    kind = jobkinds.kind_of(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    return kind if kind is not None and kind is not jobkinds.JOB else None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj_of(obj_of(obj.get("metadata")).get("labels"))


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj_of(obj_of(obj.get("metadata")).get("annotations"))


def _owned_by_integrated(obj: Mapping[str, Any]) -> bool:
    """Another integrated object owns it (a RayCluster a RayJob made): the owner is the workload."""
    return owned_by_workload_kind(obj_of(obj.get("metadata")))


def queue_of(obj: Mapping[str, Any]) -> str | None:
    """The LocalQueue a registry-kind object names (``None`` when it is no such object or not queued)."""
    if _kind(obj) is None:
        return None
    queue = _labels(obj).get(QUEUE_NAME_LABEL)
    return queue if isinstance(queue, str) else None


def _set_ops(body: Mapping[str, Any], path: tuple[str, ...], value: Any) -> list[dict[str, Any]]:
    """JSON Patch setting ``path`` to ``value``, adding missing parents."""
    ops: list[dict[str, Any]] = []
    at: Any = body
    for i, key in enumerate(path):
        last = i == len(path) - 1
        if not isinstance(at, Mapping) or key not in at:
            value_here: Any = value
            for parent in reversed(path[i + 1:]):
                value_here = {parent: value_here}
            return [*ops, {"op": "add", "path": pointer(path[:i + 1]), "value": value_here}]
        if last:
            return [*ops, {"op": "replace", "path": pointer(path), "value": value}] if at[key] != value else ops
        at = at[key]
    return ops


def _with(body: Mapping[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``body`` with ``path`` set to ``value`` (parents made as needed)."""
    out = dict(body)
    if len(path) == 1:
        out[path[0]] = value
        return out
    inner = out.get(path[0])
    out[path[0]] = _with(inner if isinstance(inner, Mapping) else {}, path[1:], value)
    return out


def mutate_kind(review: Review, *, multikueue: bool = False) -> dict[str, Any]:
    request = review.get("request") or {}
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(obj, dict):
        return response(review, allowed=True)
    kind = _kind(obj)
    if kind is None or queue_of(obj) is None or _owned_by_integrated(obj) or not kind.managed(obj):
        return response(review, allowed=True)
    patch = _set_ops(obj, kind.suspend_path, True)
    if multikueue and managedby.can_default(kind, obj):
        held = _with(obj, kind.suspend_path, True)  # the object the next operations apply to
        patch += _set_ops(held, managedby.PATHS[kind.key][1], MULTIKUEUE_CONTROLLER)
    return response(review, allowed=True, patch=patch or None)


def _shown(obj: Mapping[str, Any], namespace: str) -> str:
    meta = obj.get("metadata")
    name = (meta.get("name") or meta.get("generateName") or "") if isinstance(meta, Mapping) else ""
    return f"{obj.get('kind')} {namespace}/{name}"


def _immutable(obj: Mapping[str, Any], old: Mapping[str, Any], namespace: str) -> str | None:
    for what, new_value, old_value in (
        (f"metadata.labels.{QUEUE_NAME_LABEL}", _labels(obj).get(QUEUE_NAME_LABEL), _labels(old).get(QUEUE_NAME_LABEL)),
        (f"metadata.labels.{PREBUILT_WORKLOAD_LABEL}", prebuilt_name(_labels(obj), _annotations(obj)),
         prebuilt_name(_labels(old), _annotations(old))),
    ):
        if (new_value or "") != (old_value or ""):
            return f"{_shown(obj, namespace)}: {what}: invalid value {new_value!r}: field is immutable"
    return None


def validate_kind(review: Review) -> dict[str, Any]:
    request = review.get("request") or {}
    obj = request.get("object")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return response(review, allowed=True)
    kind = _kind(obj)
    namespace = str(request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or "")
    if kind is None:
        return response(review, allowed=True)
    old = request.get("oldObject")
    if operation == "UPDATE" and isinstance(old, dict) and not kind.suspended(obj):
        why = _immutable(obj, old, namespace)
        if why is not None:
            return response(review, allowed=False, message=why)
    if queue_of(obj) is None or _owned_by_integrated(obj):
        return response(review, allowed=True)
    meta = obj.get("metadata")
    body = {**obj, "metadata": {**(meta if isinstance(meta, Mapping) else {}), "namespace": namespace}}
    if kind is TRAINJOB:  # its podSets need its runtime: Kueue checks only the names here
        return _names_checked(review, obj, namespace)
    try:
        normalize(Document(FILE, 1, body))
    except ManifestError as e:
        where = f"{e.obj}: " if e.obj else f"{_shown(obj, namespace)}: "
        return response(review, allowed=False, message=f"{where}{e.field}: {e.message}" if e.field
                        else f"{where}{e.message}")
    return response(review, allowed=True)


class _At:
    """Where a name check's error is located: the object, as the webhook shows it."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{self.shown}: {field}: {message}")

    def amount(self, resource: str, value: object, field: str) -> int:
        raise self.error(field, "no quantities are read here")


def _names_checked(review: Review, obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """Kueue's ``ValidateJobOnCreate`` for a kind whose podSets are not read here: the queue name and
    the prebuilt Workload's name."""
    at = _At(_shown(obj, namespace))
    try:
        check_queue_name(at, str(queue_of(obj) or ""))
        prebuilt = prebuilt_name(_labels(obj), _annotations(obj))
        if prebuilt:
            check_prebuilt(at, str(obj.get("apiVersion")), str(obj.get("kind")), prebuilt, field_of(_labels(obj)))
    except ValueError as e:
        return response(review, allowed=False, message=str(e))
    return response(review, allowed=True)
