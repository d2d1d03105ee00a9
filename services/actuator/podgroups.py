"""Kueue's pod integration on a cluster, in any namespace: plain pods, pod groups and
StatefulSets (``--job-kinds Pod``; :mod:`events.jobkinds.pods`, :mod:`events.jobkinds.serving`).

Every ``interval`` seconds :class:`PodGroupReconciler` lists the pods with a queue-name label
(outside kube-system and kueue-system: Kueue's default namespace selector, and, with
``--elastic-quota-tree``, outside the tree's namespaces, whose pods are ``pods.py``'s;
``manageJobsWithoutQueueName`` is false, so unlabelled pods are not touched), the StatefulSets
with one, and the Workloads, and :func:`plan_pods` decides, purely:

- a StatefulSet's pod not in its group yet is labelled into it (Kueue's StatefulSet pod
  reconciler: group name = the StatefulSet's Workload, total count = replicas, fast admission,
  serving, role ``main``);
- a StatefulSet with replicas > 0 and no Workload gets one (one podSet ``main`` of replicas pods,
  owned by the StatefulSet); scaled to zero its Workload is deleted, which frees its quota
  (Kueue puts it on hold: quota freed too);
- a gated pod of its own without a Workload gets ``pod-<name>-<hash>``, owned by the pod; a
  pod group gets its Workload (named after the group, owned by every pod) once it is complete;
  a group Kueue refuses (mismatched total counts or queues) is reported, naming the pod and the
  annotation, and gets none;
- a pod or group that finished as Kueue decides gets ``Finished`` on its Workload;
- a queued LeaderWorkerSet has a Workload per replica and its pods join their replica's group
  (:mod:`services.actuator.lws`);
- a gated pod of a group whose Workload is admitted already (made after the admission) is released
  (:mod:`services.actuator.group_release`);
- a Workload whose pods (or StatefulSet, or LeaderWorkerSet) are all gone is deleted (the garbage collector's job
  in a full cluster), which frees its quota; gone means missing from its namespace's full lists,
  not only from the queued ones (an ElasticQuotaTree's pods carry no queue-name label).

Admission and eviction are the actuator's (:mod:`services.actuator.kube_port`): the gate
``kueue.x-k8s.io/admission`` is lifted from every pod of the Workload with its podSet's flavors'
node labels and tolerations merged in (:func:`pod_release_patch`); an eviction deletes the pods
that run (Kueue cannot un-gate a pod: its ``Stop`` deletes them; a StatefulSet makes new, gated
ones, which queue again).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from kubernetes_asyncio import client

from events.cluster import (
    ADMISSION_GATE,
    ELASTIC_QUOTA_TREE_LABEL,
    KUEUE_GROUP,
    KUEUE_VERSION,
    QUEUE_NAME_LABEL,
    ConditionStatus,
    ConditionType,
)
from events.elasticquota import DEFAULT_LOCAL_QUEUE
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.base import Finished
from events.jobkinds.pod_documents import owner_ref, priority_fields, workload_body
from services.actuator import group_release as gr
from services.actuator import lws as lw
from services.actuator.job_reconciler import Finished as WorkloadFinished
from services.actuator.job_reconciler import finished_status
from services.actuator.kubeapi import KubeApiError
from services.actuator.tree_reconciler import raw_call
from services.runtime.clock import wall_clock_ms

_log = structlog.get_logger(__name__)
MERGE_PATCH: Final = "application/merge-patch+json"
FORBIDDEN: Final = 403
WORKLOADS: Final = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
Json = dict[str, Any]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return p.obj_of(obj.get("metadata"))


def _items_of(value: object) -> list[Any]:
    """A list field as read from the API: a list, or nothing (never a crash on a hostile object)."""
    return value if isinstance(value, list) else []


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _items_of(_meta(obj).get("ownerReferences")):
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return None


def _has_finished(wl: Mapping[str, Any]) -> bool:
    conditions = _items_of(p.obj_of(wl.get("status")).get("conditions"))
    return any(isinstance(c, Mapping) and c.get("type") == ConditionType.FINISHED
               and c.get("status") == ConditionStatus.TRUE
               for c in conditions)


@dataclass
class PodPlan:
    """What one pass does (every list in a stable order)."""

    label: list[tuple[str, str, Json]] = field(default_factory=list)  # (namespace, pod, merge patch)
    create: list[Json] = field(default_factory=list)  # Workload bodies
    finish: list[tuple[Json, WorkloadFinished]] = field(default_factory=list)  # (Workload, Finished)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (namespace, Workload)
    orphans: list[Json] = field(default_factory=list)  # Workloads whose owners the queued lists lack
    late: list[tuple[Json, str]] = field(default_factory=list)  # (gated pod, its admitted group's Workload)
    errors: list[str] = field(default_factory=list)


def _sts_labels(pod: Mapping[str, Any], sts: Mapping[str, Any]) -> Json | None:
    """The merge patch joining a StatefulSet's pod to its group; None when it is in it already."""
    meta, smeta = _meta(pod), _meta(sts)
    total = s.replicas(_Where(f"StatefulSet {smeta.get('namespace')}/{smeta.get('name')}"), sts)
    labels, annotations = s.statefulset_pod_labels(str(smeta.get("name")), str(smeta.get("uid")),
                                                   p.obj_of(smeta.get("labels")), total)
    have_l, have_a = p.obj_of(meta.get("labels")), p.obj_of(meta.get("annotations"))
    if have_l.get(p.GROUP_NAME) == labels[p.GROUP_NAME]:
        return None  # in its group already: Kueue keeps the total count it joined with (a resize does not relabel)
    if all(have_l.get(k) == v for k, v in labels.items()) and all(have_a.get(k) == v for k, v in annotations.items()):
        return None
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": labels, "annotations": annotations}}


def _sts_workload(sts: Mapping[str, Any]) -> Json | None:
    meta = _meta(sts)
    name, uid, ns = str(meta.get("name")), str(meta.get("uid")), str(meta.get("namespace"))
    labels = {str(k): str(v) for k, v in p.obj_of(meta.get("labels")).items()}
    shown = f"StatefulSet {ns}/{name}"
    wl = s.statefulset_workload(_Where(shown), name, uid, sts)
    if wl is None or not labels.get(QUEUE_NAME_LABEL):
        return None
    spec = dict(wl.pod_sets[0].template.get("spec") or {})
    return workload_body(ns, wl.name, labels[QUEUE_NAME_LABEL], [owner_ref("apps/v1", "StatefulSet", name, uid)],
                         [{"name": p.MAIN, "count": wl.pod_sets[0].count, "template": {"spec": spec}}],
                         labels={}, annotations={p.IS_GROUP_WORKLOAD: "true"}, created=None,
                         priority=priority_fields(labels, spec))


class _Where:
    def __init__(self, shown: str) -> None:
        self.shown = shown

    def error(self, field: str, message: str) -> Exception:
        return p.GroupError(self.shown, field, message)

    def amount(self, resource: str, value: object, field: str) -> int:  # pragma: no cover - unused here
        raise self.error(field, "not read here")


def _single(pod: p.PodInfo, owned: Mapping[str, Any] | None, gated: bool, plan: PodPlan) -> None:
    name = p.pod_workload_name(pod)
    if owned is None:
        if gated and pod.queue:
            plan.create.append(workload_body(
                pod.namespace, name, pod.queue, [owner_ref("v1", "Pod", pod.name, pod.uid)],
                [{"name": p.MAIN, "count": 1, "template": {"spec": dict(pod.spec)}}], labels={}, annotations={},
                created=None, priority=priority_fields(pod.labels, pod.spec)))
        return
    ended = p.pod_finished(pod)
    if ended is not None and not _has_finished(owned):
        plan.finish.append((dict(owned), WorkloadFinished(name, ended.succeeded, ended.message)))


def _group(members: list[tuple[p.PodInfo, bool]], wl: Mapping[str, Any] | None, plan: PodPlan) -> None:
    infos = [i for i, _ in members]
    first = infos[0]
    name = p.group_workload_name(infos)
    try:
        sets = p.group_pod_sets(infos)
        total = p.check_group(infos)
    except p.GroupError as e:
        plan.errors.append(str(e))
        return
    if wl is None:
        if sets is not None and any(g for _, g in members) and first.queue and not p.serving(first):
            pod_sets = [{"name": r.name, "count": r.count, "template": {"spec": dict(r.pod.spec)}} for r in sets]
            owners = [owner_ref("v1", "Pod", i.name, i.uid, controller=False) for i in infos]
            plan.create.append(workload_body(first.namespace, name, first.queue, owners, pod_sets, labels={},
                                             annotations={p.IS_GROUP_WORKLOAD: "true"}, created=None,
                                             priority=priority_fields(first.labels, first.spec)))
        return
    ended: Finished | None = p.group_finished(infos, total)
    if ended is not None and not _has_finished(wl):
        plan.finish.append((dict(wl), WorkloadFinished(name, ended.succeeded, ended.message)))


def _gone(wl: Mapping[str, Any], pod_uids: set[str], sts_uids: set[str], lws_uids: set[str]) -> bool:
    """A Workload of ours whose owners are all gone."""
    refs = [r for r in _items_of(_meta(wl).get("ownerReferences")) if isinstance(r, Mapping)]
    uids = {"Pod": pod_uids, "StatefulSet": sts_uids, "LeaderWorkerSet": lws_uids}
    ours = [r for r in refs if (r.get("apiVersion"), r.get("kind")) in (("v1", "Pod"), s.STATEFULSET,
                                                                         s.LEADERWORKERSET)]
    if not ours or len(ours) != len(refs):
        return False
    return all(str(r.get("uid")) not in uids[str(r.get("kind"))] for r in ours)


def _statefulsets(sts_by: Mapping[tuple[str, str], Mapping[str, Any]],
                  by_name: Mapping[tuple[str, str], Mapping[str, Any]], plan: PodPlan) -> None:
    """Each queued StatefulSet's Workload made (replicas > 0) or deleted (scaled to zero)."""
    for (ns, _name), sts in sorted(sts_by.items()):
        try:
            body = _sts_workload(sts)
        except p.GroupError as e:
            plan.errors.append(str(e))
            continue
        wl_name = s.statefulset_workload_name(str(_meta(sts).get("name")), str(_meta(sts).get("uid")))
        if body is not None and (ns, wl_name) not in by_name:
            plan.create.append(body)
        elif body is None and (ns, wl_name) in by_name:
            plan.delete.append((ns, wl_name))  # scaled to zero: its quota is freed


def _lws_pod(raw: Mapping[str, Any], lws: Mapping[str, Any] | None, plan: PodPlan) -> bool:
    """A LeaderWorkerSet's pod: on (as a group member) once it is in its replica's group."""
    try:
        label_patch = lw.pod_patch(raw, lws) if lws is not None else None
    except p.GroupError as e:
        plan.errors.append(str(e))
        return False
    if label_patch is not None:
        plan.label.append((str(_meta(raw).get("namespace")), str(_meta(raw).get("name")), label_patch))
        return False
    return lws is not None and p.GROUP_NAME in p.obj_of(_meta(raw).get("labels"))


def _ours(raw: Mapping[str, Any], info: p.PodInfo, sts_by: Mapping[tuple[str, str], Mapping[str, Any]],
          plan: PodPlan, lws_by: Mapping[tuple[str, str], Mapping[str, Any]]) -> bool:
    """Whether the pass goes on with this pod: a plain pod, a ReplicaSet's, or a StatefulSet's (or a
    LeaderWorkerSet's) already in its group (one not yet in it is labelled into it first); a Job's
    (or another managed kind's) pod is its owner's."""
    owner = _controller(raw)
    if owner is None or owner.get("kind") == "ReplicaSet":
        return True
    if owner.get("kind") != "StatefulSet":
        return False
    of_lws, lws = lw.set_of(raw, lws_by)
    if of_lws:
        return _lws_pod(raw, lws, plan)
    parent = sts_by.get((info.namespace, str(owner.get("name"))))
    try:
        label_patch = _sts_labels(raw, parent) if parent is not None else None
    except p.GroupError as e:
        plan.errors.append(str(e))
        return False
    if label_patch is not None:
        plan.label.append((info.namespace, info.name, label_patch))
        return False
    return True


def plan_pods(pods: Sequence[Mapping[str, Any]], statefulsets: Sequence[Mapping[str, Any]],
              workloads: Sequence[Mapping[str, Any]], *, skip: frozenset[str] = frozenset(),
              leaderworkersets: Sequence[Mapping[str, Any]] = ()) -> PodPlan:
    """One pass of the pod integration (see the module docstring), pure. ``skip``: namespaces left
    to another front end (an ElasticQuotaTree's, whose pod reconciler makes every pod's Workload)."""
    plan = PodPlan()
    pods = [x for x in pods if str(_meta(x).get("namespace")) not in skip]
    statefulsets = [x for x in statefulsets if str(_meta(x).get("namespace")) not in skip
                    and not p.obj_of(_meta(x).get("labels")).get(s.LWS_NAME_LABEL)  # an LWS's are the set's
                    and not s.managed_by_another_framework(x)]
    leaderworkersets = [x for x in leaderworkersets if str(_meta(x).get("namespace")) not in skip]
    workloads = [x for x in workloads if str(_meta(x).get("namespace")) not in skip]
    by_name = {(str(_meta(w).get("namespace")), str(_meta(w).get("name"))): w for w in workloads}
    sts_by = {(str(_meta(x).get("namespace")), str(_meta(x).get("name"))): x for x in statefulsets
              if str(_meta(x).get("namespace")) not in p.UNMANAGED_NAMESPACES
              and isinstance(p.obj_of(_meta(x).get("labels")).get(QUEUE_NAME_LABEL), str)}
    _statefulsets(sts_by, by_name, plan)
    lws_by = lw.queued(leaderworkersets)
    lw.plan_workloads(lws_by, by_name, plan.create, plan.delete, plan.errors)
    groups: dict[tuple[str, str], list[tuple[p.PodInfo, bool]]] = {}
    raw_by: dict[tuple[str, str], Mapping[str, Any]] = {}
    for raw in sorted(pods, key=lambda x: (str(_meta(x).get("namespace")), str(_meta(x).get("name")))):
        info = p.pod_info(raw)
        raw_by[(info.namespace, info.name)] = raw
        if not p.managed(info) or _meta(raw).get("deletionTimestamp") or not _ours(raw, info, sts_by, plan, lws_by):
            continue
        gated = any(isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE
                    for g in _items_of(info.spec.get("schedulingGates")))
        try:
            grouped = p.total_count(info) is not None
        except p.GroupError as e:
            plan.errors.append(str(e))
            continue
        if grouped:
            groups.setdefault((info.namespace, info.group), []).append((info, gated))
        else:
            _single(info, by_name.get((info.namespace, p.pod_workload_name(info))), gated, plan)
    for (ns, _group_name), members in sorted(groups.items()):
        name = p.group_workload_name([i for i, _ in members])
        wl = by_name.get((ns, name))
        _group(members, wl, plan)
        if wl is not None and gr.admitted(wl):  # a member made after the admission (group_release.py)
            plan.late += [(dict(raw_by[(ns, i.name)]), name) for i in gr.late_members(members, wl)]
    pod_uids = {str(_meta(x).get("uid")) for x in pods}
    sts_uids = {str(_meta(x).get("uid")) for x in statefulsets}
    lws_uids = {str(_meta(x).get("uid")) for x in leaderworkersets}
    for key, wl in sorted(by_name.items()):
        if _gone(wl, pod_uids, sts_uids, lws_uids) and key not in plan.delete:
            plan.orphans.append(dict(wl))  # checked against every pod and StatefulSet before it goes
    return plan


def gone_for_good(wl: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], statefulsets: Sequence[Mapping[str, Any]],
                  leaderworkersets: Sequence[Mapping[str, Any]] = ()) -> bool:
    """Whether an orphan candidate's owners are missing from the namespace's full lists too (a pod
    without a queue-name label, an ElasticQuotaTree's, is not in the queued list)."""
    return _gone(wl, {str(_meta(x).get("uid")) for x in pods}, {str(_meta(x).get("uid")) for x in statefulsets},
                 {str(_meta(x).get("uid")) for x in leaderworkersets})


# --- release and stop ------------------------------------------------------------------------


def pod_release_patch(pod: Mapping[str, Any], node_labels: Mapping[str, str],
                      tolerations: Sequence[Mapping[str, Any]]) -> Json | None:
    """Kueue's ``prepare``: the flavors' node labels merged into the pod's nodeSelector, their
    tolerations appended, the admission gate removed; one conditional merge patch. ``None`` when
    the pod is not gated (released already)."""
    spec = p.obj_of(pod.get("spec"))
    gates = [g for g in _items_of(spec.get("schedulingGates")) if isinstance(g, Mapping)]
    if not any(g.get("name") == ADMISSION_GATE for g in gates):
        return None
    rest = [dict(g) for g in gates if g.get("name") != ADMISSION_GATE]
    patch_spec: Json = {"schedulingGates": rest or None}
    if node_labels:
        patch_spec["nodeSelector"] = {**p.obj_of(spec.get("nodeSelector")), **node_labels}
    if tolerations:
        have = [dict(t) for t in _items_of(spec.get("tolerations")) if isinstance(t, Mapping)]
        patch_spec["tolerations"] = have + [dict(t) for t in tolerations if dict(t) not in have]
    return {"metadata": {"resourceVersion": _meta(pod).get("resourceVersion")}, "spec": patch_spec}


def pod_set_of(pod: Mapping[str, Any], workload: Mapping[str, Any]) -> str:
    """The podSet a pod of ``workload`` belongs to: ``main`` for a pod of its own, its role in a group."""
    if p.obj_of(_meta(workload).get("annotations")).get(p.IS_GROUP_WORKLOAD) != "true":
        return p.MAIN
    return p.role_of(p.pod_info(pod))


def to_stop(pod: Mapping[str, Any]) -> bool:
    """Kueue's ``Stop`` leaves pods that are still gated, finished or being deleted."""
    info = p.pod_info(pod)
    gated = any(isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE
                for g in _items_of(info.spec.get("schedulingGates")))
    return not (gated or info.terminated or _meta(pod).get("deletionTimestamp"))


async def pods_of(api: client.ApiClient, namespace: str, workload: Mapping[str, Any]) -> list[Json]:
    """The pods a Workload of the pod integration stands for: its group's, or its own pod."""
    meta = _meta(workload)
    if p.obj_of(meta.get("annotations")).get(p.IS_GROUP_WORKLOAD) == "true":
        data = await raw_call(api, "GET", f"/api/v1/namespaces/{namespace}/pods",
                              query=[("labelSelector", f"{p.GROUP_NAME}={meta.get('name')}")])
        return [x for x in (data or {}).get("items") or [] if isinstance(x, dict)]
    out = []
    for ref in _items_of(meta.get("ownerReferences")):
        if isinstance(ref, Mapping) and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            with contextlib.suppress(KubeApiError):
                pod = await raw_call(api, "GET", f"/api/v1/namespaces/{namespace}/pods/{ref.get('name')}")
                if not ref.get("uid") or _meta(pod).get("uid") == ref.get("uid"):
                    out.append(pod)
    return out


def is_pod_workload(workload: Mapping[str, Any]) -> bool:
    meta = _meta(workload)
    if p.obj_of(meta.get("annotations")).get(p.IS_GROUP_WORKLOAD) == "true":
        return True
    return any(isinstance(r, Mapping) and r.get("apiVersion") == "v1" and r.get("kind") == "Pod"
               for r in _items_of(meta.get("ownerReferences")))


async def release_pods(api: client.ApiClient, namespace: str, workload: Mapping[str, Any],
                       scheduling: Mapping[str, tuple[Mapping[str, str], Sequence[Mapping[str, Any]]]]) -> int:
    """Lift the gate of every pod of ``workload`` with its podSet's scheduling; how many were released."""
    released = 0
    for pod in await pods_of(api, namespace, workload):
        labels, tolerations = scheduling.get(pod_set_of(pod, workload), ({}, ()))
        patch = pod_release_patch(pod, labels, tolerations)
        if patch is None:
            continue
        with contextlib.suppress(KubeApiError):  # 409 / gone: the decision is applied again on the next delivery
            await raw_call(api, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{_meta(pod).get('name')}",
                           body=patch, content_type=MERGE_PATCH)
            released += 1
    return released


async def stop_pods(api: client.ApiClient, namespace: str, workload: Mapping[str, Any]) -> int:
    """Kueue's ``Stop``: delete every running pod of ``workload``."""
    stopped = 0
    for pod in await pods_of(api, namespace, workload):
        if to_stop(pod):
            with contextlib.suppress(KubeApiError):
                await raw_call(api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{_meta(pod).get('name')}")
                stopped += 1
    return stopped


# --- the reconciler --------------------------------------------------------------------------


@dataclass
class PodGroupStats:
    passes: int = 0
    labelled: int = 0
    created: int = 0
    released: int = 0  # pods of an admitted group made after its admission
    finished: int = 0
    deleted: int = 0
    refused: int = 0
    errors: int = 0


class PodGroupReconciler:
    """Workloads for queued pods, pod groups and StatefulSets in any namespace (module docstring)."""

    def __init__(self, api: client.ApiClient, *, interval: float = 1.0, clock: Any = wall_clock_ms,
                 elastic_quota_tree: bool = False) -> None:
        self.api, self.interval, self.clock = api, interval, clock
        self.elastic_quota_tree = elastic_quota_tree  # its bound namespaces are its pod reconciler's
        self.stats = PodGroupStats()
        self._reported: set[str] = set()

    async def _items(self, path: str, selector: str | None = None) -> list[Json]:
        query = [("labelSelector", selector)] if selector else None
        data = await raw_call(self.api, "GET", path, query=query)
        return [x for x in (data or {}).get("items") or [] if isinstance(x, dict)]

    async def _optional(self, path: str, selector: str | None = None) -> list[Json]:
        """A kind whose CRD may not be installed (LeaderWorkerSet): none when the server has no such kind,
        or when the role does not grant it yet (RBAC applied before this version: said once)."""
        try:
            return await self._items(path, selector)
        except KubeApiError as e:
            if e.status == FORBIDDEN and path not in self._reported:
                self._reported.add(path)
                _log.warning("pod_group.not_allowed", path=path, error=str(e))
            if e.not_found or e.status == FORBIDDEN:
                return []
            raise

    async def reconcile(self) -> PodPlan:
        self.stats.passes += 1
        pods = await self._items("/api/v1/pods", QUEUE_NAME_LABEL)
        statefulsets = await self._items("/apis/apps/v1/statefulsets", QUEUE_NAME_LABEL)
        leaderworkersets = await self._optional(f"{lw.LWS_PATH}/leaderworkersets", QUEUE_NAME_LABEL)
        workloads = await self._items(f"{WORKLOADS}/workloads")
        skip: frozenset[str] = frozenset()
        if self.elastic_quota_tree:
            queues = await self._items(f"{WORKLOADS}/localqueues", ELASTIC_QUOTA_TREE_LABEL)
            skip = frozenset(str(_meta(q).get("namespace")) for q in queues
                             if _meta(q).get("name") == DEFAULT_LOCAL_QUEUE)
        plan = plan_pods(pods, statefulsets, workloads, skip=skip, leaderworkersets=leaderworkersets)
        await self._apply(plan)
        return plan

    async def _apply(self, plan: PodPlan) -> None:
        for message in plan.errors:
            if message not in self._reported:  # once per problem, not once per pass
                self._reported.add(message)
                self.stats.refused += 1
                _log.warning("pod_group.refused", error=message)
        if plan.late:
            self.stats.released += await gr.release_late(self.api, plan.late, pod_release_patch, pod_set_of)
        for ns, name, patch in plan.label:
            with contextlib.suppress(KubeApiError):  # 409: changed meanwhile, next pass
                await raw_call(self.api, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body=patch,
                               content_type=MERGE_PATCH)
                self.stats.labelled += 1
        for body in plan.create:
            ns = str(body["metadata"]["namespace"])
            with contextlib.suppress(KubeApiError):  # 409: made already; others: next pass
                await raw_call(self.api, "POST", f"{WORKLOADS}/namespaces/{ns}/workloads", body=body)
                self.stats.created += 1
        for wl, finished in plan.finish:
            status = finished_status(wl, finished, int(self.clock()))
            if status is None:
                continue
            where = f"{WORKLOADS}/namespaces/{_meta(wl).get('namespace')}/workloads/{finished.workload}/status"
            with contextlib.suppress(KubeApiError):
                await raw_call(self.api, "PATCH", where, body=status, content_type=MERGE_PATCH)
                self.stats.finished += 1
        for ns in sorted({str(_meta(wl).get("namespace")) for wl in plan.orphans}):
            pods = await self._items(f"/api/v1/namespaces/{ns}/pods")
            sets = await self._items(f"/apis/apps/v1/namespaces/{ns}/statefulsets")
            lwss = await self._optional(f"{lw.LWS_PATH}/namespaces/{ns}/leaderworkersets")
            plan.delete += [(ns, str(_meta(wl).get("name"))) for wl in plan.orphans
                            if _meta(wl).get("namespace") == ns and gone_for_good(wl, pods, sets, lwss)]
        for ns, name in plan.delete:
            with contextlib.suppress(KubeApiError):
                await raw_call(self.api, "DELETE", f"{WORKLOADS}/namespaces/{ns}/workloads/{name}")
                self.stats.deleted += 1

    async def run(self, stop: asyncio.Event) -> PodGroupStats:
        while not stop.is_set():
            try:
                await self.reconcile()
            except KubeApiError as e:
                self.stats.errors += 1
                _log.warning("pod_group_reconciler.error", error=str(e), retriable=e.retriable)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
        return self.stats
