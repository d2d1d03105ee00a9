"""Plain Pods and pod groups as Kueue's pod integration sees them, pure (``pkg/controller/jobs/pod``).

- A pod with ``kueue.x-k8s.io/queue-name`` and no group is one Workload, ``pod-<name>-<hash>``
  (:func:`events.jobkinds.naming.workload_name` of kind ``Pod``, core group), with one podSet
  ``main`` of count 1 whose template is the pod's spec.
- A pod group is the pods sharing ``kueue.x-k8s.io/pod-group-name`` (a label; Kueue also reads an
  annotation of that name) in a namespace, each with ``kueue.x-k8s.io/pod-group-total-count``. Its
  Workload is named after the group (the group name itself, unless a pod names a prebuilt
  Workload) and is made only once the group has ``total`` runnable pods (not Failed); its podSets
  are one per *role*: the pods' role hash (``kueue.x-k8s.io/role-hash``, else
  :func:`role_hash` of the spec), count = pods of that role, sorted by name. With
  ``kueue.x-k8s.io/pod-group-fast-admission: "true"`` (a StatefulSet's pods) it is one podSet of
  ``total`` pods from the first runnable pod, made as soon as one pod is seen.
- Mismatches are refused as Kueue does: a total count on a pod without a group name (or a group
  name without a count), a count that is not a positive integer, pods of one group with different
  counts or queues (:class:`GroupError` names the pod and the label or annotation).
- Finished (:func:`group_finished`): a single pod when it Succeeded or Failed (succeeded iff
  Succeeded, with ``status.message``); a group when ``total`` pods Succeeded, or, with a pod
  marked ``kueue.x-k8s.io/retriable-in-group: "false"``, when none is still running; a serving
  group (``kueue.x-k8s.io/pod-group-serving: "true"``) never.

The role hash is SHA-256 over Go's JSON of the fields that matter for admission
(``utilpod.GenerateRoleHash``: containers' and init containers' requests and ports, node selector,
affinity, tolerations, runtime class, priority, topology spread, overhead, resource claims),
first 8 hex digits. Quantities are written in Kubernetes' canonical form and ports and
tolerations in Go's field order; affinity, topology spread constraints and resource claims are
written in the order the manifest gives their fields (Go writes its struct order), so for those
the hash may differ from Kueue's. A pod's webhook-set ``role-hash`` annotation always wins.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from events.cluster import (
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    POD_GROUP_FAST_ADMISSION_ANNOTATION,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_SERVING_ANNOTATION,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    POD_SUSPENDING_PARENT_ANNOTATION,
    PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL,
    RETRIABLE_IN_GROUP_ANNOTATION,
    ROLE_HASH_ANNOTATION,
)
from events.jobkinds.base import Finished
from events.jobkinds.naming import workload_name
from events.quantity import QuantityError, parse_fraction

GROUP_NAME: Final = POD_GROUP_NAME_LABEL
GROUP_TOTAL_COUNT: Final = POD_GROUP_TOTAL_COUNT_ANNOTATION
FAST_ADMISSION: Final = POD_GROUP_FAST_ADMISSION_ANNOTATION
SERVING: Final = POD_GROUP_SERVING_ANNOTATION
ROLE_HASH: Final = ROLE_HASH_ANNOTATION
RETRIABLE_IN_GROUP: Final = RETRIABLE_IN_GROUP_ANNOTATION
IS_GROUP_WORKLOAD: Final = IS_GROUP_WORKLOAD_ANNOTATION
PREBUILT_WORKLOAD: Final = PREBUILT_WORKLOAD_LABEL
SUSPENDED_BY_PARENT: Final = POD_SUSPENDING_PARENT_ANNOTATION
MANAGED: Final = MANAGED_LABEL
MAIN: Final = "main"
UNMANAGED_NAMESPACES: Final = ("kube-system", "kueue-system")
"""Kueue's default ``managedJobsNamespaceSelector``: pods there are never Kueue's."""
MAX_POD_SETS: Final = 8


class GroupError(ValueError):
    """A pod (or group) Kueue refuses: which pod, which label/annotation, why."""

    def __init__(self, pod: str, field: str, message: str) -> None:
        super().__init__(f"Pod {pod}: {field}: {message}")
        self.pod, self.field, self.message = pod, field, message


@dataclass(frozen=True)
class PodInfo:
    """What the pod integration reads of a pod."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    phase: str = ""
    message: str = ""

    @property
    def shown(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def queue(self) -> str | None:
        return self.labels.get(QUEUE_NAME_LABEL)

    @property
    def group(self) -> str:
        """The pod group's name (label, else annotation); empty when it is a pod of its own."""
        return self.labels.get(GROUP_NAME) or self.annotations.get(GROUP_NAME) or ""

    @property
    def terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def obj_of(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_info(obj: Mapping[str, Any], namespace: str = "") -> PodInfo:
    """A pod as the API (or a manifest) gives it."""
    meta = obj_of(obj.get("metadata"))
    status = obj_of(obj.get("status"))
    spec = obj_of(obj.get("spec"))

    def strings(value: object) -> dict[str, str]:
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}

    name = str(meta.get("name") or "")
    ns = str(meta.get("namespace") or namespace or "default")
    uid = str(meta.get("uid") or hashlib.sha1(f"{ns}/{name}".encode(), usedforsecurity=False).hexdigest()[:32])
    return PodInfo(namespace=ns, name=name, uid=uid, labels=strings(meta.get("labels")),
                   annotations=strings(meta.get("annotations")), spec=spec,
                   phase=str(status.get("phase") or ""), message=str(status.get("message") or ""))


def managed(pod: PodInfo) -> bool:
    """Kueue's pod webhook with its defaults (``manageJobsWithoutQueueName: false``, the namespace
    selector excluding kube-system and kueue-system): a pod with a queue-name label, elsewhere."""
    return pod.queue is not None and pod.namespace not in UNMANAGED_NAMESPACES


def pod_workload_name(pod: PodInfo) -> str:
    """``pod-<name>-<hash>`` (``GetWorkloadNameForPod``), or the pod's prebuilt Workload."""
    return pod.labels.get(PREBUILT_WORKLOAD) or workload_name("Pod", "", pod.name, pod.uid)


# --- the role hash -----------------------------------------------------------------------------

_BINARY: Final = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL: Final = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3),
                   ("u", -6), ("n", -9))


def canonical_quantity(value: object) -> str:
    """A quantity as Kubernetes writes it back (``resource.Quantity.String``): binary suffixes stay
    binary when the value is a whole number of them, otherwise the largest decimal SI suffix that
    keeps the number whole (rounded up to nano units)."""
    try:
        amount = parse_fraction(value)
    except QuantityError:
        return str(value)
    text = str(value).strip()
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if amount == 0:
        return "0"
    if text.endswith("i") and amount.denominator == 1:
        for suffix, unit in _BINARY:
            if amount % unit == 0:
                return f"{sign}{amount // unit}{suffix}"
        return f"{sign}{amount}"
    nanos = int(-(-amount * 10**9 // 1))  # ceil to nano units
    for suffix, exp in _DECIMAL:
        unit = 10 ** (exp + 9)
        if nanos % unit == 0:
            return f"{sign}{int(nanos // unit)}{suffix}"
    return f"{sign}{int(nanos)}n"


def _go_ordered(value: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """A struct as Go writes it: its fields in declaration order, empty ones left out (omitempty)."""
    out = {k: value[k] for k in order if value.get(k) not in (None, "", 0, [], {})}
    out.update({k: v for k, v in value.items() if k not in order})
    return out


def _requests(container: Mapping[str, Any]) -> dict[str, str] | None:
    resources = container.get("resources")
    requests = resources.get("requests") if isinstance(resources, Mapping) else None
    if not isinstance(requests, Mapping) or not requests:
        return None
    return {str(k): canonical_quantity(v) for k, v in sorted(requests.items())}


def _containers_shape(containers: object) -> list[dict[str, Any]] | None:
    if not isinstance(containers, list) or not containers:
        return None
    out = []
    for c in containers:
        c = c if isinstance(c, Mapping) else {}
        ports = c.get("ports")
        shaped = [_go_ordered(p, ("name", "hostPort", "containerPort", "protocol", "hostIP"))
                  if isinstance(p, Mapping) else p for p in ports] if isinstance(ports, list) and ports else None
        if shaped is not None and isinstance(ports, list):
            for p, raw in zip(shaped, ports, strict=True):
                if isinstance(raw, Mapping) and "containerPort" in raw:
                    p["containerPort"] = raw["containerPort"]  # not omitempty
        out.append({"ports": shaped, "resources": {"requests": _requests(c)}})
    return out


def _nonempty(value: object) -> object:
    return value if value not in (None, [], {}) else None


def role_hash(spec: Mapping[str, Any]) -> str:
    """Kueue's role of a pod: the first 8 hex digits of SHA-256 over its admission shape."""
    text = json.dumps({"spec": spec_shape(spec)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def spec_shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod spec that matter for admission (Kueue's ``SpecShape``): what the role hash
    is made of, and what a queued pod group's template may not change."""
    tolerations = spec.get("tolerations")
    shape: dict[str, Any] = {
        "affinity": _nonempty(spec.get("affinity")),
        "containers": _containers_shape(spec.get("containers")),
        "initContainers": _containers_shape(spec.get("initContainers")),
        "nodeSelector": _nonempty(spec.get("nodeSelector")),
        "overhead": ({str(k): canonical_quantity(v) for k, v in spec["overhead"].items()}
                     if isinstance(spec.get("overhead"), Mapping) and spec["overhead"] else None),
        "priority": spec.get("priority"),
        "resourceClaims": _nonempty(spec.get("resourceClaims")),
        "runtimeClassName": spec.get("runtimeClassName"),
        "tolerations": [_go_ordered(t, ("key", "operator", "value", "effect", "tolerationSeconds"))
                        if isinstance(t, Mapping) else t for t in tolerations]
        if isinstance(tolerations, list) and tolerations else None,
        "topologySpreadConstraints": _nonempty(spec.get("topologySpreadConstraints")),
    }
    resources = spec.get("resources")
    if isinstance(resources, Mapping):
        requests = resources.get("requests")
        shape["resources"] = ({str(k): canonical_quantity(v) for k, v in requests.items()}
                              if isinstance(requests, Mapping) and requests else None)
    return shape


def role_of(pod: PodInfo) -> str:
    return pod.annotations.get(ROLE_HASH) or role_hash(pod.spec)


# --- groups ------------------------------------------------------------------------------------


def _count_field(pod: PodInfo) -> str:
    return f"metadata.annotations.{GROUP_TOTAL_COUNT}"


def total_count(pod: PodInfo) -> int | None:
    """The pod's group total count; ``None`` for a pod of its own. Kueue's pod webhook rules."""
    raw = pod.annotations.get(GROUP_TOTAL_COUNT)
    if not pod.group:
        if raw is not None:
            raise GroupError(pod.shown, f"metadata.labels.{GROUP_NAME}",
                             f"required: both the '{GROUP_TOTAL_COUNT}' annotation and the '{GROUP_NAME}' "
                             "label should be set")
        return None
    if raw is None:
        raise GroupError(pod.shown, _count_field(pod), f"required: both the '{GROUP_TOTAL_COUNT}' annotation "
                                                       f"and the '{GROUP_NAME}' label should be set")
    try:
        value = int(raw.strip()) if raw.strip().lstrip("+-").isdigit() else None
    except ValueError:
        value = None
    if value is None:
        raise GroupError(pod.shown, _count_field(pod), f"invalid value {raw[:40]!r}: not an integer")
    if value < 1:
        raise GroupError(pod.shown, _count_field(pod), f"invalid value {raw[:40]!r}: group total count should "
                                                       "be greater than zero")
    return value


def fast(pod: PodInfo) -> bool:
    return pod.annotations.get(FAST_ADMISSION) == "true"


def serving(pod: PodInfo) -> bool:
    return pod.annotations.get(SERVING) == "true"


def runnable(pod: PodInfo) -> bool:
    """Kueue's ``isPodRunnableOrSucceeded``: not Failed (and not being deleted, which a manifest never is)."""
    return pod.phase != "Failed"


@dataclass(frozen=True)
class RolePodSet:
    """One podSet of a group: its name (the role hash, or ``main``), its count, the pod it is read from."""

    name: str
    count: int
    pod: PodInfo


def check_group(pods: Sequence[PodInfo]) -> int:
    """The group's total count, all its live pods agreeing on it and on the queue (Kueue's
    ``validatePodGroupMetadata``); the first pod is the one reconciled."""
    first = pods[0]
    total = total_count(first)
    assert total is not None
    for pod in pods[1:]:
        if pod.phase == "Failed":
            continue
        if pod.queue != first.queue:
            raise GroupError(pod.shown, f"metadata.labels.{QUEUE_NAME_LABEL}",
                             f"pods '{first.name}' and '{pod.name}' of group '{first.group}' have different queue "
                             f"names: {first.queue}!={pod.queue}")
        theirs = total_count(pod)
        if theirs != total:
            raise GroupError(pod.shown, _count_field(pod),
                             f"pods '{first.name}' and '{pod.name}' of group '{first.group}' have different "
                             f"'{GROUP_TOTAL_COUNT}' values: {total}!={theirs}")
    return total


def group_pod_sets(pods: Sequence[PodInfo]) -> list[RolePodSet] | None:
    """The group's podSets, or ``None`` while Kueue waits for more pods (fewer runnable pods than
    the total count, without fast admission). Extra pods beyond the total are not counted (Kueue
    deletes the newest extras)."""
    total = check_group(pods)
    active = [p for p in pods if runnable(p)]
    if not active:
        return None
    if fast(pods[0]):
        return [RolePodSet(role_of(active[0]), total, active[0])]
    if len(active) < total:
        return None
    roles: dict[str, RolePodSet] = {}
    for pod in active[:total]:
        role = role_of(pod)
        seen = roles.get(role)
        roles[role] = RolePodSet(role, seen.count + 1, seen.pod) if seen else RolePodSet(role, 1, pod)
    if len(roles) > MAX_POD_SETS:
        raise GroupError(pods[0].shown, f"metadata.labels.{GROUP_NAME}",
                         f"group '{pods[0].group}' has {len(roles)} different pod roles; at most {MAX_POD_SETS} "
                         "podSets fit in a Workload")
    return [roles[r] for r in sorted(roles)]


def group_workload_name(pods: Sequence[PodInfo]) -> str:
    return pods[0].labels.get(PREBUILT_WORKLOAD) or pods[0].group


def group_finished(pods: Sequence[PodInfo], total: int) -> Finished | None:
    """Kueue's ``Finished`` for a group (see the module docstring)."""
    if not pods or serving(pods[0]):
        return None
    succeeded = sum(p.phase == "Succeeded" for p in pods)
    active = any(not p.terminated for p in pods)
    unretriable = any(p.annotations.get(RETRIABLE_IN_GROUP) == "false" for p in pods)
    if succeeded == total or (not active and unretriable):
        return Finished(True, f"Pods succeeded: {succeeded}/{total}.")
    return None


def pod_finished(pod: PodInfo) -> Finished | None:
    if not pod.terminated:
        return None
    return Finished(pod.phase == "Succeeded", pod.message)
