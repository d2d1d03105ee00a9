"""The shape every job kind shares: what a kind is, how its podSets are read, and the helpers
its module uses to read fields of a raw manifest with located errors.

A kind's module gives one :class:`JobKind`: its group, version, kind and plural, where its
suspension flag lives, and a function from the object's body to its podSets
(:class:`PodSetSource`: a name, a count and the raw pod template with the path to it). Everything
else (the Workload's name, priority, owner, suspend and resume patches) is built here or in
:mod:`events.jobkinds.patches` from those, the same way for every kind.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.podspec import Where

PathPart = str | int
"""A step into a manifest: a mapping key or a list index."""

INT32_MAX = 2**31 - 1


def dotted(path: Sequence[PathPart]) -> str:
    """``("spec", "replicatedJobs", 0, "template")`` as ``spec.replicatedJobs[0].template``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def pointer(path: Sequence[PathPart]) -> str:
    """The JSON Pointer (RFC 6901) of a path, for JSON Patch operations."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@dataclass(frozen=True)
class PodSetSource:
    """One podSet of a job as its kind derives it: Kueue's podSet name, its pod count, and the pod
    template (raw, as written, or as the kind's controller would complete it) at ``path``."""

    name: str
    count: int
    template: Mapping[str, Any]
    path: tuple[PathPart, ...]
    min_count: int | None = None
    info_at: tuple[PathPart, ...] | None = None
    """Where the kind takes an admission's scheduling for this podSet instead of in its template
    (an AppWrapper's ``spec.components[i].podSetInfos[j]``); ``None``: in the template."""
    flat: bool = False
    """The admission's nodeSelector, tolerations, labels and annotations go directly into the object
    at ``path`` (a SparkApplication's ``spec.driver``), not into a pod template's spec and metadata."""


@dataclass(frozen=True)
class Finished:
    """The object ended: how, and the message its status gives."""

    succeeded: bool
    message: str = ""


PodSetsOf = Callable[[Where, Mapping[str, Any]], list[PodSetSource]]
PriorityOf = Callable[[Mapping[str, Any]], str]
FinishedOf = Callable[[Mapping[str, Any]], Finished | None]


def conditions_finished(succeeded: str, failed: str) -> FinishedOf:
    """Finished when ``status.conditions`` has ``succeeded`` or ``failed`` with status True (the first
    such condition decides), as Kueue reads JobSets and Kubeflow jobs."""

    def finished(body: Mapping[str, Any]) -> Finished | None:
        status = body.get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        for c in conditions if isinstance(conditions, list) else []:
            if isinstance(c, Mapping) and c.get("type") in (succeeded, failed) and c.get("status") == "True":
                message = c.get("message")
                return Finished(c.get("type") == succeeded, message if isinstance(message, str) else "")
        return None

    return finished


def _never(_body: Mapping[str, Any]) -> Finished | None:
    return None


def _no_priority(_body: Mapping[str, Any]) -> str:
    return ""


def _always(_body: Mapping[str, Any]) -> bool:
    return True


def _never_ready(_body: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class JobKind:
    """One kind of workload Kueue integrates, as far as kueuelog needs to know it."""

    group: str
    version: str
    kind: str
    plural: str
    suspend_path: tuple[str, ...]
    """Where the boolean that holds the job lives (``spec.suspend``, ``spec.runPolicy.suspend``)."""
    pod_sets: PodSetsOf
    priority_class: PriorityOf = _no_priority
    """The kind's own priority class (Kueue's ``JobWithPriorityClass``); empty when it has none,
    and then the first podSet template's ``priorityClassName`` is taken."""
    finished: FinishedOf = _never
    """Whether the object ended, read from its status as Kueue's integration reads it."""
    managed: Callable[[Mapping[str, Any]], bool] = _always
    """Whether a queued object is Kueue's to manage at all (a RayJob on an existing cluster is not)."""
    pods_ready: Callable[[Mapping[str, Any]], bool] = _never_ready
    """Whether all its pods are ready, as Kueue's integration reads it (:mod:`events.jobkinds.readiness`)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.api_version, self.kind)

    def suspended(self, body: Mapping[str, Any]) -> bool:
        """Whether the object is held: its suspend flag is ``true``."""
        at: Any = body
        for key in self.suspend_path:
            at = at.get(key) if isinstance(at, Mapping) else None
        return at is True


# --- reading a raw manifest with located errors ----------------------------------------------


def mapping(where: Where, value: object, path: Sequence[PathPart], *, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise where.error(dotted(path), "required field is missing")
        return {}
    if not isinstance(value, Mapping):
        raise where.error(dotted(path), f"expected an object, got {type(value).__name__}")
    return value


def sequence(where: Where, value: object, path: Sequence[PathPart]) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(dotted(path), f"expected an array, got {type(value).__name__}")
    return value


def count(where: Where, value: object, path: Sequence[PathPart], default: int, *, minimum: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(dotted(path), f"expected an integer, got {value!r}")
    if not minimum <= value <= INT32_MAX:
        raise where.error(dotted(path), f"must be between {minimum} and {INT32_MAX}, got {value}")
    return value


def pods(where: Where, factors: tuple[int, int], path: Sequence[PathPart], what: str) -> int:
    """A podSet's count as a product (replicas x pods per replica), at most a 32-bit integer as
    Kueue's Workload takes it; refused at the field that makes it too large."""
    total = factors[0] * factors[1]
    if total > INT32_MAX:
        raise where.error(dotted(path), f"{what} ({factors[0]} x {factors[1]} = {total}) must be at most {INT32_MAX}")
    return total


def text(where: Where, value: object, path: Sequence[PathPart], *, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise where.error(dotted(path), "required field is missing")
        return ""
    if not isinstance(value, str):
        raise where.error(dotted(path), f"expected a string, got {value!r}")
    return value


def boolean(where: Where, value: object, path: Sequence[PathPart]) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise where.error(dotted(path), f"expected a boolean, got {value!r}")
    return value


_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def pod_set_name(where: Where, raw: str, path: Sequence[PathPart]) -> str:
    """Kueue's podSet name for a replica type or group: the name lowercased
    (``NewPodSetReference``), which must then be an RFC 1123 label."""
    name = raw.lower()
    if len(name) > 63 or not _LABEL.fullmatch(name):
        raise where.error(dotted(path), f"invalid value {raw[:100]!r}: as a podSet name ({name[:100]!r}) it must be "
                                        "an RFC 1123 label (lowercase alphanumerics and '-', at most 63 characters)")
    return name


def pod_template(where: Where, value: object, path: tuple[PathPart, ...]) -> Mapping[str, Any]:
    """A pod template (``metadata`` and ``spec``) that has at least one container."""
    template = mapping(where, value, path, required=True)
    spec = mapping(where, template.get("spec"), (*path, "spec"), required=True)
    if not sequence(where, spec.get("containers"), (*path, "spec", "containers")):
        raise where.error(dotted((*path, "spec", "containers")), "must have at least 1 item")
    return template


def with_container(template: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``template`` with one more container (a sidecar a controller adds at pod creation)."""
    out = copy.deepcopy(dict(template))
    spec = dict(out.get("spec") or {})
    spec["containers"] = [*(spec.get("containers") or []), dict(container)]
    out["spec"] = spec
    return out
