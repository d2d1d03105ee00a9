"""JobSet (``jobset.x-k8s.io/v1alpha2``): one podSet per replicated Job, named after it, of
``replicas`` (1 when unset) times the Job's pods at once; held by ``spec.suspend``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.jobkinds import readiness
from events.jobkinds.base import (
    JobKind,
    PathPart,
    PodSetSource,
    conditions_finished,
    count,
    mapping,
    pod_set_name,
    pod_template,
    pods,
    sequence,
    text,
)
from events.jobkinds.batch import job_pod_count
from events.podspec import Where


def _pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    jobs = sequence(where, spec.get("replicatedJobs"), ("spec", "replicatedJobs"))
    if not jobs:
        raise where.error("spec.replicatedJobs", "must have at least 1 item")
    out: list[PodSetSource] = []
    for i, raw in enumerate(jobs):
        at: tuple[PathPart, ...] = ("spec", "replicatedJobs", i)
        rj = mapping(where, raw, at)
        name = pod_set_name(where, text(where, rj.get("name"), (*at, "name"), required=True), (*at, "name"))
        replicas = count(where, rj.get("replicas"), (*at, "replicas"), 1)
        job_spec = mapping(where, mapping(where, rj.get("template"), (*at, "template"), required=True).get("spec"),
                           (*at, "template", "spec"), required=True)
        per_replica = job_pod_count(where, job_spec, (*at, "template", "spec"))
        path = (*at, "template", "spec", "template")
        total = pods(where, (replicas, per_replica), (*at, "replicas"), "replicas x the Job's pods at once")
        out.append(PodSetSource(name, total, pod_template(where, job_spec.get("template"), path), path))
    return out


JOBSET = JobKind(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet", plural="jobsets",
                 suspend_path=("spec", "suspend"), pod_sets=_pod_sets,
                 finished=conditions_finished("Completed", "Failed"), pods_ready=readiness.jobset)
