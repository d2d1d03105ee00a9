"""DRA claims counted into quota as Kueue's KueueDRAIntegration counts them.

A podSet's claims arrive resolved (events/dra.py: devices per device class from each
ResourceClaimTemplate, or Kueue's error). Here the Configuration's ``deviceClassMappings`` turn
the devices into logical resources, per pod, added to the pod's requests after excluded
resources and transformations (``totalRequestsFromPodSets`` in ``pkg/workload/workload.go``), and
a claim Kueue cannot count keeps the workload pending with reason Misconfigured and Kueue's
message (``handleDRA`` and ``markDRAInadmissible`` in ``pkg/controller/core/workload_controller.go``).
"""

from __future__ import annotations

from events import objects as o
from events.quantity import MILLI_RESOURCES
from events.validation import INT64_MAX

CLAIMS_NOT_SUPPORTED = "KueueDRAIntegration feature does not support use of resource claims"


def dra_error(config: o.Configuration, wl: o.Workload) -> str:
    """Why Kueue cannot count ``wl``'s claims (its QuotaReserved=False message), else ``""``.

    Kueue checks for claims by name first, then walks podSets and claims in order and stops at
    the first error; only the first is reported."""
    if not any(ps.device_claims for ps in wl.pod_sets):
        return ""  # (asked at every nomination: most workloads claim no devices)
    if any(c.claim for ps in wl.pod_sets for c in ps.device_claims):
        return CLAIMS_NOT_SUPPORTED
    mapped = dict(config.device_class_mappings)
    for i, ps in enumerate(wl.pod_sets):
        for c in ps.device_claims:
            where = f"spec.podSets[{i}].template.spec.resourceClaims[{c.index}]"
            if not c.resolved:
                return (f"{where}: Internal error: failed to get claim spec for ResourceClaimTemplate "
                        f"{c.template} in podset {ps.name}: the template was not read")
            if c.error:
                return where + c.error
            for cls, _ in c.devices:
                if cls not in mapped:
                    return (f"{where}.resourceClaimTemplateName: Not found: \"DeviceClass {cls} is not mapped in DRA "
                            f"configuration for podset {ps.name}\"")
    return ""


def per_pod(config: o.Configuration, ps: o.PodSet) -> dict[str, int]:
    """What one pod's claims count as, by logical resource (amounts); unmapped classes count
    nothing (``dra_error`` keeps such a workload from being nominated)."""
    if not ps.device_claims:
        return {}
    mapped = dict(config.device_class_mappings)
    out: dict[str, int] = {}
    for c in ps.device_claims:
        for cls, n in c.devices:
            res = mapped.get(cls)
            if res is None:
                continue
            amount = n * 1000 if res in MILLI_RESOURCES else n
            out[res] = min(out.get(res, 0) + amount, INT64_MAX)
    return out


def add_claims(config: o.Configuration, ps: o.PodSet, per_pod_requests: dict[str, int]) -> dict[str, int]:
    """``per_pod_requests`` with the podSet's claims added (saturating, as Kueue's amounts)."""
    extra = per_pod(config, ps)
    if not extra:
        return per_pod_requests
    out = dict(per_pod_requests)
    for res, v in sorted(extra.items()):
        out[res] = min(out.get(res, 0) + v, INT64_MAX)
    return out
