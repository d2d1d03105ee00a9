"""LeaderWorkerSet on a cluster (``leaderworkerset.x-k8s.io/v1``), as Kueue's LeaderWorkerSet
reconciler treats it (``pkg/controller/jobs/leaderworkerset``); part of the pod group
reconciler's pass (:mod:`services.actuator.podgroups`), pure.

- A queued LeaderWorkerSet (a ``kueue.x-k8s.io/queue-name`` label, outside kube-system and
  kueue-system) has one Workload per replica ``i`` in ``0..replicas-1``,
  ``leaderworkerset-<name>-<i>-<hash>``, owned by the set, marked ``is-group-workload``, with the
  podSets of :func:`events.jobkinds.serving.lws_workloads`. A missing one is created; one of the
  set's whose index is past ``replicas`` (scaled down) is deleted, which frees its quota; all of
  them go when the set is gone (the pod group reconciler's orphan check).
- Each of its pods (labelled by the LWS controller with the set's name and its group index, owned
  by one of the set's StatefulSets) is labelled into its replica's group
  (:func:`events.jobkinds.serving.lws_pod_labels`), so that the Workload's admission lifts the gate
  from exactly that replica's pods, with the flavors of its podSet (``leader`` / ``worker`` /
  ``main``), and an eviction deletes them (the LWS controller makes new, gated ones).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from events.cluster import QUEUE_NAME_LABEL
from events.jobkinds import pods as p
from events.jobkinds import serving as s
from events.jobkinds.pod_documents import owner_ref, priority_fields, workload_body

LWS_PATH: Final = f"/apis/{s.LWS_GROUP}/v1"
Json = dict[str, Any]
Key = tuple[str, str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return p.obj_of(obj.get("metadata"))


class SetError(p.GroupError):
    """A LeaderWorkerSet Kueue cannot read: ``LeaderWorkerSet ns/name: field: why``."""

    def __init__(self, shown: str, field: str, message: str) -> None:
        super().__init__(shown, field, message)
        self.args = (f"{shown}: {field}: {message}",)


class _Where:
    def __init__(self, shown: str) -> None:
        self.shown = shown

    def error(self, field: str, message: str) -> Exception:
        return SetError(self.shown, field, message)

    def amount(self, resource: str, value: object, field: str) -> int:  # pragma: no cover - unused here
        raise self.error(field, "not read here")


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _shown(lws: Mapping[str, Any]) -> str:
    meta = _meta(lws)
    return f"LeaderWorkerSet {meta.get('namespace')}/{meta.get('name')}"


def queued(leaderworkersets: Sequence[Mapping[str, Any]]) -> dict[Key, Mapping[str, Any]]:
    """The queued LeaderWorkerSets by (namespace, name) (Kueue's default namespace selector)."""
    out: dict[Key, Mapping[str, Any]] = {}
    for x in leaderworkersets:
        meta = _meta(x)
        ns = str(meta.get("namespace"))
        if ns not in p.UNMANAGED_NAMESPACES and isinstance(p.obj_of(meta.get("labels")).get(QUEUE_NAME_LABEL), str):
            out[(ns, str(meta.get("name")))] = x
    return out


def workload_bodies(lws: Mapping[str, Any]) -> list[Json]:
    """The Workloads a queued LeaderWorkerSet stands for, one per replica (raises GroupError)."""
    meta = _meta(lws)
    name, uid, ns = str(meta.get("name")), str(meta.get("uid")), str(meta.get("namespace"))
    labels = {str(k): str(v) for k, v in p.obj_of(meta.get("labels")).items()}
    out = []
    for wl in s.lws_workloads(_Where(_shown(lws)), name, uid, lws):
        pod_sets = [{"name": ps.name, "count": ps.count, "template": {"spec": dict(ps.template.get("spec") or {})}}
                    for ps in wl.pod_sets]
        first_spec = wl.pod_sets[0].template.get("spec") or {}
        out.append(workload_body(ns, wl.name, labels[QUEUE_NAME_LABEL],
                                 [owner_ref(s.LEADERWORKERSET[0], s.LEADERWORKERSET[1], name, uid)], pod_sets,
                                 labels={}, annotations={p.IS_GROUP_WORKLOAD: "true"}, created=None,
                                 priority=priority_fields(labels, first_spec)))
    return out


def _owned_by(wl: Mapping[str, Any], uid: str) -> bool:
    return any(isinstance(r, Mapping) and (r.get("apiVersion"), r.get("kind")) == s.LEADERWORKERSET
               and str(r.get("uid")) == uid for r in _items(_meta(wl).get("ownerReferences")))


def plan_workloads(lws_by: Mapping[Key, Mapping[str, Any]], workloads: Mapping[Key, Mapping[str, Any]],
                   create: list[Json], delete: list[Key], errors: list[str]) -> None:
    """Each queued LeaderWorkerSet's missing replica Workloads created, those past its replicas deleted."""
    for (ns, _name), lws in sorted(lws_by.items()):
        try:
            bodies = workload_bodies(lws)
        except p.GroupError as e:
            errors.append(str(e))
            continue
        want = {str(b["metadata"]["name"]) for b in bodies}
        create += [b for b in bodies if (ns, str(b["metadata"]["name"])) not in workloads]
        uid = str(_meta(lws).get("uid"))
        delete += [key for key, wl in sorted(workloads.items())
                   if key[0] == ns and key[1] not in want and _owned_by(wl, uid)]


def set_of(pod: Mapping[str, Any], lws_by: Mapping[Key, Mapping[str, Any]]) -> tuple[bool, Mapping[str, Any] | None]:
    """(whether the pod is a LeaderWorkerSet's, that set if it is queued)."""
    meta = _meta(pod)
    name = p.obj_of(meta.get("labels")).get(s.LWS_NAME_LABEL)
    if not isinstance(name, str):
        return False, None
    return True, lws_by.get((str(meta.get("namespace")), name))


def pod_patch(pod: Mapping[str, Any], lws: Mapping[str, Any]) -> Json | None:
    """The merge patch putting one of the set's pods into its replica's group; None when it is in it
    already, or when the LWS controller has not given it its group index yet (Kueue waits too).
    Raises GroupError for a set whose size Kueue cannot read."""
    meta, lmeta = _meta(pod), _meta(lws)
    have_l = {str(k): str(v) for k, v in p.obj_of(meta.get("labels")).items()}
    have_a = {str(k): str(v) for k, v in p.obj_of(meta.get("annotations")).items()}
    index = have_l.get(s.LWS_GROUP_INDEX_LABEL)
    if index is None:
        return None
    labels, annotations = s.lws_pod_labels(str(lmeta.get("name")), str(lmeta.get("uid")), lws,
                                           _Where(_shown(lws)), index, have_a)
    if all(have_l.get(k) == v for k, v in labels.items()) and all(have_a.get(k) == v for k, v in annotations.items()):
        return None
    return {"metadata": {"resourceVersion": meta.get("resourceVersion"), "labels": labels, "annotations": annotations}}
