"""T9k Scheduler's ``Queue`` (``scheduler.tensorstack.dev/v1beta1``) in, engine objects out.

A Queue is mapped onto the engine as one ClusterQueue of the same name in the cohort
:data:`COHORT`, covering exactly the resources of ``spec.quota.requests`` on the one flavor
:data:`FLAVOR`, with nominal quota 0 and the queue's quota as its borrowing limit: the quota
is a cap on what the queue may hold, and what it holds comes from the cluster's capacity, the
cohort. The Queue's own fields ride along on the ClusterQueue (``o.T9kQueue``): ``priority``
becomes the priority of the queue's workloads (so higher queues are served first and, with
``reclaimWithinCohort`` and ``borrowWithinCohort`` set to ``LowerPriority``, may preempt
lower queues' workloads), ``preemptible: false`` keeps a queue's workloads from being
preemption candidates, and the rest (users, groups, namespaceSelector, closed, quota,
resourceShapeProfile) is what admission at creation checks (``services.core.t9k``).

A workload names its queue as T9k's do: the pod template label :data:`QUEUE_LABEL` with
``schedulerName: t9k-scheduler``. A ``batch/v1`` Job written that way becomes a Workload like
a Kueue-queued Job, whose priority comes from its queue (``priorityClassSource``
:data:`PRIORITY_SOURCE`).

``spec.maxDuration`` follows T9k's grammar exactly (:data:`MAX_DURATION`); a year is 365
days and a week 7 days. The ConfigMap ``t9k-system/resource-shapes`` holds one key per
profile, each a YAML list of shapes ``{name, requests: {resource: quantity}}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Protocol

import msgspec
import yaml

from events import api
from events import objects as o
from events.cluster import QUEUE_NAME_LABEL, T9K_ALLOCATED_ANNOTATION
from events.jobs import job_to_workload
from events.podspec import ObjectError, selector_from_api

GROUP: Final = "scheduler.tensorstack.dev"
API_VERSION: Final = f"{GROUP}/v1beta1"
NAMESPACE: Final = "t9k-system"
QUEUE_LABEL: Final = f"{GROUP}/queue"
SCHEDULER_NAME: Final = "t9k-scheduler"
PRIORITY_SOURCE: Final = f"{GROUP}/queue"
COHORT: Final = "t9k"
FLAVOR: Final = "t9k"
SHAPES_CONFIGMAP: Final = "resource-shapes"
ALLOCATED_SUFFIX: Final = "-allocated"
KINDS: Final = frozenset({(API_VERSION, "Queue"), ("v1", "ConfigMap")})
"""What ``events.manifests`` hands to :func:`normalize`."""

MAX_DURATION: Final = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)
"""T9k's grammar for ``spec.maxDuration``, verbatim."""
_UNIT_MS: Final = (
    ("y", 365 * 86_400_000), ("w", 7 * 86_400_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000),
    ("s", 1000), ("ms", 1),
)
MAX_DURATION_MS: Final = 2**63 // 1_000_000  # what a Go time.Duration holds, in ms


class Where(Protocol):
    def error(self, field: str, message: str) -> Exception: ...

    def amount(self, resource: str, value: object, field: str) -> int: ...


class _Spec(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    pass


class QueueQuota(_Spec):
    requests: dict[str, api.Quantity] | None = None


class QueueSpec(_Spec):
    quota: QueueQuota | None = None
    priority: int | None = None
    preemptible: bool | None = None
    closed: bool | None = None
    max_duration: str | None = None
    resource_shape_profile: str | None = None
    node_selector: api.LabelSelector | None = None
    namespace_selector: api.LabelSelector | None = None
    users: list[str] | None = None
    groups: list[str] | None = None


class QueueStatus(msgspec.Struct, kw_only=True, rename="camel"):
    allocated: dict[str, api.Quantity] | None = None


def max_duration_ms(text: str) -> int | None:
    """``spec.maxDuration`` in milliseconds; ``None`` for ``""`` (no limit). Raises ``ValueError``."""
    m = MAX_DURATION.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid value {text[:64]!r}: must match {MAX_DURATION.pattern} "
                         "(units y, w, d, h, m, s, ms, e.g. \"3w\", \"2h45m\")")
    if not text:
        return None
    # Groups 3, 5, ..., 15 hold the digits of y, w, d, h, m, s, ms in that order.
    total = sum(int(m.group(3 + 2 * i)) * unit for i, (_, unit) in enumerate(_UNIT_MS) if m.group(3 + 2 * i))
    if total > MAX_DURATION_MS:
        raise ValueError(f"invalid value {text[:64]!r}: longer than {MAX_DURATION_MS} ms (Go's maximum duration)")
    return total


def _convert(where: Where, value: Any, typ: type[Any], field: str) -> Any:
    try:
        return msgspec.convert(value, typ)
    except msgspec.ValidationError as e:
        text = str(e)
        m = re.search(r" - at `\$(.*)`$", text)
        path = m.group(1) if m else ""
        text = text[: m.start()] if m else text
        m2 = re.match(r"Object contains unknown field `(.+)`", text)
        if m2:
            path, text = f"{path}.{m2.group(1)}", "unknown field"
        raise where.error(f"{field}{path}", text) from None


def _amounts(where: Where, values: Mapping[str, Any] | None, field: str) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((r, where.amount(r, q, f"{field}.{r}")) for r, q in (values or {}).items()))


def _names(where: Where, values: list[str] | None, field: str) -> tuple[str, ...]:
    for i, name in enumerate(values or []):
        if not name:
            raise where.error(f"{field}[{i}]", "must not be empty")
    return tuple(sorted(set(values or [])))


def _selector(where: Where, sel: api.LabelSelector | None, field: str) -> o.LabelSelector | None:
    if sel is None:
        return None
    try:
        return selector_from_api(where, sel, field)
    except ObjectError as e:
        raise where.error(e.field, e.message) from None


def queue_fields(where: Where, body: Mapping[str, Any]) -> o.T9kQueue:
    """A Queue manifest's fields, validated; every refusal names the field."""
    spec: QueueSpec = _convert(where, body.get("spec") or {}, QueueSpec, "spec")
    status: QueueStatus = _convert(where, body.get("status") or {}, QueueStatus, "status")
    priority = 0 if spec.priority is None else spec.priority
    if not 0 <= priority <= 100:
        raise where.error("spec.priority", f"must be between 0 and 100, got {priority}")
    duration = None
    if spec.max_duration is not None:
        try:
            duration = max_duration_ms(spec.max_duration)
        except ValueError as e:
            raise where.error("spec.maxDuration", str(e)) from None
    quota = _amounts(where, (spec.quota or QueueQuota()).requests, "spec.quota.requests")
    return o.T9kQueue(
        priority=priority,
        preemptible=bool(spec.preemptible),
        closed=bool(spec.closed),
        max_duration_ms=duration,
        node_selector=_selector(where, spec.node_selector, "spec.nodeSelector"),
        namespace_selector=_selector(where, spec.namespace_selector, "spec.namespaceSelector"),
        users=_names(where, spec.users, "spec.users"),
        groups=_names(where, spec.groups, "spec.groups"),
        quota=quota,
        allocated=_amounts(where, status.allocated, "status.allocated"),
        resource_shape_profile=spec.resource_shape_profile or "",
    )


class Located(Where, Protocol):
    name: str


def normalize(ctx: Located, kind: str, body: Mapping[str, Any], namespace: str) -> o.AnyObject | None:
    """A Queue as its ClusterQueue; ConfigMap ``t9k-system/resource-shapes`` as the shapes
    (any other ConfigMap is not ours: ``None``)."""
    if kind == "Queue":
        if namespace != NAMESPACE:
            raise ctx.error("metadata.namespace", f"a Queue lives in namespace {NAMESPACE}, got {namespace!r}")
        return cluster_queue(ctx.name, queue_fields(ctx, body))
    if (namespace, ctx.name) != (NAMESPACE, SHAPES_CONFIGMAP):
        return None
    return resource_shapes(ctx, body.get("data"))


def cluster_queue(name: str, queue: o.T9kQueue) -> o.ClusterQueue:
    """The ClusterQueue a Queue is to the engine (see the module's docstring)."""
    groups: tuple[o.ResourceGroup, ...] = ()
    if queue.quota:
        groups = (o.ResourceGroup(
            covered_resources=tuple(r for r, _ in queue.quota),
            flavors=(o.FlavorQuotas(name=FLAVOR, resources=tuple(
                (r, o.Quota(nominal=0, borrowing_limit=q)) for r, q in queue.quota)),),
        ),)
    return o.ClusterQueue(
        name=name,
        cohort=COHORT,
        resource_groups=groups,
        namespace_selector=o.LabelSelector(),  # who may use it is checked at creation
        preemption=o.PreemptionPolicy(
            reclaim_within_cohort=o.ReclaimWithinCohort.LOWER_PRIORITY,
            borrow_within_cohort=o.BorrowWithinCohortPolicy.LOWER_PRIORITY,
        ),
        t9k=queue,
    )


def resource_shapes(where: Where, data: Mapping[str, Any] | None) -> o.ResourceShapes:
    """ConfigMap ``t9k-system/resource-shapes``: ``data.<profile>`` is a YAML list of
    ``{name: <shape>, requests: {<resource>: <quantity>}}``."""
    profiles = []
    for profile, text in sorted((data or {}).items()):
        field = f"data.{profile}"
        if not isinstance(text, str):
            raise where.error(field, "must be a string holding a YAML list of shapes")
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise where.error(field, f"not YAML: {str(e).splitlines()[0]}") from None
        if not isinstance(raw, list):
            raise where.error(field, "must be a YAML list of shapes {name, requests}")
        shapes = []
        for i, item in enumerate(raw):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
                raise where.error(f"{field}[{i}].name", "required field is missing")
            unknown = sorted(set(item) - {"name", "requests"})
            if unknown:
                raise where.error(f"{field}[{i}].{unknown[0]}", "unknown field")
            requests = item.get("requests") or {}
            if not isinstance(requests, dict):
                raise where.error(f"{field}[{i}].requests", "must be a map of resource to quantity")
            amounts = _amounts(where, requests, f"{field}[{i}].requests")
            shapes.append(o.ResourceShape(name=item["name"], requests=amounts))
        profiles.append((profile, tuple(shapes)))
    return o.ResourceShapes(profiles=tuple(profiles))


def queue_of_template(template: api.PodTemplateSpec) -> str | None:
    """The Queue a pod template names (label and ``schedulerName: t9k-scheduler``), else ``None``."""
    labels = (template.metadata.labels if template.metadata else None) or {}
    if QUEUE_LABEL not in labels or template.spec.scheduler_name != SCHEDULER_NAME:
        return None
    return labels[QUEUE_LABEL]


def queue_of_job(job: Mapping[str, Any]) -> str | None:
    """:func:`queue_of_template` for a Job as the API serialises it (camelCase JSON)."""
    template = (job.get("spec") or {}).get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    scheduler = (template.get("spec") or {}).get("schedulerName")
    if isinstance(labels, Mapping) and QUEUE_LABEL in labels and scheduler == SCHEDULER_NAME:
        return str(labels[QUEUE_LABEL])
    return None


def job_workload(where: Where, meta: api.ObjectMeta, spec: api.JobSpec, namespace: str,
                 creation_time: int | None) -> o.Workload | None:
    """A ``batch/v1`` Job queued on a T9k Queue as a Workload (``None`` when it names no Queue)."""
    queue = queue_of_template(spec.template)
    if queue is None:
        return None
    field = f"spec.template.metadata.labels.{QUEUE_LABEL}"
    if not queue:
        raise where.error(field, "must not be empty")
    # Built exactly as a Kueue-queued Job is (one podSet "main", Kueue's Workload name), then
    # pointed at the Queue: its queue name, and its priority from the Queue.
    as_kueue = msgspec.structs.replace(meta, labels={**(meta.labels or {}), QUEUE_NAME_LABEL: queue})
    try:
        wl = job_to_workload(where, as_kueue, spec, namespace, creation_time)
    except Exception as e:
        if "queue-name" in str(getattr(e, "field", "")):
            raise where.error(field, str(getattr(e, "message", e)).replace("a LocalQueue", "a Queue")) from None
        raise
    assert wl is not None
    labels = dict(meta.labels or {})
    labels[QUEUE_LABEL] = queue
    return msgspec.structs.replace(
        wl, priority_ref=o.PriorityRef(source=PRIORITY_SOURCE, name=queue), labels=tuple(sorted(labels.items())),
    )


def is_t9k_workload(wl: o.Workload) -> bool:
    return wl.priority_ref is not None and wl.priority_ref.source == PRIORITY_SOURCE


def allocated_workload(name: str, queue: o.T9kQueue) -> o.Workload | None:
    """``status.allocated`` as usage already held (``simulate``): a Workload that arrives admitted
    in the queue, holding the allocated amounts of the resources the queue has quota for."""
    covered = {r for r, _ in queue.quota}
    usage = tuple((r, v) for r, v in queue.allocated if r in covered and v > 0)
    if not usage:
        return None
    wl_name = f"{name}{ALLOCATED_SUFFIX}"
    return o.Workload(
        namespace=NAMESPACE, name=wl_name, uid=f"t9k-allocated-{name}"[:32], queue_name=name,
        pod_sets=(o.PodSet(name="allocated", count=1, requests=usage),),
        creation_time=0, priority_ref=o.PriorityRef(source=PRIORITY_SOURCE, name=name),
        admission=o.Admission(cluster_queue=name, pod_set_assignments=(o.PodSetAssignment(
            name="allocated", flavors=tuple((r, FLAVOR) for r, _ in usage), resource_usage=usage, count=1),)),
        reserved_at=0,
        labels=((QUEUE_LABEL, name),),
        annotations=((T9K_ALLOCATED_ANNOTATION, "status.allocated of the Queue, as usage already held"),),
    )


def default_pool(queues: list[o.ClusterQueue]) -> o.Cohort:
    """The cohort :data:`COHORT` when the input declares none: room for every queue's full quota,
    so that queues compete only when the cluster's capacity is declared as that Cohort."""
    totals: dict[str, int] = {}
    for cq in queues:
        for r, q in cq.t9k.quota if cq.t9k else ():
            totals[r] = min(2**63 - 1, totals.get(r, 0) + q)
    groups: tuple[o.ResourceGroup, ...] = ()
    if totals:
        resources = tuple(sorted(totals))
        groups = (o.ResourceGroup(covered_resources=resources, flavors=(o.FlavorQuotas(
            name=FLAVOR, resources=tuple((r, o.Quota(nominal=totals[r])) for r in resources)),)),)
    return o.Cohort(name=COHORT, resource_groups=groups)
