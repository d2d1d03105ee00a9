"""Manifests in, normalised objects out — or a ManifestError naming file, document, object and field.

The rules are Kueue's (CRD markers, CEL rules and webhooks of ``kueue.x-k8s.io``) and the API
server's (names, namespaces); each refusal is checked on every part of its location and on its
message, and each accepted shape on the exact object it normalises to.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from events import objects as o
from events.cluster import POD_PRIORITY_CLASS_SOURCE, WORKLOAD_PRIORITY_CLASS_SOURCE
from events.manifests import Document, ManifestError, load, normalize, read_documents
from tests.builders import (
    V1,
    Builder,
    a_cluster_queue,
    a_cohort,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_priority_class,
    a_workload,
)

FILE = "queues/team-a.yaml"
DOC = 3
V1BETA2 = "kueue.x-k8s.io/v1beta2"
V1ALPHA1 = "kueue.x-k8s.io/v1alpha1"
KUEUELOG = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kueuelog"
RG0 = "spec.resourceGroups[0]"
Q0 = f"{RG0}.flavors[0].resources[0]"
CONTAINER0 = "spec.podSets[0].template.spec.containers[0]"


# --- helpers ---------------------------------------------------------------------------------


def body_of(b: Builder | dict[str, Any]) -> dict[str, Any]:
    return b.obj() if isinstance(b, Builder) else copy.deepcopy(b)


def _keys(path: str) -> list[str | int]:
    """``spec.resourceGroups[0].flavors.1.name`` -> ['spec', 'resourceGroups', 0, 'flavors', 1, 'name']."""
    return [int(k) if k.isdigit() else k for k in re.sub(r"\[(\d+)\]", r".\1", path).split(".")]


def edit(b: Builder | dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of the manifest with ``path`` (as the error paths write it, or with dotted indices) set."""
    body = body_of(b)
    keys = _keys(path)
    node: Any = body
    for k in keys[:-1]:
        if isinstance(k, str) and k not in node:
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value
    return body


def drop(b: Builder | dict[str, Any], path: str) -> dict[str, Any]:
    body = body_of(b)
    *parents, last = _keys(path)
    node: Any = body
    for k in parents:
        node = node[k]
    del node[last]
    return body


def versioned(b: Builder | dict[str, Any], api_version: str) -> dict[str, Any]:
    return edit(b, "apiVersion", api_version)


def accept(b: Builder | dict[str, Any]) -> Any:
    return normalize(Document(FILE, DOC, body_of(b)))


def refuse(b: Builder | dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as exc:
        normalize(Document(FILE, DOC, body_of(b)))
    return exc.value


def assert_located(err: ManifestError, obj: str, field: str, message: str) -> None:
    """The error names the file, the document, the object and the exact field, then says why."""
    assert (err.file, err.document, err.obj, err.field) == (FILE, DOC, obj, field)
    assert str(err).startswith(f"{FILE}: document {DOC} ({obj}): {field}: ")
    assert message in err.message
    assert message in str(err)


def cq(name: str = "cq") -> Any:
    return a_cluster_queue(name)


def groups(n: int, flavors_per_group: int = 1) -> Any:
    """A ClusterQueue with ``n`` resource groups, each with its own resource and flavors."""
    b = cq()
    for g in range(n):
        b.group(*[(f"f{g}-{f}", {f"example.com/r{g}": 1}) for f in range(flavors_per_group)])
    return b


def pod_set(name: str = "main", count: int = 1, **extra: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    ps: dict[str, Any] = {"name": name, "count": count, "template": {"spec": {"containers": [container]}}}
    ps.update(extra)
    return ps


def wl_with(*pod_sets: dict[str, Any]) -> dict[str, Any]:
    return edit(a_workload("team-a", "w"), "spec.podSets", list(pod_sets))


# --- ClusterQueue / Cohort resource groups ---------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(
            cq().flavor("default", cpu=9).flavor("spot", cpu=9),
            "ClusterQueue cq", "spec.resourceGroups[1].coveredResources[0]",
            "duplicate value 'cpu': a resource can be covered by only one resource group "
            "(already in spec.resourceGroups[0])",
            id="a resource covered by two resource groups",
        ),
        pytest.param(
            cq().flavor("default", cpu=9).flavor("default", memory="36Gi"),
            "ClusterQueue cq", "spec.resourceGroups[1].flavors[0].name",
            "duplicate value 'default': a flavor can appear in only one resource group "
            "(already in spec.resourceGroups[0])",
            id="a flavor in two resource groups",
        ),
        pytest.param(
            cq().group(("default", {"cpu": 9}), ("default", {"cpu": 3})),
            "ClusterQueue cq", f"{RG0}.flavors[1].name",
            "duplicate value 'default'",
            id="a flavor twice in the same resource group",
        ),
        pytest.param(
            cq().group(("spot", {"cpu": 9, "memory": "36Gi"}), ("on-demand", {"memory": "36Gi", "cpu": 9})),
            "ClusterQueue cq", f"{RG0}.flavors[1].resources",
            "must list exactly the coveredResources ['cpu', 'memory'] in the same order, got ['memory', 'cpu']",
            id="flavor resources in another order than coveredResources",
        ),
        pytest.param(
            cq().group(("spot", {"cpu": 9, "memory": "36Gi"}), ("on-demand", {"cpu": 9})),
            "ClusterQueue cq", f"{RG0}.flavors[1].resources",
            "must list exactly the coveredResources ['cpu', 'memory'] in the same order, got ['cpu']",
            id="flavor with fewer resources than coveredResources",
        ),
        pytest.param(
            edit(cq().flavor("default", cpu=9), f"{RG0}.coveredResources", ["cpu", "memory"]),
            "ClusterQueue cq", f"{RG0}.flavors[0].resources",
            "got ['cpu']",
            id="coveredResources lists a resource no flavor gives a quota for",
        ),
        pytest.param(
            edit(cq().flavor("default", cpu=9), f"{RG0}.coveredResources", []),
            "ClusterQueue cq", f"{RG0}.coveredResources", "must have at least 1 item",
            id="empty coveredResources",
        ),
        pytest.param(
            edit(cq().flavor("default", cpu=9), f"{RG0}.flavors", []),
            "ClusterQueue cq", f"{RG0}.flavors", "must have at least 1 item",
            id="resource group without flavors",
        ),
        pytest.param(
            groups(17), "ClusterQueue cq", "spec.resourceGroups", "must have at most 16 items",
            id="17 resource groups",
        ),
        pytest.param(
            groups(1, flavors_per_group=65), "ClusterQueue cq", f"{RG0}.flavors", "must have at most 64 items",
            id="65 flavors in one resource group",
        ),
        pytest.param(
            groups(5, flavors_per_group=52), "ClusterQueue cq", "spec.resourceGroups",
            "total number of flavors across all resourceGroups must be <= 256, got 260",
            id="more than 256 flavors across resource groups",
        ),
        pytest.param(
            edit(cq().flavor("default", cpu=9), f"{RG0}.coveredResources.0", "Bad_Name!"),
            "ClusterQueue cq", f"{RG0}.coveredResources[0]", "invalid resource name 'Bad_Name!'",
            id="covered resource that is not a qualified name",
        ),
        pytest.param(
            a_cohort("all").flavor("default", cpu=9).flavor("spot", cpu=9),
            "Cohort all", "spec.resourceGroups[1].coveredResources[0]", "duplicate value 'cpu'",
            id="Cohort: a resource covered by two resource groups",
        ),
        pytest.param(
            a_cohort("all").group(("a", {"cpu": 9, "memory": 1}), ("b", {"memory": 1, "cpu": 9})),
            "Cohort all", f"{RG0}.flavors[1].resources", "in the same order",
            id="Cohort: flavor resources out of order",
        ),
    ],
)
def test_resource_group_rules(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


@pytest.mark.parametrize(
    ("manifest", "want_groups"),
    [
        pytest.param(groups(16), 16, id="exactly 16 resource groups"),
        pytest.param(groups(4, flavors_per_group=64), 4, id="exactly 256 flavors, 64 per group"),
    ],
)
def test_resource_group_limits_are_inclusive(manifest, want_groups):
    got = accept(manifest)
    assert len(got.resource_groups) == want_groups


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(
            cq().flavor("default", cpu=(9, 1)), "ClusterQueue cq", f"{Q0}.borrowingLimit",
            "must be nil when cohort is empty", id="ClusterQueue borrowingLimit without a cohort",
        ),
        pytest.param(
            cq().flavor("default", cpu=(9, None, 1)), "ClusterQueue cq", f"{Q0}.lendingLimit",
            "must be nil when cohort is empty", id="ClusterQueue lendingLimit without a cohort",
        ),
        pytest.param(
            a_cohort("all").flavor("default", cpu=(9, 1)), "Cohort all", f"{Q0}.borrowingLimit",
            "must be nil when parent is empty", id="Cohort borrowingLimit without a parent",
        ),
        pytest.param(
            a_cohort("all").flavor("default", cpu=(9, None, 1)), "Cohort all", f"{Q0}.lendingLimit",
            "must be nil when parent is empty", id="Cohort lendingLimit without a parent",
        ),
        pytest.param(
            cq().cohort("all").flavor("default", cpu=(9, None, 10)), "ClusterQueue cq", f"{Q0}.lendingLimit",
            "must be less than or equal to the nominalQuota (10 > 9)",
            id="ClusterQueue lendingLimit above nominalQuota",
        ),
        pytest.param(
            cq().cohort("all").flavor("default", memory=("1Gi", None, "1025Mi")), "ClusterQueue cq",
            f"{Q0}.lendingLimit", "must be less than or equal to the nominalQuota (1025Mi > 1Gi)",
            id="lendingLimit above nominalQuota is compared exactly across units",
        ),
    ],
)
def test_borrowing_and_lending_limits(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


@pytest.mark.parametrize(
    ("manifest", "want_quota"),
    [
        pytest.param(cq().cohort("all").flavor("default", cpu=(9, 1, 9)),
                     o.Quota(nominal=9000, borrowing_limit=1000, lending_limit=9000),
                     id="ClusterQueue in a cohort: lendingLimit equal to nominalQuota"),
        pytest.param(cq().cohort("all").flavor("default", cpu=(9, 0, 0)),
                     o.Quota(nominal=9000, borrowing_limit=0, lending_limit=0),
                     id="ClusterQueue in a cohort: zero limits are limits, not absent"),
        pytest.param(a_cohort("team").parent("org").flavor("default", cpu=(1, None, 5)),
                     o.Quota(nominal=1000, lending_limit=5000),
                     id="Cohort with a parent may lend more than its own nominalQuota (it lends its children's too)"),
        pytest.param(a_cohort("team").parent("org").flavor("default", cpu=(1, 3)),
                     o.Quota(nominal=1000, borrowing_limit=3000),
                     id="Cohort with a parent: borrowingLimit"),
        pytest.param(cq().flavor("default", cpu=0), o.Quota(nominal=0), id="zero nominalQuota"),
    ],
)
def test_accepted_limits(manifest, want_quota):
    got = accept(manifest)
    assert got.resource_groups[0].flavors[0].resources == (("cpu", want_quota),)


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(cq().flavor("default", cpu="-1"), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "must be greater than or equal to 0, got '-1'", id="negative nominalQuota"),
        pytest.param(cq().flavor("default", cpu=-2), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "must be greater than or equal to 0, got -2", id="negative YAML int nominalQuota"),
        pytest.param(cq().flavor("default", memory="-100m"), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "must be greater than or equal to 0, got '-100m'",
                     id="negative quota that would round to zero bytes is still negative"),
        pytest.param(cq().flavor("default", cpu="-0.0001"), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "must be greater than or equal to 0", id="negative cpu below a milli"),
        pytest.param(cq().cohort("all").flavor("default", cpu=(9, "-1")), "ClusterQueue cq",
                     f"{Q0}.borrowingLimit", "must be greater than or equal to 0", id="negative borrowingLimit"),
        pytest.param(cq().cohort("all").flavor("default", cpu=(9, None, "-1")), "ClusterQueue cq",
                     f"{Q0}.lendingLimit", "must be greater than or equal to 0", id="negative lendingLimit"),
        pytest.param(cq().flavor("default", cpu="nine"), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "'nine' is not a quantity", id="nominalQuota that is not a quantity"),
        pytest.param(cq().flavor("default", cpu=True), "ClusterQueue cq", f"{Q0}.nominalQuota",
                     "Expected `int | float | str`, got `bool`", id="nominalQuota that is a boolean"),
        pytest.param(a_workload("team-a", "w").request(cpu="-1"), "Workload team-a/w",
                     f"{CONTAINER0}.resources.requests.cpu", "must be greater than or equal to 0, got '-1'",
                     id="negative request"),
        pytest.param(a_workload("team-a", "w").request(memory="1.2.3"), "Workload team-a/w",
                     f"{CONTAINER0}.resources.requests.memory", "'1.2.3' is not a quantity",
                     id="request that is not a quantity"),
        pytest.param(cq().weight("-1"), "ClusterQueue cq", "spec.fairSharing.weight",
                     "must be greater than or equal to 0", id="negative fair sharing weight"),
        pytest.param(cq().weight("1n"), "ClusterQueue cq", "spec.fairSharing.weight",
                     "when not 0, weight must be > 1e-9, got '1n'", id="fair sharing weight that collapses to zero"),
    ],
)
def test_negative_and_malformed_quantities(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


@pytest.mark.parametrize(
    ("weight", "want_milli"),
    [
        pytest.param(None, 1000, id="no fairSharing: weight 1"),
        pytest.param("0", 0, id="weight 0 is allowed"),
        pytest.param("0.5", 500, id="weight 0.5"),
        pytest.param(2, 2000, id="weight 2"),
        pytest.param("2n", 1, id="weight just above 1n rounds up to a milli"),
    ],
)
def test_fair_sharing_weight_in_milli_units(weight, want_milli):
    b = cq() if weight is None else cq().weight(weight)
    assert accept(b).fair_sharing_weight == want_milli


# --- names and namespaces --------------------------------------------------------------------


LONG = "a" * 254


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "bad"),
    [
        pytest.param(cq("Team-A"), "ClusterQueue Team-A", "metadata.name", "'Team-A'", id="upper-case name"),
        pytest.param(cq("team_a"), "ClusterQueue team_a", "metadata.name", "'team_a'", id="underscore in a name"),
        pytest.param(cq("-team"), "ClusterQueue -team", "metadata.name", "'-team'", id="name starting with a dash"),
        pytest.param(cq("team-"), "ClusterQueue team-", "metadata.name", "'team-'", id="name ending with a dash"),
        pytest.param(cq("team\n"), "ClusterQueue team", "metadata.name", "'team\\n'",
                     id="name with a trailing newline"),
        pytest.param(cq(LONG), f"ClusterQueue {LONG}", "metadata.name", f"'{LONG}'", id="name of 254 characters"),
        pytest.param(a_flavor("GPU"), "ResourceFlavor GPU", "metadata.name", "'GPU'", id="ResourceFlavor name"),
        pytest.param(a_local_queue("team-a", "LQ", "cq"), "LocalQueue LQ", "metadata.name", "'LQ'",
                     id="LocalQueue name"),
        pytest.param(a_workload("team-a", "W_1"), "Workload W_1", "metadata.name", "'W_1'", id="Workload name"),
        pytest.param(cq().cohort("Team_AB"), "ClusterQueue cq", "spec.cohort", "'Team_AB'",
                     id="cohort reference"),
        pytest.param(cq().flavor("Spot", cpu=1), "ClusterQueue cq", f"{RG0}.flavors[0].name", "'Spot'",
                     id="flavor reference"),
        pytest.param(a_local_queue("team-a", "lq", "CQ"), "LocalQueue team-a/lq", "spec.clusterQueue", "'CQ'",
                     id="clusterQueue reference"),
        pytest.param(a_workload("team-a", "w").queue("Queue").request(cpu=1), "Workload team-a/w",
                     "spec.queueName", "'Queue'", id="queueName reference"),
        pytest.param(a_cohort("child").parent("Root"), "Cohort child", "spec.parentName", "'Root'",
                     id="parent reference"),
        pytest.param(a_workload("team-a", "w").pod_set("Main", cpu=1), "Workload team-a/w",
                     "spec.podSets[0].name", "'Main'", id="podSet name"),
        pytest.param(a_workload("team-a", "w").pod_set("a.b", cpu=1), "Workload team-a/w",
                     "spec.podSets[0].name", "'a.b'", id="podSet name is a label: no dots"),
        pytest.param(a_workload("team-a", "w").pod_set("p" * 64, cpu=1), "Workload team-a/w",
                     "spec.podSets[0].name", f"'{'p' * 64}'", id="podSet name of 64 characters"),
    ],
)
def test_invalid_names_are_refused(manifest, obj, field, bad):
    err = refuse(manifest)
    assert_located(err, obj, field, f"invalid value {bad}")
    assert "must consist of lower case alphanumeric characters" in err.message


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(edit(cq(), "metadata.name", ""), "metadata.name", "required field is missing", id="empty name"),
        pytest.param(drop(cq(), "metadata.name"), "metadata.name", "required field is missing", id="no name"),
    ],
)
def test_missing_names(manifest, field, message):
    assert_located(refuse(manifest), "ClusterQueue", field, message)


def test_name_of_253_characters_with_dots_is_a_valid_subdomain():
    name = ".".join(["a" * 63] * 4)[:253]
    assert len(name) == 253
    assert accept(cq(name)).name == name


@pytest.mark.parametrize(
    ("namespace", "obj", "message"),
    [
        pytest.param("Team-A", "Workload w", "invalid value 'Team-A': a lowercase RFC 1123 label", id="upper case"),
        pytest.param("team_a", "Workload w", "invalid value 'team_a'", id="underscore"),
        pytest.param("team.a", "Workload w", "invalid value 'team.a'", id="dot: a namespace is a label"),
        pytest.param("n" * 64, "Workload w", "at most 63 characters", id="64 characters"),
    ],
)
def test_invalid_namespace_of_a_namespaced_object(namespace, obj, message):
    manifest = edit(a_workload("x", "w").request(cpu=1), "metadata.namespace", namespace)
    assert_located(refuse(manifest), obj, "metadata.namespace", message)


def test_namespaced_objects_default_to_the_default_namespace():
    got = accept(drop(a_local_queue("x", "lq", "cq"), "metadata.namespace"))
    assert (got.namespace, got.name) == ("default", "lq")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("team.a", "invalid value 'team.a': a lowercase RFC 1123 label", id="a Namespace name has no dots"),
        pytest.param("n" * 64, "(at most 63 characters)", id="a Namespace name has at most 63 characters"),
        pytest.param("Team", "invalid value 'Team'", id="a Namespace name is lower case"),
    ],
)
def test_invalid_namespace_object_names(name, message):
    assert_located(refuse(a_namespace(name)), f"Namespace {name}", "metadata.name", message)


@pytest.mark.parametrize(
    ("manifest", "want_labels"),
    [
        pytest.param(a_namespace("team-a"), (("kubernetes.io/metadata.name", "team-a"),),
                     id="a Namespace without labels gets kubernetes.io/metadata.name"),
        pytest.param(a_namespace("team-a", team="a"), (("kubernetes.io/metadata.name", "team-a"), ("team", "a")),
                     id="the API server's label is added to the user's labels"),
        pytest.param(a_namespace("team-a", **{"kubernetes.io/metadata.name": "other"}),
                     (("kubernetes.io/metadata.name", "team-a"),),
                     id="kubernetes.io/metadata.name is always the namespace's own name"),
        pytest.param(drop(a_namespace("team-a"), "metadata.labels"), (("kubernetes.io/metadata.name", "team-a"),),
                     id="no labels key at all"),
    ],
)
def test_namespace_gets_the_metadata_name_label(manifest, want_labels):
    assert accept(manifest) == o.Namespace(name="team-a", labels=want_labels)


# --- namespaceSelector -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(cq().selector(None), o.LabelSelector(matches_nothing=True),
                     id="no namespaceSelector: matches nothing"),
        pytest.param(edit(cq(), "spec.namespaceSelector", None), o.LabelSelector(matches_nothing=True),
                     id="namespaceSelector: null matches nothing"),
        pytest.param(cq().selector({}), o.LabelSelector(), id="namespaceSelector: {} matches every namespace"),
        pytest.param(cq().selector({"matchLabels": {"team": "a", "env": "prod"}}),
                     o.LabelSelector(match_labels=(("env", "prod"), ("team", "a"))), id="matchLabels, sorted"),
        pytest.param(
            cq().selector({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]},
                                                {"key": "gpu", "operator": "Exists"}]}),
            o.LabelSelector(match_expressions=(o.Requirement(key="team", operator="In", values=("a", "b")),
                                               o.Requirement(key="gpu", operator="Exists"))),
            id="matchExpressions keep their order",
        ),
    ],
)
def test_namespace_selector(manifest, want):
    assert accept(manifest).namespace_selector == want


@pytest.mark.parametrize(
    ("selector", "field", "message"),
    [
        pytest.param({"matchExpressions": [{"key": "team", "operator": "In"}]},
                     "spec.namespaceSelector.matchExpressions[0].values", "must be specified when operator is 'In'",
                     id="In without values"),
        pytest.param({"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]},
                     "spec.namespaceSelector.matchExpressions[0].values", "must be empty when operator is 'Exists'",
                     id="Exists with values"),
        pytest.param({"matchExpressions": [{"key": "team", "operator": "Gt", "values": ["1"]}]},
                     "spec.namespaceSelector.matchExpressions[0].operator", "unsupported value 'Gt'",
                     id="Gt is for node selectors only"),
        pytest.param({"matchLabel": {"team": "a"}}, "spec.namespaceSelector.matchLabel", "unknown field",
                     id="misspelt matchLabels"),
        pytest.param({"matchExpressions": [{"operator": "Exists"}]},
                     "spec.namespaceSelector.matchExpressions[0].key", "required field is missing",
                     id="requirement without a key"),
    ],
)
def test_invalid_namespace_selector(selector, field, message):
    assert_located(refuse(cq().selector(selector)), "ClusterQueue cq", field, message)


# --- enums -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(edit(cq(), "spec.queueingStrategy", "FIFO"), "ClusterQueue cq", "spec.queueingStrategy",
                     "unsupported value 'FIFO': supported values: 'StrictFIFO', 'BestEffortFIFO'",
                     id="queueingStrategy"),
        pytest.param(cq().stop("Drain"), "ClusterQueue cq", "spec.stopPolicy",
                     "unsupported value 'Drain': supported values: 'None', 'Hold', 'HoldAndDrain'",
                     id="ClusterQueue stopPolicy"),
        pytest.param(a_local_queue("team-a", "lq", "cq").stop("Pause"), "LocalQueue team-a/lq", "spec.stopPolicy",
                     "unsupported value 'Pause'", id="LocalQueue stopPolicy"),
        pytest.param(cq().preemption(within="Always"), "ClusterQueue cq", "spec.preemption.withinClusterQueue",
                     "unsupported value 'Always': supported values: 'Never', 'LowerPriority', "
                     "'LowerOrNewerEqualPriority'", id="withinClusterQueue"),
        pytest.param(cq().preemption(reclaim="LowerOrNewerEqualPriority"), "ClusterQueue cq",
                     "spec.preemption.reclaimWithinCohort",
                     "unsupported value 'LowerOrNewerEqualPriority': supported values: 'Never', 'LowerPriority', 'Any'",
                     id="reclaimWithinCohort does not take LowerOrNewerEqualPriority"),
        pytest.param(cq().preemption(reclaim="Any", borrow="Any"), "ClusterQueue cq",
                     "spec.preemption.borrowWithinCohort.policy",
                     "unsupported value 'Any': supported values: 'Never', 'LowerPriority'",
                     id="borrowWithinCohort.policy"),
        pytest.param(cq().fungibility(when_can_borrow="Preempt"), "ClusterQueue cq",
                     "spec.flavorFungibility.whenCanBorrow", "unsupported value 'Preempt'",
                     id="whenCanBorrow does not take Preempt"),
        pytest.param(cq().fungibility(when_can_preempt="Borrow"), "ClusterQueue cq",
                     "spec.flavorFungibility.whenCanPreempt", "unsupported value 'Borrow'",
                     id="whenCanPreempt does not take Borrow"),
        pytest.param(cq().fungibility(when_can_borrow="Stop"), "ClusterQueue cq",
                     "spec.flavorFungibility.whenCanBorrow",
                     "unsupported value 'Stop': supported values: 'MayStopSearch', 'TryNextFlavor', 'Borrow'",
                     id="whenCanBorrow lists the deprecated alias among the supported values in v1beta1"),
        pytest.param(versioned(cq().fungibility(when_can_borrow="Borrow"), V1BETA2), "ClusterQueue cq",
                     "spec.flavorFungibility.whenCanBorrow",
                     "unsupported value 'Borrow': supported values: 'MayStopSearch', 'TryNextFlavor'",
                     id="v1beta2 no longer takes the deprecated Borrow"),
        pytest.param(versioned(cq().fungibility(when_can_preempt="Preempt"), V1BETA2), "ClusterQueue cq",
                     "spec.flavorFungibility.whenCanPreempt", "unsupported value 'Preempt'",
                     id="v1beta2 no longer takes the deprecated Preempt"),
        pytest.param(cq().fungibility("TryNextFlavor", "TryNextFlavor", "Cheapest"), "ClusterQueue cq",
                     "spec.flavorFungibility.preference", "unsupported value 'Cheapest'", id="preference"),
        pytest.param(cq().fungibility("MayStopSearch", "TryNextFlavor", "PreemptionOverBorrowing"),
                     "ClusterQueue cq", "spec.flavorFungibility.preference",
                     "preference 'PreemptionOverBorrowing' requires both whenCanBorrow and whenCanPreempt to be "
                     "TryNextFlavor", id="preference needs both policies at TryNextFlavor"),
        pytest.param(cq().fungibility(preference="BorrowingOverPreemption"), "ClusterQueue cq",
                     "spec.flavorFungibility.preference", "requires both whenCanBorrow and whenCanPreempt",
                     id="preference with defaulted policies"),
        pytest.param(a_flavor("gpu").taint("k", "v", "Sometimes"), "ResourceFlavor gpu", "spec.nodeTaints[0].effect",
                     "unsupported value 'Sometimes': supported values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
                     id="nodeTaints effect"),
        pytest.param(edit(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassName", "high"),
                          "spec.priorityClassSource", "custom"),
                     "Workload team-a/w", "spec.priorityClassSource", "unsupported value 'custom'",
                     id="priorityClassSource"),
    ],
)
def test_unsupported_enum_values(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(cq(), o.FlavorFungibility(when_can_borrow=o.WhenCanBorrow.MAY_STOP_SEARCH,
                                               when_can_preempt=o.WhenCanPreempt.TRY_NEXT_FLAVOR),
                     id="defaults: MayStopSearch / TryNextFlavor"),
        pytest.param(cq().fungibility("Borrow", "Preempt"),
                     o.FlavorFungibility(when_can_borrow=o.WhenCanBorrow.MAY_STOP_SEARCH,
                                         when_can_preempt=o.WhenCanPreempt.MAY_STOP_SEARCH),
                     id="v1beta1 deprecated Borrow and Preempt both mean MayStopSearch"),
        pytest.param(cq().fungibility("MayStopSearch", "MayStopSearch"),
                     o.FlavorFungibility(when_can_borrow=o.WhenCanBorrow.MAY_STOP_SEARCH,
                                         when_can_preempt=o.WhenCanPreempt.MAY_STOP_SEARCH),
                     id="current MayStopSearch"),
        pytest.param(cq().fungibility("TryNextFlavor", "TryNextFlavor"),
                     o.FlavorFungibility(when_can_borrow=o.WhenCanBorrow.TRY_NEXT_FLAVOR,
                                         when_can_preempt=o.WhenCanPreempt.TRY_NEXT_FLAVOR),
                     id="current TryNextFlavor"),
        pytest.param(versioned(cq().fungibility("TryNextFlavor", "TryNextFlavor", "PreemptionOverBorrowing"),
                               V1BETA2),
                     o.FlavorFungibility(when_can_borrow=o.WhenCanBorrow.TRY_NEXT_FLAVOR,
                                         when_can_preempt=o.WhenCanPreempt.TRY_NEXT_FLAVOR,
                                         preference=o.FungibilityPreference.PREEMPTION_OVER_BORROWING),
                     id="v1beta2 preference with both TryNextFlavor"),
        pytest.param(edit(cq(), "spec.flavorFungibility", {"whenCanBorrow": ""}),
                     o.FlavorFungibility(), id="empty string takes the default"),
    ],
)
def test_flavor_fungibility(manifest, want):
    assert accept(manifest).flavor_fungibility == want


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(cq(), o.PreemptionPolicy(), id="no preemption: Never everywhere"),
        pytest.param(cq().preemption(within="LowerOrNewerEqualPriority"),
                     o.PreemptionPolicy(within_cluster_queue=o.WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY),
                     id="withinClusterQueue LowerOrNewerEqualPriority"),
        pytest.param(cq().preemption(reclaim="Any", borrow="LowerPriority", threshold=100),
                     o.PreemptionPolicy(reclaim_within_cohort=o.ReclaimWithinCohort.ANY,
                                        borrow_within_cohort=o.BorrowWithinCohortPolicy.LOWER_PRIORITY,
                                        borrow_max_priority_threshold=100),
                     id="borrowWithinCohort with reclaimWithinCohort and a threshold"),
        pytest.param(cq().preemption(reclaim="Never", borrow="Never"), o.PreemptionPolicy(),
                     id="borrowWithinCohort Never with reclaimWithinCohort Never"),
    ],
)
def test_preemption_policies(manifest, want):
    assert accept(manifest).preemption == want


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(cq().preemption(borrow="LowerPriority"), "spec.preemption",
                     "reclaimWithinCohort=Never and borrowWithinCohort.policy!=Never",
                     id="borrowWithinCohort without reclaimWithinCohort"),
        pytest.param(cq().preemption(reclaim="Never", borrow="LowerPriority"), "spec.preemption",
                     "borrowWithinCohort requires reclaimWithinCohort to be enabled",
                     id="borrowWithinCohort with reclaimWithinCohort Never"),
        pytest.param(cq().preemption(reclaim="Any", borrow="LowerPriority", threshold=2**31),
                     "spec.preemption.borrowWithinCohort.maxPriorityThreshold",
                     "must fit in a 32-bit integer, got 2147483648", id="maxPriorityThreshold beyond int32"),
    ],
)
def test_invalid_preemption(manifest, field, message):
    assert_located(refuse(manifest), "ClusterQueue cq", field, message)


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(cq(), o.StopPolicy.NONE, id="default None"),
        pytest.param(cq().stop("Hold"), o.StopPolicy.HOLD, id="Hold"),
        pytest.param(cq().stop("HoldAndDrain"), o.StopPolicy.HOLD_AND_DRAIN, id="HoldAndDrain"),
    ],
)
def test_stop_policy(manifest, want):
    assert accept(manifest).stop_policy == want


# --- unknown fields and wrong types ----------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "obj", "field"),
    [
        pytest.param(edit(cq(), "spec.foo", 1), "ClusterQueue cq", "spec.foo", id="ClusterQueue spec.foo"),
        pytest.param(edit(cq().flavor("default", cpu=9), f"{Q0}.nominal", 9), "ClusterQueue cq",
                     f"{Q0}.nominal", id="misspelt nominalQuota deep in a resource group"),
        pytest.param(edit(cq().flavor("default", cpu=9), f"{RG0}.flavors.0.quota", {}), "ClusterQueue cq",
                     f"{RG0}.flavors[0].quota", id="old v1alpha1 quota field in a flavor"),
        pytest.param(edit(cq(), "spec.preemption", {"withinCohort": "Any"}), "ClusterQueue cq",
                     "spec.preemption.withinCohort", id="unknown preemption policy"),
        pytest.param(edit(a_cohort("all"), "spec.cohort", "x"), "Cohort all", "spec.cohort",
                     id="Cohort has no cohort field"),
        pytest.param(edit(a_local_queue("team-a", "lq", "cq"), "spec.clusterQueueName", "cq"),
                     "LocalQueue team-a/lq", "spec.clusterQueueName", id="LocalQueue misspelt clusterQueue"),
        pytest.param(edit(a_flavor("gpu"), "spec.nodeLabel", {"a": "b"}), "ResourceFlavor gpu", "spec.nodeLabel",
                     id="ResourceFlavor misspelt nodeLabels"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.podSets.0.minimum", 1),
                     "Workload team-a/w", "spec.podSets[0].minimum", id="Workload podSet unknown field"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.queue", "lq"), "Workload team-a/w",
                     "spec.queue", id="Workload spec.queue"),
        pytest.param(edit({"apiVersion": V1, "kind": "AdmissionCheck", "metadata": {"name": "prov"},
                           "spec": {"controllerName": "x"}}, "spec.controller", "x"),
                     "AdmissionCheck prov", "spec.controller", id="AdmissionCheck unknown field"),
    ],
)
def test_unknown_fields_are_refused_with_their_path(manifest, obj, field):
    assert_located(refuse(manifest), obj, field, "unknown field")


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(edit(cq(), "spec.resourceGroups", "cpu"), "ClusterQueue cq", "spec.resourceGroups",
                     "Expected `array | null`, got `str`", id="resourceGroups is a string"),
        pytest.param(edit(cq().flavor("default", cpu=9), f"{Q0}.nominalQuota", [9]), "ClusterQueue cq",
                     f"{Q0}.nominalQuota", "Expected `int | float | str`, got `array`", id="nominalQuota is a list"),
        pytest.param(drop(cq().flavor("default", cpu=9), f"{RG0}.flavors.0.resources.0.nominalQuota"),
                     "ClusterQueue cq", f"{Q0}.nominalQuota", "required field is missing", id="nominalQuota missing"),
        pytest.param(edit(cq(), "spec.cohort", 7), "ClusterQueue cq", "spec.cohort",
                     "Expected `str | null`, got `int`", id="cohort is a number"),
        pytest.param(edit(cq(), "spec", ["a"]), "ClusterQueue cq", "spec", "expected an object, got list",
                     id="spec is a list"),
        pytest.param(edit(a_local_queue("team-a", "lq", "cq"), "spec.clusterQueue", 5), "LocalQueue team-a/lq",
                     "spec.clusterQueue", "Expected `str | null`, got `int`", id="clusterQueue is a number"),
        pytest.param(drop(a_local_queue("team-a", "lq", "cq"), "spec.clusterQueue"), "LocalQueue team-a/lq",
                     "spec.clusterQueue", "required field is missing", id="LocalQueue without clusterQueue"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.podSets.0.count", "2"),
                     "Workload team-a/w", "spec.podSets[0].count", "Expected `int`, got `str`",
                     id="podSet count is a string"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.priority", "high"), "Workload team-a/w",
                     "spec.priority", "Expected `int | null`, got `str`", id="priority is a string"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.active", "yes"), "Workload team-a/w",
                     "spec.active", "Expected `bool | null`, got `str`", id="active is a string"),
        pytest.param(edit(cq(), "metadata.labels", "team-a"), "ClusterQueue", "metadata.labels",
                     "Expected `object | null`, got `str`", id="labels is a string"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1),
                          "spec.podSets.0.template.spec.containers.0.resources.requests", ["cpu"]),
                     "Workload team-a/w", f"{CONTAINER0}.resources.requests", "Expected `object | null`, got `array`",
                     id="requests is a list"),
        pytest.param(edit(a_flavor("gpu"), "spec.nodeLabels", {"a": 1}), "ResourceFlavor gpu",
                     "spec.nodeLabels[...]", "Expected `str`, got `int`", id="nodeLabels value is a number"),
        pytest.param(a_priority_class("high", "1000"), "WorkloadPriorityClass high", "value",
                     "expected an integer, got '1000'", id="WorkloadPriorityClass value is a string"),
        pytest.param(drop(a_priority_class("high", 1), "value"), "WorkloadPriorityClass high", "value",
                     "required field is missing", id="WorkloadPriorityClass without value"),
        pytest.param(a_priority_class("high", 2**31), "WorkloadPriorityClass high", "value",
                     "must fit in a 32-bit integer, got 2147483648", id="WorkloadPriorityClass value beyond int32"),
        pytest.param(a_priority_class("high", True, workload=False), "PriorityClass high", "value",
                     "expected an integer, got True", id="PriorityClass value is a boolean"),
        pytest.param(edit(a_priority_class("high", 5, workload=False), "globalDefault", "false"),
                     "PriorityClass high", "globalDefault", "expected a boolean, got 'false'",
                     id="PriorityClass globalDefault is a string"),
    ],
)
def test_wrong_types_are_refused_with_their_path(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


# --- Workload podSets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(a_workload("team-a", "w").pod_set("main", 2, min_count=3, cpu=1), "spec.podSets[0].minCount",
                     "must be between 1 and count (2), got 3", id="minCount greater than count"),
        pytest.param(a_workload("team-a", "w").pod_set("main", 2, min_count=0, cpu=1), "spec.podSets[0].minCount",
                     "must be between 1 and count (2), got 0", id="minCount zero"),
        pytest.param(a_workload("team-a", "w").pod_set("a", 4, min_count=2, cpu=1).pod_set("b", 4, min_count=1, cpu=1),
                     "spec.podSets", "at most one podSet can use minCount", id="two podSets with minCount"),
        pytest.param(a_workload("team-a", "w").pod_set("main", cpu=1).pod_set("main", cpu=2),
                     "spec.podSets[1].name", "duplicate value 'main'", id="duplicate podSet names"),
        pytest.param(wl_with(*[pod_set(f"p{i}") for i in range(9)]), "spec.podSets", "must have at most 8 items",
                     id="9 podSets"),
        pytest.param(wl_with(), "spec.podSets", "must have at least 1 item", id="no podSets"),
        pytest.param(a_workload("team-a", "w"), "spec.podSets", "must have at least 1 item", id="podSets missing"),
        pytest.param(a_workload("team-a", "w").pod_set("main", -1, cpu=1), "spec.podSets[0].count",
                     "must be greater than or equal to 0, got -1", id="negative count"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.maximumExecutionTimeSeconds", 0),
                     "spec.maximumExecutionTimeSeconds", "must be greater than or equal to 1, got 0",
                     id="maximumExecutionTimeSeconds of zero"),
    ],
)
def test_pod_set_rules(manifest, field, message):
    assert_located(refuse(manifest), "Workload team-a/w", field, message)


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(a_workload("team-a", "w").pod_set("main", 3, min_count=3, cpu=1), (("main", 3, 3),),
                     id="minCount equal to count"),
        pytest.param(a_workload("team-a", "w").pod_set("main", 0, cpu=1), (("main", 0, None),), id="count zero"),
        pytest.param(wl_with(*[pod_set(f"p{i}") for i in range(8)]), tuple((f"p{i}", 1, None) for i in range(8)),
                     id="8 podSets, in order"),
        pytest.param(wl_with({"template": {"spec": {"containers": []}}}), (("main", 1, None),),
                     id="name defaults to main and count to 1"),
        pytest.param(a_workload("team-a", "w").pod_set("driver", cpu=1).pod_set("workers", 4, min_count=2, cpu=1),
                     (("driver", 1, None), ("workers", 4, 2)), id="one podSet with minCount among several"),
    ],
)
def test_valid_pod_sets(manifest, want):
    got = accept(manifest)
    assert tuple((ps.name, ps.count, ps.min_count) for ps in got.pod_sets) == want


@pytest.mark.parametrize(
    ("where", "field"),
    [
        pytest.param("requests", f"{CONTAINER0}.resources.requests.pods", id="pods in requests"),
        pytest.param("limits", f"{CONTAINER0}.resources.limits.pods", id="pods in limits"),
    ],
)
def test_pods_cannot_be_requested_explicitly(where, field):
    manifest = edit(a_workload("team-a", "w").request(cpu=1),
                    f"spec.podSets.0.template.spec.containers.0.resources.{where}", {"cpu": "1", "pods": "1"})
    assert_located(refuse(manifest), "Workload team-a/w", field,
                   "'pods' is a reserved resource name and cannot be requested")


def test_pods_in_an_init_container_is_refused_too():
    manifest = edit(a_workload("team-a", "w").request(cpu=1), "spec.podSets.0.template.spec.initContainers",
                    [{"name": "init", "resources": {"requests": {"pods": 1}}}])
    assert_located(refuse(manifest), "Workload team-a/w",
                   "spec.podSets[0].template.spec.initContainers[0].resources.requests.pods", "reserved")


# --- times -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timestamp", "want_ms"),
    [
        pytest.param("2025-01-01T00:00:01Z", 1_735_689_601_000, id="RFC 3339 with Z"),
        pytest.param("2025-01-01T00:00:00.5Z", 1_735_689_600_500, id="fractional seconds"),
        pytest.param("2025-01-01T02:00:00+02:00", 1_735_689_600_000, id="offset"),
        pytest.param("2025-01-01t00:00:00z", 1_735_689_600_000, id="lower-case t and z"),
        pytest.param(None, None, id="no creationTimestamp"),
    ],
)
def test_creation_timestamp(timestamp, want_ms):
    manifest = a_workload("team-a", "w").request(cpu=1).obj()
    if timestamp is not None:
        manifest["metadata"]["creationTimestamp"] = timestamp
    assert accept(manifest).creation_time == want_ms


@pytest.mark.parametrize(
    "timestamp",
    [
        pytest.param("yesterday", id="words"),
        pytest.param("2025-13-01T00:00:00Z", id="month 13"),
        pytest.param("2025-01-01 25:00", id="hour 25"),
        pytest.param("", id="empty"),
    ],
)
def test_bad_creation_timestamp(timestamp):
    manifest = edit(a_workload("team-a", "w").request(cpu=1), "metadata.creationTimestamp", timestamp)
    assert_located(refuse(manifest), "Workload team-a/w", "metadata.creationTimestamp",
                   f"invalid RFC 3339 time {timestamp!r}")


@pytest.mark.parametrize(
    ("workload", "want"),
    [
        pytest.param(a_workload("team-a", "w").request(cpu=1).admitted("cq", {"cpu": "f"}).evicted("Preempted", 90),
                     o.Eviction(reason="Preempted", message="evicted: Preempted", time=1_735_689_690_000),
                     id="holding quota with Evicted=True: its eviction is under way"),
        pytest.param(a_workload("team-a", "w").request(cpu=1).admitted("cq", {"cpu": "f"}), None,
                     id="holding quota, not evicted"),
    ],
)
def test_an_evicted_condition_is_kept(workload, want):
    """Kueue treats a workload with Evicted=True that still holds quota as a preemption in progress;
    the loader used to drop the condition."""
    assert accept(workload.obj()).eviction == want


def test_an_evicted_condition_without_quota_is_just_pending():
    manifest = a_workload("team-a", "w").request(cpu=1).obj()
    manifest["status"] = {"conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted"}]}
    assert accept(manifest).eviction is None


def test_bad_evicted_condition_time():
    manifest = edit(a_workload("team-a", "w").request(cpu=1).admitted("cq", {"cpu": "f"}).evicted(),
                    "status.conditions.1.lastTransitionTime", "yesterday")
    assert_located(refuse(manifest), "Workload team-a/w", "status.conditions[1].lastTransitionTime",
                   "invalid RFC 3339 time 'yesterday'")


def test_unquoted_yaml_timestamp_stays_a_string_and_is_parsed_by_us():
    text = ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata:\n  name: w\n"
            "  namespace: team-a\n  creationTimestamp: 2025-01-01T00:00:01Z\n"
            "spec:\n  podSets:\n  - name: main\n    count: 1\n    template: {spec: {containers: []}}\n")
    docs = read_documents(FILE, text)
    assert docs[0].body["metadata"]["creationTimestamp"] == "2025-01-01T00:00:01Z"
    assert normalize(docs[0]).creation_time == 1_735_689_601_000


# --- kinds and API versions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(edit(cq(), "kind", "QueueCluster"), "QueueCluster cq", "kind",
                     "unsupported kind QueueCluster (apiVersion kueue.x-k8s.io/v1beta1)", id="unknown Kueue kind"),
        pytest.param({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
                     "Deployment web", "kind", "unsupported kind Deployment (apiVersion apps/v1)", id="a Deployment"),
        pytest.param(versioned(cq(), "kueue.x-k8s.io/v1"), "ClusterQueue cq", "apiVersion",
                     "unsupported kind ClusterQueue (apiVersion kueue.x-k8s.io/v1)", id="unknown Kueue version"),
        pytest.param(versioned(cq(), V1ALPHA1), "ClusterQueue cq", "apiVersion",
                     "unsupported kind ClusterQueue (apiVersion kueue.x-k8s.io/v1alpha1)",
                     id="v1alpha1 is only for Cohort"),
        pytest.param(versioned(a_namespace("team-a"), "v2"), "Namespace team-a", "apiVersion",
                     "unsupported kind Namespace (apiVersion v2)", id="Namespace in a wrong version"),
        pytest.param({"apiVersion": "batch/v2", "kind": "Job", "metadata": {"name": "j"}}, "Job j", "apiVersion",
                     "unsupported kind Job (apiVersion batch/v2)", id="Job in a wrong version"),
        pytest.param({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PriorityClass", "metadata": {"name": "p"},
                      "value": 1}, "PriorityClass p", "apiVersion",
                     "unsupported kind PriorityClass (apiVersion scheduling.k8s.io/v1beta1)",
                     id="PriorityClass at a version Kubernetes no longer serves"),
        pytest.param(drop(cq(), "apiVersion"), "ClusterQueue", "apiVersion", "required field is missing",
                     id="no apiVersion"),
        pytest.param(edit(cq(), "apiVersion", 1), "ClusterQueue", "apiVersion", "required field is missing",
                     id="apiVersion is not a string"),
        pytest.param({"apiVersion": "config.kueue.x-k8s.io/v1", "kind": "Configuration"}, "Configuration",
                     "apiVersion", "unsupported kind Configuration (apiVersion config.kueue.x-k8s.io/v1)",
                     id="Configuration in a wrong version"),
        # The kind is judged before any field: a Pod written with generateName is an unsupported kind,
        # not a missing name, and neither its metadata nor its spec is read.
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "kueue-sleep-"}}, "Pod",
                     "kind", "unsupported kind Pod (apiVersion v1)",
                     id="a Pod with generateName is a kind we do not take"),
        pytest.param({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": 7},
                      "spec": {"leaderWorkerTemplate": "broken"}}, "LeaderWorkerSet", "kind",
                     "unsupported kind LeaderWorkerSet (apiVersion leaderworkerset.x-k8s.io/v1)",
                     id="a LeaderWorkerSet with broken fields is refused for its kind first"),
        pytest.param({"apiVersion": "jobset.x-k8s.io/v1", "kind": "JobSet", "metadata": {"name": "js"}},
                     "JobSet js", "apiVersion", "unsupported kind JobSet (apiVersion jobset.x-k8s.io/v1)",
                     id="a JobSet at a version kueuelog does not take is refused by its apiVersion"),
        pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "MultiKueueCluster\nfake line"},
                     "MultiKueueCluster\nfake line", "kind",
                     "unsupported kind 'MultiKueueCluster\\nfake line' (apiVersion kueue.x-k8s.io/v1beta1)",
                     id="a kind with a line break is quoted"),
    ],
)
def test_unsupported_kind_or_api_version(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


def test_unsupported_kind_lists_the_kinds_kueuelog_takes():
    err = refuse({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}})
    assert err.message.endswith(
        "; kueuelog takes kueue.x-k8s.io/v1beta1 and v1beta2 AdmissionCheck, ClusterQueue, Cohort, LocalQueue, "
        "ProvisioningRequestConfig, ResourceFlavor, Workload, WorkloadPriorityClass, MultiKueueConfig, "
        "MultiKueueCluster; kueue.x-k8s.io/v1alpha1 Cohort; "
        "config.kueue.x-k8s.io/v1beta1 and v1beta2 Configuration; v1 Namespace, ConfigMap; scheduling.k8s.io/v1 "
        "PriorityClass; batch/v1 Job; resource.k8s.io/v1 and v1beta2 and v1beta1 ResourceClaimTemplate; "
        "scheduler.tensorstack.dev/v1beta1 Queue; jobset.x-k8s.io/v1alpha2 JobSet; "
        "kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob; kubeflow.org/v2beta1 MPIJob; "
        "trainer.kubeflow.org/v1alpha1 TrainJob, ClusterTrainingRuntime, TrainingRuntime; "
        "ray.io/v1 RayJob, RayCluster, RayService; workload.codeflare.dev/v1beta2 AppWrapper; "
        "sparkoperator.k8s.io/v1beta2 SparkApplication")


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(drop(cq(), "kind"), "kind", "required field is missing", id="no kind"),
        pytest.param(edit(cq(), "kind", ""), "kind", "required field is missing", id="empty kind"),
        pytest.param(["a", "b"], "", "expected a Kubernetes object, got list", id="a list instead of an object"),
        pytest.param("just text", "", "expected a Kubernetes object, got str", id="a string instead of an object"),
    ],
)
def test_documents_that_are_not_objects(body, field, message):
    with pytest.raises(ManifestError) as exc:
        normalize(Document(FILE, DOC, body))
    err = exc.value
    assert (err.file, err.document, err.obj, err.field, err.message) == (FILE, DOC, "", field, message)
    want = f"{FILE}: document {DOC}: {field}: {message}" if field else f"{FILE}: document {DOC}: {message}"
    assert str(err) == want


# --- v1alpha1 / v1beta1 / v1beta2 fields -----------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(edit(cq(), "spec.cohortName", "all"), "ClusterQueue cq", "spec.cohortName",
                     "unknown field (v1beta1 uses spec.cohort)", id="v1beta1 ClusterQueue with cohortName"),
        pytest.param(versioned(cq().cohort("all"), V1BETA2), "ClusterQueue cq", "spec.cohort",
                     "unknown field (v1beta2 uses spec.cohortName)", id="v1beta2 ClusterQueue with cohort"),
        pytest.param(versioned(cq().admission_checks("prov"), V1BETA2), "ClusterQueue cq", "spec.admissionChecks",
                     "unknown field (v1beta2 uses spec.admissionChecksStrategy)",
                     id="v1beta2 ClusterQueue with admissionChecks"),
        pytest.param(versioned(edit(a_cohort("child"), "spec.parentName", "root"), V1ALPHA1), "Cohort child",
                     "spec.parentName", "unknown field (v1alpha1 uses spec.parent)",
                     id="v1alpha1 Cohort with parentName"),
        pytest.param(versioned(edit(a_cohort("child"), "spec.parent", "root"), V1BETA2), "Cohort child",
                     "spec.parent", "unknown field (v1beta2 uses spec.parentName)", id="v1beta2 Cohort with parent"),
        pytest.param(edit(a_cohort("child").parent("root"), "spec.parent", "other"), "Cohort child",
                     "spec.parentName", "'root' conflicts with spec.parent 'other'",
                     id="v1beta1 Cohort with two different parents"),
        pytest.param(a_cohort("loop").parent("loop"), "Cohort loop", "spec.parentName",
                     "a Cohort cannot be its own parent", id="Cohort that is its own parent"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                          {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}),
                     "Workload team-a/w", "spec.priorityClassRef",
                     "unknown field (v1beta1 uses spec.priorityClassName)",
                     id="v1beta1 Workload with priorityClassRef"),
        pytest.param(versioned(a_workload("team-a", "w").request(cpu=1).priority_class("high"), V1BETA2),
                     "Workload team-a/w", "spec.priorityClassName",
                     "unknown field (v1beta2 uses spec.priorityClassRef)",
                     id="v1beta2 Workload with priorityClassName"),
        pytest.param(versioned(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                                    {"group": "scheduling.k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}),
                               V1BETA2),
                     "Workload team-a/w", "spec.priorityClassRef.kind",
                     "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
                     id="v1beta2 priorityClassRef kind that does not match its group"),
        pytest.param(versioned(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                                    {"group": "example.com", "kind": "PriorityClass", "name": "high"}), V1BETA2),
                     "Workload team-a/w", "spec.priorityClassRef.group", "unsupported value 'example.com'",
                     id="v1beta2 priorityClassRef in an unknown group"),
        pytest.param(versioned(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                                    {"name": "high"}), V1BETA2),
                     "Workload team-a/w", "spec.priorityClassRef.group", "required field is missing",
                     id="v1beta2 priorityClassRef without a group"),
    ],
)
def test_fields_of_the_wrong_api_version_are_refused(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


@pytest.mark.parametrize(
    ("manifest", "want_cohort"),
    [
        pytest.param(cq().cohort("all"), "all", id="v1beta1 spec.cohort"),
        pytest.param(versioned(edit(cq(), "spec.cohortName", "all"), V1BETA2), "all", id="v1beta2 spec.cohortName"),
        pytest.param(cq(), "", id="no cohort"),
    ],
)
def test_cluster_queue_cohort_by_version(manifest, want_cohort):
    assert accept(manifest).cohort == want_cohort


@pytest.mark.parametrize(
    ("manifest", "want_parent"),
    [
        pytest.param(versioned(edit(a_cohort("child"), "spec.parent", "root"), V1ALPHA1), "root",
                     id="v1alpha1 spec.parent"),
        pytest.param(edit(a_cohort("child"), "spec.parent", "root"), "root", id="v1beta1 spec.parent"),
        pytest.param(a_cohort("child").parent("root"), "root", id="v1beta1 spec.parentName"),
        pytest.param(edit(a_cohort("child").parent("root"), "spec.parent", "root"), "root",
                     id="v1beta1 both, agreeing"),
        pytest.param(versioned(a_cohort("child").parent("root"), V1BETA2), "root", id="v1beta2 spec.parentName"),
        pytest.param(a_cohort("root"), "", id="no parent: a root"),
    ],
)
def test_cohort_parent_by_version(manifest, want_parent):
    assert accept(manifest).parent == want_parent


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(a_workload("team-a", "w").request(cpu=1).priority_class("high"),
                     o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="v1beta1 priorityClassName from a WorkloadPriorityClass"),
        pytest.param(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassName", "high"),
                     o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="v1beta1 priorityClassName defaults to a pod PriorityClass"),
        pytest.param(versioned(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                                    {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}),
                               V1BETA2),
                     o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="v1beta2 priorityClassRef to a WorkloadPriorityClass"),
        pytest.param(versioned(edit(a_workload("team-a", "w").request(cpu=1), "spec.priorityClassRef",
                                    {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}), V1BETA2),
                     o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="v1beta2 priorityClassRef to a PriorityClass"),
        pytest.param(a_workload("team-a", "w").request(cpu=1), None, id="no priority class"),
    ],
)
def test_workload_priority_reference(manifest, want):
    assert accept(manifest).priority_ref == want


# --- ResourceFlavor --------------------------------------------------------------------------


def _tolerating_flavor(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return edit(a_flavor("gpu"), "spec.tolerations", list(tolerations))


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(a_flavor("gpu").labels(**{f"l{i}": "x" for i in range(9)}), "spec.nodeLabels",
                     "must have at most 8 items", id="9 nodeLabels"),
        pytest.param(edit(a_flavor("gpu"), "spec.nodeTaints", [{"key": f"k{i}", "effect": "NoSchedule"}
                                                                  for i in range(9)]),
                     "spec.nodeTaints", "must have at most 8 items", id="9 nodeTaints"),
        pytest.param(_tolerating_flavor(*[{"key": f"k{i}", "operator": "Exists"} for i in range(9)]),
                     "spec.tolerations", "must have at most 8 items", id="9 tolerations"),
        pytest.param(_tolerating_flavor({"key": "k", "operator": "Matches"}), "spec.tolerations[0].operator",
                     "unsupported value 'Matches': supported values: 'Equal' (default), 'Exists'",
                     id="toleration operator"),
        pytest.param(_tolerating_flavor({"operator": "Equal", "value": "v"}), "spec.tolerations[0].operator",
                     "operator must be Exists when 'key' is empty", id="toleration without a key must be Exists"),
        pytest.param(_tolerating_flavor({"key": "k", "operator": "Exists", "value": "v"}), "spec.tolerations[0].value",
                     "a value must be empty when 'operator' is 'Exists'", id="Exists toleration with a value"),
        pytest.param(_tolerating_flavor({"key": "k", "value": "v", "effect": "Never"}), "spec.tolerations[0].effect",
                     "unsupported value 'Never'", id="toleration effect"),
        pytest.param(_tolerating_flavor({"key": "k", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5}),
                     "spec.tolerations[0].tolerationSeconds",
                     "effect must be 'NoExecute' when 'tolerationSeconds' is set",
                     id="tolerationSeconds without NoExecute"),
        pytest.param(edit(a_flavor("gpu"), "spec.topologyName", "default"), "spec.nodeLabels",
                     "at least one nodeLabel is required when topology is set", id="topologyName without nodeLabels"),
        pytest.param(edit(a_flavor("gpu"), "spec.nodeTaints", [{"key": "k"}]), "spec.nodeTaints[0].effect",
                     "required field is missing", id="taint without an effect"),
    ],
)
def test_invalid_resource_flavor(manifest, field, message):
    assert_located(refuse(manifest), "ResourceFlavor gpu", field, message)


def test_resource_flavor_is_normalised():
    manifest = (a_flavor("gpu").labels(zone="b", **{"gpu-type": "a100"}).taint("gpu", "true", "NoSchedule")
                .toleration("spot", "true", "NoExecute"))
    manifest = edit(manifest, "spec.tolerations", [*manifest.body["spec"]["tolerations"], {"operator": "Exists"}])
    assert accept(manifest) == o.ResourceFlavor(
        name="gpu",
        node_labels=(("gpu-type", "a100"), ("zone", "b")),
        node_taints=(o.Taint(key="gpu", value="true", effect="NoSchedule"),),
        tolerations=(o.Toleration(key="spot", operator="Equal", value="true", effect="NoExecute"),
                     o.Toleration(key="", operator="Exists", value="", effect="")),
    )


# --- other kinds -----------------------------------------------------------------------------


def _admission_check(spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "AdmissionCheck", "metadata": {"name": "prov"}, "spec": spec}


def _prov_config(spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ProvisioningRequestConfig", "metadata": {"name": "cfg"}, "spec": spec}


@pytest.mark.parametrize(
    ("manifest", "obj", "field", "message"),
    [
        pytest.param(_admission_check({}), "AdmissionCheck prov", "spec.controllerName", "required field is missing",
                     id="AdmissionCheck without controllerName"),
        pytest.param(_admission_check("x"), "AdmissionCheck prov", "spec", "expected an object, got str",
                     id="AdmissionCheck spec is a string"),
        pytest.param(_admission_check({"controllerName": 5}), "AdmissionCheck prov", "spec.controllerName",
                     "Expected `str | null`, got `int`", id="AdmissionCheck controllerName is a number"),
        pytest.param(_prov_config(5), "ProvisioningRequestConfig cfg", "spec", "expected an object, got int",
                     id="ProvisioningRequestConfig spec is a number"),
        pytest.param(_prov_config({"managedResources": "nvidia.com/gpu"}), "ProvisioningRequestConfig cfg",
                     "spec.managedResources", "Expected `array | null`, got `str`",
                     id="managedResources is a string, not a list"),
    ],
)
def test_invalid_admission_check_objects(manifest, obj, field, message):
    assert_located(refuse(manifest), obj, field, message)


def test_admission_check_objects_are_normalised():
    ac = _admission_check({"controllerName": "kueue.x-k8s.io/provisioning-request",
                           "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                          "name": "cfg"}})
    prc = _prov_config({"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                        "managedResources": ["nvidia.com/gpu"], "retryStrategy": {"backoffLimitCount": 3}})
    assert accept(ac) == o.AdmissionCheck(name="prov", controller_name="kueue.x-k8s.io/provisioning-request",
                                          parameters_kind="ProvisioningRequestConfig", parameters_name="cfg",
                                          parameters_api_group="kueue.x-k8s.io")
    assert accept(prc) == o.ProvisioningRequestConfig(
        name="cfg", provisioning_class_name="check-capacity.autoscaling.x-k8s.io",
        managed_resources=("nvidia.com/gpu",), backoff_limit_count=3)


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(a_priority_class("high", 1000), o.WorkloadPriorityClass(name="high", value=1000),
                     id="WorkloadPriorityClass"),
        pytest.param(a_priority_class("low", -5), o.WorkloadPriorityClass(name="low", value=-5),
                     id="negative WorkloadPriorityClass value"),
        pytest.param(a_priority_class("high", 10, workload=False), o.PriorityClass(name="high", value=10),
                     id="PriorityClass"),
        pytest.param(edit(a_priority_class("base", 1, workload=False), "globalDefault", True),
                     o.PriorityClass(name="base", value=1, global_default=True), id="globalDefault PriorityClass"),
    ],
)
def test_priority_classes(manifest, want):
    assert accept(manifest) == want


def _config(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", **fields}


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(_config(fairSharing={"enable": True, "preemptionStrategies": ["Fairest"]}),
                     "fairSharing.preemptionStrategies[0]", "unsupported value 'Fairest'", id="unknown strategy"),
        pytest.param(_config(fairSharing={"enable": True, "preemptionStrategies": ["LessThanInitialShare",
                                                                                   "LessThanInitialShare"]}),
                     "fairSharing.preemptionStrategies",
                     "unsupported value ['LessThanInitialShare', 'LessThanInitialShare']", id="a strategy twice"),
        pytest.param(_config(fairSharing={"enable": True, "preemptionStrategies": ["LessThanInitialShare",
                                                                                   "LessThanOrEqualToFinalShare"]}),
                     "fairSharing.preemptionStrategies", "supported values: 'LessThanOrEqualToFinalShare', "
                     "'LessThanInitialShare', 'LessThanOrEqualToFinalShare,LessThanInitialShare'",
                     id="strategies in the wrong order"),
        pytest.param(_config(waitForPodsReady={"enable": True, "timeout": "5 minutes"}), "waitForPodsReady.timeout",
                     "invalid duration '5 minutes'", id="timeout that is not a Go duration"),
        pytest.param(_config(fairSharing={"enabled": True}), "fairSharing.enabled", "unknown field",
                     id="misspelt enable"),
    ],
)
def test_invalid_configuration(manifest, field, message):
    assert_located(refuse(manifest), "Configuration", field, message)


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(_config(), o.Configuration(), id="defaults"),
        pytest.param(_config(fairSharing={"enable": True, "preemptionStrategies": ["LessThanInitialShare"]}),
                     o.Configuration(fair_sharing=True, fair_sharing_strategies=("LessThanInitialShare",)),
                     id="fair sharing with one strategy"),
        pytest.param(_config(waitForPodsReady={"enable": True, "timeout": "1h30m", "blockAdmission": True}),
                     o.Configuration(wait_for_pods_ready=True, wait_for_pods_ready_timeout_ms=5_400_000,
                                     wait_for_pods_ready_block_admission=True),
                     id="waitForPodsReady with a Go duration"),
        pytest.param(_config(integrations={"frameworks": ["batch/job"]}, manageJobsWithoutQueueName=False),
                     o.Configuration(), id="knobs that do not change decisions are accepted and ignored"),
    ],
)
def test_configuration(manifest, want):
    assert accept(manifest) == want


# --- whole objects ---------------------------------------------------------------------------


def test_cluster_queue_is_normalised_exactly():
    manifest = (cq("team-a-cq").cohort("all")
                .group(("spot", {"cpu": ("9", "1"), "memory": ("36Gi", None, "12Gi")}),
                       ("on-demand", {"cpu": 0.5, "memory": "1G"}))
                .flavor("gpu-a100", **{"example.com/gpu": 4})
                .strict_fifo().preemption(within="LowerPriority", reclaim="Any").weight("1.5"))
    assert accept(manifest) == o.ClusterQueue(
        name="team-a-cq",
        cohort="all",
        resource_groups=(
            o.ResourceGroup(covered_resources=("cpu", "memory"), flavors=(
                o.FlavorQuotas(name="spot", resources=(
                    ("cpu", o.Quota(nominal=9000, borrowing_limit=1000)),
                    ("memory", o.Quota(nominal=36 << 30, lending_limit=12 << 30)),
                )),
                o.FlavorQuotas(name="on-demand", resources=(("cpu", o.Quota(nominal=500)),
                                                            ("memory", o.Quota(nominal=10**9)))),
            )),
            o.ResourceGroup(covered_resources=("example.com/gpu",), flavors=(
                o.FlavorQuotas(name="gpu-a100", resources=(("example.com/gpu", o.Quota(nominal=4)),)),
            )),
        ),
        namespace_selector=o.LabelSelector(),
        queueing_strategy=o.QueueingStrategy.STRICT_FIFO,
        preemption=o.PreemptionPolicy(within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY,
                                      reclaim_within_cohort=o.ReclaimWithinCohort.ANY),
        fair_sharing_weight=1500,
    )


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(cq().admission_checks("prov", "other"), ("prov", "other"), id="v1beta1 admissionChecks"),
        pytest.param(versioned(edit(cq(), "spec.admissionChecksStrategy",
                                    {"admissionChecks": [{"name": "prov", "onFlavors": ["spot"]}]}), V1BETA2),
                     ("prov",), id="v1beta2 admissionChecksStrategy"),
    ],
)
def test_admission_checks_of_a_cluster_queue(manifest, want):
    assert accept(manifest).admission_checks == want


def test_admission_checks_and_strategy_are_mutually_exclusive():
    manifest = edit(cq().admission_checks("prov"), "spec.admissionChecksStrategy",
                    {"admissionChecks": [{"name": "prov"}]})
    assert_located(refuse(manifest), "ClusterQueue cq", "spec.admissionChecksStrategy",
                   "admissionChecks and admissionChecksStrategy are mutually exclusive")


def test_local_queue_is_normalised():
    assert accept(a_local_queue("team-a", "lq", "team-a-cq").stop("Hold")) == o.LocalQueue(
        namespace="team-a", name="lq", cluster_queue="team-a-cq", stop_policy=o.StopPolicy.HOLD)


def test_cohort_is_normalised():
    assert accept(a_cohort("team").parent("org").flavor("default", cpu=(4, 2, 8)).weight(2)) == o.Cohort(
        name="team", parent="org", fair_sharing_weight=2000,
        resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
            o.FlavorQuotas(name="default", resources=(("cpu", o.Quota(nominal=4000, borrowing_limit=2000,
                                                                      lending_limit=8000)),)),)),),
    )


@pytest.mark.parametrize(
    ("status", "want_admission"),
    [
        pytest.param(None, None, id="no status: pending"),
        pytest.param(
            {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "spot"}}]},
             "conditions": [{"type": "QuotaReserved", "status": "True"}]},
            o.Admission(cluster_queue="cq", pod_set_assignments=(
                o.PodSetAssignment(name="main", flavors=(("cpu", "spot"),), resource_usage=(("cpu", 1500),),
                                   count=3),)),
            id="QuotaReserved=True without resourceUsage: requests times count",
        ),
        pytest.param(
            {"admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "spot"}, "count": 2, "resourceUsage": {"cpu": "1"}}]},
             "conditions": [{"type": "QuotaReserved", "status": "True"}]},
            o.Admission(cluster_queue="cq", pod_set_assignments=(
                o.PodSetAssignment(name="main", flavors=(("cpu", "spot"),), resource_usage=(("cpu", 1000),),
                                   count=2),)),
            id="QuotaReserved=True with resourceUsage and count as written",
        ),
        pytest.param(
            {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main"}]},
             "conditions": [{"type": "QuotaReserved", "status": "False"}]},
            None, id="admission without QuotaReserved=True does not hold quota",
        ),
    ],
)
def test_workload_arriving_with_an_admission(status, want_admission):
    manifest = a_workload("team-a", "w").request(count=3, cpu="500m").obj()
    if status is not None:
        manifest["status"] = status
    assert accept(manifest).admission == want_admission


@pytest.mark.parametrize(
    ("status", "field", "message"),
    [
        pytest.param({"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "workers"}]},
                      "conditions": [{"type": "QuotaReserved", "status": "True"}]},
                     "status.admission.podSetAssignments[0].name", "no podSet named 'workers' in spec.podSets",
                     id="assignment to a podSet that does not exist"),
        pytest.param({"admission": {"clusterQueue": "CQ", "podSetAssignments": []},
                      "conditions": [{"type": "QuotaReserved", "status": "True"}]},
                     "status.admission.clusterQueue", "invalid value 'CQ'", id="admission to an invalid name"),
        pytest.param({"admission": {"clusterQueue": "cq", "podSetAssignments": [
                         {"name": "main", "resourceUsage": {"cpu": "-1"}}]},
                      "conditions": [{"type": "QuotaReserved", "status": "True"}]},
                     "status.admission.podSetAssignments[0].resourceUsage.cpu", "must be greater than or equal to 0",
                     id="negative resourceUsage"),
    ],
)
def test_invalid_admission(status, field, message):
    manifest = edit(a_workload("team-a", "w").request(cpu=1), "status", status)
    assert_located(refuse(manifest), "Workload team-a/w", field, message)


# --- YAML streams ----------------------------------------------------------------------------


CQ_YAML = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources:
      - name: cpu
        nominalQuota: 9
"""
FLAVOR_YAML = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: default\n"
BAD_CQ_YAML = CQ_YAML.replace("nominalQuota: 9", "nominalQuota: 9\n        borrowingLimit: 1")


def test_documents_are_numbered_from_one_and_empty_documents_keep_their_number():
    docs = read_documents("a.yaml", f"{FLAVOR_YAML}---\n---\n{CQ_YAML}")
    assert [(d.file, d.index, d.body["kind"]) for d in docs] == [("a.yaml", 1, "ResourceFlavor"),
                                                                   ("a.yaml", 3, "ClusterQueue")]


def test_a_list_is_expanded_into_its_items():
    text = ("apiVersion: v1\nkind: List\nitems:\n"
            "- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n"
            "- {apiVersion: v1, kind: Namespace, metadata: {name: b}}\n")
    got = load({"ns.yaml": text})
    assert [(d.index, obj) for d, obj in got] == [
        (1, o.Namespace(name="a", labels=(("kubernetes.io/metadata.name", "a"),))),
        (1, o.Namespace(name="b", labels=(("kubernetes.io/metadata.name", "b"),))),
    ]


def test_the_error_names_the_file_and_the_document_it_is_in():
    with pytest.raises(ManifestError) as exc:
        load({"flavors.yaml": FLAVOR_YAML, "queues.yaml": f"{FLAVOR_YAML}---\n{BAD_CQ_YAML}"})
    err = exc.value
    assert (err.file, err.document, err.obj, err.field) == (
        "queues.yaml", 2, "ClusterQueue cq", "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit")
    assert str(err) == ("queues.yaml: document 2 (ClusterQueue cq): "
                        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
                        "must be nil when cohort is empty")


@pytest.mark.parametrize(
    ("text", "want_document", "want"),
    [
        pytest.param("kind: ClusterQueue\nmetadata:\n  name: [cq\n", 1,
                     "invalid YAML (line 4): expected ',' or ']', but got '<stream end>'", id="unclosed flow sequence"),
        pytest.param(f"{FLAVOR_YAML}---\n{FLAVOR_YAML}---\nkind: [\n", 3, "invalid YAML (line ",
                     id="the broken document is named, not just the file"),
        pytest.param(CQ_YAML.replace("nominalQuota: 9", "nominalQuota: 9\n        nominalQuota: 90"), 1,
                     "invalid YAML (line 14): found duplicate key 'nominalQuota'",
                     id="a key written twice is refused, not silently overwritten"),
        pytest.param(f"{FLAVOR_YAML}---\nkind: Namespace\nkind: ResourceFlavor\n", 2,
                     "invalid YAML (line 7): found duplicate key 'kind'",
                     id="duplicate key in the second document; lines count from the top of the file"),
    ],
)
def test_invalid_yaml_is_refused_with_its_document_and_line(text, want_document, want):
    with pytest.raises(ManifestError) as exc:
        read_documents("broken.yaml", text)
    err = exc.value
    assert (err.file, err.document, err.obj, err.field) == ("broken.yaml", want_document, "", "")
    assert str(err).startswith(f"broken.yaml: document {want_document}: {want}")


def test_yaml_merge_keys_are_not_duplicates():
    docs = read_documents("merge.yaml", "base: &b {cpu: 1}\nflavor:\n  <<: *b\n  memory: 2\n")
    assert docs[0].body == {"base": {"cpu": 1}, "flavor": {"cpu": 1, "memory": 2}}


def test_load_skips_jobs_kueue_does_not_manage():
    job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: plain\nspec:\n  template: {spec: {containers: []}}\n"
    got = load({"jobs.yaml": f"{FLAVOR_YAML}---\n{job}"})
    assert [obj for _, obj in got] == [o.ResourceFlavor(name="default")]


# --- the command line ------------------------------------------------------------------------


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUEUELOG), "simulate", *args], capture_output=True, text=True, timeout=120, check=False)


def test_cli_refuses_an_invalid_file_with_exit_2_and_a_located_error(tmp_path):
    path = tmp_path / "queues.yaml"
    path.write_text(f"{FLAVOR_YAML}---\n{BAD_CQ_YAML}", encoding="utf-8")
    proc = _simulate(str(path), "-o", "json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (f"error: {path}: document 2 (ClusterQueue cq): "
                           "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: "
                           "must be nil when cohort is empty\n")


def test_cli_names_the_second_file_when_the_first_one_is_fine(tmp_path):
    good, bad = tmp_path / "flavors.yaml", tmp_path / "workloads.yaml"
    good.write_text(FLAVOR_YAML, encoding="utf-8")
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w, namespace: team-a}\n"
                   "spec:\n  podSets:\n  - name: main\n    count: 2\n    minCount: 3\n"
                   "    template: {spec: {containers: []}}\n", encoding="utf-8")
    proc = _simulate(str(good), str(bad))
    assert proc.returncode == 2
    assert f"error: {bad}: document 1 (Workload team-a/w): spec.podSets[0].minCount: " in proc.stderr
    assert "must be between 1 and count (2), got 3" in proc.stderr


def test_cli_refuses_a_missing_file_with_exit_2(tmp_path):
    missing = tmp_path / "nope.yaml"
    proc = _simulate(str(missing))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"error: cannot read {missing}: No such file or directory\n"


def test_cli_refuses_broken_yaml_with_exit_2(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: ClusterQueue\nmetadata:\n  name: [cq\n", encoding="utf-8")
    proc = _simulate(str(path))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path}: document 1: invalid YAML (line 4): ")


def test_cli_accepts_a_valid_file(tmp_path):
    path = tmp_path / "queues.yaml"
    path.write_text(f"{FLAVOR_YAML}---\n{CQ_YAML}", encoding="utf-8")
    proc = _simulate(str(path), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"apiVersion": "v1", "kind": "List", "items": []}


def test_cli_yaml_output_is_the_json_output_with_pending_workloads():
    """-o yaml used to crash on the closed-set pending reason of a waiting workload."""
    examples = sorted(str(p) for p in Path("examples").glob("*.yaml"))
    as_json = _simulate(*examples, "-o", "json")
    as_yaml = _simulate(*examples, "-o", "yaml")
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_yaml.stderr
    doc = yaml.safe_load(as_yaml.stdout)
    assert doc == json.loads(as_json.stdout)
    assert any(item["metadata"].get("annotations", {}).get("kueuelog.io/pending-reason") for item in doc["items"])


_CQ_V1BETA2 = ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec:\n"
               "  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n"
               "    - name: default\n      resources: [{name: cpu, nominalQuota: '2'}]\n")


_JOB_WITH_CLAIM = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns, labels: "
                   "{kueue.x-k8s.io/queue-name: lq}}\nspec:\n  template:\n    spec:\n      resourceClaims:\n"
                   "      - {name: gpu, resourceClaimTemplateName: single-gpu}\n"
                   "      containers: [{name: c, image: i, resources: {claims: [{name: gpu}]}}]\n")
_WORKLOAD_GATED = ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {name: w, namespace: ns}\nspec:\n"
                   "  queueName: lq\n  preemptionGates: [{name: example.com/gate}]\n  podSets:\n  - name: main\n"
                   "    count: 1\n    template: {spec: {containers: [{name: c, image: i}]}}\n")


@pytest.mark.parametrize(("text", "field", "says"), [
    pytest.param(_CQ_V1BETA2 + "  concurrentAdmissionPolicy: {}\n", "spec.concurrentAdmissionPolicy",
                 "feature gate ConcurrentAdmission", id="concurrent admission policy"),
    pytest.param(_WORKLOAD_GATED, "spec.preemptionGates", "MultiKueueOrchestratedPreemption", id="preemption gates"),
    pytest.param("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n"
                 "  deviceClassMappings: [{name: gpus, deviceClassNames: [gpu.example.com],\n"
                 "    sources: [{counter: {}}]}]\n",
                 "resources.deviceClassMappings[0].sources", "KueueDRAIntegrationPartitionableDevices",
                 id="DRA mapping sources (counters, capacity)"),
    pytest.param("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n"
                 "  quotaCheckStrategy: IgnoreUndeclared\n",
                 "resources.quotaCheckStrategy", "feature gate QuotaCheckStrategy", id="quota check strategy"),
])
def test_kueue_features_not_supported_yet_are_refused_by_name_never_ignored(text, field, says):
    with pytest.raises(ManifestError) as err:
        load({"k.yaml": text})
    assert err.value.field == field and says in err.value.message


def test_a_jobs_dra_claims_are_taken_and_resolved_against_the_input():
    """Kueue's DRA integration (events/dra.py): the claim is read, its template looked up in the input."""
    (_, wl), = load({"k.yaml": _JOB_WITH_CLAIM})
    (claim,) = wl.pod_sets[0].device_claims
    assert (claim.name, claim.template, claim.resolved, claim.devices) == ("gpu", "single-gpu", True, ())
    assert claim.error.endswith('resourceclaimtemplates.resource.k8s.io "single-gpu" not found')


def test_admission_scope_without_fair_sharing_is_accepted():
    assert load({"k.yaml": _CQ_V1BETA2 + "  admissionScope: {admissionMode: NoAdmissionFairSharing}\n"})


def test_admission_scope_usage_based_is_read():
    ((_, cq),) = load({"k.yaml": _CQ_V1BETA2 + "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n"})
    assert isinstance(cq, o.ClusterQueue) and cq.admission_fair_sharing


@pytest.mark.parametrize(("scope", "field", "says"), [
    ("{admissionMode: Sometimes}", "spec.admissionScope.admissionMode", "supported values"),
    ("{}", "spec.admissionScope.admissionMode", "required field is missing"),
    ("{admissionMode: NoAdmissionFairSharing, x: 1}", "spec.admissionScope.x", "unknown field"),
])
def test_a_bad_admission_scope_is_one_line_naming_the_field(scope, field, says):
    with pytest.raises(ManifestError) as err:
        load({"k.yaml": _CQ_V1BETA2 + f"  admissionScope: {scope}\n"})
    assert err.value.field == field and says in err.value.message and "\n" not in str(err.value)


def test_a_local_queue_weight_is_read_in_milli_units():
    text = ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq, namespace: ns}\n"
            "spec: {clusterQueue: cq, fairSharing: {weight: '2.5'}}\n")
    ((_, lq),) = load({"k.yaml": text})
    assert isinstance(lq, o.LocalQueue) and lq.fair_sharing_weight == 2500
