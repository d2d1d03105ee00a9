"""The workload kinds Kueue integrates, in one registry, and the pure half of their integration.

Each kind is one small module giving a :class:`~events.jobkinds.base.JobKind` (its podSets from
its manifest, where it is suspended); this package turns any of them into the Workload Kueue
would create for it (:func:`to_workload`: name, podSets, priority, owner), and
:mod:`events.jobkinds.patches` gives the suspend and resume patches. ``simulate``, the manifest
loader and (as they move onto it) the watcher, the actuator and RBAC take the list of kinds
from :data:`KINDS` here.

``batch/v1`` Job is in the registry with its shape (:data:`~events.jobkinds.batch.JOB`); its
Workload is still built by :mod:`events.jobs`, unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec

from events import api
from events import objects as o
from events.cluster import (
    POD_PRIORITY_CLASS_SOURCE,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)
from events.jobkinds import kubeflow, prebuilt, ray
from events.jobkinds.appwrapper import APPWRAPPER
from events.jobkinds.base import Finished as Finished  # re-exported: the package's names
from events.jobkinds.base import JobKind as JobKind
from events.jobkinds.base import PodSetSource as PodSetSource
from events.jobkinds.base import dotted
from events.jobkinds.batch import JOB as JOB
from events.jobkinds.jobset import JOBSET
from events.jobkinds.naming import check_queue_name
from events.jobkinds.naming import workload_name as workload_name
from events.jobkinds.spark import SPARKAPPLICATION
from events.jobkinds.trainjob import TRAINJOB
from events.podspec import Where, pod_set_from_template

OTHER_KINDS: tuple[JobKind, ...] = (JOBSET, *kubeflow.KINDS, TRAINJOB, *ray.KINDS, APPWRAPPER, SPARKAPPLICATION)
"""The kinds whose Workload this package builds (every kind but ``batch/v1`` Job)."""
KINDS: tuple[JobKind, ...] = (JOB, *OTHER_KINDS)
BY_KEY: Mapping[tuple[str, str], JobKind] = {k.key: k for k in KINDS}
POD_KINDS: tuple[str, ...] = ("Pod",)
"""Kueue's pod integration (``events.jobkinds.pods`` and ``serving``): ``--job-kinds Pod`` takes queued
pods, pod groups, Deployments' pods and StatefulSets on a cluster (their Workloads are made from the
pods, not from a suspendable object, so they are not :class:`JobKind` entries)."""


def by_api_version(kinds: tuple[JobKind, ...]) -> tuple[tuple[tuple[str], tuple[str, ...]], ...]:
    """The kinds grouped by apiVersion, in registry order: how a refusal lists them."""
    versions: dict[str, list[str]] = {}
    for k in kinds:
        versions.setdefault(k.api_version, []).append(k.kind)
    return tuple(((version,), tuple(names)) for version, names in versions.items())


def kind_of(api_version: str, kind: str) -> JobKind | None:
    return BY_KEY.get((api_version, kind))


def _template(where: Where, source: PodSetSource) -> api.PodTemplateSpec:
    try:
        return msgspec.convert(source.template, api.PodTemplateSpec)
    except msgspec.ValidationError as e:
        message, _, at = str(e).partition(" - at `$")
        raise where.error(dotted(source.path) + at.rstrip("`"), message) from None


def pod_sets(where: Where, sources: tuple[PodSetSource, ...]) -> tuple[o.PodSet, ...]:
    """The podSets a kind derived, requests and all, as Kueue puts them in the Workload."""
    return tuple(
        pod_set_from_template(where, s.name, s.count, s.min_count, _template(where, s), dotted(s.path))
        for s in sources
    )


def _priority(kind: JobKind, labels: Mapping[str, str], body: Mapping[str, Any],
              sources: tuple[PodSetSource, ...]) -> o.PriorityRef | None:
    if labels.get(PRIORITY_CLASS_LABEL):
        return o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name=labels[PRIORITY_CLASS_LABEL])
    name = kind.priority_class(body)
    for source in sources:
        if name:
            break
        pod_spec = source.template.get("spec") or {}
        candidate = pod_spec.get("priorityClassName") if isinstance(pod_spec, Mapping) else None
        name = candidate if isinstance(candidate, str) else ""
    return o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name=name) if name else None


def to_workload(where: Where, kind: JobKind, meta: api.ObjectMeta, body: Mapping[str, Any], namespace: str,
                creation_time: int | None) -> o.Workload | None:
    """The Workload Kueue creates for an object of ``kind`` on a queue; ``None`` when the object names
    no queue (or the kind says it is not Kueue's to manage)."""
    labels = meta.labels or {}
    queue = labels.get(QUEUE_NAME_LABEL)
    if queue is None or not kind.managed(body):
        return None
    check_queue_name(where, queue)
    sources = tuple(kind.pod_sets(where, body))
    sets = pod_sets(where, sources)
    name = meta.name or ""
    uid = meta.uid or hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32]
    annotations = meta.annotations or {}
    wl_name = prebuilt.prebuilt_name(labels, annotations)
    if wl_name:
        prebuilt.check(where, kind.api_version, kind.kind, wl_name, prebuilt.field_of(labels))
    wl_name = wl_name or workload_name(kind.kind, kind.group, name, uid)
    return o.Workload(
        namespace=namespace,
        name=wl_name,
        uid=hashlib.sha1(f"workload/{namespace}/{wl_name}".encode(), usedforsecurity=False).hexdigest()[:32],
        queue_name=queue,
        pod_sets=sets,
        creation_time=creation_time,
        priority_ref=_priority(kind, labels, body, sources),
        owner=o.OwnerReference(api_version=kind.api_version, kind=kind.kind, name=name, uid=uid),
        active=True,
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
    )


def parse_kind_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of kinds besides Job (``JobSet,PyTorchJob``, any case) as the registry
    spells them, in registry order; ``ValueError`` naming the first unknown one and the choices."""
    by_lower = {k.kind.lower(): k.kind for k in OTHER_KINDS} | {k.lower(): k for k in POD_KINDS}
    wanted: set[str] = set()
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name.lower() not in by_lower:
            choices = ", ".join([*(k.kind for k in OTHER_KINDS), *POD_KINDS])
            raise ValueError(f"unknown workload kind {name[:60]!r}: choose from {choices}")
        wanted.add(by_lower[name.lower()])
    return tuple(k for k in [*(k.kind for k in OTHER_KINDS), *POD_KINDS] if k in wanted)
