"""Serving workloads as Kueue treats them, pure: Deployment, StatefulSet (``apps/v1``) and
LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``). None of them is suspended; Kueue holds their
pods with the scheduling gate, and none of their Workloads ever finishes.

- **Deployment** (``pkg/controller/jobs/deployment``): its webhook copies the queue-name (and
  ``kueue.x-k8s.io/priority-class``) label onto the pod template, with ``kueue.x-k8s.io/managed``
  and the ``pod-suspending-parent`` annotation; each pod is then a plain pod of its own
  (:mod:`events.jobkinds.pods`): one Workload per pod.
- **StatefulSet** (``pkg/controller/jobs/statefulset``): one Workload for the whole set, made
  from the StatefulSet: ``statefulset-<name>-<hash>``, one podSet ``main`` of ``replicas`` pods
  (1 when unset) from the pod template, owned by the StatefulSet, marked
  ``kueue.x-k8s.io/is-group-workload``; none while ``replicas`` is 0 (scaled to zero Kueue puts
  the Workload on hold, which frees its quota). Its pods join the group with
  :func:`statefulset_pod_labels` (name, total count = replicas, fast admission, serving, role
  ``main``), so they are released together by that Workload's admission.
- **LeaderWorkerSet** (``pkg/controller/jobs/leaderworkerset``): one Workload per replica
  (group index), ``leaderworkerset-<name>-<index>-<hash>``, podSets ``leader`` (1 pod, from
  ``leaderTemplate``) and ``worker`` (``size`` - 1) when there is a leader template, else
  ``main`` (``size`` pods); ``replicas`` and ``size`` default to 1. On a cluster its pods (the LWS
  controller's, labelled with the set's name and their group index) join their replica's group with
  :func:`lws_pod_labels` (Kueue's ``setDefault``: group name = prebuilt Workload = that replica's
  Workload, total count = ``size``, role ``leader`` / ``worker`` (``main`` without a leader
  template)); its webhook puts the queue (and priority-class) label, ``pod-suspending-parent`` and
  ``pod-group-serving`` on both pod templates (:func:`lws_template_metadata`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from events.cluster import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from events.jobkinds.base import PathPart, count, mapping, pod_template, text
from events.jobkinds.naming import workload_name
from events.jobkinds.pods import (
    FAST_ADMISSION,
    GROUP_NAME,
    GROUP_TOTAL_COUNT,
    MAIN,
    MANAGED,
    PREBUILT_WORKLOAD,
    ROLE_HASH,
    SERVING,
    SUSPENDED_BY_PARENT,
)
from events.podspec import Where

DEPLOYMENT: Final = ("apps/v1", "Deployment")
STATEFULSET: Final = ("apps/v1", "StatefulSet")
LWS_GROUP: Final = "leaderworkerset.x-k8s.io"
LEADERWORKERSET: Final = (f"{LWS_GROUP}/v1", "LeaderWorkerSet")
KINDS: Final = (DEPLOYMENT, STATEFULSET, LEADERWORKERSET)
LWS_FRAMEWORK: Final = f"{LWS_GROUP}/leaderworkerset"
"""Kueue's framework name for LeaderWorkerSet (the ``pod-suspending-parent`` value of its pods)."""
LWS_NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_LEADER_NAME_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/leader-name"
"""What the LWS controller puts on its pods: the set's name and the replica (group) index on every
pod, the leader's name on each worker (so a pod without it is a leader)."""
LWS_MAX_REPLICAS: Final = 1_000_000
"""Kueue's bound on a LeaderWorkerSet's ``spec.replicas`` (its webhook refuses more)."""
MAX_REPLICAS: Final = 10_000
"""The most pods (or groups) ``simulate`` makes of one object (ours)."""


@dataclass(frozen=True)
class GroupPodSet:
    name: str
    count: int
    template: Mapping[str, Any]
    path: tuple[PathPart, ...]


@dataclass(frozen=True)
class GroupWorkload:
    """One Workload a serving object stands for: its name, podSets and which replica it is."""

    name: str
    pod_sets: tuple[GroupPodSet, ...]
    index: int | None = None


def _spec(where: Where, body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(where, body.get("spec"), ("spec",), required=True)


def replicas(where: Where, body: Mapping[str, Any]) -> int:
    return count(where, _spec(where, body).get("replicas"), ("spec", "replicas"), 1)


def template(where: Where, body: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod_template(where, _spec(where, body).get("template"), ("spec", "template"))


def propagated_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """What a Deployment's (or StatefulSet's) webhook puts on its pod template's labels."""
    out = {MANAGED: "true", QUEUE_NAME_LABEL: labels[QUEUE_NAME_LABEL]}
    if labels.get(PRIORITY_CLASS_LABEL):
        out[PRIORITY_CLASS_LABEL] = labels[PRIORITY_CLASS_LABEL]
    return out


def parent_annotation(framework: str) -> dict[str, str]:
    return {SUSPENDED_BY_PARENT: framework}


def managed_by_another_framework(sts: Mapping[str, Any]) -> bool:
    """A StatefulSet whose pod template another integration marks as its own (a LeaderWorkerSet's,
    made from its marked templates): Kueue's StatefulSet webhooks and reconciler leave it alone."""
    spec = sts.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    parent = annotations.get(SUSPENDED_BY_PARENT) if isinstance(annotations, Mapping) else None
    return parent is not None and parent != "statefulset"


def statefulset_workload_name(name: str, uid: str) -> str:
    return workload_name("StatefulSet", "apps", name, uid)


def statefulset_pod_labels(sts_name: str, sts_uid: str, sts_labels: Mapping[str, str],
                           total: int) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) Kueue's StatefulSet pod reconciler sets on each of its pods."""
    group = statefulset_workload_name(sts_name, sts_uid)
    labels = {**propagated_labels(sts_labels), GROUP_NAME: group, PREBUILT_WORKLOAD: group}
    annotations = {GROUP_TOTAL_COUNT: str(total), FAST_ADMISSION: "true", SERVING: "true", ROLE_HASH: MAIN}
    return labels, annotations


def statefulset_workload(where: Where, name: str, uid: str, body: Mapping[str, Any]) -> GroupWorkload | None:
    n = replicas(where, body)
    if n == 0:
        return None
    return GroupWorkload(statefulset_workload_name(name, uid),
                         (GroupPodSet(MAIN, n, template(where, body), ("spec", "template")),))


def lws_workloads(where: Where, name: str, uid: str, body: Mapping[str, Any]) -> list[GroupWorkload]:
    spec = _spec(where, body)
    n = count(where, spec.get("replicas"), ("spec", "replicas"), 1)
    if n > MAX_REPLICAS:
        raise where.error("spec.replicas", f"must be at most {MAX_REPLICAS} (the most kueuelog simulates), got {n}")
    at: tuple[PathPart, ...] = ("spec", "leaderWorkerTemplate")
    lwt = mapping(where, spec.get("leaderWorkerTemplate"), at, required=True)
    size = count(where, lwt.get("size"), (*at, "size"), 1, minimum=1)
    worker = pod_template(where, lwt.get("workerTemplate"), (*at, "workerTemplate"))
    sets: list[GroupPodSet] = []
    if lwt.get("leaderTemplate") is not None:
        leader = pod_template(where, lwt["leaderTemplate"], (*at, "leaderTemplate"))
        sets.append(GroupPodSet("leader", 1, leader, (*at, "leaderTemplate")))
        sets.append(GroupPodSet("worker", size - 1, worker, (*at, "workerTemplate")))
    else:
        sets.append(GroupPodSet(MAIN, size, worker, (*at, "workerTemplate")))
    text(where, name, ("metadata", "name"), required=True)
    return [GroupWorkload(workload_name("LeaderWorkerSet", LWS_GROUP, f"{name}-{i}", uid), tuple(sets), i)
            for i in range(n)]


def lws_workload_name(name: str, uid: str, index: int | str) -> str:
    """Kueue's name of a LeaderWorkerSet replica's Workload."""
    return workload_name("LeaderWorkerSet", LWS_GROUP, f"{name}-{index}", uid)


def lws_size(where: Where, body: Mapping[str, Any]) -> int:
    at: tuple[PathPart, ...] = ("spec", "leaderWorkerTemplate")
    lwt = mapping(where, _spec(where, body).get("leaderWorkerTemplate"), at, required=True)
    return count(where, lwt.get("size"), (*at, "size"), 1, minimum=1)


def lws_has_leader(body: Mapping[str, Any]) -> bool:
    spec = body.get("spec")
    lwt = spec.get("leaderWorkerTemplate") if isinstance(spec, Mapping) else None
    return isinstance(lwt, Mapping) and lwt.get("leaderTemplate") is not None


def lws_pod_labels(lws_name: str, lws_uid: str, body: Mapping[str, Any], where: Where, index: str,
                   pod_annotations: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) that put one of a LeaderWorkerSet's pods into its replica's group, as
    Kueue's LeaderWorkerSet reconciler does (``setDefault``); the serving mark too, which its
    webhook puts on the templates (so a pod made before the webhook ran never finishes either)."""
    group = lws_workload_name(lws_name, lws_uid, index)
    role = MAIN
    if lws_has_leader(body):
        role = "worker" if LWS_LEADER_NAME_ANNOTATION in pod_annotations else "leader"
    labels = {MANAGED: "true", GROUP_NAME: group, PREBUILT_WORKLOAD: group}
    annotations = {GROUP_TOTAL_COUNT: str(lws_size(where, body)), ROLE_HASH: role, SERVING: "true"}
    return labels, annotations


def lws_template_metadata(labels: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) Kueue's LeaderWorkerSet webhook puts on its leader and worker pod templates."""
    out = {QUEUE_NAME_LABEL: labels[QUEUE_NAME_LABEL]}
    if labels.get(PRIORITY_CLASS_LABEL):
        out[PRIORITY_CLASS_LABEL] = labels[PRIORITY_CLASS_LABEL]
    return out, {SUSPENDED_BY_PARENT: LWS_FRAMEWORK, SERVING: "true"}
