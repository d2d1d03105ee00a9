"""Admission checks in manifests: AdmissionCheck, ProvisioningRequestConfig and a Workload's
``status.admissionChecks``, normalised and validated as Kueue's API validates them.

Called by :mod:`events.manifests`, which owns the document context (``Where``) so that every
error names the file, the document, the object and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from events import api
from events import objects as o
from events.cluster import PROVISIONING_CONTROLLER

_CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MERGE_POLICIES = ("IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements")
INT32_MAX = 2**31 - 1


class Where(Protocol):
    name: str

    def error(self, field: str, message: str) -> Exception: ...


def admission_check(where: Where, spec: api.AdmissionCheckSpec, body: Mapping[str, Any]) -> o.AdmissionCheck:
    if not spec.controller_name:
        raise where.error("spec.controllerName", "required field is missing")
    params = spec.parameters or api.AdmissionCheckParametersReference()
    if spec.controller_name == PROVISIONING_CONTROLLER and params.kind not in (None, "ProvisioningRequestConfig"):
        raise where.error("spec.parameters.kind", f"must be ProvisioningRequestConfig for controller "
                                                  f"{PROVISIONING_CONTROLLER} (got {params.kind!r})")
    return o.AdmissionCheck(
        name=where.name, controller_name=spec.controller_name,
        parameters_kind=params.kind or "", parameters_name=params.name or "",
        parameters_api_group=params.api_group or "", active=active_condition(body),
    )


def active_condition(body: Mapping[str, Any]) -> bool | None:
    """The object's ``Active`` condition (AdmissionCheck, MultiKueueCluster): None when it has none."""
    status = body.get("status")
    if not isinstance(status, Mapping):
        return None
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Active":
            return c.get("status") == "True"
    return None


def _int32(where: Where, value: int | None, field: str, default: int) -> int:
    if value is None:
        return default
    if not 0 <= value <= INT32_MAX:
        raise where.error(field, f"must be between 0 and {INT32_MAX} (got {value})")
    return value


def provisioning_config(where: Where, spec: api.ProvisioningRequestConfigSpec) -> o.ProvisioningRequestConfig:
    cls = spec.provisioning_class_name
    if not cls:
        raise where.error("spec.provisioningClassName", "required field is missing")
    if len(cls) > 253 or not _CLASS_NAME.match(cls):
        raise where.error("spec.provisioningClassName", f"must be a DNS subdomain of at most 253 characters "
                                                        f"(got {cls!r})")
    params = spec.parameters or {}
    if len(params) > 100:
        raise where.error("spec.parameters", f"at most 100 parameters (got {len(params)})")
    for k, v in sorted(params.items()):
        if not isinstance(v, str):
            raise where.error(f"spec.parameters.{k}", f"a ProvisioningRequest parameter is a string of at most "
                                                      f"255 characters (got {type(v).__name__})")
        if len(v) > 255:
            raise where.error(f"spec.parameters.{k}", f"at most 255 characters (got {len(v)})")
    policy = spec.pod_set_merge_policy or ""
    if policy and policy not in MERGE_POLICIES:
        raise where.error("spec.podSetMergePolicy", f"must be one of {', '.join(MERGE_POLICIES)} (got {policy!r})")
    retry = spec.retry_strategy or api.ProvisioningRequestRetryStrategy()
    updates: list[tuple[str, str]] = []
    for i, ns in enumerate((spec.pod_set_updates.node_selector or []) if spec.pod_set_updates else []):
        if not ns.key or not ns.value_from_provisioning_class_detail:
            missing = "key" if not ns.key else "valueFromProvisioningClassDetail"
            raise where.error(f"spec.podSetUpdates.nodeSelector[{i}].{missing}", "required field is missing")
        updates.append((ns.key, ns.value_from_provisioning_class_detail))
    if len(updates) > 8:
        raise where.error("spec.podSetUpdates.nodeSelector", f"at most 8 items (got {len(updates)})")
    return o.ProvisioningRequestConfig(
        name=where.name,
        provisioning_class_name=cls,
        managed_resources=tuple(spec.managed_resources or ()),
        parameters=tuple(sorted(params.items())),
        backoff_limit_count=_int32(where, retry.backoff_limit_count, "spec.retryStrategy.backoffLimitCount", 3),
        backoff_base_seconds=_int32(where, retry.backoff_base_seconds, "spec.retryStrategy.backoffBaseSeconds", 60),
        backoff_max_seconds=_int32(where, retry.backoff_max_seconds, "spec.retryStrategy.backoffMaxSeconds", 1800),
        pod_set_merge_policy=policy,
        node_selector_updates=tuple(updates),
    )


def _toleration(where: Where, t: Mapping[str, Any], field: str) -> o.Toleration:
    values = {k: t.get(k) for k in ("key", "operator", "value", "effect")}
    for k, v in values.items():
        if v is not None and not isinstance(v, str):
            raise where.error(f"{field}.{k}", "must be a string")
    return o.Toleration(key=values["key"] or "", operator=values["operator"] or "Equal",
                        value=values["value"] or "", effect=values["effect"] or "")


def check_states(where: Where, states: list[api.AdmissionCheckState] | None,
                 parse_time: Any) -> tuple[o.AdmissionCheckState, ...]:
    """A Workload's ``status.admissionChecks`` as given (``simulate`` input)."""
    out: dict[str, o.AdmissionCheckState] = {}
    for i, s in enumerate(states or []):
        field = f"status.admissionChecks[{i}]"
        if s.state not in tuple(o.CheckState):
            raise where.error(f"{field}.state", f"must be one of Pending, Ready, Retry, Rejected (got {s.state!r})")
        if s.name in out:
            raise where.error(f"{field}.name", f"duplicate admission check {s.name!r}")
        at = 0
        if s.last_transition_time:
            try:
                at = parse_time(s.last_transition_time)
            except ValueError:
                raise where.error(f"{field}.lastTransitionTime",
                                  f"invalid RFC 3339 time {s.last_transition_time!r}") from None
        updates = tuple(
            o.PodSetUpdate(
                name=u.name, labels=tuple(sorted((u.labels or {}).items())),
                annotations=tuple(sorted((u.annotations or {}).items())),
                node_selector=tuple(sorted((u.node_selector or {}).items())),
                tolerations=tuple(_toleration(where, t, f"{field}.podSetUpdates[{j}].tolerations[{k}]")
                                  for k, t in enumerate(u.tolerations or [])),
            )
            for j, u in enumerate(s.pod_set_updates or [])
        )
        out[s.name] = o.AdmissionCheckState(
            name=s.name, state=o.CheckState(s.state), message=s.message or "", last_transition_time=at,
            pod_set_updates=updates, retry_count=_int32(where, s.retry_count, f"{field}.retryCount", 0),
            requeue_after_seconds=(None if s.requeue_after_seconds is None else
                                   _int32(where, s.requeue_after_seconds, f"{field}.requeueAfterSeconds", 0)),
        )
    return tuple(out[k] for k in sorted(out))
