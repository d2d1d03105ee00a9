"""Pods that join a pod group after its Workload was admitted: released by the pod group reconciler.

The actuator lifts the gate from the pods a group has when the admission is applied
(:func:`services.actuator.podgroups.release_pods`). A StatefulSet's or LeaderWorkerSet's Workload is
made from the object itself, so it can be admitted before its controller has made every pod (a
StatefulSet makes them one by one; the LWS controller makes a replica's workers after its leader),
and a replacement pod can come while the Workload stays admitted. Kueue's pod group reconciler
ungates such pods too; here each pass of :class:`services.actuator.podgroups.PodGroupReconciler`
releases a gated member of a group whose Workload is admitted (``status.admission`` and
``Admitted=True``), with that podSet's flavors' node labels and tolerations, after reading the
Workload again (so that one evicted meanwhile is not released), in one conditional merge patch;
never more pods of a podSet than its count (:func:`late_members`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes_asyncio import client

from events.cluster import KUEUE_GROUP, KUEUE_VERSION, ConditionStatus, ConditionType
from events.jobkinds import pods as p
from services.actuator.kubeapi import InvalidObject, KubeApiError
from services.actuator.kubeplan import FlavorScheduling, flavor_scheduling, merged_scheduling
from services.actuator.tree_reconciler import raw_call

KUEUE_API = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
Json = dict[str, Any]
Scheduling = dict[str, tuple[dict[str, str], list[Json]]]


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def admitted(wl: Mapping[str, Any]) -> bool:
    """Whether a Workload is admitted now: its admission is there and ``Admitted`` is True."""
    status = p.obj_of(wl.get("status"))
    if not isinstance(status.get("admission"), Mapping):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == ConditionType.ADMITTED
               and c.get("status") == ConditionStatus.TRUE for c in _items(status.get("conditions")))


def late_members(members: Sequence[tuple[p.PodInfo, bool]], wl: Mapping[str, Any]) -> list[p.PodInfo]:
    """The gated members (``(pod, gated)``, in name order) to release: per podSet (role), only as many
    as the Workload admits beyond those running already; an excess pod (a StatefulSet scaled up
    around Kueue's webhook) stays gated, as in Kueue, and never runs without quota."""
    room: dict[str, int] = {}
    for ps in _items(p.obj_of(wl.get("spec")).get("podSets")):
        ps = p.obj_of(ps)
        count = ps.get("count")
        room[str(ps.get("name"))] = count if isinstance(count, int) and not isinstance(count, bool) else 0
    for info, gated in members:
        if not gated and not info.terminated:
            room[p.role_of(info)] = room.get(p.role_of(info), 0) - 1
    out = []
    for info, gated in members:
        role = p.role_of(info)
        if gated and room.get(role, 0) > 0:
            room[role] -= 1
            out.append(info)
    return out


def flavors_of(wl: Mapping[str, Any]) -> list[str]:
    """The flavors a Workload's admission assigns, sorted, each once."""
    names: set[str] = set()
    for psa in _items(p.obj_of(p.obj_of(wl.get("status")).get("admission")).get("podSetAssignments")):
        names.update(str(f) for f in p.obj_of(p.obj_of(psa).get("flavors")).values())
    return sorted(names)


def scheduling(wl: Mapping[str, Any], flavors: Mapping[str, FlavorScheduling]) -> Scheduling:
    """Each podSet's flavors' node labels and tolerations, as the actuator gives them on admission."""
    out: Scheduling = {}
    for psa in _items(p.obj_of(p.obj_of(wl.get("status")).get("admission")).get("podSetAssignments")):
        psa = p.obj_of(psa)
        names = sorted({str(f) for f in p.obj_of(psa.get("flavors")).values()})
        out[str(psa.get("name"))] = merged_scheduling(flavors[n] for n in names if n in flavors)
    return out


async def _flavor(api: client.ApiClient, name: str, cache: dict[str, FlavorScheduling | None]) -> None:
    if name in cache:
        return
    cache[name] = None
    with contextlib.suppress(KubeApiError, InvalidObject):  # a flavor gone or malformed: its pods wait
        obj = await raw_call(api, "GET", f"{KUEUE_API}/resourceflavors/{name}")
        cache[name] = flavor_scheduling(obj or {})


ReleasePatch = Callable[[Mapping[str, Any], Mapping[str, str], Sequence[Mapping[str, Any]]], Json | None]
PodSetOf = Callable[[Mapping[str, Any], Mapping[str, Any]], str]


async def release_late(api: client.ApiClient, late: Sequence[tuple[Json, str]], release_patch: ReleasePatch,
                       pod_set_of: PodSetOf) -> int:
    """Release each (pod, Workload name) of ``late`` whose Workload is still admitted; how many were."""
    released = 0
    cache: dict[str, FlavorScheduling | None] = {}
    for pod, wl_name in late:
        ns, name = str(p.obj_of(pod.get("metadata")).get("namespace")), str(p.obj_of(pod.get("metadata")).get("name"))
        try:
            wl = await raw_call(api, "GET", f"{KUEUE_API}/namespaces/{ns}/workloads/{wl_name}")
        except KubeApiError:
            continue
        if not isinstance(wl, Mapping) or not admitted(wl):
            continue
        for flavor in flavors_of(wl):
            await _flavor(api, flavor, cache)
        known = {k: v for k, v in cache.items() if v is not None}
        labels, tolerations = scheduling(wl, known).get(pod_set_of(pod, wl), ({}, []))
        patch = release_patch(pod, labels, tolerations)
        if patch is None:
            continue
        with contextlib.suppress(KubeApiError):  # 409: changed meanwhile, next pass
            await raw_call(api, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body=patch,
                           content_type="application/merge-patch+json")
            released += 1
    return released
