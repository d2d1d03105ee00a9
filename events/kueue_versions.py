"""Kueue's API versions without Kueue's conversion webhook: respell a body for the version it is at.

kueuelog's CRDs (deploy/crds) serve every Kueue kind at v1beta1 and v1beta2 (Cohort also at
v1alpha1) with conversion strategy ``None``: the API server stores what a client wrote and, read
at another version, only rewrites ``apiVersion``. So that nothing is pruned, every version's schema
carries the union of the versions' spellings; an object written as v1beta1 (``spec.cohort``)
and read as v1beta2 still says ``spec.cohort``. :func:`respell` is the conversion Kueue's webhook
would have done, applied by the reader: it turns a body into the spelling of its ``apiVersion``
(what Kueue's ``apis/kueue/v1beta1/*_conversion.go`` maps), so that ``events.manifests`` —
strict per version, as Kueue's CRDs are for a manifest — reads it.

The renames (v1beta1 <-> v1beta2):

- ClusterQueue ``spec.cohort`` <-> ``spec.cohortName``; v1beta1's ``spec.admissionChecks`` (names)
  -> ``spec.admissionChecksStrategy.admissionChecks[].name``; v1beta1's fungibility ``Borrow`` /
  ``Preempt`` -> ``MayStopSearch``.
- Cohort ``spec.parent`` (v1alpha1) <-> ``spec.parentName`` (v1beta1 takes both, v1beta2 the latter).
- Workload ``spec.priorityClassName`` + ``spec.priorityClassSource`` <-> ``spec.priorityClassRef``;
  ``status.accumulatedPastExexcutionTimeSeconds`` (sic) <-> ``accumulatedPastExecutionTimeSeconds``.
- LocalQueue ``status.flavorUsage`` <-> ``status.flavorsUsage``.
- MultiKueueCluster ``spec.kubeConfig`` / ``spec.clusterProfileRef`` (v1beta1) <->
  ``spec.clusterSource.kubeConfig`` / ``.clusterProfileRef``.

Two spellings that disagree (the CRDs' rules refuse that on write) are left as they are, so the
parser refuses the object naming the field. Pure: no I/O, the input is not modified.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, Final

from events.cluster import KUEUE_GROUP, POD_PRIORITY_CLASS_SOURCE, WORKLOAD_PRIORITY_CLASS_SOURCE

STORAGE_VERSION: Final = "v1beta2"
"""The version our CRDs store, and the one the watcher reads and the actuator writes."""

_REF_OF_SOURCE: Final = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: (KUEUE_GROUP, "WorkloadPriorityClass"),
    POD_PRIORITY_CLASS_SOURCE: ("scheduling.k8s.io", "PriorityClass"),
}
_SOURCE_OF_REF: Final = {ref: source for source, ref in _REF_OF_SOURCE.items()}

Json = dict[str, Any]


def _rename(d: Json, old: str, new: str) -> None:
    """Move ``d[old]`` to ``d[new]``; an empty ``old`` is dropped; a conflicting ``new`` keeps both."""
    if old not in d:
        return
    value = d[old]
    if value in (None, ""):
        del d[old]
    elif d.get(new) in (None, "", value):
        del d[old]
        d[new] = value


def _cluster_queue(body: Json, version: str) -> None:
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return
    if version == "v1beta1":
        _rename(spec, "cohortName", "cohort")
        return
    _rename(spec, "cohort", "cohortName")
    checks = spec.get("admissionChecks")
    if isinstance(checks, list) and not spec.get("admissionChecksStrategy"):
        del spec["admissionChecks"]
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    elif checks == []:
        del spec["admissionChecks"]
    ff = spec.get("flavorFungibility")
    if isinstance(ff, dict):
        if ff.get("whenCanBorrow") == "Borrow":
            ff["whenCanBorrow"] = "MayStopSearch"
        if ff.get("whenCanPreempt") == "Preempt":
            ff["whenCanPreempt"] = "MayStopSearch"


def _cohort(body: Json, version: str) -> None:
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return
    if version == "v1alpha1":
        _rename(spec, "parentName", "parent")
    elif version == "v1beta2":
        _rename(spec, "parent", "parentName")


def _workload(body: Json, version: str) -> None:
    spec = body.get("spec")
    if isinstance(spec, dict):
        if version == "v1beta1":
            ref = spec.get("priorityClassRef")
            if isinstance(ref, dict) and not spec.get("priorityClassName"):
                source = _SOURCE_OF_REF.get((str(ref.get("group")), str(ref.get("kind"))))
                if source is not None and isinstance(ref.get("name"), str):
                    del spec["priorityClassRef"]
                    spec["priorityClassName"] = ref["name"]
                    spec["priorityClassSource"] = source
        else:
            for key in ("priorityClassName", "priorityClassSource"):
                if spec.get(key) in (None, ""):
                    spec.pop(key, None)
            name, source = spec.get("priorityClassName"), spec.get("priorityClassSource")
            group_kind = _REF_OF_SOURCE.get(source or POD_PRIORITY_CLASS_SOURCE)
            if name and not spec.get("priorityClassRef") and group_kind is not None:
                spec["priorityClassRef"] = {"group": group_kind[0], "kind": group_kind[1], "name": name}
                spec.pop("priorityClassName")
                spec.pop("priorityClassSource", None)
    status = body.get("status")
    if isinstance(status, dict):
        old, new = "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds"
        if version == "v1beta1":
            _rename(status, new, old)
        else:
            _rename(status, old, new)


def _local_queue(body: Json, version: str) -> None:
    status = body.get("status")
    if isinstance(status, dict):
        if version == "v1beta1":
            _rename(status, "flavorsUsage", "flavorUsage")
        else:
            _rename(status, "flavorUsage", "flavorsUsage")


def _multikueue_cluster(body: Json, version: str) -> None:
    spec = body.get("spec")
    if not isinstance(spec, dict):
        return
    if version == "v1beta1":
        source = spec.get("clusterSource")
        if isinstance(source, dict) and not any(k in spec for k in source):
            del spec["clusterSource"]
            spec.update(source)
    elif any(k in spec for k in ("kubeConfig", "clusterProfileRef")) and "clusterSource" not in spec:
        spec["clusterSource"] = {k: spec.pop(k) for k in ("kubeConfig", "clusterProfileRef") if k in spec}


_BY_KIND: Final[Mapping[str, Callable[[Json, str], None]]] = {
    "MultiKueueCluster": _multikueue_cluster,
    "ClusterQueue": _cluster_queue,
    "Cohort": _cohort,
    "Workload": _workload,
    "LocalQueue": _local_queue,
}


def respell(body: Mapping[str, Any]) -> Json:
    """``body`` spelled for its own ``apiVersion``; anything but a Kueue kind we convert comes back
    unchanged (as a copy)."""
    out = copy.deepcopy(dict(body))
    api_version = out.get("apiVersion")
    kind = out.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return out
    group, _, version = api_version.rpartition("/")
    convert = _BY_KIND.get(kind)
    if group == KUEUE_GROUP and convert is not None:
        convert(out, version)
    return out
