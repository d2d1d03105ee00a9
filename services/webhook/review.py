"""Admission reviews in, admission responses out: what the webhooks decide, without I/O.

- :func:`mutate_job`: a ``batch/v1`` Job created for a queue (Kueue's ``kueue.x-k8s.io/queue-name``
  label, or a T9k Queue named by its pod template with ``schedulerName: t9k-scheduler``) is
  created suspended, as Kueue's job webhook does, so that no pod starts before admission; on a
  T9k Queue with a ``spec.nodeSelector`` its pod template also gets the required node affinity
  that keeps its pods on those nodes (:func:`queue_affinity`).
- :func:`mutate_pod` and the ``bound`` argument of :func:`mutate_job`: in a namespace bound to
  an ElasticQuotaTree leaf (``events.elasticquota``), a pod is created held by the scheduling gate
  ``kueue.x-k8s.io/admission`` (it is a workload of its own unless a Job owns it), and a Job without
  a queue label is created for LocalQueue ``default`` and suspended (Kueue's pod integration and
  LocalQueueDefaulting).
- :func:`validate_object`: a Kueue object (or a T9k Queue) is refused with the field and message
  ``kueuelog simulate`` gives for it (``events.manifests``).
- :func:`validate_t9k_job`: a Job on a T9k Queue is refused at creation by the Queue's rules
  (``services.core.t9k``), given what the server looked up: the Queue, the namespace's
  labels, the resource shapes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from events import jobkinds, t9k
from events import objects as o
from events.cluster import ADMISSION_GATE, MULTIKUEUE_CONTROLLER, QUEUE_NAME_LABEL
from events.elasticquota import DEFAULT_LOCAL_QUEUE
from events.jobkinds import managedby, serving
from events.jobkinds import pods as kpods
from events.manifests import Document, ManifestError, normalize
from services.core.t9k import Requester, creation_refusal

Review = Mapping[str, Any]
FILE = "admission"


def _request(review: Review) -> Mapping[str, Any]:
    request = review.get("request")
    if not isinstance(request, dict):
        raise ValueError("an AdmissionReview without a request")
    return request


def response(review: Review, *, allowed: bool, message: str = "", patch: list[dict[str, Any]] | None = None,
             warnings: list[str] | None = None) -> dict[str, Any]:
    """The AdmissionReview to answer ``review`` with."""
    out: dict[str, Any] = {"uid": _request(review).get("uid", ""), "allowed": allowed}
    if not allowed:
        out["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if patch:
        out["patchType"] = "JSONPatch"
        out["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        out["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": out}


def _job_queue(job: Mapping[str, Any]) -> str | None:
    """The queue a Job is created for (Kueue's label, or a T9k Queue), else ``None``."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    if isinstance(labels, dict) and QUEUE_NAME_LABEL in labels:
        return str(labels[QUEUE_NAME_LABEL])
    return t9k_queue_of(job)


t9k_queue_of = t9k.queue_of_job


def _requirements(sel: o.LabelSelector) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"key": k, "operator": "In", "values": [v]} for k, v in sel.match_labels]
    out.extend({"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
               for r in sel.match_expressions)
    return out


def queue_affinity(pod_spec: Mapping[str, Any], sel: o.LabelSelector) -> dict[str, Any]:
    """The pod spec's ``affinity`` with the Queue's node selector required as well: its expressions
    are added to every required term (terms are ORed, expressions within one ANDed), or make the
    one term when there is none."""
    affinity = json.loads(json.dumps(pod_spec.get("affinity") or {}))
    node = affinity.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), *_requirements(sel)]
    required["nodeSelectorTerms"] = terms
    return dict(affinity)


def mutate_job(review: Review, queue: Mapping[str, Any] | None = None, *, bound: bool = False,
               multikueue: bool = False) -> dict[str, Any]:
    """``queue``: the T9k Queue the Job names, as read from the API (``None``: none, or not found);
    ``bound``: its namespace is bound to an ElasticQuotaTree leaf (a Job there needs no label);
    ``multikueue``: its LocalQueue's ClusterQueue has a MultiKueue admission check, so its
    ``spec.managedBy`` becomes ``kueue.x-k8s.io/multikueue`` (Kueue's ``ApplyDefaultForManagedBy``)
    unless it names a controller other than the job controller."""
    request = _request(review)
    job = request.get("object") or {}
    if request.get("operation") != "CREATE" or not isinstance(job, dict):
        return response(review, allowed=True)
    patch: list[dict[str, Any]] = []
    if _job_queue(job) is None:
        meta = job.get("metadata") or {}
        if not bound or meta.get("ownerReferences"):  # not queued; or made by another controller
            return response(review, allowed=True)
        labels = meta.get("labels")
        patch.append({"op": "add", "path": "/metadata/labels/" + QUEUE_NAME_LABEL.replace("/", "~1"),
                      "value": DEFAULT_LOCAL_QUEUE} if isinstance(labels, dict) else
                     {"op": "add", "path": "/metadata/labels", "value": {QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE}})
    spec = job.get("spec") or {}
    if spec.get("suspend") is not True:
        patch.append({"op": "replace" if "suspend" in spec else "add", "path": "/spec/suspend", "value": True})
    if multikueue and managedby.can_default(jobkinds.JOB, job):
        patch.append({"op": "replace" if "managedBy" in spec else "add", "path": "/spec/managedBy",
                      "value": MULTIKUEUE_CONTROLLER})
    pod_spec = (spec.get("template") or {}).get("spec")
    if queue is not None and t9k_queue_of(job) is not None and isinstance(pod_spec, dict):
        parsed, _ = _refusal({**queue, "apiVersion": t9k.API_VERSION, "kind": "Queue"})
        sel = parsed.t9k.node_selector if isinstance(parsed, o.ClusterQueue) and parsed.t9k else None
        if sel is not None and (sel.match_labels or sel.match_expressions):
            patch.append({"op": "replace" if "affinity" in pod_spec else "add",
                          "path": "/spec/template/spec/affinity", "value": queue_affinity(pod_spec, sel)})
    return response(review, allowed=True, patch=patch)


def _queued_pod(request: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
    """Kueue's pod webhook with its defaults: a pod with a queue-name label (or made by a queued
    Deployment or StatefulSet: ``pod-suspending-parent``), outside kube-system and kueue-system."""
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return namespace not in kpods.UNMANAGED_NAMESPACES and (
        QUEUE_NAME_LABEL in labels or kpods.SUSPENDED_BY_PARENT in annotations)


def owned_by_workload_kind(meta: Mapping[str, Any]) -> bool:
    """An object another integrated kind made (a Job's pod, a PyTorchJob's pod, a RayJob's
    RayCluster): its owner is the workload (``batch/v1`` Job is in the registry too)."""
    return any(isinstance(r, dict) and (str(r.get("apiVersion", "")), str(r.get("kind", ""))) in jobkinds.BY_KEY
               for r in meta.get("ownerReferences") or [])


def _meta_ops(meta: Mapping[str, Any], key: str, values: Mapping[str, str]) -> list[dict[str, Any]]:
    have = meta.get(key)
    if not isinstance(have, dict):
        return [{"op": "add", "path": f"/metadata/{key}", "value": dict(values)}]
    return [{"op": "add", "path": f"/metadata/{key}/{k.replace('~', '~0').replace('/', '~1')}", "value": v}
            for k, v in values.items() if have.get(k) != v]


def mutate_pod(review: Review, *, bound: bool) -> dict[str, Any]:
    """A pod created in a namespace bound to a tree leaf, or queued (:func:`_queued_pod`), is held by
    the admission gate until its Workload is admitted (``services/actuator/pods.py`` and
    ``podgroups.py`` make the Workload and lift the gate); a queued pod is also labelled
    ``kueue.x-k8s.io/managed`` and given its ``kueue.x-k8s.io/role-hash``, as Kueue's webhook does.
    A pod of a Job (or of another integrated kind) is its owner's, and a pod gated already keeps its gate."""
    request = _request(review)
    pod = request.get("object") or {}
    if request.get("operation") != "CREATE" or not isinstance(pod, dict):
        return response(review, allowed=True)
    meta: Mapping[str, Any] = kpods.obj_of(pod.get("metadata"))
    spec = pod.get("spec")
    queued = _queued_pod(request, meta)
    if not (bound or queued) or not isinstance(spec, dict) or owned_by_workload_kind(meta):
        return response(review, allowed=True)
    patch: list[dict[str, Any]] = []
    if queued:
        try:  # Kueue's pod webhook refuses bad group metadata at creation (validatePodGroupMetadata)
            namespace = request.get("namespace") or meta.get("namespace")
            kpods.total_count(kpods.pod_info({**pod, "metadata": {**meta, "namespace": namespace}}))
        except kpods.GroupError as e:
            return response(review, allowed=False, message=str(e))
        patch += _meta_ops(meta, "labels", {kpods.MANAGED: "true"})
        if kpods.ROLE_HASH not in (meta.get("annotations") or {}):
            patch += _meta_ops(meta, "annotations", {kpods.ROLE_HASH: kpods.role_hash(spec)})
    gates = spec.get("schedulingGates")
    if not (isinstance(gates, list) and any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates)):
        gate = {"name": ADMISSION_GATE}
        patch += ([{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}] if isinstance(gates, list) else
                  [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}])
    return response(review, allowed=True, patch=patch or None)


def mutate_serving(review: Review) -> dict[str, Any]:
    """A queued Deployment or StatefulSet (Kueue's deployment and statefulset webhooks): its pod
    template gets ``kueue.x-k8s.io/managed``, the queue-name (and priority-class) label and the
    ``kueue.x-k8s.io/pod-suspending-parent`` annotation, so that each pod it makes is created
    gated and queued. (Kueue's StatefulSet webhook sets only the annotation and its pod reconciler
    the labels later; kueuelog puts the labels in the template, so its reconciler finds the pods.)"""
    request = _request(review)
    obj = request.get("object") or {}
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return response(review, allowed=True)
    meta: Mapping[str, Any] = kpods.obj_of(obj.get("metadata"))
    labels: Mapping[str, str] = kpods.obj_of(meta.get("labels"))
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if QUEUE_NAME_LABEL not in labels or namespace in kpods.UNMANAGED_NAMESPACES or not isinstance(template, dict):
        return response(review, allowed=True)
    if obj.get("kind") == "StatefulSet" and serving.managed_by_another_framework(obj):
        return response(review, allowed=True)  # a LeaderWorkerSet's StatefulSet: its pods are the set's
    framework = "statefulset" if obj.get("kind") == "StatefulSet" else "deployment"
    tmeta: Mapping[str, Any] | None = template.get("metadata") if isinstance(template.get("metadata"), dict) else None
    want = {"labels": serving.propagated_labels(labels), "annotations": serving.parent_annotation(framework)}
    if tmeta is None:
        patch = [{"op": "add", "path": "/spec/template/metadata", "value": want}]
    else:
        patch = [{**op, "path": "/spec/template" + op["path"]}
                 for key, values in want.items() for op in _meta_ops(tmeta, key, values)]
    return response(review, allowed=True, patch=patch or None)


def _refusal(obj: Mapping[str, Any]) -> tuple[o.AnyObject | None, str | None]:
    """(the parsed object, or the parser's refusal as ``Kind name: field: message``)."""
    try:
        return normalize(Document(FILE, 1, obj)), None
    except ManifestError as e:
        where = f"{e.obj}: " if e.obj else ""
        return None, f"{where}{e.field}: {e.message}" if e.field else f"{where}{e.message}"


def validate_object(review: Review) -> dict[str, Any]:
    request = _request(review)
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return response(review, allowed=True)
    obj = request.get("object")
    if not isinstance(obj, dict):
        return response(review, allowed=False, message="the request has no object")
    _, why = _refusal(obj)
    return response(review, allowed=why is None, message=why or "")


@dataclass(frozen=True)
class Lookup:
    """What the server read from the API for a T9k Job: ``queue`` is the Queue's manifest (``None``
    when it does not exist)."""

    queue: Mapping[str, Any] | None
    namespace_labels: Mapping[str, str]
    shapes: Mapping[str, Any] | None = None  # the ConfigMap's data


def validate_t9k_job(review: Review, lookup: Lookup) -> dict[str, Any]:
    request = _request(review)
    job = request.get("object") or {}
    name = t9k_queue_of(job) if isinstance(job, dict) else None
    if request.get("operation") != "CREATE" or name is None:
        return response(review, allowed=True)
    wl, why = _refusal(job)
    if why is not None or not isinstance(wl, o.Workload):
        return response(review, allowed=False, message=why or "not a Job on a T9k Queue")
    cq: o.ClusterQueue | None = None
    if lookup.queue is not None:
        queue, why = _refusal({**lookup.queue, "apiVersion": t9k.API_VERSION, "kind": "Queue"})
        if why is not None:
            return response(review, allowed=False, message=f"Queue {name} is invalid: {why}")
        cq = queue if isinstance(queue, o.ClusterQueue) else None
    shapes = None
    if lookup.shapes is not None:
        shaped, why = _refusal({"apiVersion": "v1", "kind": "ConfigMap", "data": lookup.shapes,
                                "metadata": {"name": t9k.SHAPES_CONFIGMAP, "namespace": t9k.NAMESPACE}})
        if why is not None:
            return response(review, allowed=False, message=why)
        shapes = shaped if isinstance(shaped, o.ResourceShapes) else None
    user = request.get("userInfo") or {}
    who = Requester(str(user.get("username", "")), tuple(str(g) for g in user.get("groups") or ()))
    allocated = dict(cq.t9k.allocated) if cq is not None and cq.t9k is not None else {}
    why = creation_refusal(cq, name, wl, ns_labels=lookup.namespace_labels, allocated=allocated, who=who,
                           shapes=shapes)
    return response(review, allowed=why is None, message=why or "")
