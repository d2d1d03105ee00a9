"""Elastic Jobs scaled down in place, as Kueue's workload slices do (ElasticJobsViaWorkloadSlices).

A Job annotated ``kueue.x-k8s.io/elastic-job: "true"`` may change ``spec.parallelism`` while it
runs. Scaled down, Kueue updates the admitted workload's podSet counts in place
(``EnsureWorkloadSlices`` in ``pkg/workloadslicing``) and leaves ``status.admission`` as it was;
its cache then counts each podSet's admitted usage scaled to the new count
(``totalRequestsFromAdmission`` and ``PodSetResources.ScaledTo`` in ``pkg/workload/workload.go``:
usage divided by the admitted count, times the new one), so the quota freed is available to the
next cycle. This module holds that arithmetic; the fold applies it (``state.py``).

Scaling up an admitted elastic Job makes a new workload slice that replaces the old one once
admitted: services/core/scaleup.py.
"""

from __future__ import annotations

from events import objects as o


def scaled_usage(psa: o.PodSetAssignment, count: int) -> tuple[tuple[str, int], ...]:
    """``psa``'s resource usage for ``count`` pods: as admitted unless ``count`` is below the
    admitted count (Kueue's ScaledTo: integer division by the admitted count, then times the new)."""
    if psa.count == 0 or count >= psa.count:
        return psa.resource_usage
    return tuple((res, amount // psa.count * count) for res, amount in psa.resource_usage)


def scaled_down(before: tuple[o.PodSet, ...], after: tuple[o.PodSet, ...]) -> bool:
    """Kueue's ``ScaledDown``: the same podSets, none larger and at least one smaller."""
    old = {ps.name: ps.count for ps in before}
    new = {ps.name: ps.count for ps in after}
    if sorted(old) != sorted(new):
        return False
    return all(new[k] <= old[k] for k in old) and any(new[k] < old[k] for k in old)
