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


class FlavorFungibility(_Obj, frozen=True):
    when_can_borrow: WhenCanBorrow = WhenCanBorrow.MAY_STOP_SEARCH
    when_can_preempt: WhenCanPreempt = WhenCanPreempt.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


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


class ProvisioningRequestConfig(_Kind, frozen=True, tag="ProvisioningRequestConfig"):
    name: str
    provisioning_class_name: str = ""
    managed_resources: tuple[str, ...] = ()


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
    exclude_resource_prefixes: tuple[str, ...] = ()
    resource_transformations: tuple[ResourceTransformation, ...] = ()  # in the Configuration's order
    # Kueue's beta feature gate FlavorFungibilityPreserveScanProgress (on by default), switched
    # by ``featureGates``: a skipped workload resumes its flavor scan in the next cycle.
    flavor_fungibility_preserve_scan_progress: bool = True
    # Kueue's beta feature gate UnadmittedWorkloadsObservability (on by default since 0.19): a
    # pending workload's QuotaReserved reason is granular (services/core/reasons.py).
    unadmitted_workloads_observability: bool = True


class NodeSelectorTerm(_Obj, frozen=True):
    match_expressions: tuple[Requirement, ...] = ()


class OverLimits(_Obj, frozen=True):
    """A container whose requests exceed its limits: Kueue keeps such a workload pending
    (``ValidateResources`` in ``pkg/workload/resources.go``), so the scheduler needs to know."""

    container: str  # within the pod spec: "initContainers[0]", "containers[1]"
    resources: tuple[str, ...]  # sorted


class PodSet(_Obj, frozen=True):
    name: str
    count: int
    requests: tuple[tuple[str, int], ...]  # per pod, sorted by resource name
    min_count: int | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[NodeSelectorTerm, ...] = ()  # required node affinity, ORed
    tolerations: tuple[Toleration, ...] = ()
    over_limits: tuple[OverLimits, ...] = ()  # init containers first, then containers, in order


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
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(f"{self.namespace}/{self.name}")


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
    | Configuration
    | Workload
)
