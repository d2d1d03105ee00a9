"""The job reconciler's half of ``kueue.x-k8s.io/prebuilt-workload-name`` on a cluster, pure:
what to do with the existing Workload a job names (Kueue's ``ensureOneWorkload`` for a prebuilt
Workload, ``EnsurePrebuiltWorkloadOwnership``, ``ensurePrebuiltWorkloadInSync``).

- controlled by another object: left alone (Kueue ignores it; the job stays without a Workload);
- not controlled yet: adopted, the job its controller owner and ``kueue.x-k8s.io/job-uid`` its
  label, in one merge patch with the Workload's resourceVersion as precondition;
- not equivalent to the job (:func:`events.jobkinds.prebuilt.mismatch`): marked Finished with
  reason ``OutOfSync`` (after the adoption), as Kueue does.

A prebuilt Workload that does not exist yet is the shell's to wait for (the job stays suspended).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from events import objects as o
from events.cluster import JOB_UID_LABEL, KUEUE_GROUP
from events.jobkinds import prebuilt
from events.kueue_versions import respell
from events.manifests import Document, ManifestError, normalize

OUT_OF_SYNC_REASON = "OutOfSync"
OUT_OF_SYNC_MESSAGE = "The prebuilt workload is out of sync with its user job"


@dataclass(frozen=True)
class Adoption:
    patch: dict[str, Any] | None = None
    """The merge patch that adopts the Workload; ``None`` when it is the job's already (or foreign)."""
    foreign: str = ""
    """Why it is left alone: another object controls it."""
    out_of_sync: str = ""
    """Why it is not the job's Workload any more (it is marked Finished, OutOfSync)."""


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = meta.get("ownerReferences")
    for r in refs if isinstance(refs, list) else []:
        if isinstance(r, Mapping) and r.get("controller") is True:
            return r
    return None


def adoption(wl: Mapping[str, Any], job_wl: o.Workload, owner: Mapping[str, Any]) -> Adoption:
    """What to do with the prebuilt Workload ``wl`` (as the API returns it) for the job whose own
    Workload would be ``job_wl`` and whose owner reference is ``owner``."""
    meta = wl.get("metadata") if isinstance(wl.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    controller = _controller(meta)
    if controller is not None and controller.get("uid") != owner.get("uid"):
        return Adoption(foreign=f"Workload {meta.get('namespace')}/{meta.get('name')} is already controlled by "
                                f"{controller.get('kind')} {controller.get('name')}")
    problem = _mismatch(wl, job_wl)
    if controller is not None:
        return Adoption(out_of_sync=problem or "")
    refs = [dict(r) for r in (meta.get("ownerReferences") or []) if isinstance(r, Mapping)]
    patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                          "ownerReferences": [*refs, dict(owner)],
                          "labels": {JOB_UID_LABEL: str(owner.get("uid"))}}}
    return Adoption(patch=patch, out_of_sync=problem or "")


def _mismatch(wl: Mapping[str, Any], job_wl: o.Workload) -> str | None:
    body = {**wl, "apiVersion": str(wl.get("apiVersion") or f"{KUEUE_GROUP}/v1beta2"), "kind": "Workload"}
    meta = dict(body.get("metadata") or {})
    meta.pop("ownerReferences", None)  # read as a Workload of its own, to compare its podSets
    body["metadata"] = meta
    try:
        theirs = normalize(Document("cluster", 1, respell(body)))
    except ManifestError as e:
        return f"the Workload cannot be read: {e.field}: {e.message}"
    if not isinstance(theirs, o.Workload):
        return "the Workload cannot be read"
    return prebuilt.mismatch(job_wl, theirs)
