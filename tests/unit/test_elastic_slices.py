"""Elastic Jobs scaled down in place (services/core/slices.py), as Kueue's workload slices do:
the podSet count shrinks, ``status.admission`` stays, usage is the admitted usage scaled to the
new count (``PodSetResources.ScaledTo``), and the quota freed admits the next workload."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from events import objects as o
from events.manifests import Document, normalize
from events.messages import ObjectApplied
from services.app.simulate import fold_files_screened, run
from services.core.slices import scaled_down, scaled_usage
from services.core.snapshot import decode_state, encode_state
from services.core.state import fold
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload


def _psa(count: int, **usage: int) -> o.PodSetAssignment:
    return o.PodSetAssignment(name="main", flavors=tuple((r, "f") for r in sorted(usage)),
                              resource_usage=tuple(sorted(usage.items())), count=count)


@pytest.mark.parametrize(("psa", "count", "want"), [
    pytest.param(_psa(4, cpu=4000, memory=4096), 2, (("cpu", 2000), ("memory", 2048)), id="half the pods, half"),
    pytest.param(_psa(4, cpu=4000), 4, (("cpu", 4000),), id="the same count"),
    pytest.param(_psa(4, cpu=4000), 6, (("cpu", 4000),), id="a larger count keeps the admitted usage"),
    pytest.param(_psa(3, cpu=1000), 2, (("cpu", 666),), id="Kueue divides first: 1000/3*2"),
    pytest.param(_psa(0), 0, (), id="an empty podSet"),
])
def test_usage_is_scaled_to_the_new_count(psa: o.PodSetAssignment, count: int, want: tuple[Any, ...]) -> None:
    assert scaled_usage(psa, count) == want


def _ps(**counts: int) -> tuple[o.PodSet, ...]:
    return tuple(o.PodSet(name=n, count=c, requests=()) for n, c in counts.items())


@pytest.mark.parametrize(("before", "after", "want"), [
    pytest.param(_ps(main=4), _ps(main=2), True, id="fewer pods"),
    pytest.param(_ps(main=4), _ps(main=4), False, id="the same"),
    pytest.param(_ps(main=4), _ps(main=6), False, id="scaled up"),
    pytest.param(_ps(a=4, b=2), _ps(a=3, b=3), False, id="one down, one up"),
    pytest.param(_ps(a=4, b=2), _ps(a=3, b=2), True, id="one down, the other the same"),
    pytest.param(_ps(main=4), _ps(other=2), False, id="other podSets"),
])
def test_kueues_scaled_down(before: tuple[o.PodSet, ...], after: tuple[o.PodSet, ...], want: bool) -> None:
    assert scaled_down(before, after) is want


def _admitted(count: int) -> dict[str, Any]:
    body = a_workload("ns", "elastic").queue("lq").request(cpu="1").obj()
    body["spec"]["podSets"][0]["count"] = count
    body["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    body["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": count, "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": str(count)}}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "m",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    return body


def test_a_scaled_down_workload_frees_quota_for_the_next_one() -> None:
    nxt = a_workload("ns", "next").queue("lq").request(cpu="1").obj()
    nxt["spec"]["podSets"][0]["count"] = 2
    nxt["metadata"]["creationTimestamp"] = "2025-01-01T00:00:01Z"
    setup = [a_flavor("f").obj(), a_cluster_queue("cq").flavor("f", cpu="4").obj(),
             a_local_queue("ns", "lq", "cq").obj()]
    state, _ = fold_files_screened({"t.yaml": yaml.safe_dump_all([*setup, _admitted(4), nxt])})
    state = run(state, None).state
    assert state.workloads["ns/next"].admission is None  # 4 of 4 cpu held: parked as inadmissible
    shrunk = copy.deepcopy(_admitted(4))
    del shrunk["status"]
    shrunk["spec"]["podSets"][0]["count"] = 2
    obj = normalize(Document("t.yaml", 1, shrunk))
    assert isinstance(obj, o.Workload)
    fold(state, ObjectApplied(time=0, object=obj))
    elastic = state.workloads["ns/elastic"]
    assert elastic.usage == {("f", "cpu"): 2000}
    assert elastic.admission is not None and elastic.admission.pod_set_assignments[0].count == 4  # status kept
    # A snapshot restores the same usage: it is derived from the admission and the podSets.
    again = decode_state(encode_state(state))
    assert again.workloads["ns/elastic"].usage == {("f", "cpu"): 2000}
    result = run(state, None).state.workloads
    assert result["ns/next"].admission is not None
