"""The RBAC the workload kinds need, derived from the registry: what ``deploy/jobkinds/rbac.yaml``
holds (``tests/unit/test_job_kind_rbac.py`` keeps the file equal to :func:`manifests`; regenerate
with ``python -m tests.unit.test_job_kind_rbac``).

The watcher with ``--job-kinds`` lists and watches them; the actuator with ``--job-kinds`` (its
kind reconcilers and its port) lists, watches and reads them and patches them (hold, release,
inject and restore scheduling). Neither creates or deletes one; the Workloads and Events the
actuator writes are granted in ``deploy/base``."""

from __future__ import annotations

from typing import Any

from events.cluster import KUEUE_GROUP
from events.jobkinds import OTHER_KINDS, trainjob

NAMESPACE = "kueuelog-system"
VERBS = {"watcher": ["list", "watch"], "actuator": ["get", "list", "watch", "patch"]}


POD_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch", "delete"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["list"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["list"]},
    {"apiGroups": [KUEUE_GROUP], "resources": ["workloads"], "verbs": ["list", "create", "delete"]},
]
"""The actuator's pod integration (``--job-kinds Pod``, ``services/actuator/podgroups.py``): queued pods
listed, labelled into a StatefulSet's (or LeaderWorkerSet replica's) group, released (gate lifted) and
stopped (deleted); StatefulSets and LeaderWorkerSets listed; Workloads listed, created for pods, groups,
StatefulSets and LeaderWorkerSet replicas and deleted when their owners are gone (``Finished`` is
written on workloads/status, granted in ``deploy/base``)."""


RUNTIME_VERBS = {"watcher": ["list", "watch"], "actuator": ["get"]}
"""Kubeflow Trainer's runtimes (``events.jobkinds.trainjob``), read, never written: the watcher lists
and watches them, the actuator's TrainJob reconciler reads the one a TrainJob names."""


def rules(service: str) -> list[dict[str, Any]]:
    """One rule per API group, its kinds' plurals in registry order, with the service's verbs (and
    for the actuator, the pod integration's :data:`POD_RULES`)."""
    groups: dict[str, list[str]] = {}
    for kind in OTHER_KINDS:
        plurals = groups.setdefault(kind.group, [])
        if kind.plural not in plurals:
            plurals.append(kind.plural)
    out = [{"apiGroups": [group], "resources": plurals, "verbs": list(VERBS[service])}
           for group, plurals in groups.items()]
    runtimes = [trainjob.RUNTIME_PLURALS[k] for k in trainjob.RUNTIME_KINDS]
    out.append({"apiGroups": [trainjob.GROUP], "resources": runtimes, "verbs": list(RUNTIME_VERBS[service])})
    return out + ([dict(r) for r in POD_RULES] if service == "actuator" else [])


def manifests() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for service in VERBS:
        name = f"kueuelog-{service}-job-kinds"
        labels = {"app.kubernetes.io/name": "kueuelog", "app.kubernetes.io/component": service}
        out += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": name, "labels": labels}, "rules": rules(service)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": name, "labels": dict(labels)},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": f"kueuelog-{service}", "namespace": NAMESPACE}]},
        ]
    return out
