"""DRA at the edge: ResourceClaimTemplates read, pod claims resolved, device class mappings checked.

Kueue's DRA integration (feature gate KueueDRAIntegration, beta, on by default) counts a pod
template's ``spec.resourceClaims`` into quota: each claim made from a ResourceClaimTemplate
contributes, per device class, the devices its requests ask for (``exactly`` with allocation mode
``ExactCount``: ``count``, default 1; an ``adminAccess`` request: nothing), and the Configuration's
``resources.deviceClassMappings`` names the logical resource those devices count as, per pod
(``pkg/dra/claims.go``, ``countDevicesPerClass`` and ``GetResourceRequestsForResourceClaimTemplates``).

Kueue reads the template when its workload controller first handles the workload. kueuelog reads
it where the Job becomes a Workload: ``simulate`` from the input (any document of it), the
watcher from the ResourceClaimTemplates it watches. What Kueue cannot count stays in the claim as
Kueue's error text and keeps the workload pending (``services/core/dra.py``):

- a claim by ``resourceClaimName`` (Kueue takes only templates);
- a template that does not exist, a request with ``firstAvailable`` or allocation mode ``All``;
- a device class no mapping names.

What kueuelog cannot evaluate is refused by field: CEL ``selectors`` (Kueue matches them against
the cluster's ResourceSlices) and mapping ``sources`` (counters and capacity: ResourceSlices too).

API versions: ``resource.k8s.io/v1`` (what Kueue reads), ``v1beta2`` (the same shape) and
``v1beta1`` (requests without ``exactly``, as the API server converts them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import msgspec

from events import objects as o
from events.validation import INT64_MAX

GROUP: Final = "resource.k8s.io"
VERSIONS: Final = ("v1", "v1beta2", "v1beta1")
API_VERSIONS: Final = tuple(f"{GROUP}/{v}" for v in VERSIONS)
KIND: Final = "ResourceClaimTemplate"
_EXACT, _ALL = "ExactCount", "All"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUALIFIED = re.compile(r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_MAPPINGS: Final = 16
MAX_CLASSES_PER_MAPPING: Final = 8


class Where(Protocol):
    def error(self, field: str, message: str) -> Exception: ...


class ClaimTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """What a ResourceClaimTemplate asks, as Kueue counts it: devices per class, or Kueue's error
    (text after the pod claim's field path, as ``GetResourceRequestsForResourceClaimTemplates``
    prefixes it)."""

    namespace: str
    name: str
    devices: tuple[tuple[str, int], ...] = ()
    error: str = ""


def is_template(body: object) -> bool:
    return (isinstance(body, Mapping) and body.get("kind") == KIND
            and isinstance(body.get("apiVersion"), str) and body["apiVersion"] in API_VERSIONS)


def _mapping(where: Where, value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(field, f"expected an object, got {type(value).__name__}")
    return value


def _list(where: Where, value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(field, f"expected a list, got {type(value).__name__}")
    return value


def read_template(where: Where, version: str, body: Mapping[str, Any], namespace: str, name: str) -> ClaimTemplate:
    """A ResourceClaimTemplate manifest at ``version``; what the API server would refuse, or
    what kueuelog cannot evaluate, is refused naming the field."""
    spec = _mapping(where, body.get("spec", {}), "spec")
    claim = _mapping(where, spec.get("spec", {}), "spec.spec")
    devices = _mapping(where, claim.get("devices", {}), "spec.spec.devices")
    counts: dict[str, int] = {}
    error = ""
    for i, raw in enumerate(_list(where, devices.get("requests"), "spec.spec.devices.requests")):
        path = f"spec.spec.devices.requests[{i}]"
        req = _mapping(where, raw, path)
        exactly, epath = _exactly(where, version, req, path)
        if req.get("firstAvailable") is not None:
            _list(where, req["firstAvailable"], f"{path}.firstAvailable")
            if exactly is not None:
                raise where.error(path, "exactly one of exactly or firstAvailable must be set")
            error = error or (f".devices.requests[{i}]: Invalid value: \"null\": ResourceClaimTemplate {name}: "
                              "FirstAvailable device selection is not supported")
            continue
        if exactly is None:
            raise where.error(f"{path}.exactly", "required field is missing (or firstAvailable)")
        found = _request(where, exactly, epath, name, f".devices.requests[{i}].exactly")
        if isinstance(found, str):
            error = error or found
        elif found is not None:
            cls, n = found
            counts[cls] = min(counts.get(cls, 0) + n, INT64_MAX)  # Kueue adds saturating
    if error:
        return ClaimTemplate(namespace=namespace, name=name, error=error)
    return ClaimTemplate(namespace=namespace, name=name, devices=tuple(sorted(counts.items())))


def _exactly(where: Where, version: str, req: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any] | None, str]:
    """The request's ``exactly`` part: its own field in v1 and v1beta2, the request itself in
    v1beta1 (where a request with a device class is what v1 calls ``exactly``)."""
    if version == "v1beta1":
        if "exactly" in req:
            raise where.error(f"{path}.exactly", "unknown field in resource.k8s.io/v1beta1 (use v1)")
        return (req if req.get("deviceClassName") is not None else None), path
    raw = req.get("exactly")
    return (None if raw is None else _mapping(where, raw, f"{path}.exactly")), f"{path}.exactly"


def _request(where: Where, ex: Mapping[str, Any], path: str, template: str,
             kueue_path: str) -> tuple[str, int] | str | None:
    """(device class, devices) of one exact request; Kueue's error text; ``None``: counts nothing."""
    cls = ex.get("deviceClassName")
    if not isinstance(cls, str) or not cls:
        raise where.error(f"{path}.deviceClassName", "required field is missing")
    if ex.get("selectors"):
        raise where.error(f"{path}.selectors", "not supported by kueuelog: Kueue matches CEL selectors against the "
                          "cluster's ResourceSlices (KueueDRAIntegration); remove them or run under Kueue")
    admin = ex.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise where.error(f"{path}.adminAccess", f"expected a boolean, got {admin!r}")
    mode = ex.get("allocationMode", _EXACT) or _EXACT
    if mode not in (_EXACT, _ALL):
        raise where.error(f"{path}.allocationMode",
                          f"unsupported value {mode!r}: supported values: {_EXACT!r}, {_ALL!r}")
    count = ex.get("count", 1 if mode == _EXACT else None)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > INT64_MAX):
        raise where.error(f"{path}.count", f"must be an integer from 1 to {INT64_MAX}, got {count!r}")
    if mode == _ALL and count is not None and "count" in ex:
        raise where.error(f"{path}.count", "must not be set when allocationMode is 'All'")
    if admin:
        return None  # Kueue skips admin access requests: no quota
    if mode == _ALL:
        return (f"{kueue_path}.allocationMode: Invalid value: \"All\": ResourceClaimTemplate {template}: "
                "AllocationMode 'All' is not supported")
    assert isinstance(count, int)
    return cls, count


def pod_claims(where: Where, given: list[Any] | None, path: str) -> tuple[o.DeviceClaim, ...]:
    """A pod template's ``spec.resourceClaims``, unresolved (``resolve`` reads the templates)."""
    out: list[o.DeviceClaim] = []
    seen: set[str] = set()
    for j, raw in enumerate(given or []):
        cpath = f"{path}[{j}]"
        c = _mapping(where, raw, cpath)
        name = c.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            raise where.error(f"{cpath}.name", f"must be a DNS label (lowercase alphanumerics and '-'), got {name!r}")
        if name in seen:
            raise where.error(f"{cpath}.name", f"duplicate value {name!r}")
        seen.add(name)
        template, claim = c.get("resourceClaimTemplateName"), c.get("resourceClaimName")
        if (template is None) == (claim is None):
            raise where.error(cpath, "must specify one of: resourceClaimName, resourceClaimTemplateName")
        ref = template if template is not None else claim
        field = "resourceClaimTemplateName" if template is not None else "resourceClaimName"
        if not isinstance(ref, str) or not ref:
            raise where.error(f"{cpath}.{field}", f"expected a name, got {ref!r}")
        out.append(o.DeviceClaim(index=j, name=name, template=ref if template is not None else "",
                                 claim=ref if claim is not None else ""))
    return tuple(out)


Lookup = Callable[[str, str], "ClaimTemplate | None"]
"""(namespace, name) -> the template, or ``None`` when there is none."""


def NO_TEMPLATES(namespace: str, name: str) -> ClaimTemplate | None:
    """The lookup of a place that knows no template: every claim's template is not found."""
    return None


def resolve(wl: o.Workload, lookup: Lookup) -> o.Workload:
    """``wl`` with every claim made from a template resolved against ``lookup``."""
    if not any(ps.device_claims for ps in wl.pod_sets):
        return wl
    pod_sets = tuple(
        msgspec.structs.replace(ps, device_claims=tuple(_resolved(c, ps.name, wl.namespace, lookup)
                                                        for c in ps.device_claims))
        if ps.device_claims else ps
        for ps in wl.pod_sets
    )
    return msgspec.structs.replace(wl, pod_sets=pod_sets)


def _resolved(c: o.DeviceClaim, pod_set: str, namespace: str, lookup: Lookup) -> o.DeviceClaim:
    if not c.template:
        return c
    t = lookup(namespace, c.template)
    if t is None:
        return msgspec.structs.replace(c, resolved=True, devices=(), error=(
            f": Internal error: failed to get claim spec for ResourceClaimTemplate {c.template} in podset "
            f"{pod_set}: resourceclaimtemplates.{GROUP} \"{c.template}\" not found"))
    return msgspec.structs.replace(c, resolved=True, devices=t.devices, error=t.error)


def uses_templates(wl: o.Workload) -> tuple[str, ...]:
    """The templates ``wl``'s claims name, sorted."""
    return tuple(sorted({c.template for ps in wl.pod_sets for c in ps.device_claims if c.template}))


def _mapping_name(where: Where, value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _QUALIFIED.fullmatch(value):
        raise where.error(field, f"must be a qualified name ([DNS subdomain/]name, at most 253 characters), "
                          f"got {value!r}")
    return value


def device_class_mappings(where: Where, given: list[Any]) -> tuple[tuple[str, str], ...]:
    """Kueue's ``resources.deviceClassMappings`` validated as ``validateDeviceClassMappings`` does
    (at most 16 mappings of 1 to 8 device classes, unique names, each class mapped once); a
    mapping's ``sources`` (counters, capacity) is refused: it needs ResourceSlices."""
    base = "resources.deviceClassMappings"
    if len(given) > MAX_MAPPINGS:
        raise where.error(base, f"must have at most {MAX_MAPPINGS} items, got {len(given)}")
    out: dict[str, str] = {}
    names: set[str] = set()
    for i, raw in enumerate(given):
        path = f"{base}[{i}]"
        m = _mapping(where, raw, path)
        unknown = sorted(set(m) - {"name", "deviceClassNames", "sources"})
        if unknown:
            raise where.error(f"{path}.{unknown[0]}", "unknown field")
        if m.get("sources"):
            raise where.error(f"{path}.sources", "not supported by kueuelog yet (Kueue's counter and capacity "
                              "sources for DRA quota read the cluster's ResourceSlices, feature gates "
                              "KueueDRAIntegrationPartitionableDevices and KueueDRAIntegrationConsumableCapacity); "
                              "remove it")
        name = _mapping_name(where, m.get("name"), f"{path}.name")
        if name in names:
            raise where.error(f"{path}.name", f"duplicate value {name!r}")
        names.add(name)
        classes = _list(where, m.get("deviceClassNames"), f"{path}.deviceClassNames")
        if not classes:
            raise where.error(f"{path}.deviceClassNames", "at least one device class name is required")
        if len(classes) > MAX_CLASSES_PER_MAPPING:
            raise where.error(f"{path}.deviceClassNames", f"must have at most {MAX_CLASSES_PER_MAPPING} items, "
                              f"got {len(classes)}")
        for k, cls in enumerate(classes):
            cpath = f"{path}.deviceClassNames[{k}]"
            cls = _mapping_name(where, cls, cpath)
            if cls in out:
                raise where.error(cpath, f"device class already mapped to resource {out[cls]}"
                                  if out[cls] != name else f"duplicate value {cls!r}")
            out[cls] = name
    return tuple(sorted(out.items()))
