"""A Workload nothing owns (created as a Workload, as Kueue's performance generator does): pure parts.

Kueue evicts such a Workload by setting its ``Evicted`` condition (and ``Preempted``) while it still
holds its quota reservation; whatever runs it stops it and then clears the reservation
(``QuotaReserved=False``, no ``status.admission``), which is how Kueue learns the eviction is
complete. The actuator does the same: it marks the eviction's decision id in annotation
``kueuelog.io/evicted`` (the correlation id the watcher publishes ``EvictionCompleted`` with once
the reservation is gone) and writes only the eviction's conditions, leaving the reservation to
its owner. A Job's, another kind's or a pod group's Workload is not one of these: the actuator
stops their pods itself and writes the eviction with its completion at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import conditions as cond
from events.checkstatus import check_state_json
from events.cluster import EVICTED_ANNOTATION
from events.messages import DeactivateWorkload, EvictWorkload
from services.actuator.kubeplan import Json, annotations_of, resource_version, set_condition


def is_standalone(workload: Mapping[str, Any]) -> bool:
    """No ownerReferences at all (a pod group's Workload is owned by its pods)."""
    return not (workload.get("metadata") or {}).get("ownerReferences")


def evicted_mark_patch(workload: Mapping[str, Any], d: EvictWorkload) -> Json | None:
    """The eviction's decision id on the Workload (metadata); None when it carries it already."""
    if annotations_of(workload).get(EVICTED_ANNOTATION) == d.id:
        return None
    return {"metadata": {"resourceVersion": resource_version(workload), "annotations": {EVICTED_ANNOTATION: d.id}}}


def evicting_status(status: Mapping[str, Any], d: EvictWorkload) -> Json:
    """The eviction decided (``Evicted``, ``Preempted`` when preempted), the reservation kept."""
    conds = [dict(c) for c in status.get("conditions") or [] if isinstance(c, dict)]
    for c in cond.eviction(d.reason, d.message, d.preemption_reason, d.time,
                           underlying_cause=d.underlying_cause if isinstance(d, DeactivateWorkload) else ""):
        set_condition(conds, c)
    out = {**status, "conditions": conds}
    if d.admission_checks:
        out["admissionChecks"] = [check_state_json(c) for c in d.admission_checks]
    return out
