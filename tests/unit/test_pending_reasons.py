"""The reason of a pending workload's QuotaReserved=False, as Kueue v0.19 writes it (services/core/reasons.py).

With UnadmittedWorkloadsObservability (beta, on by default since Kueue 0.19) the scheduler writes
the granular reason it stopped at (``pkg/scheduler/scheduler.go``) and the workload controller
``Misconfigured`` / ``Suspended`` for a workload that cannot queue
(``pkg/controller/core/workload_controller.go``, ``getQueueBlocker``); with the gate off, the
older ``Pending`` / ``Inadmissible``.
"""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.messages import PendingReason
from services.core.reasons import GRANULAR
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_local_queue, a_namespace, a_workload, simulate


def test_every_pending_reason_of_ours_maps_to_one_of_kueues() -> None:
    assert set(GRANULAR) == set(PendingReason)


def _world(**cq: Any) -> list[Any]:
    cluster_queue = a_cluster_queue("cq").flavor("f", cpu=4)
    return [a_flavor("f"), a_namespace("ns", team="a"), cluster_queue.preemption(**cq) if cq else cluster_queue,
            a_local_queue("ns", "lq", "cq")]


def _stopped_cq() -> list[Any]:
    world = _world()
    world[2] = a_cluster_queue("cq").flavor("f", cpu=4).stop("Hold")
    return world


def _stopped_lq() -> list[Any]:
    world = _world()
    world[3] = a_local_queue("ns", "lq", "cq")
    world[3].body["spec"]["stopPolicy"] = "Hold"
    return world


def _selector_mismatch() -> list[Any]:
    world = _world()
    world[2] = a_cluster_queue("cq").flavor("f", cpu=4).selector({"matchLabels": {"team": "b"}})
    return world


CASES = [
    pytest.param(_world(), [a_workload("ns", "w").queue("lq").request(cpu="2").created(0),
                            a_workload("ns", "x").queue("lq").request(cpu="3").created(1)],
                 "ns/x", "WaitingForQuota", "Pending", id="no room left: WaitingForQuota"),
    pytest.param(_world(), [a_workload("ns", "x").queue("lq").request(cpu="5")],
                 "ns/x", "ExceedsMaxQuota", "Pending", id="more than the ClusterQueue can hold: ExceedsMaxQuota"),
    pytest.param(_world(), [a_workload("ns", "x").queue("lq").request(gpu="1")],
                 "ns/x", "NoMatchingFlavor", "Pending", id="a resource no flavor covers: NoMatchingFlavor"),
    pytest.param(_world(within="LowerPriority"),
                 [a_workload("ns", "low").queue("lq").request(cpu="4").priority(1).created(0)
                  .admitted("cq", {"cpu": "f"}),
                  a_workload("ns", "x").queue("lq").request(cpu="4").priority(10).created(1)],
                 "ns/x", "WaitingForPreemptedWorkloads", "Pending",
                 id="its victims are leaving: WaitingForPreemptedWorkloads"),
    pytest.param(_selector_mismatch(), [a_workload("ns", "x").queue("lq").request(cpu="1")],
                 "ns/x", "Misconfigured", "Pending", id="namespace not selected: Misconfigured"),
    pytest.param(_world(), [a_workload("ns", "x").queue("nowhere").request(cpu="1")],
                 "ns/x", "Misconfigured", "Inadmissible", id="no such LocalQueue: Misconfigured"),
    pytest.param(_stopped_lq(), [a_workload("ns", "x").queue("lq").request(cpu="1")],
                 "ns/x", "Suspended", "Inadmissible", id="a stopped LocalQueue: Suspended"),
    pytest.param(_stopped_cq(), [a_workload("ns", "x").queue("lq").request(cpu="1")],
                 "ns/x", "Suspended", "Inadmissible", id="a stopped ClusterQueue: Suspended"),
]


@pytest.mark.parametrize(("world", "workloads", "key", "granular", "legacy"), CASES)
def test_quota_reserved_false_carries_kueues_reason(
    world: list[Any], workloads: list[Any], key: str, granular: str, legacy: str,
) -> None:
    cycles = 1 if granular == "WaitingForPreemptedWorkloads" else None
    assert simulate(*world, *workloads, cycles=cycles).condition(key, "QuotaReserved") == ("False", granular)
    off = a_configuration().feature_gate("UnadmittedWorkloadsObservability", False)
    assert simulate(off, *world, *workloads, cycles=cycles).condition(key, "QuotaReserved") == ("False", legacy)


def test_the_gate_is_on_unless_the_configuration_turns_it_off() -> None:
    assert o.Configuration().unadmitted_workloads_observability
    assert simulate(a_configuration()).state.config.unadmitted_workloads_observability
    off = a_configuration().feature_gate("UnadmittedWorkloadsObservability", False)
    assert not simulate(off).state.config.unadmitted_workloads_observability
