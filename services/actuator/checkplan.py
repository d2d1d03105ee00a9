"""Two-phase admission on Kubernetes: the pure patches for admission checks.

A Workload whose ClusterQueue has admission checks gets its quota (``AdmitWorkload`` with
``admission_checks``) while its Job stays suspended: only its status changes (QuotaReserved,
``Admitted=False`` with ``UnsatisfiedAdmissionChecks``, the checks ``Pending``). Once every check
is Ready (``AdmitChecked``) the Job is unsuspended with its flavors and the checks' podSetUpdates
merged as Kueue merges them (``pkg/podset``: a nodeSelector key with two values is a conflict),
and the Workload becomes ``Admitted=True``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from events import conditions as cond
from events import objects as o
from events.checkstatus import check_state_json, toleration_json
from events.cluster import ConditionType
from events.messages import AdmitChecked, AdmitWorkload
from services.actuator.kubeapi import InvalidObject

Json = dict[str, Any]


def merge_updates(selector: Mapping[str, str], tolerations: Sequence[Json], updates: Sequence[o.PodSetUpdate],
                  what: str) -> tuple[dict[str, str], list[Json]]:
    """The scheduling with the podSetUpdates for pod set ``main`` merged in (a Job is one pod set)."""
    out_selector = dict(selector)
    out_tolerations = list(tolerations)
    for u in updates:
        if u.name != "main":
            continue
        for k, v in u.node_selector:
            if out_selector.get(k, v) != v:
                raise InvalidObject(what, f"spec.template.spec.nodeSelector.{k}",
                                    f"conflict for key={k}, value1={out_selector[k]}, value2={v} "
                                    "(an admission check's podSetUpdate)")
            out_selector[k] = v
        for t in u.tolerations:
            tj = toleration_json(t)
            if tj not in out_tolerations:
                out_tolerations.append(tj)
    return out_selector, out_tolerations


def template_metadata(updates: Sequence[o.PodSetUpdate]) -> Json:
    """The labels and annotations the podSetUpdates add to the pod template."""
    labels = {k: v for u in updates if u.name == "main" for k, v in u.labels}
    annotations = {k: v for u in updates if u.name == "main" for k, v in u.annotations}
    out: Json = {}
    if labels:
        out["labels"] = labels
    if annotations:
        out["annotations"] = annotations
    return out


def pending_checks(status: Mapping[str, Any], d: AdmitWorkload) -> list[Json]:
    """``status.admissionChecks`` at reservation: existing entries kept, new ones Pending, sorted."""
    existing = {str(c.get("name")): dict(c) for c in status.get("admissionChecks") or [] if isinstance(c, dict)}
    return [existing.get(name) or check_state_json(o.AdmissionCheckState(name=name, last_transition_time=d.time))
            for name in sorted(d.admission_checks or ())]


def checked_conditions(d: AdmitChecked) -> list[Any]:
    """Admitted=True; with a podSetUpdate conflict, Finished (FailedToStart) right after."""
    out = [cond.admitted(d.time)]
    if d.failed_to_start:
        out.append(cond.condition(ConditionType.FINISHED, True, "FailedToStart", d.failed_to_start, d.time))
    return out
