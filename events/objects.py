"""The internal, version-free objects the scheduler folds.

Every manifest the product accepts (Kueue v1beta1/v1beta2, v1alpha1 Cohort, a
``batch/v1`` Job, a Namespace, ...) is normalised into one of these Structs at
the edge (``events.manifests``). They are what cluster events carry, what the
fold stores and what snapshots encode; they are frozen so that state can share
them freely, and quantities inside them are already integers.

Later front ends (ElasticQuotaTree, T9k Queue, several clusters) translate into
the same objects, which is why nothing here names a Kueue API version.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NewType

import msgspec

Millis = NewType("Millis", int)
"""Time in milliseconds since the Unix epoch; the only clock the core knows."""

WorkloadKey = NewType("WorkloadKey", str)
"""``namespace/name`` of a Workload: the unique id used for ordering and dedup."""


class QueueingStrategy(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class StopPolicy(StrEnum):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class WithinClusterQueue(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class WhenCanBorrow(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class WhenCanPreempt(StrEnum):
    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(StrEnum):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class _Obj(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class _Kind(_Obj, frozen=True, tag_field="kind"):
    """A top-level object; its Kubernetes kind is its wire tag."""


class Requirement(_Obj, frozen=True):
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (Gt, Lt for node selectors)
    values: tuple[str, ...] = ()


class LabelSelector(_Obj, frozen=True):
    """A label selector. ``matches_nothing`` is Kueue's null selector."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()
    matches_nothing: bool = False


class Taint(_Obj, frozen=True):
    key: str
    value: str = ""
    effect: str = ""


class Toleration(_Obj, frozen=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class ResourceFlavor(_Kind, frozen=True, tag="ResourceFlavor"):
    name: str
    node_labels: tuple[tuple[str, str], ...] = ()
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class Quota(_Obj, frozen=True):
    nominal: int
    borrowing_limit: int | None = None  # None: unlimited
    lending_limit: int | None = None  # None: everything can be lent


class FlavorQuotas(_Obj, frozen=True):
    name: str
    resources: tuple[tuple[str, Quota], ...]


class ResourceGroup(_Obj, frozen=True):
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


class PreemptionPolicy(_Obj, frozen=True):
    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    borrow_max_priority_threshold: int | None = None
    # kueuelog's extension (annotation kueuelog.io/reclaim-within: NominalQuota, events/elasticquota.py):
    # reclaim in the cohort tree only for a workload that fits in the ClusterQueue's own nominal quota.
    reclaim_within_nominal: bool = False


class FlavorFungibility(_Obj, frozen=True):
    when_can_borrow: WhenCanBorrow = WhenCanBorrow.MAY_STOP_SEARCH
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


class T9kQueue(_Obj, frozen=True):
    """A T9k Scheduler ``Queue``'s own fields, kept on the ClusterQueue it maps to (``events.t9k``):
    what the engine needs (priority, preemptible) and what admission at creation needs."""

    priority: int = 0  # 0..100; higher is served first and may preempt lower queues
    preemptible: bool = False  # Go's zero value: a Queue that does not say so is not preempted
    closed: bool = False
    max_duration_ms: int | None = None
    node_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    quota: tuple[tuple[str, int], ...] = ()  # spec.quota.requests
    allocated: tuple[tuple[str, int], ...] = ()  # status.allocated as the manifest gave it
    resource_shape_profile: str = ""


class ClusterQueue(_Kind, frozen=True, tag="ClusterQueue"):
    name: str
    cohort: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    namespace_selector: LabelSelector = LabelSelector(matches_nothing=True)
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = PreemptionPolicy()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    stop_policy: StopPolicy = StopPolicy.NONE
    admission_checks: tuple[str, ...] = ()
    fair_sharing_weight: int = 1000  # milli-units; Kueue's default weight is 1
    t9k: T9kQueue | None = None  # set only for a ClusterQueue made from a T9k Queue
    # admissionChecksStrategy rules with onFlavors: (check, flavors); a check not listed here
    # applies whatever the flavors (services.core.checks.checks_for).
    admission_check_flavors: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # spec.admissionScope.admissionMode UsageBasedAdmissionFairSharing: its LocalQueues take turns
    # by their decayed usage (services.core.admissionfair), when the Configuration has the block.
    admission_fair_sharing: bool = False


class Cohort(_Kind, frozen=True, tag="Cohort"):
    name: str
    parent: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_sharing_weight: int = 1000


class LocalQueue(_Kind, frozen=True, tag="LocalQueue"):
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = StopPolicy.NONE
    fair_sharing_weight: int = 1000  # spec.fairSharing.weight in milli-units (admission fair sharing)
    # status.fairSharing.admissionFairSharingStatus.consumedResources in nano-units, by resource:
    # the usage history a LocalQueue brings (from Kueue, say), which seeds admission fair sharing.
    afs_consumed: tuple[tuple[str, int], ...] = ()


class WorkloadPriorityClass(_Kind, frozen=True, tag="WorkloadPriorityClass"):
    name: str
    value: int


class PriorityClass(_Kind, frozen=True, tag="PriorityClass"):
    name: str
    value: int
    global_default: bool = False


class Namespace(_Kind, frozen=True, tag="Namespace"):
    name: str
    labels: tuple[tuple[str, str], ...] = ()


class AdmissionCheck(_Kind, frozen=True, tag="AdmissionCheck"):
    name: str
    controller_name: str = ""
    parameters_kind: str = ""
    parameters_name: str = ""
    parameters_api_group: str = ""
    active: bool | None = None  # status.conditions Active as written; None: not stated (derived)


class PlacementPolicy(StrEnum):
    """How a MultiKueueConfig's clusters are tried (kueuelog's choice; Kueue has one order)."""

    ORDERED = "Ordered"  # spec.clusters order: the first worker that can admit now (Kueue's preference order)
    MOST_FREE_QUOTA = "MostFreeQuota"  # the worker whose queue has the most unused quota left after it


class MultiKueueConfig(_Kind, frozen=True, tag="MultiKueueConfig"):
    """Kueue's MultiKueueConfig: the worker clusters an AdmissionCheck may place on, preferred first."""

    name: str
    clusters: tuple[str, ...] = ()
    policy: PlacementPolicy = PlacementPolicy.ORDERED  # annotation kueuelog.io/placement-policy


class MultiKueueCluster(_Kind, frozen=True, tag="MultiKueueCluster"):
    """Kueue's MultiKueueCluster: how the manager reaches one worker (a kubeconfig in a Secret or at
    a path). Its name is the cluster name the worker's watcher and actuator publish under."""

    name: str
    location_type: str = "Secret"  # Secret | Path
    location: str = ""
    active: bool | None = None  # status.conditions Active as written; None: not stated


class ProvisioningRequestConfig(_Kind, frozen=True, tag="ProvisioningRequestConfig"):
    name: str
    provisioning_class_name: str = ""
    managed_resources: tuple[str, ...] = ()
    parameters: tuple[tuple[str, str], ...] = ()
    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800
    pod_set_merge_policy: str = ""
    # podSetUpdates.nodeSelector: (node label key, key of the ProvisioningRequest's provisioningClassDetails)
    node_selector_updates: tuple[tuple[str, str], ...] = ()


class ProvisioningRequestPodSet(_Obj, frozen=True):
    pod_set: str  # the Workload's podSet (the first of those merged into it)
    pod_template: str  # the PodTemplate's name (``ppt-<request>-<podSet>``)
    count: int


class ProvisioningRequestPlan(_Obj, frozen=True):
    """A ProvisioningRequest to create for a workload's provisioning check (Kueue's controller,
    ``pkg/controller/admissionchecks/provisioning``): named ``<workload>-<check>-<attempt>``."""

    name: str
    check: str
    attempt: int
    provisioning_class_name: str
    parameters: tuple[tuple[str, str], ...] = ()
    pod_sets: tuple[ProvisioningRequestPodSet, ...] = ()


class CheckState(StrEnum):
    """An admission check's state on a Workload (Kueue's ``CheckState``)."""

    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class PodSetUpdate(_Obj, frozen=True):
    """What a Ready admission check asks to be merged into a podSet's pod template."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


class AdmissionCheckState(_Obj, frozen=True):
    """One entry of a Workload's ``status.admissionChecks``."""

    name: str
    state: CheckState = CheckState.PENDING
    message: str = ""
    last_transition_time: int = 0  # Millis
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    retry_count: int = 0
    requeue_after_seconds: int | None = None


class ResourceTransformation(_Obj, frozen=True):
    """Kueue's ``resources.transformations`` entry, defaulted (strategy Retain); each output's
    factor per unit of input is an exact fraction (numerator, denominator)."""

    input: str
    strategy: str = "Retain"  # or "Replace"
    multiply_by: str = ""
    outputs: tuple[tuple[str, int, int], ...] = ()  # (resource, numerator, denominator), by resource


class Configuration(_Kind, frozen=True, tag="Configuration"):
    """The knobs of Kueue's Configuration that change decisions."""

    fair_sharing: bool = False
    fair_sharing_strategies: tuple[str, ...] = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
    wait_for_pods_ready: bool = False
    wait_for_pods_ready_timeout_ms: int = 300_000
    wait_for_pods_ready_block_admission: bool = False
    # None: the timeout, as Kueue defaults recoveryTimeout (apis/config/*/defaults.go).
    wait_for_pods_ready_recovery_timeout_ms: int | None = None
    requeuing_timestamp: str = "Eviction"  # or "Creation": the queue order of a workload requeued after a timeout
    requeuing_backoff_limit_count: int | None = None  # None: requeued for ever
    requeuing_backoff_base_seconds: int = 60
    requeuing_backoff_max_seconds: int = 3600
    exclude_resource_prefixes: tuple[str, ...] = ()
    resource_transformations: tuple[ResourceTransformation, ...] = ()  # in the Configuration's order
    # Kueue's beta feature gate FlavorFungibilityPreserveScanProgress (on by default), switched
    # by ``featureGates``: a skipped workload resumes its flavor scan in the next cycle.
    flavor_fungibility_preserve_scan_progress: bool = True
    # Kueue's beta feature gate UnadmittedWorkloadsObservability (on by default since 0.19): a
    # pending workload's QuotaReserved reason is granular (services/core/reasons.py).
    unadmitted_workloads_observability: bool = True
    # Kueue's resources.deviceClassMappings (KueueDRAIntegration): device class -> the logical
    # resource its devices count as, sorted by device class (events/dra.py, services/core/dra.py).
    device_class_mappings: tuple[tuple[str, str], ...] = ()
    # Kueue's admissionFairSharing block (feature gate AdmissionFairSharing, beta, on by default):
    # on when the block is there (services.core.admissionfair). Durations in ms; resource weights
    # by resource name (a resource not listed weighs 1).
    admission_fair_sharing: bool = False
    afs_usage_half_life_ms: int = 0
    afs_usage_sampling_interval_ms: int = 300_000
    afs_resource_weights: tuple[tuple[str, float], ...] = ()
    # multiKueue.workerLostTimeout (Kueue's default 15m): a worker silent that long is lost.
    multikueue_worker_lost_timeout_ms: int = 900_000
    # kueuelog's own knob (not Kueue's): how many heads of each BestEffortFIFO ClusterQueue a cycle
    # nominates (services/core/heads.py). 1 is Kueue's scheduler exactly.
    heads_per_cluster_queue: int = 1


class NodeSelectorTerm(_Obj, frozen=True):
    match_expressions: tuple[Requirement, ...] = ()


class OverLimits(_Obj, frozen=True):
    """A container whose requests exceed its limits: Kueue keeps such a workload pending
    (``ValidateResources`` in ``pkg/workload/resources.go``), so the scheduler needs to know."""

    container: str  # within the pod spec: "initContainers[0]", "containers[1]"
    resources: tuple[str, ...]  # sorted


class DeviceClaim(_Obj, frozen=True):
    """A pod template's DRA claim, ``spec.resourceClaims[index]``, with its ResourceClaimTemplate's
    device requests read where the template is known (events/dra.py): the core counts them into
    quota through the Configuration's deviceClassMappings, as Kueue's KueueDRAIntegration does."""

    index: int
    name: str
    template: str = ""  # resourceClaimTemplateName
    claim: str = ""  # resourceClaimName: a claim Kueue does not take
    resolved: bool = False  # the template was looked up (found or not: see ``error``)
    devices: tuple[tuple[str, int], ...] = ()  # device class -> devices per pod, sorted
    error: str = ""  # why Kueue cannot count it: Kueue's text after the claim's field path


class PodSet(_Obj, frozen=True):
    name: str
    count: int
    requests: tuple[tuple[str, int], ...]  # per pod, sorted by resource name
    min_count: int | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[NodeSelectorTerm, ...] = ()  # required node affinity, ORed
    tolerations: tuple[Toleration, ...] = ()
    over_limits: tuple[OverLimits, ...] = ()  # init containers first, then containers, in order
    device_claims: tuple[DeviceClaim, ...] = ()  # DRA claims, in spec.resourceClaims order


class PodSetAssignment(_Obj, frozen=True):
    name: str
    flavors: tuple[tuple[str, str], ...]  # resource -> flavor
    resource_usage: tuple[tuple[str, int], ...]  # resource -> total over `count` pods
    count: int


class Admission(_Obj, frozen=True):
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]


class OwnerReference(_Obj, frozen=True):
    api_version: str
    kind: str
    name: str
    uid: str = ""


class PriorityRef(_Obj, frozen=True):
    """Where a Workload's priority comes from when ``priority`` is not set on it."""

    source: str  # events.cluster.WORKLOAD_PRIORITY_CLASS_SOURCE or POD_PRIORITY_CLASS_SOURCE
    name: str



class Eviction(_Obj, frozen=True):
    """An arriving Workload's ``Evicted=True`` condition while it still holds quota: its eviction
    is under way, so it is a preemption already in progress (Kueue's ``workloadevict.IsEvicted``)."""

    reason: str
    message: str = ""
    time: int | None = None  # Millis: the condition's lastTransitionTime


class Workload(_Kind, frozen=True, tag="Workload"):
    namespace: str
    name: str
    uid: str
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    creation_time: int | None = None  # Millis
    priority: int | None = None
    priority_ref: PriorityRef | None = None
    owner: OwnerReference | None = None
    active: bool = True
    admission: Admission | None = None  # arrived already holding quota
    reserved_at: int | None = None  # when that quota was reserved (QuotaReserved lastTransitionTime)
    eviction: Eviction | None = None  # holding that quota, but already being evicted
    maximum_execution_time_seconds: int | None = None  # spec.maximumExecutionTimeSeconds (a Job's label)
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    admission_checks: tuple[AdmissionCheckState, ...] = ()  # status.admissionChecks as given

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(f"{self.namespace}/{self.name}")


class ResourceShape(_Obj, frozen=True):
    name: str
    requests: tuple[tuple[str, int], ...]  # per pod; a resource not named is not bounded


class ResourceShapes(_Kind, frozen=True, tag="ResourceShapes"):
    """ConfigMap ``t9k-system/resource-shapes``: each profile's shapes (``events.t9k``)."""

    profiles: tuple[tuple[str, tuple[ResourceShape, ...]], ...] = ()


AnyObject = (
    ResourceFlavor
    | ClusterQueue
    | Cohort
    | LocalQueue
    | WorkloadPriorityClass
    | PriorityClass
    | Namespace
    | AdmissionCheck
    | ProvisioningRequestConfig
    | MultiKueueConfig
    | MultiKueueCluster
    | Configuration
    | Workload
    | ResourceShapes
)
