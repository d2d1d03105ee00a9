"""MultiKueue in manifests: MultiKueueConfig, MultiKueueCluster and the multikueue AdmissionCheck,
normalised and validated as Kueue's API validates them (``apis/kueue/v1beta2/multikueue_types.go``:
the same shape in v1beta1 and v1beta2).

Called by :mod:`events.manifests`, which owns the document context (``Where``) so that every error
names the file, the document, the object and the field. Also the one place that says how a
manifest is marked as a worker cluster's object (:data:`CLUSTER_ANNOTATION`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import msgspec

from events import objects as o
from events.checks_manifest import active_condition
from events.cluster import CLUSTER_ANNOTATION, KUEUE_GROUP, MULTIKUEUE_CONTROLLER
from events.cluster import PLACEMENT_POLICY_ANNOTATION as POLICY_ANNOTATION

__all__ = ["CLUSTER_ANNOTATION", "MULTIKUEUE_CONTROLLER", "POLICY_ANNOTATION"]
CONFIG_KIND: Final = "MultiKueueConfig"
LOCATION_TYPES: Final = ("Secret", "Path")
MAX_CLUSTERS: Final = 20
MAX_NAME: Final = 256


class Where(Protocol):
    name: str

    def error(self, field: str, message: str) -> Exception: ...

    def convert(self, value: Any, typ: Any, field: str) -> Any: ...


class KubeConfig(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    location: str | None = None
    location_type: str | None = None


class ClusterProfileReference(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    name: str | None = None


class ClusterSource(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    kube_config: KubeConfig | None = None
    cluster_profile_ref: ClusterProfileReference | None = None


class MultiKueueClusterSpec(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    cluster_source: ClusterSource | None = None  # v1beta2
    kube_config: KubeConfig | None = None  # v1beta1 spells the source at spec itself
    cluster_profile_ref: ClusterProfileReference | None = None  # v1beta1


class MultiKueueConfigSpec(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    clusters: list[str] | None = None
    quota_management: str | None = None


def _spec(where: Where, body: Mapping[str, Any], typ: Any) -> Any:
    spec = body.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise where.error("spec", f"expected an object, got {type(spec).__name__}")
    return where.convert(spec, typ, "spec")


def multikueue_config(where: Where, body: Mapping[str, Any], annotations: Mapping[str, str]) -> o.MultiKueueConfig:
    spec: MultiKueueConfigSpec = _spec(where, body, MultiKueueConfigSpec)
    clusters = spec.clusters or []
    if not clusters:
        raise where.error("spec.clusters", "at least 1 cluster is required")
    if len(clusters) > MAX_CLUSTERS:
        raise where.error("spec.clusters", f"at most {MAX_CLUSTERS} clusters (got {len(clusters)})")
    seen: set[str] = set()
    for i, c in enumerate(clusters):
        if not c or len(c) > MAX_NAME:
            raise where.error(f"spec.clusters[{i}]", f"must be 1 to {MAX_NAME} characters (got {len(c)})")
        if c in seen:
            raise where.error(f"spec.clusters[{i}]", f"must be unique ({c!r} is listed twice)")
        seen.add(c)
    if spec.quota_management not in (None, "Manual", "Automated"):
        raise where.error("spec.quotaManagement", f"must be Manual or Automated (got {spec.quota_management!r})")
    policy = annotations.get(POLICY_ANNOTATION, o.PlacementPolicy.ORDERED)
    if policy not in tuple(o.PlacementPolicy):
        raise where.error(f"metadata.annotations.{POLICY_ANNOTATION}",
                          f"must be one of {', '.join(o.PlacementPolicy)} (got {policy!r})")
    return o.MultiKueueConfig(name=where.name, clusters=tuple(clusters), policy=o.PlacementPolicy(policy))


def multikueue_cluster(where: Where, body: Mapping[str, Any]) -> o.MultiKueueCluster:
    spec: MultiKueueClusterSpec = _spec(where, body, MultiKueueClusterSpec)
    v1beta1 = str(body.get("apiVersion", "")).endswith("/v1beta1")
    if v1beta1:  # Kueue's v1beta1: spec.kubeConfig / spec.clusterProfileRef
        if spec.cluster_source is not None:
            raise where.error("spec.clusterSource", "not a v1beta1 field (v1beta1 spells spec.kubeConfig)")
        source, at = ClusterSource(kube_config=spec.kube_config, cluster_profile_ref=spec.cluster_profile_ref), "spec"
    else:
        for field, value in (("kubeConfig", spec.kube_config), ("clusterProfileRef", spec.cluster_profile_ref)):
            if value is not None:
                raise where.error(f"spec.{field}", f"not a v1beta2 field (v1beta2 spells spec.clusterSource.{field})")
        source, at = spec.cluster_source or ClusterSource(), "spec.clusterSource"
    if source.kube_config is None and source.cluster_profile_ref is None:
        raise where.error(at, "exactly one of kubeConfig, clusterProfileRef is required")
    if source.kube_config is not None and source.cluster_profile_ref is not None:
        raise where.error(at, "exactly one of kubeConfig, clusterProfileRef may be given")
    if source.kube_config is None:
        raise where.error(f"{at}.clusterProfileRef", "ClusterProfiles are not supported by kueuelog; give a kubeConfig")
    kc = source.kube_config
    location = kc.location or ""
    if not 1 <= len(location) <= MAX_NAME:
        raise where.error(f"{at}.kubeConfig.location", f"must be 1 to {MAX_NAME} characters (got {len(location)})")
    location_type = kc.location_type or "Secret"
    if location_type not in LOCATION_TYPES:
        raise where.error(f"{at}.kubeConfig.locationType", f"must be Secret or Path (got {location_type!r})")
    return o.MultiKueueCluster(name=where.name, location_type=location_type, location=location,
                               active=active_condition(body))


def check_parameters(where: Where, kind: str | None, api_group: str | None, name: str | None) -> None:
    """A multikueue AdmissionCheck's ``spec.parameters`` must point to a MultiKueueConfig."""
    if kind != CONFIG_KIND:
        raise where.error("spec.parameters.kind", f"must be {CONFIG_KIND} for controller "
                                                  f"{MULTIKUEUE_CONTROLLER} (got {kind!r})")
    if api_group not in (None, "", KUEUE_GROUP):
        raise where.error("spec.parameters.apiGroup", f"must be {KUEUE_GROUP} (got {api_group!r})")
    if not name:
        raise where.error("spec.parameters.name", "required field is missing")
