"""A Workload's ``status.admissionChecks`` entry as Kueue writes it: one rendering for
``simulate`` (the core's render) and the Kubernetes actuator."""

from __future__ import annotations

from typing import Any

from events import objects as o
from events.manifests import format_time

Json = dict[str, Any]


def toleration_json(t: o.Toleration) -> Json:
    out: Json = {}
    if t.key:
        out["key"] = t.key
    out["operator"] = t.operator
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def check_state_json(c: o.AdmissionCheckState) -> Json:
    at = c.last_transition_time - c.last_transition_time % 1000
    out: Json = {"name": c.name, "state": str(c.state), "message": c.message, "lastTransitionTime": format_time(at)}
    if c.pod_set_updates:
        out["podSetUpdates"] = [_update_json(u) for u in c.pod_set_updates]
    if c.retry_count:
        out["retryCount"] = c.retry_count
    if c.requeue_after_seconds is not None:
        out["requeueAfterSeconds"] = c.requeue_after_seconds
    return out


def _update_json(u: o.PodSetUpdate) -> Json:
    out: Json = {"name": u.name}
    if u.labels:
        out["labels"] = dict(u.labels)
    if u.annotations:
        out["annotations"] = dict(u.annotations)
    if u.node_selector:
        out["nodeSelector"] = dict(u.node_selector)
    if u.tolerations:
        out["tolerations"] = [toleration_json(t) for t in u.tolerations]
    return out
