"""A Workload nothing owns: the actuator marks its eviction and leaves the reservation to its owner."""

from __future__ import annotations

from events.cluster import EVICTED_ANNOTATION
from services.actuator.kubeplan import admitted_status
from services.actuator.standalone import evicted_mark_patch, evicting_status, is_standalone
from tests.unit.test_kube_actuator import admit, evict


def test_an_eviction_keeps_the_reservation_and_says_why() -> None:
    out = evicting_status(admitted_status({}, admit()), evict())
    assert out["admission"]["clusterQueue"] == "cq"
    got = {c["type"]: (c["status"], c["reason"]) for c in out["conditions"]}
    assert got == {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted"),
                   "Evicted": ("True", "Preempted"), "Preempted": ("True", "InClusterQueue")}


def test_the_mark_carries_the_decision_id_once() -> None:
    wl = {"metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "7"}}
    d = evict()
    want = {"metadata": {"resourceVersion": "7", "annotations": {EVICTED_ANNOTATION: d.id}}}
    assert evicted_mark_patch(wl, d) == want
    marked = {"metadata": {**wl["metadata"], "annotations": {EVICTED_ANNOTATION: d.id}}}
    assert evicted_mark_patch(marked, d) is None
    assert evicted_mark_patch(marked, evict(9)) is not None  # a later eviction has its own id


def test_only_a_workload_with_no_owner_is_standalone() -> None:
    assert is_standalone({"metadata": {"name": "wl"}})
    assert not is_standalone({"metadata": {"ownerReferences": [{"kind": "Pod", "name": "p"}]}})
