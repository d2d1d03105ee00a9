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
from events.objects import Admission, AdmissionCheckState, AnyObject, PodSetUpdate, ProvisioningRequestPlan


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


class WorkloadActivation(Event, frozen=True, tag="workload.activation"):
    """A Job's Workload says ``spec.active`` (the Job is its source of truth for everything else):
    a user setting it back to true re-activates a workload the scheduler deactivated."""

    namespace: str
    name: str
    active: bool


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


class AdmissionCheckUpdated(Event, frozen=True, tag="workload.admission-check"):
    """An admission check's controller set the check's state on a Workload (its report: the
    provisioning controller, or any other controller through the API)."""

    namespace: str
    name: str
    check: AdmissionCheckState


class ProvisioningRequestCondition(msgspec.Struct, frozen=True, kw_only=True):
    type: str  # Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked
    status: str  # True / False
    message: str = ""


class ProvisioningRequestObserved(Event, frozen=True, tag="provisioning-request.observed"):
    """A ProvisioningRequest's status as seen (the watcher; the simulated autoscaler): which
    workload, check and attempt it serves, its conditions and ``provisioningClassDetails``. The
    scheduler maps it to the check's state as Kueue's provisioning controller does."""

    namespace: str
    name: str
    workload: str
    check: str
    attempt: int
    conditions: tuple[ProvisioningRequestCondition, ...] = ()
    class_details: tuple[tuple[str, str], ...] = ()


class TreeHandOver(Event, frozen=True, tag="shard.hand-over"):
    """The shard map moved the cohort tree whose root is ``root`` to shard ``to_shard``: the shard
    that folds this stops deciding for the tree here and hands its state over
    (``services.core.handover``; ``events.shardmap`` has the protocol). ``handover`` is its id."""

    root: str
    to_shard: int
    handover: str


class TreeAdopted(Event, frozen=True, tag="shard.adopted"):
    """A cohort tree's state as shard ``from_shard`` had it when it folded the hand-over
    ``handover``: the shard that folds this decides for the tree from here. ``state`` is a partial
    scheduler state in the snapshot encoding (``services.core.snapshot``)."""

    root: str
    from_shard: int
    handover: str
    state: msgspec.Raw  # required: a hand-over without its state is no hand-over


ClusterEvent = (
    ObjectApplied
    | ObjectDeleted
    | WorkloadFinished
    | EvictionCompleted
    | ClockTicked
    | PodsReady
    | PodsNotReady
    | WorkloadActivation
    | DecisionApplied
    | ActuationFailed
    | AdmissionCheckUpdated
    | ProvisioningRequestObserved
    | TreeHandOver
    | TreeAdopted
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
    FAILED_ADMISSION_CHECKS = "FailedAdmissionChecks"  # a Retry or Rejected check: not nominated


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
    """Quota reserved. Without ``admission_checks`` the workload is admitted too; with them it
    waits (``Admitted=False``) until every check is Ready (then ``AdmitChecked``)."""

    admission: Admission
    # Left out of the record when there are none (UNSET), so that a decision without checks is
    # written byte for byte as before them and old logs still verify. ``or ()`` reads them.
    admission_checks: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET  # the checks that apply, by name
    provisioning_requests: tuple[ProvisioningRequestPlan, ...] | msgspec.UnsetType = msgspec.UNSET  # to create
    # A scaled-up elastic Job's new slice: the namespace/name of the slice it replaces, which is
    # finished (WorkloadSliceReplaced) by this same decision, so quota is never held twice.
    replaced_slice: str | msgspec.UnsetType = msgspec.UNSET


class AdmitChecked(Decision, frozen=True, tag="admit-checked"):
    """Every admission check of a workload holding quota is Ready: it is admitted now (Kueue's
    ``Admitted=True``), and the checks' podSetUpdates are applied with its flavors."""

    admission: Admission
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    failed_to_start: str = ""  # the podSetUpdates conflict with the flavors: the Job fails to start (Finished)
    admission_checks: tuple[AdmissionCheckState, ...] = ()  # the checks' states, for the Workload's status


class EvictWorkload(Decision, frozen=True, tag="evict"):
    reason: EvictionReason  # Kueue's Evicted reason
    message: str
    preemption_reason: str = ""  # InClusterQueue, InCohortReclamation, ...
    preemptor: str = ""  # namespace/name
    # The workload's ProvisioningRequests to delete (left out when none, as in AdmitWorkload).
    provisioning_requests: tuple[ProvisioningRequestPlan, ...] | msgspec.UnsetType = msgspec.UNSET
    # Its admission checks as the eviction leaves them (reset to Pending, retryCount counted), for
    # the Workload's status; left out when it has none.
    admission_checks: tuple[AdmissionCheckState, ...] | msgspec.UnsetType = msgspec.UNSET


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


class UpdateWorkloadStatus(Decision, frozen=True, tag="workload-status"):
    """Status only: a workload's admission checks or its ``status.requeueState`` changed without
    an admission outcome (a check Pending with a new message or ETA, Ready before the others, Retry
    or Rejected just before the eviction it calls for; a back-off set or over). The actuator writes
    them to the Workload's status as Kueue's controllers do when they change; it admits, evicts and
    reports nothing, and replay changes no state with it (the events already did)."""

    admission_checks: tuple[AdmissionCheckState, ...] = ()  # every check of the workload, by name
    requeue_count: int = 0  # status.requeueState.count (PodsReady timeouts counted)
    requeue_at: int | None = None  # status.requeueState.requeueAt (ms); None: not set


class UpdateLocalQueueFairSharing(Decision, frozen=True, tag="localqueue.fair-sharing"):
    """Status only: a LocalQueue's admission fair sharing usage was sampled (``namespace``/``name``
    name the LocalQueue, not a workload). The actuator writes it to the LocalQueue's
    ``status.fairSharing.admissionFairSharingStatus``, as Kueue's LocalQueue controller does at
    every ``usageSamplingInterval``; nothing is reported back and replay changes no state with it
    beyond remembering it was said (services/core/admissionfair.py)."""

    consumed_resources: tuple[tuple[str, str], ...] = ()  # resource -> quantity (Kubernetes' canonical form)
    last_update: int = 0  # ms: when the usage was last sampled (lastUpdate)


class PlaceWorkload(Decision, frozen=True, tag="multikueue.place"):
    """MultiKueue: a workload holding quota on the manager is placed on one worker cluster, whose
    own ClusterQueue admits it with ``admission`` (the worker's flavors). The check becomes Ready,
    ``status.clusterName`` is ``cluster``; that cluster's actuator runs it there."""

    cluster: str
    check: str
    admission: Admission
    message: str = ""
    # Per podSet, the worker's flavors' node labels and tolerations, for the copy made there.
    pod_set_updates: tuple[PodSetUpdate, ...] = ()


class PlacementWaiting(Decision, frozen=True, tag="multikueue.waiting"):
    """MultiKueue: no worker can admit the workload now; ``message`` says why, per cluster (the
    check stays Pending with this message)."""

    check: str
    message: str
    # Kueue's status.nominatedClusterNames meanwhile: the workers it is being tried on (name order).
    nominated: tuple[str, ...] = ()


class PlacementEnd(StrEnum):
    """Why a MultiKueue placement ends (a closed set)."""

    WORKLOAD_FINISHED = "WorkloadFinished"
    EVICTED_ON_MANAGER = "EvictedOnManager"
    WORKER_LOST = "WorkerLost"  # silent past workerLostTimeout, or its MultiKueueCluster not Active
    CLUSTER_REMOVED = "ClusterRemoved"  # its MultiKueueCluster was deleted
    STALE_COPY = "StaleCopy"  # a worker reports a copy of a workload not placed there (back after being lost)


class RemovePlacement(Decision, frozen=True, tag="multikueue.remove"):
    """MultiKueue: the workload's copy on ``cluster`` goes (its actuator deletes what it created):
    finished, evicted on the manager, or the worker was lost (then the check is Retry and the
    workload is requeued on the manager, to be placed elsewhere)."""

    cluster: str
    check: str
    reason: PlacementEnd
    message: str = ""


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


AnyDecision = (AdmitWorkload | EvictWorkload | DeactivateWorkload | MarkPending | AdmitChecked | UpdateWorkloadStatus
               | PlaceWorkload | PlacementWaiting | RemovePlacement | UpdateLocalQueueFairSharing)
DecisionRecord = (AdmitWorkload | EvictWorkload | DeactivateWorkload | MarkPending | AdmitChecked | UpdateWorkloadStatus
                  | PlaceWorkload | PlacementWaiting | RemovePlacement | UpdateLocalQueueFairSharing | CycleCompleted)
