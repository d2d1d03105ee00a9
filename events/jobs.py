"""``batch/v1`` Job to Workload, the way Kueue's job integration builds one.

One podSet ``main`` with ``count`` = parallelism (capped by completions), per-pod
requests from the pod template, ``minCount`` from the
``kueue.x-k8s.io/job-min-parallelism`` annotation (partial admission), priority
from the ``kueue.x-k8s.io/priority-class`` label (a WorkloadPriorityClass) or the
template's ``priorityClassName`` (a PriorityClass), and an ownerReference to
the Job. The Workload's name is ``job-<job name>-<hash>`` as in Kueue, with the
hash taken over the Job's kind, group, name and uid exactly as Kueue's
``GetWorkloadNameForOwnerWithGVK`` takes it, so that the name is the one Kueue would
give the same Job (and stable across replays).
"""

from __future__ import annotations

import hashlib
import re

from events import api
from events import objects as o
from events import validation as v
from events.cluster import (
    MAX_EXEC_TIME_LABEL,
    MIN_PARALLELISM_ANNOTATION,
    POD_PRIORITY_CLASS_SOURCE,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)
from events.jobkinds import prebuilt
from events.jobkinds.naming import MAX_NAME, check_queue_name, workload_name
from events.podspec import Where, pod_set_from_template

__all__ = ["MAX_NAME", "job_to_workload", "workload_name_for_job"]
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def workload_name_for_job(job_name: str, job_uid: str) -> str:
    """Kueue's ``jobframework.GetWorkloadNameForOwnerWithGVK`` for a batch/v1 Job."""
    return workload_name("Job", "batch", job_name, job_uid)


def _prebuilt(where: Where, meta: api.ObjectMeta) -> str:
    """The prebuilt Workload the Job names (``events.jobkinds.prebuilt``), checked; ``""`` for none."""
    name = prebuilt.prebuilt_name(meta.labels, meta.annotations)
    if name:
        prebuilt.check(where, "batch/v1", "Job", name, prebuilt.field_of(meta.labels))
    return name


def job_to_workload(
    where: Where, meta: api.ObjectMeta, spec: api.JobSpec, namespace: str, creation_time: int | None
) -> o.Workload | None:
    labels = meta.labels or {}
    queue = labels.get(QUEUE_NAME_LABEL)
    if queue is None:
        return None  # not managed by Kueue
    name = meta.name or ""
    check_queue_name(where, queue)
    parallelism = 1 if spec.parallelism is None else spec.parallelism
    try:
        count = v.int32(parallelism, "spec.parallelism", minimum=0)
        if spec.completions is not None:
            count = min(count, v.int32(spec.completions, "spec.completions", minimum=0))
    except v.Invalid as e:
        raise where.error(e.field, e.message) from None
    annotations = meta.annotations or {}
    min_count = None
    if MIN_PARALLELISM_ANNOTATION in annotations:
        raw = annotations[MIN_PARALLELISM_ANNOTATION]
        field = f"metadata.annotations.{MIN_PARALLELISM_ANNOTATION}"
        try:
            min_count = v.int_text(raw, field)
        except v.Invalid as e:
            raise where.error(e.field, e.message) from None
        # Kueue's job webhook compares with the pod count, min(parallelism, completions).
        if not 0 < min_count < count:
            raise where.error(
                field,
                f"must be greater than 0 and less than the Job's pod count min(parallelism, completions) "
                f"({count}), got {min_count}",
            )
    if not spec.template.spec.containers:
        # The API server's pod validation requires one; Kueue's Workload CRD does not, so the rule
        # is the Job's (a Job without a template has none either).
        raise where.error("spec.template.spec.containers", "must have at least 1 item")
    pod_set = pod_set_from_template(where, "main", count, min_count, spec.template, "spec.template")
    max_exec = None
    if labels.get(MAX_EXEC_TIME_LABEL) is not None:
        # Kueue's job integration copies the label to spec.maximumExecutionTimeSeconds (at least 1).
        field = f"metadata.labels.{MAX_EXEC_TIME_LABEL}"
        try:
            max_exec = v.int_text(labels[MAX_EXEC_TIME_LABEL], field)
            v.int32(max_exec, field, minimum=1)
        except v.Invalid as e:
            raise where.error(e.field, e.message) from None
    priority_ref = None
    if labels.get(PRIORITY_CLASS_LABEL):
        priority_ref = o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name=labels[PRIORITY_CLASS_LABEL])
    elif spec.template.spec.priority_class_name:
        priority_ref = o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name=spec.template.spec.priority_class_name)
    uid = meta.uid or hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32]
    wl_name = _prebuilt(where, meta) or workload_name_for_job(name, uid)
    return o.Workload(
        namespace=namespace,
        name=wl_name,
        uid=hashlib.sha1(f"workload/{namespace}/{wl_name}".encode(), usedforsecurity=False).hexdigest()[:32],
        queue_name=queue,
        pod_sets=(pod_set,),
        creation_time=creation_time,
        priority_ref=priority_ref,
        owner=o.OwnerReference(api_version="batch/v1", kind="Job", name=name, uid=uid),
        active=True,
        maximum_execution_time_seconds=max_exec,
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
    )
