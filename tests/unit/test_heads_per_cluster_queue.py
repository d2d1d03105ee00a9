"""``headsPerClusterQueue``: heads per ClusterQueue per cycle (services/core/heads.py).

1 (the default) is Kueue's cycle exactly; N > 1 takes up to N heads of a BestEffortFIFO
ClusterQueue, in queue order, with the quota taken by each checked before the next.
"""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.manifests import Document, ManifestError, normalize
from events.messages import AdmitWorkload, ObjectApplied
from services.core.cycle import run_cycle
from services.core.state import State, fold


def _config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **fields}


def test_a_configuration_without_the_field_takes_one_head_as_kueue() -> None:
    cfg = normalize(Document("config.yaml", 1, _config()))
    assert isinstance(cfg, o.Configuration)
    assert cfg.heads_per_cluster_queue == 1


def test_the_field_is_read_and_bounded() -> None:
    cfg = normalize(Document("config.yaml", 1, _config(headsPerClusterQueue=8)))
    assert isinstance(cfg, o.Configuration)
    assert cfg.heads_per_cluster_queue == 8
    for bad in (0, -1, 1001):
        with pytest.raises(ManifestError, match="headsPerClusterQueue: must be between 1"):
            normalize(Document("config.yaml", 1, _config(headsPerClusterQueue=bad)))


def _world(heads: int, *, strict: bool = False, nominal_cpu: int = 4, cohort: str = "") -> State:
    state = State()
    objs: list[o.AnyObject] = [
        o.Configuration(heads_per_cluster_queue=heads, wait_for_pods_ready=False),
        o.ResourceFlavor(name="default"),
        o.ClusterQueue(
            name="cq", cohort=cohort, namespace_selector=o.LabelSelector(),
            queueing_strategy=o.QueueingStrategy.STRICT_FIFO if strict else o.QueueingStrategy.BEST_EFFORT_FIFO,
            resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                o.FlavorQuotas(name="default", resources=(("cpu", o.Quota(nominal=nominal_cpu * 1000)),)),)),),
        ),
        o.LocalQueue(namespace="ns", name="lq", cluster_queue="cq"),
    ]
    for obj in objs:
        fold(state, ObjectApplied(time=0, object=obj))
    return state


def _submit(state: State, name: str, cpu: int, *, priority: int = 0, at: int = 1) -> None:
    fold(state, ObjectApplied(time=at, object=o.Workload(
        namespace="ns", name=name, uid=name, queue_name="lq", creation_time=at, priority=priority,
        pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", cpu * 1000),)),))))


def _admitted(state: State) -> list[str]:
    return [d.name for d in run_cycle(state).decisions if isinstance(d, AdmitWorkload)]


def test_default_one_head_admits_one_workload_per_cycle() -> None:
    state = _world(1)
    for i in range(4):
        _submit(state, f"w{i}", 1, at=i + 1)
    assert [_admitted(state) for _ in range(4)] == [["w0"], ["w1"], ["w2"], ["w3"]]


def test_n_heads_admit_up_to_n_per_cycle_in_queue_order() -> None:
    state = _world(3)
    for i in range(5):
        _submit(state, f"w{i}", 1, at=i + 1)
    assert _admitted(state) == ["w0", "w1", "w2"]
    assert _admitted(state) == ["w3"]  # the quota (4 cpu) is full after w3


def test_quota_taken_by_an_earlier_head_is_checked_for_the_next() -> None:
    state = _world(3, nominal_cpu=4)
    _submit(state, "big", 3, priority=10, at=1)
    _submit(state, "mid", 2, at=2)
    _submit(state, "small", 1, at=3)
    # All three are nominated as fitting against 4 free cpu; walked in Kueue's order, "big" takes 3,
    # "mid" no longer fits (skipped, back in the queue), "small" does.
    result = run_cycle(state)
    assert [d.name for d in result.decisions if isinstance(d, AdmitWorkload)] == ["big", "small"]
    skipped = {h.key: h for h in result.heads}
    assert set(skipped) == {"ns/mid"}
    assert not skipped["ns/mid"].parked
    assert state.workloads["ns/mid"].pending_reason == "SkippedInCycle"


def test_a_strict_fifo_queue_still_takes_one_head() -> None:
    state = _world(3, strict=True)
    for i in range(3):
        _submit(state, f"w{i}", 1, at=i + 1)
    assert _admitted(state) == ["w0"]


def test_more_heads_than_pending_takes_them_all() -> None:
    state = _world(10, nominal_cpu=100)
    for i in range(3):
        _submit(state, f"w{i}", 1, at=i + 1)
    assert _admitted(state) == ["w0", "w1", "w2"]
    assert _admitted(state) == []
