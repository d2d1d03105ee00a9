"""DRA claims counted into quota as Kueue's KueueDRAIntegration counts them (events/dra.py,
services/core/dra.py): the tables restate ``countDevicesPerClass`` and
``GetResourceRequestsForResourceClaimTemplates`` (``pkg/dra/claims.go``) and the workload
controller's ``handleDRA`` outcome in our terms."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from events import dra
from events.manifests import ManifestError
from services.app.simulate import fold_files_screened, run
from services.core.state import WorkloadRecord
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_job, a_local_queue

NOT_MAPPED = ('spec.podSets[0].template.spec.resourceClaims[0].resourceClaimTemplateName: Not found: '
              '"DeviceClass gpu.example.com is not mapped in DRA configuration for podset main"')


def _template(name: str, *requests: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def _exact(cls: str = "gpu.example.com", **fields: Any) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": cls, **fields}}


class _Where:
    def error(self, field: str, message: str) -> Exception:
        return ValueError(f"{field}: {message}")


@pytest.mark.parametrize(("requests", "version", "devices", "error"), [
    pytest.param([_exact()], "v1", (("gpu.example.com", 1),), "", id="count defaults to one device"),
    pytest.param([_exact(count=3)], "v1", (("gpu.example.com", 3),), "", id="an exact count"),
    pytest.param([_exact(count=2), {**_exact(count=3), "name": "s"}, _exact("nic.example.com")], "v1beta2",
                 (("gpu.example.com", 5), ("nic.example.com", 1)), "", id="requests of one class add up"),
    pytest.param([_exact(adminAccess=True, count=4)], "v1", (), "", id="an admin access request counts nothing"),
    pytest.param([_exact(allocationMode="All")], "v1", (),
                 '.devices.requests[0].exactly.allocationMode: Invalid value: "All": ResourceClaimTemplate t: '
                 "AllocationMode 'All' is not supported", id="allocation mode All is Kueue's error"),
    pytest.param([_exact(), {"name": "f", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}], "v1", (),
                 '.devices.requests[1]: Invalid value: "null": ResourceClaimTemplate t: '
                 "FirstAvailable device selection is not supported", id="firstAvailable is Kueue's error"),
    pytest.param([{"name": "r", "deviceClassName": "gpu.example.com", "count": 2}], "v1beta1",
                 (("gpu.example.com", 2),), "", id="v1beta1 requests have no exactly"),
])
def test_a_templates_devices_are_counted_per_class(
    requests: list[dict[str, Any]], version: str, devices: tuple[tuple[str, int], ...], error: str,
) -> None:
    t = dra.read_template(_Where(), version, _template("t", *requests, version=version), "ns", "t")
    assert (t.devices, t.error) == (devices, error)


def _setup(*mappings: tuple[str, list[str]], quota: str = "8", **more: Any) -> list[dict[str, Any]]:
    config = a_configuration().obj()
    if mappings:
        config["resources"] = {"deviceClassMappings": [{"name": n, "deviceClassNames": c} for n, c in mappings]}
    config["resources"] = {**config.get("resources", {}), **more}
    return [config, a_flavor("default").obj(),
            a_cluster_queue("cq").flavor("default", cpu="40", **{"example.com/gpu": quota}).obj(),
            a_local_queue("ns", "lq", "cq").obj()]


def _job(name: str, *claims: dict[str, Any], parallelism: int = 1, **requests: Any) -> dict[str, Any]:
    body = a_job("ns", name, "lq").parallelism(parallelism).request(cpu="1", **requests).obj()
    body["spec"]["template"]["spec"]["resourceClaims"] = list(claims)
    return body


def _outcome(docs: list[dict[str, Any]]) -> dict[str, WorkloadRecord]:
    state, _ = fold_files_screened({"t.yaml": yaml.safe_dump_all(docs)})
    result = run(state, None)
    return {rec.obj.owner.name if rec.obj.owner else rec.obj.name: rec for rec in result.state.workloads.values()}


def _usage(rec: WorkloadRecord) -> dict[str, int]:
    assert rec.admission is not None, rec.conditions.get("QuotaReserved")
    return dict(rec.admission.pod_set_assignments[0].resource_usage)


def _pending(rec: WorkloadRecord) -> tuple[str, str, str]:
    c = rec.conditions["QuotaReserved"]
    return c.status, c.reason, c.message


CLAIM = {"name": "gpu", "resourceClaimTemplateName": "two"}


def test_mapped_devices_count_per_pod_against_the_logical_resource() -> None:
    got = _outcome([*_setup(("example.com/gpu", ["gpu.example.com"])),
                    _template("two", _exact(count=2)), _job("a", CLAIM, parallelism=3),
                    _job("b", CLAIM, parallelism=2)])
    assert _usage(got["a"]) == {"cpu": 3000, "example.com/gpu": 6}
    assert _pending(got["b"])[2].endswith("insufficient unused quota for example.com/gpu in flavor default, "
                                          "2 more needed")


def test_claims_add_to_a_request_of_the_same_name_and_skip_excluded_prefixes() -> None:
    """Kueue adds the DRA resources after excluded prefixes and transformations: the mapping's
    resource counts even when its prefix is excluded, on top of the container's own request."""
    got = _outcome([*_setup(("example.com/gpu", ["gpu.example.com"]), excludeResourcePrefixes=["example.com/"]),
                    _template("two", _exact(count=2)), _job("a", CLAIM, **{"example.com/gpu": "1"})])
    assert _usage(got["a"]) == {"cpu": 1000, "example.com/gpu": 2}


def test_a_template_later_in_the_input_is_found() -> None:
    got = _outcome([*_setup(("example.com/gpu", ["gpu.example.com"])), _job("a", CLAIM),
                    _template("two", _exact(count=2))])
    assert _usage(got["a"]) == {"cpu": 1000, "example.com/gpu": 2}


@pytest.mark.parametrize(("docs", "message"), [
    pytest.param([*_setup(), _template("two", _exact()), _job("a", CLAIM)], NOT_MAPPED,
                 id="a device class no mapping names"),
    pytest.param([*_setup(("example.com/gpu", ["other.example.com"])), _template("two", _exact()),
                  _job("a", CLAIM)], NOT_MAPPED, id="a mapping of another class"),
    pytest.param([*_setup(("example.com/gpu", ["gpu.example.com"])), _job("a", CLAIM)],
                 'spec.podSets[0].template.spec.resourceClaims[0]: Internal error: failed to get claim spec for '
                 'ResourceClaimTemplate two in podset main: resourceclaimtemplates.resource.k8s.io "two" not found',
                 id="a template that does not exist"),
    pytest.param([*_setup(("example.com/gpu", ["gpu.example.com"])), _template("two", _exact(allocationMode="All")),
                  _job("a", CLAIM)],
                 'spec.podSets[0].template.spec.resourceClaims[0].devices.requests[0].exactly.allocationMode: '
                 'Invalid value: "All": ResourceClaimTemplate two: AllocationMode \'All\' is not supported',
                 id="allocation mode All"),
    pytest.param([*_setup(("example.com/gpu", ["gpu.example.com"])), _template("two", _exact()),
                  _job("a", CLAIM, {"name": "own", "resourceClaimName": "mine"})],
                 "KueueDRAIntegration feature does not support use of resource claims",
                 id="a claim by name, whatever else the pod claims"),
])
def test_what_kueue_cannot_count_keeps_the_workload_misconfigured(docs: list[dict[str, Any]], message: str) -> None:
    got = _outcome(docs)
    assert got["a"].admission is None
    assert _pending(got["a"]) == ("False", "Misconfigured", message)


def _refusal(docs: list[dict[str, Any]]) -> str:
    with pytest.raises(ManifestError) as e:
        fold_files_screened({"t.yaml": yaml.safe_dump_all(docs)})
    return str(e.value)


@pytest.mark.parametrize(("docs", "wanted"), [
    pytest.param([_template("t", {"name": "r", "exactly": {"deviceClassName": "g", "selectors": [
        {"cel": {"expression": "true"}}]}})],
        "(ResourceClaimTemplate ns/t): spec.spec.devices.requests[0].exactly.selectors: not supported by kueuelog",
        id="CEL selectors need the cluster's ResourceSlices"),
    pytest.param([_template("t", _exact(count=0))], "spec.spec.devices.requests[0].exactly.count: must be an integer",
                 id="a count below one"),
    pytest.param([_template("t", _exact(allocationMode="Some"))],
                 "spec.spec.devices.requests[0].exactly.allocationMode: unsupported value 'Some'",
                 id="an unknown allocation mode"),
    pytest.param([_template("t", {"name": "r"})], "spec.spec.devices.requests[0].exactly: required field",
                 id="neither exactly nor firstAvailable"),
    pytest.param(_setup(("a.example.com/gpu", ["gpu.example.com"]), ("b.example.com/gpu", ["gpu.example.com"])),
                 "resources.deviceClassMappings[1].deviceClassNames[0]: device class already mapped to resource "
                 "a.example.com/gpu", id="a device class in two mappings"),
    pytest.param(_setup(("example.com/gpu", []),), "resources.deviceClassMappings[0].deviceClassNames: at least one",
                 id="a mapping without device classes"),
    pytest.param([{**a_configuration().obj(), "resources": {"deviceClassMappings": [
        {"name": "gpu.memory", "deviceClassNames": ["gpu.example.com"],
         "sources": [{"counter": {"driver": "d", "name": "memory"}}]}]}}],
        "resources.deviceClassMappings[0].sources: not supported by kueuelog yet", id="counter sources"),
    pytest.param([_job("a", {"name": "gpu", "resourceClaimName": "x", "resourceClaimTemplateName": "y"})],
                 "spec.template.spec.resourceClaims[0]: must specify one of", id="a claim naming both"),
    pytest.param([_job("a", {"name": "GPU", "resourceClaimTemplateName": "y"})],
                 "spec.template.spec.resourceClaims[0].name: must be a DNS label", id="a claim name"),
])
def test_bad_dra_input_is_refused_naming_the_field(docs: list[dict[str, Any]], wanted: str) -> None:
    assert wanted in _refusal(docs)


def test_a_record_with_negative_devices_is_refused_as_every_door_refuses_it() -> None:
    """A cluster-event record is held to the same limits (events/validation.py): a claim's devices
    are an int64 amount, never negative."""
    from events import objects as o
    from events import validation

    claim = o.DeviceClaim(index=0, name="gpu", template="t", resolved=True, devices=(("gpu.example.com", -1),))
    wl = o.Workload(name="w", namespace="ns", uid="u", queue_name="lq",
                    pod_sets=(o.PodSet(name="main", count=1, requests=(), device_claims=(claim,)),))
    with pytest.raises(validation.Invalid) as e:
        validation.validate_object(wl)
    assert e.value.field == "spec.podSets[0].template.spec.resourceClaims[0] (gpu.example.com)"
