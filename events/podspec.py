"""Pod templates to PodSets: per-pod requests, node selection and tolerations.

Requests are computed the way Kubernetes (and so Kueue) computes a pod's
effective requests: regular containers summed, each init container taken as a
maximum (sidecars, i.e. restartable init containers, add up like regular ones),
plus the pod overhead; a container that sets only limits requests its limits,
as the API server's defaulting would make it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from events import api, dra, validation
from events import objects as o

RESERVED_RESOURCES = frozenset({"pods"})
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
_NODE_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class ObjectError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class Where(Protocol):
    """Enough of the caller's location to raise a located error and parse a quantity."""

    def error(self, field: str, message: str) -> Exception: ...

    def amount(self, resource: str, value: object, field: str) -> int: ...


def _container_requests(where: Where, c: api.Container, path: str) -> dict[str, int]:
    res = c.resources or api.ResourceRequirements()
    merged: dict[str, object] = dict(res.limits or {})
    merged.update(res.requests or {})
    out: dict[str, int] = {}
    for name, value in merged.items():
        field = f"{path}.resources.{'requests' if name in (res.requests or {}) else 'limits'}.{name}"
        if name in RESERVED_RESOURCES:
            raise where.error(
                field, f"{name!r} is a reserved resource name and cannot be requested; Kueue counts pods itself"
            )
        out[name] = where.amount(name, value, field)
    return out


def over_limits(where: Where, spec: api.PodSpec, path: str) -> tuple[o.OverLimits, ...]:
    """The containers whose explicit requests exceed their limits, as Kueue's ``ValidateResources``
    finds them (``pkg/workload/resources.go``): init containers first, then containers; only
    resources that have both a request and a limit are compared."""
    out: list[o.OverLimits] = []
    groups = (("initContainers", spec.init_containers or []), ("containers", spec.containers))
    for kind, containers in groups:
        for i, c in enumerate(containers):
            res = c.resources or api.ResourceRequirements()
            requests, limits = res.requests or {}, res.limits or {}
            over = sorted(
                name for name in requests
                if name in limits
                and where.amount(name, requests[name], f"{path}.{kind}[{i}].resources.requests.{name}")
                > where.amount(name, limits[name], f"{path}.{kind}[{i}].resources.limits.{name}")
            )
            if over:
                out.append(o.OverLimits(container=f"{kind}[{i}]", resources=tuple(over)))
    return tuple(out)


def pod_requests(where: Where, spec: api.PodSpec, path: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(spec.containers):
        for r, v in _container_requests(where, c, f"{path}.containers[{i}]").items():
            total[r] = total.get(r, 0) + v
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(spec.init_containers or []):
        req = _container_requests(where, c, f"{path}.initContainers[{i}]")
        if c.restart_policy == "Always":
            for r, v in req.items():
                total[r] = total.get(r, 0) + v
                sidecars[r] = sidecars.get(r, 0) + v
        else:
            for r, v in req.items():
                init_max[r] = max(init_max.get(r, 0), v + sidecars.get(r, 0))
    for r, v in init_max.items():
        total[r] = max(total.get(r, 0), v)
    for r, value in (spec.overhead or {}).items():
        total[r] = total.get(r, 0) + where.amount(r, value, f"{path}.overhead.{r}")
    return total


def _requirements(where: Where, reqs: Sequence[api.LabelSelectorRequirement | api.NodeSelectorRequirement],
                  path: str, ops: tuple[str, ...]) -> tuple[o.Requirement, ...]:
    out: list[o.Requirement] = []
    for i, r in enumerate(reqs):
        if r.operator not in ops:
            raise where.error(
                f"{path}[{i}].operator", f"unsupported value {r.operator!r}: supported values: {list(ops)}"
            )
        values = tuple(r.values or ())
        if r.operator in ("In", "NotIn") and not values:
            raise where.error(f"{path}[{i}].values", f"must be specified when operator is {r.operator!r}")
        if r.operator in ("Exists", "DoesNotExist") and values:
            raise where.error(f"{path}[{i}].values", f"must be empty when operator is {r.operator!r}")
        if r.operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            raise where.error(f"{path}[{i}].values", f"must be a single integer when operator is {r.operator!r}")
        out.append(o.Requirement(key=r.key, operator=r.operator, values=values))
    return tuple(out)


def selector_from_api(where: Where, sel: api.LabelSelector, path: str) -> o.LabelSelector:
    return o.LabelSelector(
        match_labels=tuple(sorted((sel.match_labels or {}).items())),
        match_expressions=_requirements(where, sel.match_expressions or [], f"{path}.matchExpressions", _SELECTOR_OPS),
    )


def pod_set_from_template(
    where: Where, name: str, count: int, min_count: int | None, template: api.PodTemplateSpec, path: str
) -> o.PodSet:
    spec = template.spec
    # DRA claims (Kueue's KueueDRAIntegration): read here, their templates resolved where they
    # are known (events/dra.py), counted through deviceClassMappings by the core.
    claims = dra.pod_claims(where, spec.resource_claims, f"{path}.spec.resourceClaims")
    requests = pod_requests(where, spec, f"{path}.spec")
    try:
        validation.pod_set_total(count, requests.items(), path)
        validation.labels(sorted((spec.node_selector or {}).items()), f"{path}.spec.nodeSelector")
    except validation.Invalid as e:
        raise where.error(e.field, e.message) from None
    terms: list[o.NodeSelectorTerm] = []
    na = spec.affinity.node_affinity if spec.affinity else None
    required = na.required_during_scheduling_ignored_during_execution if na else None
    if required is not None:
        for ti, term in enumerate(required.node_selector_terms):
            tpath = (f"{path}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                     f".nodeSelectorTerms[{ti}].matchExpressions")
            terms.append(o.NodeSelectorTerm(
                match_expressions=_requirements(where, term.match_expressions or [], tpath, _NODE_OPS)
            ))
    return o.PodSet(
        name=name,
        count=count,
        min_count=min_count,
        requests=tuple(sorted(requests.items())),
        node_selector=tuple(sorted((spec.node_selector or {}).items())),
        affinity_terms=tuple(terms),
        tolerations=tuple(
            o.Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "", effect=t.effect or "")
            for t in spec.tolerations or []
        ),
        over_limits=over_limits(where, spec, f"{path}.spec"),
        device_claims=claims,
    )
