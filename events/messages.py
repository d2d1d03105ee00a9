"""Cluster events and scheduler decisions: the facts and commands that cross processes.

Events are past-tense facts, folded in order by the scheduler; decisions are
what a scheduling cycle concluded. Every concrete class has an explicit, stable
wire tag (never its class name). New fields only with defaults; a breaking
change is a new tag plus an upcast in ``events.codec``.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from events.cluster import ConditionStatus, ConditionType, EvictionReason, PendingConditionReason
from events.objects import Admission, AnyObject


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A fact about the world. ``time`` is when it happened (ms since the epoch)."""

    time: int = 0


class ObjectApplied(Event, frozen=True, tag="object.applied"):
    """An object was created or updated (a manifest applied, a watch event)."""

    object: AnyObject


class ObjectDeleted(Event, frozen=True, tag="object.deleted"):
    kind: str
    name: str
    namespace: str = ""


class WorkloadFinished(Event, frozen=True, tag="workload.finished"):
    namespace: str
    name: str
    succeeded: bool = True
    message: str = ""


class EvictionCompleted(Event, frozen=True, tag="workload.eviction-completed"):
    """The actuator stopped an evicted workload's pods: its quota is released."""

    namespace: str
    name: str


class ClockTicked(Event, frozen=True, tag="clock.ticked"):
    """Time passed with nothing else happening."""


class PodsReady(Event, frozen=True, tag="workload.pods-ready"):
    """All pods of an admitted workload are running (or succeeded)."""

    namespace: str
    name: str


class PodsNotReady(Event, frozen=True, tag="workload.pods-not-ready"):
    """A pod of an admitted workload whose pods were all ready is no longer ready (it failed or was
    lost): the workload waits for recovery (waitForPodsReady's ``recoveryTimeout``)."""

    namespace: str
    name: str


class DecisionApplied(Event, frozen=True, tag="actuation.applied"):
    """An actuator applied a decision to its cluster."""

    decision_id: str
    namespace: str
    name: str
    cluster: str = ""


class ActuationFailed(Event, frozen=True, tag="actuation.failed"):
    """An actuator could not apply a decision (after its retries, or not retriable)."""

    decision_id: str
    namespace: str
    name: str
    error: str
    retriable: bool = False
    cluster: str = ""


ClusterEvent = (
    ObjectApplied
    | ObjectDeleted
    | WorkloadFinished
    | EvictionCompleted
    | ClockTicked
    | PodsReady
    | PodsNotReady
    | DecisionApplied
    | ActuationFailed
)


class Condition(msgspec.Struct, frozen=True, kw_only=True):
    """A Kueue Workload condition as Kueue writes it."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: int = 0


class PendingReason(StrEnum):
    """Why a workload is not admitted: a closed set for explain, metrics and UIs."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    MISCONFIGURED = "Misconfigured"
    ON_HOLD = "OnHold"
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    QUEUE_NOT_FOUND = "QueueNotFound"
    CLUSTER_QUEUE_INACTIVE = "ClusterQueueInactive"
    BLOCKED_BY_STRICT_FIFO = "BlockedByStrictFIFO"
    QUEUED = "Queued"  # not looked at by a cycle yet
    PREEMPTION_PENDING = "PreemptionPending"
    PREEMPTION_NOT_ALLOWED = "PreemptionNotAllowed"
    SKIPPED_IN_CYCLE = "SkippedInCycle"
    INACTIVE = "Inactive"
    WAITING_FOR_PODS_READY = "WaitingForPodsReady"  # blockAdmission: an admitted workload is not ready yet
    BACKING_OFF = "BackingOff"  # evicted after a PodsReady timeout, waiting for status.requeueState.requeueAt


class Decision(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """What a cycle decided. ``id`` is deterministic (cycle number + index) for dedup;
    ``time`` is the scheduler's clock when it decided (the newest event time folded)."""

    id: str
    cycle: int
    namespace: str
    name: str
    cluster_queue: str = ""
    time: int = 0


class AdmitWorkload(Decision, frozen=True, tag="admit"):
    admission: Admission


class EvictWorkload(Decision, frozen=True, tag="evict"):
    reason: EvictionReason  # Kueue's Evicted reason
    message: str
    preemption_reason: str = ""  # InClusterQueue, InCohortReclamation, ...
    preemptor: str = ""  # namespace/name


class DeactivateWorkload(EvictWorkload, frozen=True, tag="evict.deactivate"):
    """An eviction (reason ``Deactivated``) that also deactivates the workload: the actuator sets
    ``spec.active=false``, and it is not requeued until spec.active is set back to true. Every
    consumer of evictions handles it as one (it is an ``EvictWorkload``)."""

    # The scheduler's cause (``DeactivationCause``), written into the Evicted reason as Kueue
    # writes it ("DeactivatedDueTo<cause>"); empty when a user set spec.active=false.
    underlying_cause: str = ""


class MarkPending(Decision, frozen=True, tag="pending"):
    reason: PendingReason
    message: str
    inadmissible: bool = False
    condition_reason: PendingConditionReason = PendingConditionReason.PENDING  # of Kueue's QuotaReserved=False


class HeadOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one head of a cycle that was not admitted: back in its queue or parked,
    whether it keeps the head as a preemptor, and where its flavor search resumes."""

    key: str
    cluster_queue: str
    parked: bool = False
    sticky: bool = False
    last_tried: tuple[tuple[int, int, int], ...] | None = None  # (podSet, resource group, flavor index)


class CycleCompleted(msgspec.Struct, frozen=True, kw_only=True, tag="cycle", tag_field="type"):
    """The last record of every cycle: which input it was computed at, and what became of the
    heads it did not admit. Replay folds the input log up to ``input_offset`` and applies the
    cycle's decisions and head outcomes; ``--verify`` runs the cycle again and compares."""

    cycle: int
    input_offset: int
    time: int
    decisions: int
    admitted_heads: tuple[str, ...] = ()
    heads: tuple[HeadOutcome, ...] = ()


AnyDecision = AdmitWorkload | EvictWorkload | DeactivateWorkload | MarkPending
DecisionRecord = AdmitWorkload | EvictWorkload | DeactivateWorkload | MarkPending | CycleCompleted
