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
from events.cluster import KUEUE_GROUP, MANAGED_BY_LABEL, ConditionType
from events.manifests import format_time
from events.messages import AdmitChecked, AdmitWorkload
from services.actuator.kubeapi import InvalidObject, Ref
from services.core import provisioning

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


ORIGINAL_METADATA_KEY = "templateMetadata"
"""In the original-scheduling annotation: the template's labels and annotations as they were before
the podSetUpdates changed them (None: absent), so that an eviction restores them as Kueue does."""


def original_metadata(job: Mapping[str, Any], recorded: Mapping[str, Any] | None,
                      changes: Mapping[str, Any]) -> Json:
    """What to remember of the template's metadata before ``changes`` (template_metadata): the
    keys already remembered keep their first value."""
    meta = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    out: Json = {kind: dict((recorded or {}).get(kind) or {}) for kind in ("labels", "annotations")}
    for kind in ("labels", "annotations"):
        current = meta.get(kind) or {}
        for key in changes.get(kind) or {}:
            out[kind].setdefault(key, current.get(key))
    return {k: v for k, v in out.items() if v}


def restore_metadata(recorded: Mapping[str, Any] | None) -> Json:
    """The template metadata patch that puts the remembered values back (None deletes a key)."""
    return {kind: dict(values) for kind, values in (recorded or {}).items()
            if kind in ("labels", "annotations") and isinstance(values, dict) and values}


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


def requeue_state_json(count: int, requeue_at: int | None) -> Json:
    """Kueue's ``status.requeueState``: ``count`` when positive, ``requeueAt`` (whole seconds, as
    the API keeps times) when set; empty when neither (then it is removed)."""
    out: Json = {}
    if count > 0:
        out["count"] = count
    if requeue_at is not None:
        out["requeueAt"] = format_time(requeue_at - requeue_at % 1000)
    return out


# --- ProvisioningRequests and their PodTemplates ----------------------------------------------

PR_GROUP = "autoscaling.x-k8s.io"
MANAGED_BY = "kueue"


def request_ref(namespace: str, name: str) -> Ref:
    return Ref("ProvisioningRequest", PR_GROUP, "v1", "provisioningrequests", name, namespace)


def pod_template_ref(namespace: str, name: str) -> Ref:
    return Ref("PodTemplate", "", "v1", "podtemplates", name, namespace)


def owner_reference(wl: Mapping[str, Any]) -> Json:
    """The Workload as the owner (Kueue sets it with ``SetControllerReference``)."""
    meta = wl.get("metadata") or {}
    return {"apiVersion": str(wl.get("apiVersion") or f"{KUEUE_GROUP}/v1beta2"), "kind": "Workload",
            "name": meta.get("name"), "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}


def pod_template_body(namespace: str, name: str, wl: Mapping[str, Any], pod_set: str,
                      node_labels: Mapping[str, str], tolerations: Sequence[Json]) -> Json:
    """The podSet's template with the admission's node selector and tolerations merged in
    (Kueue's ``createPodTemplate``: ``podset.FromAssignment`` then ``Merge``)."""
    what = f"Workload {namespace}/{(wl.get('metadata') or {}).get('name')}"
    pod_sets = [p for p in (wl.get("spec") or {}).get("podSets") or [] if isinstance(p, dict)]
    found = next((p for p in pod_sets if p.get("name") == pod_set), None)
    if found is None:
        raise InvalidObject(what, "spec.podSets", f"has no podSet {pod_set!r} for its ProvisioningRequest")
    template = dict(found.get("template") or {})
    spec = dict(template.get("spec") or {})
    selector = dict(spec.get("nodeSelector") or {})
    for k, v in node_labels.items():
        if selector.get(k, v) != v:
            raise InvalidObject(what, f"spec.podSets.{pod_set}.template.spec.nodeSelector.{k}",
                                f"is {selector[k]!r}, the flavor needs {v!r}")
        selector[k] = v
    if selector:
        spec["nodeSelector"] = selector
    merged = list(spec.get("tolerations") or [])
    merged.extend(t for t in tolerations if t not in merged)
    if merged:
        spec["tolerations"] = merged
    template["spec"] = spec
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                         "ownerReferences": [owner_reference(wl)]},
            "template": template}


def request_body(namespace: str, plan: o.ProvisioningRequestPlan, wl: Mapping[str, Any]) -> Json:
    spec: Json = {"provisioningClassName": plan.provisioning_class_name,
                  "podSets": [{"podTemplateRef": {"name": ps.pod_template}, "count": ps.count}
                              for ps in plan.pod_sets]}
    if plan.parameters:
        spec["parameters"] = dict(plan.parameters)
    return {"apiVersion": f"{PR_GROUP}/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": plan.name, "namespace": namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                         "ownerReferences": [owner_reference(wl)]},
            "spec": spec}


def finished_requests(wl: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(request, its PodTemplates) a finished Workload may still have, named from its checks
    (``status.admissionChecks``: the current attempt is ``retryCount + 1``) and podSets as the
    provisioning check names them; a check of another controller has none (its delete is a 404)."""
    name = str((wl.get("metadata") or {}).get("name") or "")
    pod_sets = [str(p.get("name")) for p in (wl.get("spec") or {}).get("podSets") or [] if isinstance(p, dict)]
    out = []
    for c in (wl.get("status") or {}).get("admissionChecks") or []:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            continue
        retry = c.get("retryCount")
        attempt = (retry if isinstance(retry, int) else 0) + 1
        request = provisioning.request_name(name, c["name"], attempt)
        out.append((request, [provisioning.pod_template_name(request, ps) for ps in pod_sets]))
    return out
