"""``batch/v1`` Job to Workload, the way Kueue's job integration builds one.

One podSet ``main`` with ``count`` = parallelism (capped by completions), per-pod
requests from the pod template, ``minCount`` from the
``kueue.x-k8s.io/job-min-parallelism`` annotation (partial admission), priority
from the ``kueue.x-k8s.io/priority-class`` label (a WorkloadPriorityClass) or the
template's ``priorityClassName`` (a PriorityClass), and an ownerReference to
the Job. The Workload's name is ``job-<job name>-<hash>`` as in Kueue, with the
hash taken over the Job's name and uid so that it is stable across replays.
"""

from __future__ import annotations

import hashlib

from events import api
from events import objects as o
from events.podspec import Where, pod_set_from_template

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
MAX_NAME = 253


def workload_name_for_job(job_name: str, job_uid: str) -> str:
    digest = hashlib.sha1(f"batch/Job/{job_name}/{job_uid}".encode(), usedforsecurity=False).hexdigest()[:5]
    prefix = f"job-{job_name}"[: MAX_NAME - 6]
    return f"{prefix}-{digest}"


def job_to_workload(
    where: Where, meta: api.ObjectMeta, spec: api.JobSpec, namespace: str, creation_time: int | None
) -> o.Workload | None:
    labels = meta.labels or {}
    queue = labels.get(QUEUE_LABEL)
    if queue is None:
        return None  # not managed by Kueue
    name = meta.name or ""
    if not queue:
        raise where.error(f"metadata.labels.{QUEUE_LABEL}", "must not be empty")
    parallelism = 1 if spec.parallelism is None else spec.parallelism
    if parallelism < 0:
        raise where.error("spec.parallelism", f"must be greater than or equal to 0, got {parallelism}")
    count = parallelism
    if spec.completions is not None:
        if spec.completions < 0:
            raise where.error("spec.completions", f"must be greater than or equal to 0, got {spec.completions}")
        count = min(count, spec.completions)
    annotations = meta.annotations or {}
    min_count = None
    if MIN_PARALLELISM_ANNOTATION in annotations:
        raw = annotations[MIN_PARALLELISM_ANNOTATION]
        field = f"metadata.annotations.{MIN_PARALLELISM_ANNOTATION}"
        if not raw.isdigit():
            raise where.error(field, f"must be a positive integer, got {raw!r}")
        min_count = int(raw)
        if not 0 < min_count < parallelism:
            raise where.error(field, f"must be greater than 0 and less than spec.parallelism ({parallelism}), got {min_count}")
    pod_set = pod_set_from_template(where, "main", count, min_count, spec.template, "spec.template")
    priority_ref = None
    if labels.get(PRIORITY_CLASS_LABEL):
        priority_ref = o.PriorityRef(source=o.WORKLOAD_PRIORITY_CLASS_SOURCE, name=labels[PRIORITY_CLASS_LABEL])
    elif spec.template.spec.priority_class_name:
        priority_ref = o.PriorityRef(source=o.POD_PRIORITY_CLASS_SOURCE, name=spec.template.spec.priority_class_name)
    uid = meta.uid or hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32]
    wl_name = workload_name_for_job(name, uid)
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
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
    )
