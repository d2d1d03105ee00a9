"""Where each kind keeps ``managedBy``, for the kinds Kueue's MultiKueue places on workers.

Kueue's MultiKueue adapters (``pkg/controller/jobs/*/..._multikueue_adapter.go``) exist for these
kinds: the manager's object carries ``managedBy: kueue.x-k8s.io/multikueue`` (so no controller on
the manager runs it; Kueue's webhooks default it when the LocalQueue's ClusterQueue has a
MultiKueue admission check), and the worker's copy has it cleared (so the worker's controller does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.jobkinds import kubeflow, ray
from events.jobkinds.appwrapper import APPWRAPPER
from events.jobkinds.base import JobKind
from events.jobkinds.batch import JOB
from events.jobkinds.jobset import JOBSET

PATHS: Mapping[tuple[str, str], tuple[JobKind, tuple[str, ...]]] = {
    k.key: (k, path) for k, path in (
        (JOB, ("spec", "managedBy")),
        (JOBSET, ("spec", "managedBy")),
        *((k, ("spec", "runPolicy", "managedBy")) for k in kubeflow.KINDS),
        *((k, ("spec", "managedBy")) for k in ray.KINDS),
        (APPWRAPPER, ("spec", "managedBy")),
    )}
"""(apiVersion, kind) -> (the kind, where it keeps ``managedBy``)."""

OWN_CONTROLLER: Mapping[str, str] = {
    "Job": "kubernetes.io/job-controller",
    "JobSet": "jobset.sigs.k8s.io/jobset-controller",
    "MPIJob": "kubeflow.org/mpi-operator",
    **{k.kind: "kubeflow.org/training-operator" for k in kubeflow.KINDS if k.kind != "MPIJob"},
    **{k.kind: "ray.io/kuberay-operator" for k in ray.KINDS},
    "AppWrapper": "workload.codeflare.dev/appwrapper-controller",
}
"""The controller each kind names as its own ``managedBy``: Kueue's webhooks default over it too
(``CanDefaultManagedBy``: unset or the kind's own controller)."""


def can_default(kind: JobKind, body: Mapping[str, Any]) -> bool:
    """Whether a MultiKueue ClusterQueue's webhook may set ``managedBy`` on the object."""
    return kind.key in PATHS and managed_by(kind, body) in (None, OWN_CONTROLLER.get(kind.kind))


def managed_by(kind: JobKind, body: Mapping[str, Any]) -> str | None:
    """The object's ``managedBy`` (``None`` when unset or the kind has none)."""
    found = PATHS.get(kind.key)
    if found is None:
        return None
    at: Any = body
    for key in found[1]:
        at = at.get(key) if isinstance(at, Mapping) else None
    return at if isinstance(at, str) else None


def clear(kind: JobKind, body: dict[str, Any]) -> None:
    """Remove ``managedBy`` from ``body`` (in place), where the kind keeps it."""
    found = PATHS.get(kind.key)
    if found is None:
        return
    at: Any = body
    for key in found[1][:-1]:
        at = at.get(key) if isinstance(at, dict) else None
    if isinstance(at, dict):
        at.pop(found[1][-1], None)
