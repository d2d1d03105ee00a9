"""The RBAC the workload kinds need, derived from the registry: what ``deploy/jobkinds/rbac.yaml``
holds (``tests/unit/test_job_kind_rbac.py`` keeps the file equal to :func:`manifests`; regenerate
with ``python -m tests.unit.test_job_kind_rbac``).

Today only the watcher acts on these kinds (``--job-kinds``: list and watch); the job reconciler
and the actuator still take ``batch/v1`` Jobs only, so they are granted nothing here yet."""

from __future__ import annotations

from typing import Any

from events.jobkinds import OTHER_KINDS

NAMESPACE = "kueuelog-system"
_LABELS = {"app.kubernetes.io/name": "kueuelog", "app.kubernetes.io/component": "watcher"}


def watcher_rules() -> list[dict[str, Any]]:
    """One rule per API group, its kinds' plurals in registry order: list and watch."""
    groups: dict[str, list[str]] = {}
    for kind in OTHER_KINDS:
        plurals = groups.setdefault(kind.group, [])
        if kind.plural not in plurals:
            plurals.append(kind.plural)
    return [{"apiGroups": [group], "resources": plurals, "verbs": ["list", "watch"]}
            for group, plurals in groups.items()]


def manifests() -> list[dict[str, Any]]:
    name = "kueuelog-watcher-job-kinds"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": dict(_LABELS)}, "rules": watcher_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name, "labels": dict(_LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": "kueuelog-watcher", "namespace": NAMESPACE}]},
    ]
