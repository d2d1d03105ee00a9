"""What the webhooks decide for the serving kinds Kueue holds by their pods, without I/O: a
LeaderWorkerSet's templates (Kueue's ``leaderworkerset_webhook.go``) and the updates Kueue refuses on
a queued StatefulSet or LeaderWorkerSet (``statefulset_webhook.go``, ``leaderworkerset_webhook.go``,
at Kueue ff69552e with its default feature gates, ``LWSImmutableGroupSize`` on).

- :func:`mutate_lws`: a queued LeaderWorkerSet's leader and worker pod templates get the queue-name
  (and priority-class) label, ``pod-suspending-parent: leaderworkerset.x-k8s.io/leaderworkerset``
  and ``pod-group-serving: "true"``, so each pod the LWS controller makes is created gated and
  queued, and its group never finishes; the group name and count are the reconciler's, per replica
  (``services/actuator/lws.py``), as in Kueue.
- :func:`validate_serving`: refused, in one line naming the object and the field:
  - at creation and update, a queue-name label that is not a LocalQueue name; a LeaderWorkerSet's
    ``spec.replicas`` outside 0..1000000;
  - the queue-name label removed, or changed while the object has ready replicas; a
    ``kueue.x-k8s.io/priority-class`` label removed, or added while it has ready replicas;
  - (a StatefulSet another integration marks as its own, a LeaderWorkerSet's, is left alone);
  - on a queued object: a change to what its pods are admitted by (the pod templates' requests,
    ports, node selector, affinity, tolerations, ...: Kueue's ``SpecShape``), a LeaderWorkerSet's
    ``size``, its leader template added or removed; a StatefulSet's ``replicas`` changed from one
    non-zero count to another (Kueue resizes a StatefulSet only through zero), and scaled up from
    zero while its pods from before are still there (``status.replicas``) or its previous Workload
    still exists (kueuelog deletes a scaled-to-zero StatefulSet's Workload; the server looks it up).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from events.cluster import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.naming import check_queue_name
from services.webhook.review import Review, _meta_ops, _request, response

IMMUTABLE: Final = "field is immutable"
QUEUE_FIELD: Final = f"metadata.labels.{QUEUE_NAME_LABEL}"
PRIORITY_FIELD: Final = f"metadata.labels.{PRIORITY_CLASS_LABEL}"
LWT: Final = "spec.leaderWorkerTemplate"


class Refused(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class _Where:
    def error(self, field: str, message: str) -> Exception:
        return Refused(field, message)

    def amount(self, resource: str, value: object, field: str) -> int:  # pragma: no cover - unused here
        raise self.error(field, "not read here")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return p.obj_of(p.obj_of(obj.get("metadata")).get("labels"))


def _namespace(request: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    return str(request.get("namespace") or p.obj_of(obj.get("metadata")).get("namespace") or "")


def _queued(request: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Kueue's ``WorkloadShouldBeSuspended`` with its defaults: a queue-name label, outside
    kube-system and kueue-system."""
    return QUEUE_NAME_LABEL in _labels(obj) and _namespace(request, obj) not in p.UNMANAGED_NAMESPACES


def _shown(request: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind') or request.get('kind', {}).get('kind')} {_namespace(request, obj)}/" \
           f"{p.obj_of(obj.get('metadata')).get('name') or request.get('name') or '?'}"


# --- mutating ----------------------------------------------------------------------------------


def _template_ops(template: Mapping[str, Any], path: str, values: Mapping[str, Mapping[str, str]]) -> list[Any]:
    meta = template.get("metadata")
    if not isinstance(meta, Mapping):
        return [{"op": "add", "path": f"{path}/metadata", "value": {k: dict(v) for k, v in values.items()}}]
    return [{**op, "path": path + op["path"]} for key, vals in values.items() for op in _meta_ops(meta, key, vals)]


def mutate_lws(review: Review) -> dict[str, Any]:
    request = _request(review)
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping) \
            or not _queued(request, obj):
        return response(review, allowed=True)
    lwt = p.obj_of(p.obj_of(obj.get("spec")).get("leaderWorkerTemplate"))
    labels, annotations = s.lws_template_metadata({str(k): str(v) for k, v in _labels(obj).items()})
    want = {"labels": labels, "annotations": annotations}
    patch: list[Any] = []
    for key in ("leaderTemplate", "workerTemplate"):
        if isinstance(lwt.get(key), Mapping):
            patch += _template_ops(lwt[key], f"/spec/leaderWorkerTemplate/{key}", want)
    return response(review, allowed=True, patch=patch or None)


# --- validating --------------------------------------------------------------------------------


def _first_difference(new: object, old: object, path: str) -> str | None:
    """The first field (in key order) where two spec shapes differ, as Kueue names it."""
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        for key in sorted(set(new) | set(old)):
            found = _first_difference(new.get(key), old.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        for i, (a, b) in enumerate(zip(new, old, strict=True)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if new == old else path


def _same_shape(new_template: object, old_template: object, path: str) -> None:
    new_spec, old_spec = p.obj_of(p.obj_of(new_template).get("spec")), p.obj_of(p.obj_of(old_template).get("spec"))
    field = _first_difference(p.spec_shape(new_spec), p.spec_shape(old_spec), f"{path}.spec")
    if field is not None:
        raise Refused(field, IMMUTABLE)


def _queue_and_priority(old: Mapping[str, Any], new: Mapping[str, Any], ready: int) -> None:
    old_q, new_q = str(_labels(old).get(QUEUE_NAME_LABEL) or ""), str(_labels(new).get(QUEUE_NAME_LABEL) or "")
    if (ready > 0 or not new_q) and new_q != old_q:
        raise Refused(QUEUE_FIELD, IMMUTABLE)
    old_pc, new_pc = _labels(old).get(PRIORITY_CLASS_LABEL), _labels(new).get(PRIORITY_CLASS_LABEL)
    if ready > 0 and not old_pc and new_pc:
        raise Refused(PRIORITY_FIELD, "WorkloadPriorityClass cannot be added to a non-suspended workload")
    if old_pc and not new_pc:
        raise Refused(PRIORITY_FIELD, "WorkloadPriorityClass cannot be removed from a workload")


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _statefulset_update(old: Mapping[str, Any], new: Mapping[str, Any], workload_exists: bool) -> None:
    _same_shape(p.obj_of(new.get("spec")).get("template"), p.obj_of(old.get("spec")).get("template"), "spec.template")
    was, now = _int(p.obj_of(old.get("spec")).get("replicas"), 1), _int(p.obj_of(new.get("spec")).get("replicas"), 1)
    if was != 0 and now not in (0, was):
        raise Refused("spec.replicas", IMMUTABLE)
    if was == 0 and now > 0:
        if _int(p.obj_of(new.get("status")).get("replicas"), 0) > 0:
            raise Refused("spec.replicas", "scaling down is still in progress")
        if workload_exists:
            raise Refused("spec.replicas", "workload from previous scale-down is still being deleted")


def _lws_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    old_t, new_t = p.obj_of(p.obj_of(old.get("spec")).get("leaderWorkerTemplate")), \
        p.obj_of(p.obj_of(new.get("spec")).get("leaderWorkerTemplate"))
    if (old_t.get("leaderTemplate") is None) != (new_t.get("leaderTemplate") is None):
        raise Refused(f"{LWT}.leaderTemplate", IMMUTABLE)
    if new_t.get("leaderTemplate") is not None:
        _same_shape(new_t.get("leaderTemplate"), old_t.get("leaderTemplate"), f"{LWT}.leaderTemplate")
    _same_shape(new_t.get("workerTemplate"), old_t.get("workerTemplate"), f"{LWT}.workerTemplate")
    if _int(new_t.get("size"), 1) != _int(old_t.get("size"), 1):
        raise Refused(f"{LWT}.size", IMMUTABLE)


def _on_create(obj: Mapping[str, Any]) -> None:
    queue = _labels(obj).get(QUEUE_NAME_LABEL)
    if queue is not None:
        check_queue_name(_Where(), str(queue))
    if obj.get("kind") == s.LEADERWORKERSET[1]:
        replicas = p.obj_of(obj.get("spec")).get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= s.LWS_MAX_REPLICAS:
            raise Refused("spec.replicas", f"invalid LeaderWorkerSet replicas: must be between 0 and "
                                           f"{s.LWS_MAX_REPLICAS}, got {replicas!r}")


def refusal(request: Mapping[str, Any], *, workload_exists: bool = False) -> str | None:
    """Why Kueue refuses this StatefulSet or LeaderWorkerSet request (``Kind ns/name: field: why``),
    or None. ``workload_exists``: a StatefulSet's Workload (by its name) is still there."""
    obj, old = request.get("object"), request.get("oldObject")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return None
    if obj.get("kind") == s.STATEFULSET[1] and s.managed_by_another_framework(obj):
        return None  # a LeaderWorkerSet's: the set is what Kueue validates
    try:
        _on_create(obj)
        if request.get("operation") == "UPDATE" and isinstance(old, Mapping):
            _queue_and_priority(old, obj, _int(p.obj_of(old.get("status")).get("readyReplicas"), 0))
            if _queued(request, obj) and obj.get("kind") == s.STATEFULSET[1]:
                _statefulset_update(old, obj, workload_exists)
            elif _queued(request, obj):
                _lws_update(old, obj)
    except Refused as e:
        return f"{_shown(request, obj)}: {e}"
    return None


def statefulset_scaled_up_from_zero(request: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, Workload name) the server must look up for this request: a queued StatefulSet
    scaled up from zero (else None)."""
    obj, old = p.obj_of(request.get("object")), p.obj_of(request.get("oldObject"))
    if request.get("operation") != "UPDATE" or obj.get("kind") != s.STATEFULSET[1] or not _queued(request, obj):
        return None
    was, now = _int(p.obj_of(old.get("spec")).get("replicas"), 1), _int(p.obj_of(obj.get("spec")).get("replicas"), 1)
    if was != 0 or now == 0:
        return None
    meta = p.obj_of(obj.get("metadata"))
    return _namespace(request, obj), s.statefulset_workload_name(str(meta.get("name")), str(meta.get("uid")))


def validate_serving(review: Review, *, workload_exists: bool = False) -> dict[str, Any]:
    why = refusal(_request(review), workload_exists=workload_exists)
    return response(review, allowed=why is None, message=why or "")
