"""A running elastic Job scaled: its Workload republished with the new podSet counts.

A running Job is frozen for the watcher (``Translation.frozen``): Kueue does not take a started
Job's spec into its Workload, and the actuator's injected scheduling must not flow back. Kueue's
workload slices (ElasticJobsViaWorkloadSlices) make one exception: a Job annotated
``kueue.x-k8s.io/elastic-job: "true"`` that lowers ``spec.parallelism`` has its admitted
Workload's podSet counts lowered in place (``EnsureWorkloadSlices``), so the quota its gone pods
held is released (services/core/slices.py); scaled up, Kueue makes a new workload slice that
replaces the admitted one once admitted, which the scheduler's fold does when the counts grow
(services/core/scaleup.py). The Workload published for it is the one published before, with only
the counts changed, so nothing else of the running Job's spec flows back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from events import objects as o
from events.cluster import ELASTIC_JOB_ANNOTATION

__all__ = ["ELASTIC_JOB_ANNOTATION", "is_elastic", "rescaled_workload"]


def is_elastic(meta: Mapping[str, Any]) -> bool:
    annotations = meta.get("annotations")
    return isinstance(annotations, Mapping) and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"


def rescaled_workload(published: bytes, now: o.Workload) -> o.Workload | None:
    """The Workload ``published`` before with ``now``'s podSet counts, if ``now`` has the same
    podSets with other counts (Kueue's ``EnsureWorkloadSlices`` takes only count changes)."""
    try:
        before = msgspec.json.decode(published, type=o.Workload)
    except msgspec.DecodeError:
        return None
    old = {ps.name: ps.count for ps in before.pod_sets}
    new = {ps.name: ps.count for ps in now.pod_sets}
    if sorted(old) != sorted(new) or old == new:
        return None
    counts = {ps.name: ps.count for ps in now.pod_sets}
    return msgspec.structs.replace(before, pod_sets=tuple(
        msgspec.structs.replace(ps, count=counts[ps.name],
                                min_count=None if ps.min_count is None else min(ps.min_count, counts[ps.name]))
        for ps in before.pod_sets))
