"""The on-cluster contract: every name kueuelog reads or writes on a Kubernetes object.

This module owns, once each:

- the API group and version of Kueue's kinds as we address them on a cluster;
- the label and annotation keys, Kueue's (``kueue.x-k8s.io/...``, which users write and
  Kueue's own controllers would read) and ours (``kueuelog.io/...``, the actuator's and the
  job reconciler's bookkeeping on a Job, the simulated cluster's run time, the pending
  reason rendered on a Workload);
- the Workload condition types and the reasons Kueue writes with them, the eviction and
  preemption reasons, and the ``batch/v1`` Job condition types we read, as ``StrEnum``
  closed sets (a member is its string, so what reaches a cluster or the log is unchanged).

The conditions themselves are built in :mod:`events.conditions`. This module imports
nothing of ours, so every other module of the contract may import it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# --- API groups and versions ----------------------------------------------------------------------

KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_CONFIG_GROUP: Final = "config.kueue.x-k8s.io"
KUEUE_VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"
"""Kueue's visibility API (pending workloads in order), which ``kueuelog serve`` answers."""
KUEUE_VERSION: Final = "v1beta1"
"""The version ``simulate`` renders a Workload at when its input says no other (a v1beta1 input).
The watcher reads, and the actuator and the job reconciler write, at our CRDs' storage version
instead, :data:`events.kueue_versions.STORAGE_VERSION` (docs/crds.md)."""
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"

WORKLOAD_PRIORITY_CLASS_SOURCE: Final = f"{KUEUE_GROUP}/workloadpriorityclass"
"""A Workload's ``spec.priorityClassSource`` when its priority comes from a WorkloadPriorityClass."""
POD_PRIORITY_CLASS_SOURCE: Final = "scheduling.k8s.io/priorityclass"
"""... and when it comes from a (pod) PriorityClass."""

# --- Kueue's labels and annotations ---------------------------------------------------------------

QUEUE_NAME_LABEL: Final = f"{KUEUE_GROUP}/queue-name"
"""On a Job (or Workload): the LocalQueue it is submitted to; a Job without it is not Kueue's."""
PRIORITY_CLASS_LABEL: Final = f"{KUEUE_GROUP}/priority-class"
"""On a Job: the WorkloadPriorityClass its Workload takes its priority from."""
MAX_EXEC_TIME_LABEL: Final = f"{KUEUE_GROUP}/max-exec-time-seconds"
"""On a Job: its Workload's spec.maximumExecutionTimeSeconds."""
MIN_PARALLELISM_ANNOTATION: Final = f"{KUEUE_GROUP}/job-min-parallelism"
"""On a Job: the least parallelism it accepts (partial admission)."""
ELASTIC_JOB_ANNOTATION: Final = f"{KUEUE_GROUP}/elastic-job"
"""On a Job, ``"true"``: an elastic Job (ElasticJobsViaWorkloadSlices); scaled down while admitted,
its Workload's counts shrink in place (services/watcher/elastic.py, services/core/slices.py); scaled
up, a new workload slice replaces it once admitted (services/core/scaleup.py)."""
WORKLOAD_SLICE_REPLACEMENT_FOR: Final = f"{KUEUE_GROUP}/workload-slice-replacement-for"
"""On a Workload: the ``namespace/name`` of the admitted workload slice it replaces once admitted
(a scaled-up elastic Job's new slice; services/core/scaleup.py)."""
WORKLOAD_SLICE_NAME_ANNOTATION: Final = f"{KUEUE_GROUP}/workload-slice-name"
"""On a workload slice: the name of the first slice of its chain (Kueue's ``SliceName``)."""
JOB_UID_LABEL: Final = f"{KUEUE_GROUP}/job-uid"
"""On a Workload the job reconciler creates: the uid of the Job that owns it."""
PREBUILT_WORKLOAD_LABEL: Final = f"{KUEUE_GROUP}/prebuilt-workload-name"
"""On a Job (or another workload kind), label or (past 63 characters) annotation: the existing
Workload it runs under instead of one created for it."""
TRAINJOB_RUNTIME_PATCH_MANAGER: Final = f"{KUEUE_GROUP}/manager"
"""The ``manager`` of Kueue's own entry in a TrainJob's ``spec.runtimePatches`` (its admission)."""
PROVISIONING_ANNOTATION_PREFIX: Final = f"provreq.{KUEUE_GROUP}/"
"""Annotations of a Job with this prefix are copied to its Workload (ProvisioningRequest parameters)."""
PROVISIONING_CONTROLLER: Final = f"{KUEUE_GROUP}/provisioning-request"
"""An AdmissionCheck's ``spec.controllerName`` for Kueue's ProvisioningRequest admission check."""
MANAGED_BY_LABEL: Final = f"{KUEUE_GROUP}/managed-by"
"""On the ProvisioningRequests and PodTemplates made for admission checks: ``kueue``, as Kueue labels them."""
PROVISIONING_CONSUME_ANNOTATION: Final = "autoscaling.x-k8s.io/consume-provisioning-request"
"""On the pods of a provisioned podSet: the ProvisioningRequest whose capacity they consume."""
PROVISIONING_CLASS_ANNOTATION: Final = "autoscaling.x-k8s.io/provisioning-class-name"
"""On the pods of a provisioned podSet: that request's provisioning class."""
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
"""The label every Namespace carries with its own name (what a namespaceSelector sees at least)."""

# --- kueuelog's labels and annotations ------------------------------------------------------------

KUEUELOG_PREFIX: Final = "kueuelog.io/"

DECISION_ID_ANNOTATION: Final = f"{KUEUELOG_PREFIX}decision-id"
"""On a Job: the id of the actuator's last decision applied to it (admission or eviction)."""
DECISION_CYCLE_ANNOTATION: Final = f"{KUEUELOG_PREFIX}decision-cycle"
"""On a Job: the cycle of that decision, so that an older decision never undoes a newer one."""
EVICTED_ANNOTATION: Final = f"{KUEUELOG_PREFIX}evicted"
"""On a Job the actuator suspended for an eviction: the eviction's decision id."""
TRAINJOB_RUNTIME_KEY: Final = f"{KUEUELOG_PREFIX}runtime"
"""Not a label: the key under which a reader puts a TrainJob's resolved runtime in its body
(``events.jobkinds.trainjob``); never a field of an object on a cluster."""
ORIGINAL_POD_SCHEDULING_ANNOTATION: Final = f"{KUEUELOG_PREFIX}original-pod-scheduling"
"""On a Job while its pod template carries the flavors' nodeSelector and tolerations: the
template's own ones (JSON), restored after an eviction."""
PENDING_REASON_ANNOTATION: Final = f"{KUEUELOG_PREFIX}pending-reason"
"""On a pending Workload: our closed-set reason (``events.messages.PendingReason``), written with the
actuator's pending mark."""
ACTUATION_ANNOTATIONS: Final = frozenset({
    DECISION_ID_ANNOTATION, DECISION_CYCLE_ANNOTATION, EVICTED_ANNOTATION, ORIGINAL_POD_SCHEDULING_ANNOTATION,
    PENDING_REASON_ANNOTATION,
})
"""The actuator's bookkeeping on a Job or a Workload: not the user's object, so not part of its
Workload (a pending mark on a Workload nothing owns is no news to the scheduler)."""
REJECTED_LABEL: Final = f"{KUEUELOG_PREFIX}rejected"
"""On a queued Job created running that the job reconciler's ``reject`` policy refused ("true"):
it runs outside quota and is not queued."""
REJECTION_ANNOTATION: Final = f"{KUEUELOG_PREFIX}rejection"
"""... and why it was refused."""
T9K_ALLOCATED_ANNOTATION: Final = f"{KUEUELOG_PREFIX}t9k-allocated"
"""On the Workload ``simulate`` makes of a T9k Queue's ``status.allocated`` (``events.t9k``)."""
PENDING_MESSAGE_ANNOTATION: Final = f"{KUEUELOG_PREFIX}pending-message"
"""On a pending workload in the visibility API's answer: why it waits, with the numbers."""
SIM_DURATION_ANNOTATION: Final = f"{KUEUELOG_PREFIX}sim-duration"
"""On a Workload (or its Job) in the simulated cluster: how long it runs once admitted."""
ADMISSION_GATE: Final = f"{KUEUE_GROUP}/admission"
"""The scheduling gate that holds a pod until its Workload is admitted (Kueue's pod integration's)."""
# Kueue's pod integration (pods, pod groups, serving kinds: events/jobkinds/pods.py, serving.py).
POD_GROUP_NAME_LABEL: Final = f"{KUEUE_GROUP}/pod-group-name"
"""On a pod: the group it belongs to (also read as an annotation)."""
POD_GROUP_TOTAL_COUNT_ANNOTATION: Final = f"{KUEUE_GROUP}/pod-group-total-count"
POD_GROUP_FAST_ADMISSION_ANNOTATION: Final = f"{KUEUE_GROUP}/pod-group-fast-admission"
POD_GROUP_SERVING_ANNOTATION: Final = f"{KUEUE_GROUP}/pod-group-serving"
ROLE_HASH_ANNOTATION: Final = f"{KUEUE_GROUP}/role-hash"
RETRIABLE_IN_GROUP_ANNOTATION: Final = f"{KUEUE_GROUP}/retriable-in-group"
IS_GROUP_WORKLOAD_ANNOTATION: Final = f"{KUEUE_GROUP}/is-group-workload"
POD_SUSPENDING_PARENT_ANNOTATION: Final = f"{KUEUE_GROUP}/pod-suspending-parent"
MANAGED_LABEL: Final = f"{KUEUE_GROUP}/managed"
ELASTIC_QUOTA_TREE_LABEL: Final = f"{KUEUELOG_PREFIX}elastic-quota-tree"
"""On a Kueue object the actuator keeps for ACK's ElasticQuotaTree: the tree's name
(``services/actuator/tree_reconciler.py``)."""
RECLAIM_WITHIN_ANNOTATION: Final = f"{KUEUELOG_PREFIX}reclaim-within"
"""On a ClusterQueue: ``NominalQuota`` = reclaim in the cohort tree only for a workload that fits in
its own nominal quota (ACK's rule for an ElasticQuotaTree leaf, ``events/elasticquota.py``)."""
SIM_READY_AFTER_ANNOTATION: Final = f"{KUEUELOG_PREFIX}sim-ready-after"
# MultiKueue (services.core.placement): the AdmissionCheck controller Kueue names, the annotation
# that marks an object of ``simulate``'s input as a worker cluster's, the MultiKueueConfig's
# placement policy, and the node label the simulated workers' flavors carry.
MULTIKUEUE_CONTROLLER: Final = f"{KUEUE_GROUP}/multikueue"
CLUSTER_ANNOTATION: Final = f"{KUEUELOG_PREFIX}cluster"
PLACEMENT_POLICY_ANNOTATION: Final = f"{KUEUELOG_PREFIX}placement-policy"
SIM_WORKER_LABEL: Final = f"{KUEUELOG_PREFIX}worker"
# (PREBUILT_WORKLOAD_LABEL, above: the copy of a placed Job on its worker carries the manager's
# Workload name in it.)
MULTIKUEUE_ORIGIN_LABEL: Final = f"{KUEUE_GROUP}/multikueue-origin"  # on a worker's copy: made by MultiKueue
"""On a Workload (or its Job) in a simulated cluster: how long after each start its pods become ready
(a duration), or ``never``: a gang whose pods never all start."""


# --- conditions -----------------------------------------------------------------------------------


class ConditionType(StrEnum):
    """The Workload condition types Kueue writes (``apis/kueue/v1beta1/workload_types.go``)."""

    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    PREEMPTED = "Preempted"
    REQUEUED = "Requeued"
    FINISHED = "Finished"
    PODS_READY = "PodsReady"


class ConditionReason(StrEnum):
    """The fixed reasons written with those conditions (eviction and preemption reasons are
    :class:`EvictionReason` and :class:`PreemptionReason`)."""

    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    PENDING = "Pending"
    INADMISSIBLE = "Inadmissible"
    NO_RESERVATION = "NoReservation"
    UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"  # Kueue >= 0.19 (UnadmittedWorkloadsObservability)
    REQUEUED = "Requeued"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PODS_READY = "PodsReady"
    SLICE_REPLACED = "WorkloadSliceReplaced"  # Finished: an elastic Job's newer slice took its place
    OUT_OF_SYNC = "OutOfSync"  # Finished: a workload slice (or prebuilt Workload) out of sync with its Job


class PendingConditionReason(StrEnum):
    """The reason of ``QuotaReserved=False``. Kueue >= 0.19 writes a granular reason
    (UnadmittedWorkloadsObservability, beta, on: ``apis/kueue/v1beta2/workload_types.go``);
    with that gate off it writes ``Pending``, or ``Inadmissible`` when the workload cannot queue
    at all (no queue, an inactive ClusterQueue). services/core/reasons.py chooses."""

    PENDING = ConditionReason.PENDING.value
    INADMISSIBLE = ConditionReason.INADMISSIBLE.value
    WAITING_FOR_QUOTA = "WaitingForQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    MISCONFIGURED = "Misconfigured"
    SUSPENDED = "Suspended"
    PENDING_EVALUATION = "PendingEvaluation"


class ConditionStatus(StrEnum):
    """A condition's status (Kubernetes' ``metav1.ConditionStatus``; we never write ``Unknown``)."""

    TRUE = "True"
    FALSE = "False"


class EvictionReason(StrEnum):
    """Why a workload is evicted: the reason of its ``Evicted`` condition, as Kueue names it."""

    PREEMPTED = "Preempted"
    PODS_READY_TIMEOUT = "PodsReadyTimeout"
    ADMISSION_CHECK = "AdmissionCheck"
    CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
    LOCAL_QUEUE_STOPPED = "LocalQueueStopped"
    DEACTIVATED = "Deactivated"  # spec.active is false; with an underlying cause, "DeactivatedDueTo<cause>"
    MAX_DURATION_EXCEEDED = "MaxDurationExceeded"  # T9k Queue's spec.maxDuration (events.t9k); requeued


class DeactivationCause(StrEnum):
    """Why the scheduler deactivated a workload (Kueue's ``DeactivationTarget`` reasons): the
    underlying cause of its ``Deactivated`` eviction."""

    REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
    MAXIMUM_EXECUTION_TIME_EXCEEDED = "MaximumExecutionTimeExceeded"
    ADMISSION_CHECK = "AdmissionCheck"


class RequeuedReason(StrEnum):
    """Reasons of ``Requeued=True`` that are not an eviction's (Kueue's workload controller)."""

    REACTIVATED = "Reactivated"
    BACKOFF_FINISHED = "BackoffFinished"


class PreemptionReason(StrEnum):
    """The reason of a victim's ``Preempted`` condition (Kueue's ``pkg/scheduler/preemption``)."""

    IN_CLUSTER_QUEUE = "InClusterQueue"
    IN_COHORT_RECLAMATION = "InCohortReclamation"
    IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
    IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


class JobConditionType(StrEnum):
    """The ``batch/v1`` Job conditions that say it ended."""

    COMPLETE = "Complete"
    FAILED = "Failed"
