"""Kueue's resource transformations and excluded resources (services/core/resources.py).

The table restates the cases of Kueue's ``TestNewInfo`` (``pkg/workload/workload_test.go``, the
``transform*`` cases) in our terms: one podSet's requests as written, the transformations, and
the requests Kueue's ``totalRequestsFromPodSets`` gives the podSet (per pod times count).
"""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from events.manifests import Document, ManifestError, normalize
from events.quantity import parse_fraction, to_amount
from events.validation import INT64_MAX
from services.core.resources import per_pod_requests
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_job, a_local_queue, simulate


def _t(input_: str, strategy: str, *args: Any) -> o.ResourceTransformation:
    """A transformation: input, strategy, [multiplyBy], {output: factor per unit of input}."""
    multiply_by, outputs = (args[0], args[1]) if len(args) == 2 else ("", args[0])
    factors = [(name, f.numerator, f.denominator) for name, f in
               sorted((name, parse_fraction(text)) for name, text in outputs.items())]
    return o.ResourceTransformation(input=input_, strategy=strategy, multiply_by=multiply_by, outputs=tuple(factors))


def _pod(requests: dict[str, str]) -> list[tuple[str, int]]:
    return sorted((res, to_amount(res, text)) for res, text in requests.items())


MIG = (_t("nvidia.com/mig-1g.5gb", "Replace", {"example.com/accelerator-memory": "5Ki", "example.com/credits": "10"}),
       _t("nvidia.com/mig-2g.10gb", "Replace", {"example.com/accelerator-memory": "10Ki", "example.com/credits": "15"}),
       _t("nvidia.com/gpu", "Retain", {"example.com/accelerator-memory": "40Ki", "example.com/credits": "100"}),
       _t("nvidia.com/vgpucores", "Replace", "nvidia.com/vgpu", {"nvidia.com/total-vgpucores": "1"}),
       _t("nvidia.com/vgpumem", "Replace", "nvidia.com/vgpu", {"nvidia.com/total-vgpumem": "1"}))
ALLOWANCE = (_t("nvidia.com/gpumem", "Replace", "nvidia.com/gpu", {"quota.example.com/gpu-memory-overage": "1"}),
             _t("nvidia.com/gpu", "Retain", {"quota.example.com/gpu-memory-overage": "-1024"}))


@pytest.mark.parametrize(("requests", "count", "transformations", "want"), [
    pytest.param(_pod({"nvidia.com/mig-1g.5gb": "2", "nvidia.com/mig-2g.10gb": "1", "cpu": "1"}), 1, MIG,
                 {"cpu": 1000, "example.com/accelerator-memory": 20 * 1024, "example.com/credits": 35},
                 id="two MIG sizes are replaced by memory and credits, summed over both"),
    pytest.param(_pod({"nvidia.com/gpu": "1", "cpu": "2"}), 2, MIG,
                 {"cpu": 4000, "example.com/accelerator-memory": 80 * 1024, "example.com/credits": 200,
                  "nvidia.com/gpu": 2},
                 id="a retained gpu is counted as well as its outputs, times the count"),
    pytest.param(_pod({"nvidia.com/vgpu": "2", "nvidia.com/vgpucores": "20", "nvidia.com/vgpumem": "1024"}), 1, MIG,
                 {"nvidia.com/vgpu": 2, "nvidia.com/total-vgpucores": 40, "nvidia.com/total-vgpumem": 2048},
                 id="multiplyBy scales the outputs by the vgpu count"),
    pytest.param(_pod({"nvidia.com/vgpu": "2", "nvidia.com/vgpucores": "30", "nvidia.com/vgpumem": "2048"}), 2, MIG,
                 {"nvidia.com/vgpu": 4, "nvidia.com/total-vgpucores": 120, "nvidia.com/total-vgpumem": 8192},
                 id="multiplyBy then the podSet count"),
    pytest.param(_pod({"nvidia.com/gpumem": "2048", "nvidia.com/gpu": "2"}), 1, ALLOWANCE,
                 {"quota.example.com/gpu-memory-overage": 2048, "nvidia.com/gpu": 2},
                 id="above the allowance the overage is charged"),
    pytest.param(_pod({"nvidia.com/gpumem": "1024", "nvidia.com/gpu": "2"}), 1, ALLOWANCE,
                 {"quota.example.com/gpu-memory-overage": 0, "nvidia.com/gpu": 2},
                 id="exactly at the allowance the overage is zero"),
    pytest.param(_pod({"nvidia.com/gpumem": "512", "nvidia.com/gpu": "2"}), 1, ALLOWANCE,
                 {"quota.example.com/gpu-memory-overage": 0, "nvidia.com/gpu": 2},
                 id="under the allowance the overage is zero, never negative"),
    pytest.param(_pod({"example.com/gpu": "8", "example.com/credit": "3"}), 1,
                 (_t("example.com/credit", "Replace", {"example.com/gpu": "-1"}),),
                 {"example.com/gpu": 8},
                 id="an allowance does not reach a request the pod made directly"),
    pytest.param(_pod({"example.com/gpu": "1", "example.com/credit": "1"}), 1,
                 (_t("example.com/credit", "Replace", {"example.com/gpu": "1"}),),
                 {"example.com/gpu": 2},
                 id="an output sharing a name with a request is added to it"),
    pytest.param(_pod({"example.com/gpu": "1"}), 1, (_t("example.com/gpu", "Retain", {"example.com/gpu": "5"}),),
                 {"example.com/gpu": 6},
                 id="an output naming its own retained input is added to it"),
    pytest.param(_pod({"example.com/gpumem": "1024", "example.com/gpu": "2"}), 1,
                 (_t("example.com/gpumem", "Retain", "example.com/gpu", {"example.com/gpumem-quota": "1"}),),
                 {"example.com/gpumem": 1024, "example.com/gpumem-quota": 2048, "example.com/gpu": 2},
                 id="Retain keeps the input as requested, not multiplied"),
    pytest.param(_pod({"example.com/gpumem": "1024", "cpu": "500m"}), 1,
                 (_t("example.com/gpumem", "Retain", "cpu", {"example.com/gpumem-quota": "1"}),),
                 {"example.com/gpumem": 1024, "example.com/gpumem-quota": 512, "cpu": 500},
                 id="a multiplier under one (500m of cpu) halves the output"),
    pytest.param(_pod({"example.com/gpu": "1", "example.com/node": "2"}), 1,
                 (_t("example.com/gpu", "Retain", "example.com/node", {"example.com/gpu": "1"}),),
                 {"example.com/gpu": 3, "example.com/node": 2},
                 id="multiplied output plus the retained input as requested"),
    pytest.param(_pod({"example.com/credit": "10000000000"}), 1,
                 (_t("example.com/credit", "Replace", {"example.com/gpu": "10000000000"}),),
                 {"example.com/gpu": INT64_MAX},
                 id="a product past int64 saturates rather than wrapping"),
    pytest.param(_pod({"cpu": "100m", "memory": "100M"}), 1,
                 (_t("cpu", "Replace", {"example.com/cpu-credits": "3000"}),
                  _t("memory", "Replace", {"example.com/memory-credits": "3m"})),
                 {"example.com/cpu-credits": 300, "example.com/memory-credits": 300_000},
                 id="exact arithmetic on milli values: 100m x 3000 = 300, 100M x 3m = 300k"),
    pytest.param(_pod({"cpu": "500m"}), 1, (_t("cpu", "Retain", {"cpu-credits": "1"}),),
                 {"cpu": 500, "cpu-credits": 1},
                 id="half a credit is rounded up, as Quantity.Value() does"),
    pytest.param(_pod({"cpu": "1", "memory": "1Gi"}), 3, (_t("nvidia.com/gpu", "Replace", {"credits": "1"}),),
                 {"cpu": 3000, "memory": 3 << 30},
                 id="a transformation whose input is not requested changes nothing"),
])
def test_transformations_count_what_kueue_counts(
    requests: list[tuple[str, int]], count: int, transformations: tuple[o.ResourceTransformation, ...],
    want: dict[str, int],
) -> None:
    per_pod = per_pod_requests(requests, (), transformations)
    assert {r: min(v * count, INT64_MAX) for r, v in per_pod.items()} == want


def test_excluded_resources_are_dropped_before_the_transformations_see_them() -> None:
    t = (_t("example.com/gpu", "Replace", "example.com/ignored-node", {"credits": "1"}),)
    got = per_pod_requests(_pod({"example.com/gpu": "2", "example.com/ignored-node": "4"}), ("example.com/ignored",), t)
    assert got == {"credits": 2}  # not 8: the multiplier was excluded first


def _config(**resources: Any) -> dict[str, Any]:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "resources": resources}


def test_the_configuration_defaults_the_strategy_to_retain_and_keeps_exact_factors() -> None:
    cfg = normalize(Document("c.yaml", 1, _config(transformations=[
        {"input": "cpu", "outputs": {"cpu_credits": 1, "half": "500m", "allowance": "-1Ki"}},
        {"input": "nvidia.com/gpu", "strategy": "Replace", "multiplyBy": "nodes"}])))
    assert isinstance(cfg, o.Configuration)
    assert cfg.resource_transformations == (
        o.ResourceTransformation(input="cpu", strategy="Retain",
                                 outputs=(("allowance", -1024, 1), ("cpu_credits", 1, 1), ("half", 1, 2))),
        o.ResourceTransformation(input="nvidia.com/gpu", strategy="Replace", multiply_by="nodes"))


@pytest.mark.parametrize(("transformations", "field", "says"), [
    pytest.param([{"input": "cpu", "strategy": "Keep"}], "resources.transformations[0].strategy",
                 "supported values: 'Retain', 'Replace'", id="an unknown strategy"),
    pytest.param([{"input": "cpu"}, {"input": "cpu", "strategy": "Replace"}], "resources.transformations[1].input",
                 "duplicate value 'cpu'", id="two transformations of one input"),
    pytest.param([{"input": "cpu", "outputs": {"credits": "lots"}}], "resources.transformations[0].outputs.credits",
                 "is not a quantity", id="an output factor that is not a quantity"),
    pytest.param([{"input": ""}], "resources.transformations[0].input", "must name a resource", id="no input"),
])
def test_bad_transformations_are_refused_by_field(transformations: list[dict[str, Any]], field: str, says: str) -> None:
    with pytest.raises(ManifestError) as err:
        normalize(Document("c.yaml", 1, _config(transformations=transformations)))
    assert err.value.field == field and says in err.value.message


def _shared_quota(*objects: Any) -> Any:
    """Kueue's shared-quota example (site/static/examples/admin/shared-quota-*.yaml): 9 cpu each on
    on-demand and spot, 14 cpu_credits; every job asks 3 cpu."""
    cq = (a_cluster_queue("team-cluster-queue").group(("on-demand", {"cpu": "9"}), ("spot", {"cpu": "9"}))
          .flavor("credits", cpu_credits="14"))
    jobs = [a_job("default", f"job-{i}", "team-queue").request(cpu="3") for i in range(6)]
    return simulate(*objects, a_flavor("on-demand"), a_flavor("spot"), a_flavor("credits"), cq,
                    a_local_queue("default", "team-queue", "team-cluster-queue"), *jobs)


def test_kueues_shared_quota_example_admits_four_jobs_with_credits() -> None:
    cfg = a_configuration()
    cfg.body["resources"] = {"transformations": [{"input": "cpu", "strategy": "Retain",
                                                  "outputs": {"cpu_credits": 1}}]}
    out = _shared_quota(cfg)
    assert len(out.admitted()) == 4  # 14 credits / 3 per job; the cpu alone would take six
    assert [out.flavors(f"default/job-{i}") for i in range(4)] == [
        {"cpu": "on-demand", "cpu_credits": "credits"}] * 3 + [{"cpu": "spot", "cpu_credits": "credits"}]
    assert "insufficient unused quota for cpu_credits in flavor credits" in out.message("default/job-4")


def test_without_the_transformation_the_shared_quota_example_admits_six() -> None:
    assert len(_shared_quota().admitted()) == 6
