"""The reason a pending workload's ``QuotaReserved=False`` condition carries, as Kueue writes it.

Kueue >= 0.19 (feature gate UnadmittedWorkloadsObservability, beta, on by default) writes a
granular reason chosen where the workload was stopped (``pkg/scheduler/scheduler.go``: the flavor
assigner's NoFit reason, ``WaitingForQuota`` when preemption finds no candidates or the workload
was skipped in the cycle, ``WaitingForPreemptedWorkloads`` while its victims leave, ``Suspended``
for an inactive ClusterQueue; ``pkg/controller/core/workload_controller.go``: ``Misconfigured``
for a missing queue, ``Suspended`` for a stopped LocalQueue). With the gate switched off in the
Configuration, the reasons are the older ``Pending`` and ``Inadmissible``.

Our closed set of pending reasons (``events.messages.PendingReason``) is finer than Kueue's; each
maps to exactly one of Kueue's.
"""

from __future__ import annotations

from typing import Final

from events import objects as o
from events.cluster import PendingConditionReason as Kueue
from events.messages import PendingReason

GRANULAR: Final[dict[PendingReason, Kueue]] = {
    PendingReason.WAITING_FOR_QUOTA: Kueue.WAITING_FOR_QUOTA,
    PendingReason.NO_MATCHING_FLAVOR: Kueue.NO_MATCHING_FLAVOR,
    PendingReason.EXCEEDS_MAX_QUOTA: Kueue.EXCEEDS_MAX_QUOTA,
    PendingReason.MISCONFIGURED: Kueue.MISCONFIGURED,
    PendingReason.NAMESPACE_MISMATCH: Kueue.MISCONFIGURED,  # ValidateAdmissibility failed
    PendingReason.QUEUE_NOT_FOUND: Kueue.MISCONFIGURED,  # a stopped LocalQueue: queue_problem_reason
    PendingReason.ON_HOLD: Kueue.SUSPENDED,  # a stopped ClusterQueue is inactive
    PendingReason.CLUSTER_QUEUE_INACTIVE: Kueue.SUSPENDED,
    PendingReason.PREEMPTION_PENDING: Kueue.WAITING_FOR_PREEMPTED_WORKLOADS,
    PendingReason.PREEMPTION_NOT_ALLOWED: Kueue.WAITING_FOR_QUOTA,  # preemption found no candidates
    PendingReason.SKIPPED_IN_CYCLE: Kueue.WAITING_FOR_QUOTA,  # markSkipped
    PendingReason.BLOCKED_BY_STRICT_FIFO: Kueue.PENDING_EVALUATION,  # never a head yet
    PendingReason.QUEUED: Kueue.PENDING_EVALUATION,
    PendingReason.INACTIVE: Kueue.PENDING_EVALUATION,
    # Held outside the scheduling queue, so never evaluated while they wait: blockAdmission stops
    # Kueue's cycle (waitForPodsReadyIfNeeded), a back-off keeps the workload out of the heap until
    # requeueAt, and a Retry or Rejected check keeps it from being nominated.
    PendingReason.WAITING_FOR_PODS_READY: Kueue.PENDING_EVALUATION,
    PendingReason.BACKING_OFF: Kueue.PENDING_EVALUATION,
    PendingReason.FAILED_ADMISSION_CHECKS: Kueue.PENDING_EVALUATION,
}


def quota_reserved_reason(config: o.Configuration, reason: PendingReason, legacy: Kueue) -> Kueue:
    """The reason Kueue writes for ``reason``; ``legacy`` (``Pending`` or ``Inadmissible``) when
    the Configuration switches UnadmittedWorkloadsObservability off."""
    return GRANULAR[reason] if config.unadmitted_workloads_observability else legacy


def queue_problem_reason(config: o.Configuration, local_queue_stopped: bool) -> Kueue:
    """A workload that cannot queue: its LocalQueue is stopped (``Suspended``) or it names a queue
    that does not lead to a ClusterQueue (``Misconfigured``); ``Inadmissible`` with the gate off."""
    if not config.unadmitted_workloads_observability:
        return Kueue.INADMISSIBLE
    return Kueue.SUSPENDED if local_queue_stopped else Kueue.MISCONFIGURED
