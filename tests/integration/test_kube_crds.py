"""Our CRDs in a real kube-apiserver: the examples are accepted, bad objects refused naming the field.

Everything the API server accepts must also be accepted by our parser (the watcher feeds
it what the server stored, defaults included), and everything it refuses our parser
refuses too: each case here is checked both ways.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.manifests import Document, ManifestError, normalize, read_documents
from tests.integration.kube_deploy import KUEUE_GROUP, ROOT, apply_crds, error_causes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PLURALS = {
    "ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
    "Cohort": "cohorts", "Workload": "workloads", "WorkloadPriorityClass": "workloadpriorityclasses",
    "AdmissionCheck": "admissionchecks", "ProvisioningRequestConfig": "provisioningrequestconfigs",
}
NAMESPACED = {"LocalQueue", "Workload"}


async def create(api: client.ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    co = client.CustomObjectsApi(api)
    group_version = body["apiVersion"].split("/")[1]
    plural = PLURALS[body["kind"]]
    if body["kind"] in NAMESPACED:
        ns = body["metadata"].get("namespace", "default")
        return await co.create_namespaced_custom_object(KUEUE_GROUP, group_version, ns, plural, body)  # type: ignore[no-any-return]
    return await co.create_cluster_custom_object(KUEUE_GROUP, group_version, plural, body)  # type: ignore[no-any-return]


async def delete(api: client.ApiClient, body: dict[str, Any]) -> None:
    co = client.CustomObjectsApi(api)
    version = body["apiVersion"].split("/")[1]
    plural, name = PLURALS[body["kind"]], body["metadata"]["name"]
    try:
        if body["kind"] in NAMESPACED:
            await co.delete_namespaced_custom_object(KUEUE_GROUP, version, body["metadata"]["namespace"], plural, name)
        else:
            await co.delete_cluster_custom_object(KUEUE_GROUP, version, plural, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def parsed(body: dict[str, Any]) -> Any:
    return normalize(Document("api", 1, body))


async def test_examples_are_created_and_read_back_as_our_parser_reads_the_files(
    kube_api_client: client.ApiClient,
) -> None:
    await apply_crds(kube_api_client)
    core = client.CoreV1Api(kube_api_client)
    created: list[dict[str, Any]] = []
    try:
        for name in ("00-cluster.yaml", "10-queues.yaml"):
            path = ROOT / "examples" / name
            for doc in read_documents(name, path.read_text()):
                body = doc.body
                if body["kind"] == "Namespace":
                    # Namespaces never finish deleting without a namespace controller: tolerate a leftover.
                    try:
                        await core.create_namespace(body)
                    except ApiException as exc:
                        assert exc.status == 409, exc.body
                    continue
                stored = await create(kube_api_client, body)
                created.append(body)
                assert stored["metadata"]["uid"]
                # The server's copy (defaults filled in, unknown fields pruned) means the same to us.
                assert parsed(stored) == parsed(body), f"{body['kind']} {body['metadata']['name']}"
        kinds = sorted({b["kind"] for b in created})
        assert kinds == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "WorkloadPriorityClass"]
        assert len(created) == 12  # 4 flavors, 2 priority classes, 3 ClusterQueues, 3 LocalQueues

        co = client.CustomObjectsApi(kube_api_client)
        cq = await co.get_cluster_custom_object(KUEUE_GROUP, "v1beta1", "clusterqueues", "team-b-cq")
        # Kueue's defaults, applied by the schema.
        assert cq["spec"]["queueingStrategy"] == "StrictFIFO"
        assert cq["spec"]["stopPolicy"] == "None"
        assert cq["spec"]["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
        assert cq["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never",
                                            "borrowWithinCohort": {"policy": "Never"}}
        # A kind served as v1beta2 too (conversion None) reads the same there.
        rf = await co.get_cluster_custom_object(KUEUE_GROUP, "v1beta2", "resourceflavors", "spot")
        assert rf["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert rf["spec"]["nodeTaints"] == [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
        assert parsed(rf) == parsed({**rf, "apiVersion": "kueue.x-k8s.io/v1beta1"})
    finally:
        for body in reversed(created):
            await delete(kube_api_client, body)


def cq(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [
                {"name": "cpu", "nominalQuota": 4}]}]}]},
    }
    body["spec"].update(spec)
    return body


def with_quota(body: dict[str, Any], **quota: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] = {"name": "cpu", **quota}
    return body


Q0 = "spec.resourceGroups[0].flavors[0].resources[0]"
B2 = "kueue.x-k8s.io/v1beta2"


def workload(**spec: Any) -> dict[str, Any]:
    """A v1beta2 Workload with one valid podSet, ``spec`` added."""
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    return {"apiVersion": B2, "kind": "Workload", "metadata": {"name": "wl", "namespace": "default"},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": template}], **spec}}

INVALID = [
    pytest.param(cq("bad-strategy", queueingStrategy="FIFO"), "spec.queueingStrategy", "Unsupported value",
                 "spec.queueingStrategy", id="wrong queueingStrategy enum"),
    pytest.param(cq("bad-stop", stopPolicy="Drain"), "spec.stopPolicy", "Unsupported value", "spec.stopPolicy",
                 id="wrong stopPolicy enum"),
    pytest.param(cq("bad-within", preemption={"withinClusterQueue": "Always"}),
                 "spec.preemption.withinClusterQueue", "Unsupported value", "spec.preemption.withinClusterQueue",
                 id="wrong preemption enum"),
    pytest.param(cq("bad-fungibility", flavorFungibility={"whenCanBorrow": "Sometimes"}),
                 "spec.flavorFungibility.whenCanBorrow", "Unsupported value", "spec.flavorFungibility.whenCanBorrow",
                 id="wrong flavorFungibility enum"),
    pytest.param(cq("bad-selector", namespaceSelector={"matchExpressions": [{"key": "a", "operator": "Equals"}]}),
                 "spec.namespaceSelector.matchExpressions[0].operator", "Unsupported value",
                 "spec.namespaceSelector.matchExpressions[0].operator", id="wrong label selector operator"),
    pytest.param(with_quota(cq("no-nominal"), borrowingLimit=1), f"{Q0}.nominalQuota", "Required value",
                 f"{Q0}.nominalQuota", id="missing nominalQuota"),
    pytest.param(with_quota(cq("bad-quantity"), nominalQuota="12 cpus"), f"{Q0}.nominalQuota", "should match",
                 f"{Q0}.nominalQuota", id="quantity that is not one"),
    pytest.param(with_quota(cq("negative-quantity"), nominalQuota="-1"), f"{Q0}.nominalQuota", "should match",
                 f"{Q0}.nominalQuota", id="negative quantity"),
    pytest.param(with_quota(cq("borrowing-alone"), nominalQuota=4, borrowingLimit=2), "spec",
                 "borrowingLimit must be nil when cohort is empty", f"{Q0}.borrowingLimit",
                 id="borrowingLimit without a cohort"),
    pytest.param(with_quota(cq("lending-too-much", cohort="all"), nominalQuota="4", lendingLimit="5"),
                 f"{Q0}.lendingLimit", "lendingLimit must be less than or equal to the nominalQuota",
                 f"{Q0}.lendingLimit", id="lendingLimit above nominalQuota"),
    pytest.param(cq("borrow-no-reclaim", cohort="all", preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}),
                 "spec.preemption", "borrowWithinCohort requires reclaimWithinCohort", "spec.preemption",
                 id="borrowWithinCohort without reclaimWithinCohort"),
    pytest.param(cq("wrong-order", resourceGroups=[{"coveredResources": ["cpu", "memory"], "flavors": [
        {"name": "default", "resources": [{"name": "memory", "nominalQuota": 1},
                                          {"name": "cpu", "nominalQuota": 1}]}]}]),
        "spec.resourceGroups[0].flavors", "must list exactly the coveredResources",
        "spec.resourceGroups[0].flavors[0].resources", id="flavor resources not in coveredResources order"),
    pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                  "metadata": {"name": "lq", "namespace": "default"}, "spec": {"stopPolicy": "Hold"}},
                 "spec.clusterQueue", "Required value", "spec.clusterQueue", id="LocalQueue without clusterQueue"),
    pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "rf"},
                  "spec": {"nodeTaints": [{"key": "a", "effect": "Sometimes"}]}},
                 "spec.nodeTaints[0].effect", "Unsupported value", "spec.nodeTaints[0].effect",
                 id="wrong taint effect"),
    pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                  "metadata": {"name": "wpc"}, "description": "no value"},
                 "value", "Required value", "value", id="WorkloadPriorityClass without value"),
    pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                  "metadata": {"name": "wl", "namespace": "default"}, "spec": {"queueName": "lq", "podSets": []}},
                 "spec.podSets", "at least 1 items", "spec.podSets", id="Workload without podSets"),
    pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": "ac"},
                  "spec": {"retryDelayMinutes": 3}},
                 "spec.controllerName", "Required value", "spec.controllerName",
                 id="AdmissionCheck without controller"),
    # v1beta2, and the union schema's rules: two spellings of one field must agree. The server takes
    # either spelling at either version (conversion None); the parser, strict per version, names the
    # spelling its version does not have.
    pytest.param({**cq("two-cohorts", cohort="a", cohortName="b"), "apiVersion": B2}, "spec.cohortName",
                 "cohort and cohortName conflict", "spec.cohort", id="v1beta2 cohort and cohortName disagree"),
    pytest.param(workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "p"}),
                 "spec.priorityClassRef.kind", "kind must be WorkloadPriorityClass", "spec.priorityClassRef.kind",
                 id="v1beta2 priorityClassRef kind of another group"),
    pytest.param(workload(priorityClassRef={"group": "example.com", "kind": "PriorityClass", "name": "p"}),
                 "spec.priorityClassRef.group", "Unsupported value", "spec.priorityClassRef.group",
                 id="v1beta2 priorityClassRef of an unknown group"),
    pytest.param(workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "p"},
                          priorityClassName="p"),
                 "spec.priorityClassRef", "conflict: set only one", "spec.priorityClassName",
                 id="v1beta2 priorityClassRef next to v1beta1 priorityClassName"),
    pytest.param(workload(podSets=[{"name": "main", "count": 1, "template": {"spec": {"containers": {"name": "c"}}}}]),
                 "spec.podSets[0].template.spec.containers", "must be of type array",
                 "spec.podSets[0].template.spec.containers", id="pod template that is not a pod spec"),
]


@pytest.mark.parametrize(("body", "api_field", "api_text", "parser_field"), INVALID)
async def test_invalid_objects_are_refused_naming_the_field(
    kube_api_client: client.ApiClient, body: dict[str, Any], api_field: str, api_text: str, parser_field: str,
) -> None:
    await apply_crds(kube_api_client)
    with pytest.raises(ApiException) as refused:
        await create(kube_api_client, body)
    assert refused.value.status == 422, refused.value.body
    message, causes = error_causes(refused.value)
    assert any(field == api_field and api_text in text for field, text in causes), (message, causes)
    # Our parser refuses the same object, naming the same field.
    with pytest.raises(ManifestError) as ours:
        parsed(body)
    assert ours.value.field == parser_field, str(ours.value)
