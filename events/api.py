"""Wire shapes of the Kubernetes objects we read: Kueue's ``kueue.x-k8s.io`` kinds
(v1beta1, v1beta2, and v1alpha1 Cohort), ``batch/v1`` Job, ``v1`` Namespace,
``scheduling.k8s.io/v1`` PriorityClass and Kueue's ``Configuration``.

These Structs mirror the YAML a batch admin writes, field for field, so that
msgspec can refuse unknown fields and wrong types with a path. They are decoded
here and immediately normalised (``events.manifests``) into the version-free
internal objects of ``events.objects``; nothing downstream sees them.

Pod specs are the one place unknown fields are accepted: a pod template has
hundreds of fields Kueue ignores, and refusing them would refuse real Jobs.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Quantity = int | float | str


class _Spec(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base for spec shapes: unknown fields are errors, as with a strict CRD."""


class _Loose(msgspec.Struct, kw_only=True, rename="camel"):
    """Base for shapes owned by Kubernetes core (pod specs): unknown fields are ignored."""


class OwnerReference(_Loose):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(_Loose):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None


# --- label selectors, tolerations, affinity -------------------------------------------------


class LabelSelectorRequirement(_Spec):
    key: str
    operator: str
    values: list[str] | None = None


class LabelSelector(_Spec):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class Taint(_Spec):
    key: str
    effect: str
    value: str | None = None
    time_added: str | None = None


class Toleration(_Loose):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class NodeSelectorRequirement(_Loose):
    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(_Loose):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(_Loose):
    node_selector_terms: list[NodeSelectorTerm] = msgspec.field(default_factory=list)


class NodeAffinity(_Loose):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(_Loose):
    node_affinity: NodeAffinity | None = None


# --- pods ------------------------------------------------------------------------------------


class ResourceRequirements(_Loose):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Container(_Loose):
    name: str = ""
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class PodSpec(_Loose):
    containers: list[Container] = msgspec.field(default_factory=list)
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    overhead: dict[str, Quantity] | None = None
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    resource_claims: list[Any] | None = None  # DRA claims: events/dra.py


class PodTemplateSpec(_Loose):
    metadata: ObjectMeta | None = None
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


# --- ResourceFlavor --------------------------------------------------------------------------


class ResourceFlavorSpec(_Spec):
    node_labels: dict[str, str] | None = None
    node_taints: list[Taint] | None = None
    tolerations: list[Toleration] | None = None
    topology_name: str | None = None


# --- ClusterQueue / Cohort -------------------------------------------------------------------


class ResourceQuota(_Spec):
    name: str
    nominal_quota: Quantity
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(_Spec):
    name: str
    resources: list[ResourceQuota]


class ResourceGroup(_Spec):
    covered_resources: list[str]
    flavors: list[FlavorQuotas]


class BorrowWithinCohort(_Spec):
    policy: str | None = None
    max_priority_threshold: int | None = None


class Preemption(_Spec):
    reclaim_within_cohort: str | None = None
    borrow_within_cohort: BorrowWithinCohort | None = None
    within_cluster_queue: str | None = None


class FlavorFungibility(_Spec):
    when_can_borrow: str | None = None
    when_can_preempt: str | None = None
    preference: str | None = None


class FairSharing(_Spec):
    weight: Quantity | None = None


class AdmissionCheckStrategyRule(_Spec):
    name: str
    on_flavors: list[str] | None = None


class AdmissionChecksStrategy(_Spec):
    admission_checks: list[AdmissionCheckStrategyRule] | None = None


class ClusterQueueSpec(_Spec):
    cohort: str | None = None  # v1beta1
    cohort_name: str | None = None  # v1beta2
    resource_groups: list[ResourceGroup] | None = None
    namespace_selector: LabelSelector | None = None
    queueing_strategy: str | None = None
    preemption: Preemption | None = None
    flavor_fungibility: FlavorFungibility | None = None
    stop_policy: str | None = None
    admission_checks: list[str] | None = None
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    fair_sharing: FairSharing | None = None
    admission_scope: dict[str, Any] | None = None


class CohortSpec(_Spec):
    parent: str | None = None  # v1alpha1
    parent_name: str | None = None  # v1beta1 / v1beta2
    resource_groups: list[ResourceGroup] | None = None
    fair_sharing: FairSharing | None = None


class LocalQueueSpec(_Spec):
    cluster_queue: str | None = None
    stop_policy: str | None = None
    fair_sharing: FairSharing | None = None


# --- AdmissionCheck / ProvisioningRequestConfig ---------------------------------------------


class AdmissionCheckParametersReference(_Spec):
    api_group: str | None = None
    kind: str | None = None
    name: str | None = None


class AdmissionCheckSpec(_Spec):
    controller_name: str | None = None
    retry_delay_minutes: int | None = None  # v1beta1, deprecated
    parameters: AdmissionCheckParametersReference | None = None


class ProvisioningRequestRetryStrategy(_Spec):
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class ProvisioningRequestPodSetUpdatesNodeSelector(_Spec):
    key: str | None = None
    value_from_provisioning_class_detail: str | None = None


class ProvisioningRequestPodSetUpdates(_Spec):
    node_selector: list[ProvisioningRequestPodSetUpdatesNodeSelector] | None = None


class ProvisioningRequestConfigSpec(_Spec):
    """Kueue's ProvisioningRequestConfig spec (v1beta1 and v1beta2 spell it the same)."""

    provisioning_class_name: str | None = None
    parameters: dict[str, Any] | None = None  # strings; checked with the key named (events.checks_manifest)
    managed_resources: list[str] | None = None
    retry_strategy: ProvisioningRequestRetryStrategy | None = None
    pod_set_updates: ProvisioningRequestPodSetUpdates | None = None
    pod_set_merge_policy: str | None = None


class PodSetUpdate(_Loose):
    name: str
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None


class AdmissionCheckState(_Loose):
    name: str
    state: str
    message: str | None = None
    last_transition_time: str | None = None
    pod_set_updates: list[PodSetUpdate] | None = None
    retry_count: int | None = None
    requeue_after_seconds: int | None = None


# --- Workload --------------------------------------------------------------------------------


class PodSet(_Spec):
    name: str = "main"
    count: int = 1
    min_count: int | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    topology_request: dict[str, Any] | None = None


class PriorityClassRef(_Spec):
    group: str
    kind: str
    name: str


class WorkloadSpec(_Spec):
    pod_sets: list[PodSet] = msgspec.field(default_factory=list)
    queue_name: str | None = None
    priority_class_name: str | None = None  # v1beta1
    priority: int | None = None
    priority_class_source: str | None = None  # v1beta1
    priority_class_ref: PriorityClassRef | None = None  # v1beta2
    active: bool | None = None
    maximum_execution_time_seconds: int | None = None


class PodSetAssignment(_Spec):
    name: str
    flavors: dict[str, str] | None = None
    resource_usage: dict[str, Quantity] | None = None
    count: int | None = None
    topology_assignment: dict[str, Any] | None = None
    delayed_topology_request: str | None = None


class Admission(_Spec):
    cluster_queue: str
    pod_set_assignments: list[PodSetAssignment] = msgspec.field(default_factory=list)


class Condition(_Loose):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    observed_generation: int | None = None


class WorkloadStatus(_Loose):
    admission: Admission | None = None
    conditions: list[Condition] | None = None
    admission_checks: list[AdmissionCheckState] | None = None


# --- Job -------------------------------------------------------------------------------------


class JobSpec(_Loose):
    parallelism: int | None = None
    completions: int | None = None
    suspend: bool | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    active_deadline_seconds: int | None = None


# --- Configuration ---------------------------------------------------------------------------


class FairSharingConfigV1beta2(_Spec):
    """v1beta2: the block being there is what turns fair sharing on; no ``enable``."""

    preemption_strategies: list[str] | None = None


class FairSharingConfig(FairSharingConfigV1beta2):
    """v1beta1: on only with ``enable: true``."""

    enable: bool = False


class AdmissionFairSharingConfig(_Spec):
    usage_half_life_time: str | None = None
    usage_sampling_interval: str | None = None
    resource_weights: dict[str, Any] | None = None


class RequeuingStrategy(_Spec):
    timestamp: str | None = None
    backoff_limit_count: int | None = None
    backoff_base_seconds: int | None = None
    backoff_max_seconds: int | None = None


class WaitForPodsReadyV1beta2(_Spec):
    """v1beta2: no ``enable``; Kueue >= 0.19 defaults the block in when it is absent."""

    timeout: str | None = None
    block_admission: bool | None = None
    requeuing_strategy: RequeuingStrategy | None = None
    recovery_timeout: str | None = None


class WaitForPodsReady(WaitForPodsReadyV1beta2):
    """v1beta1: on only with ``enable: true``."""

    enable: bool = False


class ResourceTransformation(_Spec):
    """One of Kueue's ``resources.transformations``: how a requested resource is counted."""

    input: str
    strategy: str | None = None
    multiply_by: str | None = None
    outputs: dict[str, Any] | None = None


class Resources(_Spec):
    exclude_resource_prefixes: list[str] | None = None
    transformations: list[ResourceTransformation] | None = None
    device_class_mappings: list[Any] | None = None  # DRA: events/dra.py


class MultiKueueSettings(_Loose):
    """Configuration ``multiKueue``: kueuelog reads ``workerLostTimeout``; the rest is Kueue's own."""

    worker_lost_timeout: str | None = None


class ConfigurationCommon(_Loose):
    multi_kueue: MultiKueueSettings | None = None
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    resources: Resources | None = None
    manage_jobs_without_queue_name: bool | None = None
    feature_gates: dict[str, bool] | None = None
    heads_per_cluster_queue: int | None = None  # kueuelog's own field (not Kueue's): see events.configuration


class ConfigurationBody(ConfigurationCommon):
    """``config.kueue.x-k8s.io/v1beta1`` Configuration: a top-level object without spec; we keep
    the decision-making knobs."""

    fair_sharing: FairSharingConfig | None = None
    wait_for_pods_ready: WaitForPodsReady | None = None


class ConfigurationBodyV1beta2(ConfigurationCommon):
    """``config.kueue.x-k8s.io/v1beta2`` Configuration: ``enable`` is gone from both blocks."""

    fair_sharing: FairSharingConfigV1beta2 | None = None
    wait_for_pods_ready: WaitForPodsReadyV1beta2 | None = None


Kind = Literal[
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "Workload",
    "WorkloadPriorityClass",
    "PriorityClass",
    "Namespace",
    "Job",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "Configuration",
]
