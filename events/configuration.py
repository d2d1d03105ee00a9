"""Kueue's ``Configuration`` (``config.kueue.x-k8s.io``) read with the defaulting of its own version.

The two versions spell the same knobs differently, and Kueue defaults them differently
(``apis/config/v1beta1/defaults.go``, ``apis/config/v1beta2/defaults.go`` and
``apis/config/v1beta1/configuration_conversion.go``, Kueue v0.19):

============================  =====================================  ======================================
field                         v1beta1                                v1beta2
============================  =====================================  ======================================
``fairSharing``               on only with ``enable: true``;         on whenever the block is there;
                              strategies default to                  ``preemptionStrategies`` must be given;
                              [LessThanOrEqualToFinalShare,          ``enable`` is an unknown field
                              LessThanInitialShare]
``waitForPodsReady``          on only with ``enable: true``          on when the block is there, and also
                                                                     when it is not (Kueue >= 0.19,
                                                                     kubernetes-sigs/kueue#11855);
                                                                     ``enable`` is an unknown field
``waitForPodsReady.timeout``  5m when absent; an explicit 0 is       30m when absent or 0
                              refused (must be specified)
``.blockAdmission``           true when absent (= ``enable``)        false when absent
``.recoveryTimeout``          the timeout when absent                the same
``.requeuingStrategy``        timestamp Eviction, backoffBaseSeconds the same
                              60, backoffMaxSeconds 3600,
                              backoffLimitCount none (for ever)
``resources.                  prefixes of resources Kueue ignores    the same
excludeResourcePrefixes``
``resources.transformations`` strategy Retain when absent; what a      the same
                              request counts as (services/core/
                              resources.py)
``resources.                  device class -> logical resource for   the same
deviceClassMappings``         DRA claims (events/dra.py)
``admissionFairSharing``      on whenever the block is there         the same
                              (events/afs_manifest.py)
``featureGates``              FlavorFungibilityPreserveScanProgress, the same
                              UnadmittedWorkloadsObservability,
                              DisableWaitForPodsReady,
                              AdmissionFairSharing
``headsPerClusterQueue``      kueuelog's own (Kueue has no such     the same
                              field): heads per ClusterQueue per
                              cycle, 1 (Kueue) to 1000
============================  =====================================  ======================================

A block that is off (v1beta1 ``enable: false``) is dropped the way Kueue's conversion drops it,
so its contents are not validated (a duration must still parse: Kueue's strict decoding
refuses one that does not). The ``DisableWaitForPodsReady`` gate turns waitForPodsReady off in
either version (``pkg/util/waitforpodsready``). The strategy sets are Kueue's
``validStrategySets`` (``pkg/config/validation.go``).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec

from events import api, dra
from events import objects as o
from events import validation as v
from events.afs_manifest import read_admission_fair_sharing
from events.quantity import QuantityError, parse_fraction

T = TypeVar("T")

V1BETA1_POD_READY_TIMEOUT_MS = 5 * 60_000
V1BETA2_POD_READY_TIMEOUT_MS = 30 * 60_000
DEFAULT_STRATEGIES = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
STRATEGY_SETS = (("LessThanOrEqualToFinalShare",), ("LessThanInitialShare",), DEFAULT_STRATEGIES)
_REQUEUING_TIMESTAMPS = ("Creation", "Eviction")
DEFAULT_BACKOFF_BASE_SECONDS = 60
DEFAULT_BACKOFF_MAX_SECONDS = 3600
_RETAIN, _REPLACE = "Retain", "Replace"  # resources.transformations[].strategy

# Kueue's feature gates that change decisions and that a Configuration may switch, by the
# o.Configuration field each sets; the others are followed at their Kueue default.
_FEATURE_GATES = {
    "FlavorFungibilityPreserveScanProgress": "flavor_fungibility_preserve_scan_progress",
    "UnadmittedWorkloadsObservability": "unadmitted_workloads_observability",
}
_DISABLE_WAIT_FOR_PODS_READY = "DisableWaitForPodsReady"
_ADMISSION_FAIR_SHARING = "AdmissionFairSharing"
MAX_HEADS_PER_CLUSTER_QUEUE = 1000


class Where(Protocol):
    def error(self, field: str, message: str) -> Exception: ...

    def convert(self, value: Any, typ: type[T], field: str) -> T: ...


def read_configuration(where: Where, version: str, rest: dict[str, Any]) -> o.Configuration:
    """The body of a Configuration (everything but apiVersion, kind, metadata) at ``version``."""
    if version == "v1beta1":
        cfg1 = where.convert(rest, api.ConfigurationBody, "")
        fair = cfg1.fair_sharing if cfg1.fair_sharing is not None and cfg1.fair_sharing.enable else None
        strategies = tuple(fair.preemption_strategies or DEFAULT_STRATEGIES) if fair is not None else None
        wait = cfg1.wait_for_pods_ready
        _durations(where, wait)
        on = wait is not None and wait.enable
        common: api.ConfigurationCommon = cfg1
        out = _wait_for_pods_ready(where, wait if on else None, V1BETA1_POD_READY_TIMEOUT_MS,
                                   block_by_default=True, zero_is_default=False)
    else:
        cfg2 = where.convert(rest, api.ConfigurationBodyV1beta2, "")
        strategies = None
        if cfg2.fair_sharing is not None:
            if not cfg2.fair_sharing.preemption_strategies:
                raise where.error("fairSharing.preemptionStrategies", "must be specified (v1beta2 has no default), "
                                  "e.g. [LessThanOrEqualToFinalShare, LessThanInitialShare]")
            strategies = tuple(cfg2.fair_sharing.preemption_strategies)
        _durations(where, cfg2.wait_for_pods_ready)
        common = cfg2
        out = _wait_for_pods_ready(where, cfg2.wait_for_pods_ready or api.WaitForPodsReadyV1beta2(),
                                   V1BETA2_POD_READY_TIMEOUT_MS, block_by_default=False, zero_is_default=True)
    if strategies is not None:
        _check_strategies(where, strategies)
        out = msgspec.structs.replace(out, fair_sharing=True, fair_sharing_strategies=strategies)
    if common.resources is not None and common.resources.transformations:
        out = msgspec.structs.replace(out, resource_transformations=_transformations(
            where, common.resources.transformations))
    if common.admission_fair_sharing is not None:
        out = msgspec.structs.replace(out, **read_admission_fair_sharing(where, common.admission_fair_sharing))
    if common.resources is not None and common.resources.exclude_resource_prefixes:
        out = msgspec.structs.replace(out, exclude_resource_prefixes=tuple(common.resources.exclude_resource_prefixes))
    if common.resources is not None and common.resources.device_class_mappings:
        out = msgspec.structs.replace(out, device_class_mappings=dra.device_class_mappings(
            where, common.resources.device_class_mappings))
    out = _multikueue(where, common.multi_kueue, out)
    if common.heads_per_cluster_queue is not None:
        out = msgspec.structs.replace(out, heads_per_cluster_queue=_heads(where, common.heads_per_cluster_queue))
    return _feature_gates(where, common.feature_gates or {}, out)


def _multikueue(where: Where, mk: api.MultiKueueSettings | None, out: o.Configuration) -> o.Configuration:
    if mk is None or mk.worker_lost_timeout is None:
        return out
    try:
        ms = v.duration_ns(mk.worker_lost_timeout) // 1_000_000
    except v.Invalid as e:
        raise where.error("multiKueue.workerLostTimeout", f"{e.message} (expected e.g. 15m, 900s)") from None
    if ms <= 0:
        raise where.error("multiKueue.workerLostTimeout", f"must be positive (got {mk.worker_lost_timeout!r})")
    return msgspec.structs.replace(out, multikueue_worker_lost_timeout_ms=ms)


def _heads(where: Where, value: int) -> int:
    if not 1 <= value <= MAX_HEADS_PER_CLUSTER_QUEUE:
        raise where.error("headsPerClusterQueue", f"must be between 1 (Kueue's one head per ClusterQueue per "
                          f"cycle) and {MAX_HEADS_PER_CLUSTER_QUEUE}, got {value}")
    return value


def _transformations(where: Where, given: list[api.ResourceTransformation]) -> tuple[o.ResourceTransformation, ...]:
    """Kueue's ``resources.transformations`` defaulted (strategy Retain) and validated as
    ``validateResourceTransformations`` does (a known strategy, one entry per input); an output
    factor may be negative (an allowance per unit of input)."""
    out: list[o.ResourceTransformation] = []
    seen: set[str] = set()
    for i, t in enumerate(given):
        path = f"resources.transformations[{i}]"
        strategy = t.strategy or _RETAIN
        if strategy not in (_RETAIN, _REPLACE):
            raise where.error(f"{path}.strategy", f"unsupported value {strategy!r}: supported values: "
                              f"{_RETAIN!r}, {_REPLACE!r}")
        if not t.input:
            raise where.error(f"{path}.input", "must name a resource")
        if t.input in seen:
            raise where.error(f"{path}.input", f"duplicate value {t.input!r}: one transformation per input resource")
        seen.add(t.input)
        factors: list[tuple[str, int, int]] = []
        for name, value in sorted((t.outputs or {}).items()):
            try:
                f = parse_fraction(value)
            except QuantityError as e:
                raise where.error(f"{path}.outputs.{name}", str(e)) from None
            factors.append((name, f.numerator, f.denominator))
        out.append(o.ResourceTransformation(input=t.input, strategy=strategy, multiply_by=t.multiply_by or "",
                                            outputs=tuple(factors)))
    return tuple(out)


def _check_strategies(where: Where, strategies: tuple[str, ...]) -> None:
    allowed = set(DEFAULT_STRATEGIES)
    for i, s in enumerate(strategies):
        if s not in allowed:
            raise where.error(f"fairSharing.preemptionStrategies[{i}]", f"unsupported value {s!r}: supported values: "
                              + ", ".join(repr(a) for a in DEFAULT_STRATEGIES))
    if strategies not in STRATEGY_SETS:
        raise where.error(
            "fairSharing.preemptionStrategies",
            f"unsupported value {list(strategies)}: supported values: "
            + ", ".join(repr(",".join(s)) for s in STRATEGY_SETS),
        )


def _durations(where: Where, wait: api.WaitForPodsReadyV1beta2 | None) -> dict[str, int]:
    """Every duration of the block in milliseconds; parsed even when the block is off, as Kueue's
    strict decoding parses them."""
    out: dict[str, int] = {}
    if wait is None:
        return out
    for name, text in (("timeout", wait.timeout), ("recoveryTimeout", wait.recovery_timeout)):
        if text is not None:
            field = f"waitForPodsReady.{name}"
            try:
                out[name] = v.duration_ns(text) // 1_000_000
            except v.Invalid as e:
                raise where.error(field, f"{e.message} (expected e.g. 5m, 300s, 1h30m)") from None
    return out


def _wait_for_pods_ready(
    where: Where, wait: api.WaitForPodsReadyV1beta2 | None, default_timeout_ms: int, *,
    block_by_default: bool, zero_is_default: bool,
) -> o.Configuration:
    if wait is None:
        return o.Configuration()
    timeout = _durations(where, wait).get("timeout")
    if timeout is None or (timeout == 0 and zero_is_default):
        timeout = default_timeout_ms
    elif timeout == 0:
        raise where.error("waitForPodsReady.timeout", "must be specified: a timeout of 0 is not allowed")
    requeuing = wait.requeuing_strategy or api.RequeuingStrategy()
    if requeuing is not None:
        if requeuing.timestamp is not None and requeuing.timestamp not in _REQUEUING_TIMESTAMPS:
            raise where.error("waitForPodsReady.requeuingStrategy.timestamp",
                              f"unsupported value {requeuing.timestamp!r}: supported values: 'Creation', 'Eviction'")
        for name, value in (("backoffLimitCount", requeuing.backoff_limit_count),
                            ("backoffBaseSeconds", requeuing.backoff_base_seconds),
                            ("backoffMaxSeconds", requeuing.backoff_max_seconds)):
            if value is not None:
                try:
                    v.int32(value, f"waitForPodsReady.requeuingStrategy.{name}", minimum=0)
                except v.Invalid as e:
                    raise where.error(e.field, e.message) from None
    block = block_by_default if wait.block_admission is None else wait.block_admission
    recovery = _durations(where, wait).get("recoveryTimeout")
    return o.Configuration(
        wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=timeout, wait_for_pods_ready_block_admission=block,
        wait_for_pods_ready_recovery_timeout_ms=recovery,
        requeuing_timestamp=requeuing.timestamp or "Eviction",
        requeuing_backoff_limit_count=requeuing.backoff_limit_count,
        requeuing_backoff_base_seconds=(DEFAULT_BACKOFF_BASE_SECONDS if requeuing.backoff_base_seconds is None
                                        else requeuing.backoff_base_seconds),
        requeuing_backoff_max_seconds=(DEFAULT_BACKOFF_MAX_SECONDS if requeuing.backoff_max_seconds is None
                                       else requeuing.backoff_max_seconds),
    )


def _feature_gates(where: Where, gates: dict[str, bool], out: o.Configuration) -> o.Configuration:
    for gate, enabled in sorted(gates.items()):
        if gate == _ADMISSION_FAIR_SHARING:  # on by default; off, the admissionFairSharing block is ignored
            if not enabled:
                out = msgspec.structs.replace(out, admission_fair_sharing=False)
            continue
        if gate == _DISABLE_WAIT_FOR_PODS_READY:
            if enabled:
                off = o.Configuration()
                out = msgspec.structs.replace(
                    out, wait_for_pods_ready=False, wait_for_pods_ready_timeout_ms=off.wait_for_pods_ready_timeout_ms,
                    wait_for_pods_ready_block_admission=off.wait_for_pods_ready_block_admission)
            continue
        setting = _FEATURE_GATES.get(gate)
        if setting is None:
            known = sorted((*_FEATURE_GATES, _DISABLE_WAIT_FOR_PODS_READY, _ADMISSION_FAIR_SHARING))
            raise where.error(f"featureGates.{gate}", f"unknown or unsupported feature gate {gate!r}: kueuelog "
                              f"follows Kueue's defaults and lets a Configuration switch only {', '.join(known)}")
        out = msgspec.structs.replace(out, **{setting: enabled})
    return out
