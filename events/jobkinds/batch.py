"""``batch/v1`` Job: one podSet ``main`` of min(parallelism, completions) pods, held by
``spec.suspend``. The Workload of a Job is still built by :mod:`events.jobs` (partial admission,
T9k Queues); this entry gives the framework the Job's shape, and the pod count JobSet shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.jobkinds.base import (
    JobKind,
    PathPart,
    PodSetSource,
    conditions_finished,
    count,
    mapping,
    pod_template,
)
from events.podspec import Where


def job_pod_count(where: Where, spec: Mapping[str, Any], path: tuple[PathPart, ...]) -> int:
    """A Job's pods at once: ``parallelism`` (1 when unset) capped by ``completions``."""
    parallelism = count(where, spec.get("parallelism"), (*path, "parallelism"), 1)
    completions = count(where, spec.get("completions"), (*path, "completions"), parallelism)
    return min(parallelism, completions)


def _pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    spec = mapping(where, body.get("spec"), ("spec",))
    path: tuple[PathPart, ...] = ("spec", "template")
    return [PodSetSource("main", job_pod_count(where, spec, ("spec",)), pod_template(where, spec.get("template"), path),
                         path)]


JOB = JobKind(group="batch", version="v1", kind="Job", plural="jobs", suspend_path=("spec", "suspend"),
              pod_sets=_pod_sets, finished=conditions_finished("Complete", "Failed"))
