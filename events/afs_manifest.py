"""Admission fair sharing in manifests: a ClusterQueue's ``spec.admissionScope`` and the
Configuration's ``admissionFairSharing`` block, read and validated as Kueue does.

Kueue (feature gate ``AdmissionFairSharing``, beta, on by default):

- ``ClusterQueue.spec.admissionScope.admissionMode`` is ``UsageBasedAdmissionFairSharing`` or
  ``NoAdmissionFairSharing`` (the CRD's enum); the field is required within ``admissionScope``.
- ``Configuration.admissionFairSharing`` turns the feature on by being there, in v1beta1 and
  v1beta2 alike (``pkg/util/admissionfairsharing.Enabled``). ``usageSamplingInterval`` defaults
  to 5m when absent or 0 (``apis/config/*/defaults.go``); ``usageHalfLifeTime`` has no default
  (0: usage is forgotten at once). Validation (``pkg/config/validation.go``): the half-life must
  not be negative, the interval must be greater than 0, no resource weight may be negative.
- A ClusterQueue that asks for it while the Configuration has no block is accepted and orders
  its workloads as any other ClusterQueue (Kueue reads ``admissionScope`` only when the
  feature is configured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from events import api
from events import validation as v
from events.quantity import QuantityError, parse_fraction

T = TypeVar("T")

USAGE_BASED = "UsageBasedAdmissionFairSharing"
NO_ADMISSION_FAIR_SHARING = "NoAdmissionFairSharing"
DEFAULT_SAMPLING_INTERVAL_MS = 5 * 60_000


class Where(Protocol):
    def error(self, field: str, message: str) -> Exception: ...


def admission_scope(where: Where, scope: dict[str, Any] | None) -> bool:
    """Whether a ClusterQueue's ``spec.admissionScope`` asks for usage-based admission fair sharing."""
    if scope is None:
        return False
    for key in sorted(scope):
        if key != "admissionMode":
            raise where.error(f"spec.admissionScope.{key}", "unknown field (admissionScope has only admissionMode)")
    mode = scope.get("admissionMode")
    if mode is None:
        raise where.error("spec.admissionScope.admissionMode", "required field is missing")
    if mode not in (USAGE_BASED, NO_ADMISSION_FAIR_SHARING):
        raise where.error("spec.admissionScope.admissionMode",
                          f"unsupported value {mode!r}: supported values: {USAGE_BASED!r}, "
                          f"{NO_ADMISSION_FAIR_SHARING!r}")
    return bool(mode == USAGE_BASED)


def _duration_ms(where: Where, text: str | None, field: str) -> int | None:
    if text is None:
        return None
    if text.startswith("-"):
        raise where.error(field, f"must be greater than or equal to 0, got {text!r}")
    try:
        return v.duration_ns(text) // 1_000_000
    except v.Invalid as e:
        raise where.error(field, f"{e.message} (expected e.g. 5m, 300s, 168h)") from None


def read_admission_fair_sharing(where: Where, block: api.AdmissionFairSharingConfig) -> dict[str, Any]:
    """The Configuration fields the block sets (``o.Configuration``'s ``afs_*`` and the switch)."""
    half_life = _duration_ms(where, block.usage_half_life_time, "admissionFairSharing.usageHalfLifeTime") or 0
    interval = _duration_ms(where, block.usage_sampling_interval, "admissionFairSharing.usageSamplingInterval")
    weights: list[tuple[str, float]] = []
    for name, value in sorted((block.resource_weights or {}).items()):
        field = f"admissionFairSharing.resourceWeights.{name}"
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise where.error(field, f"expected a number, got {value!r}")
        if value < 0:
            raise where.error(field, f"must be greater than or equal to 0, got {value!r}")
        weights.append((name, float(value)))
    return {
        "admission_fair_sharing": True,
        "afs_usage_half_life_ms": half_life,
        "afs_usage_sampling_interval_ms": interval or DEFAULT_SAMPLING_INTERVAL_MS,
        "afs_resource_weights": tuple(weights),
    }


_STATUS = "status.fairSharing.admissionFairSharingStatus.consumedResources"


def consumed_resources(where: Where, body: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """A LocalQueue's persisted usage history (nano-units by resource), which Kueue seeds its
    ledger from when it starts (``initializeAfsIfNeeded``); () when there is none."""
    status = body.get("status")
    fair = status.get("fairSharing") if isinstance(status, dict) else None
    afs = fair.get("admissionFairSharingStatus") if isinstance(fair, dict) else None
    consumed = afs.get("consumedResources") if isinstance(afs, dict) else None
    if consumed is None:
        return ()
    if not isinstance(consumed, dict):
        raise where.error(_STATUS, f"expected a map of resource quantities, got {type(consumed).__name__}")
    out: list[tuple[str, int]] = []
    for name in sorted(consumed):
        try:
            amount = parse_fraction(consumed[name])
        except QuantityError as e:
            raise where.error(f"{_STATUS}.{name}", str(e)) from None
        if amount < 0:
            raise where.error(f"{_STATUS}.{name}", f"must not be negative, got {consumed[name]!r}")
        out.append((str(name), int(amount * 10**9)))
    return tuple(out)
