"""``kueue.x-k8s.io/prebuilt-workload-name``: a job that names an existing Workload runs under it
instead of one created for it (Kueue's jobframework, ``ensureOneWorkload`` and
``EnsurePrebuiltWorkloadOwnership``), pure.

- :func:`prebuilt_name`: the name, from the label, or from the annotation of the same key when
  it is longer than a label value may be (Kueue's ``PrebuiltWorkloadNameFor``).
- :func:`check`: Kueue's webhook rules: only the kinds whose integrations take a prebuilt
  Workload (Job, JobSet, PyTorchJob, TFJob, XGBoostJob, PaddleJob, MPIJob, RayJob, RayCluster,
  RayService, AppWrapper; not JAXJob or SparkApplication), and the name must name a Workload.
- :func:`mismatch`: why the job is not equivalent to the Workload (Kueue's
  ``EquivalentToWorkload``: as many podSets, each with the same count, minCount, tolerations
  and containers; kueuelog compares containers by their requests), ``None`` when it is.
- :func:`adopt`: for ``simulate`` and the manifest loader, every job naming a prebuilt Workload
  replaced by that Workload, now owned by the job; a missing, foreign-owned or mismatched
  Workload is an error naming the job and the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import msgspec

from events import objects as o
from events.cluster import JOB_UID_LABEL, PREBUILT_WORKLOAD_LABEL
from events.jobkinds.naming import DNS_SUBDOMAIN, MAX_NAME
from events.podspec import Where

LABEL_VALUE_MAX = 63
SUPPORTED: frozenset[tuple[str, str]] = frozenset({
    ("batch/v1", "Job"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("kubeflow.org/v1", "TFJob"), ("kubeflow.org/v1", "PaddleJob"), ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "XGBoostJob"), ("kubeflow.org/v2beta1", "MPIJob"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("ray.io/v1", "RayJob"), ("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayService"),
    ("workload.codeflare.dev/v1beta2", "AppWrapper"),
})


def prebuilt_name(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> str:
    """The prebuilt Workload a job names, ``""`` for none."""
    name = (labels or {}).get(PREBUILT_WORKLOAD_LABEL) or ""
    if name:
        return name
    long = (annotations or {}).get(PREBUILT_WORKLOAD_LABEL) or ""
    return long if len(long) > LABEL_VALUE_MAX else ""


def field_of(labels: Mapping[str, str] | None) -> str:
    where = "labels" if (labels or {}).get(PREBUILT_WORKLOAD_LABEL) else "annotations"
    return f"metadata.{where}.{PREBUILT_WORKLOAD_LABEL}"


def check(where: Where, api_version: str, kind: str, name: str, field: str) -> None:
    """Kueue's webhook on a job naming a prebuilt Workload."""
    if (api_version, kind) not in SUPPORTED:
        group, _, version = api_version.rpartition("/")
        raise where.error(field, f'is not supported for "{group}/{version}, Kind={kind}"' if group
                          else f'is not supported for "{version}, Kind={kind}"')
    if len(name) > MAX_NAME or not DNS_SUBDOMAIN.fullmatch(name):
        raise where.error(field, f"invalid value {name[:100]!r}: must be a lowercase RFC 1123 subdomain "
                                 "(a Workload's name)")


def mismatch(job: o.Workload, prebuilt: o.Workload) -> str | None:
    """Why the job's own podSets are not the prebuilt Workload's; ``None`` when equivalent."""
    if job.maximum_execution_time_seconds != prebuilt.maximum_execution_time_seconds:
        return (f"maximumExecutionTimeSeconds: the job asks {job.maximum_execution_time_seconds}, the Workload has "
                f"{prebuilt.maximum_execution_time_seconds}")
    if len(job.pod_sets) != len(prebuilt.pod_sets):
        return f"the job has {len(job.pod_sets)} podSets, the Workload {len(prebuilt.pod_sets)}"
    for i, (mine, theirs) in enumerate(zip(job.pod_sets, prebuilt.pod_sets, strict=True)):
        for what, a, b in (("count", mine.count, theirs.count), ("minCount", mine.min_count, theirs.min_count),
                           ("requests", dict(mine.requests), dict(theirs.requests)),
                           ("tolerations", mine.tolerations, theirs.tolerations)):
            if a != b:
                return f"podSets[{i}] ({theirs.name}) {what}: the job has {a}, the Workload {b}"
    return None


def owned_by(job: o.Workload, prebuilt: o.Workload) -> o.Workload:
    """The prebuilt Workload adopted by the job (its controller owner, its ``job-uid`` label)."""
    assert job.owner is not None
    labels = {**dict(prebuilt.labels), JOB_UID_LABEL: job.owner.uid}
    return msgspec.structs.replace(prebuilt, owner=job.owner, labels=tuple(sorted(labels.items())))


D = TypeVar("D")


def adopt(pairs: Sequence[tuple[D, o.AnyObject]], wanted: Callable[[D], tuple[str, str, str] | None],
          error: Callable[[D, str, str, str], Exception]) -> list[tuple[D, o.AnyObject]]:
    """``pairs`` (document, object) with every job's own Workload that names a prebuilt one dropped
    and that Workload, where it stands, owned by the job. ``wanted(doc)``: (name, field, shown job)
    for a job naming one, else ``None``; ``error(doc, shown, field, message)`` the exception."""
    standalone = {(obj.namespace, obj.name): i for i, (doc, obj) in enumerate(pairs)
                  if isinstance(obj, o.Workload) and wanted(doc) is None}
    out: list[tuple[D, o.AnyObject] | None] = list(pairs)
    for i, (doc, obj) in enumerate(pairs):
        want = wanted(doc)
        if want is None or not isinstance(obj, o.Workload):
            continue
        name, field, shown = want
        at = standalone.get((obj.namespace, name))
        if at is None:
            raise error(doc, shown, field, f"Workload {obj.namespace}/{name} not found (Kueue keeps the job "
                                           "suspended until it exists)")
        found = out[at]
        assert found is not None
        prebuilt = found[1]
        assert isinstance(prebuilt, o.Workload)
        mine = obj.owner is not None and prebuilt.owner is not None and (
            (prebuilt.owner.kind, prebuilt.owner.name) == (obj.owner.kind, obj.owner.name))
        if prebuilt.owner is not None and not mine:
            raise error(doc, shown, field, f"Workload {obj.namespace}/{name} is already owned by "
                                           f"{prebuilt.owner.kind} {prebuilt.owner.name}")
        problem = mismatch(obj, prebuilt)
        if problem is not None:
            raise error(doc, shown, field, f"the prebuilt Workload {obj.namespace}/{name} is out of sync with its "
                                           f"job ({problem}); Kueue marks it Finished (OutOfSync)")
        out[at] = (found[0], owned_by(obj, prebuilt))
        out[i] = None
    return [p for p in out if p is not None]
