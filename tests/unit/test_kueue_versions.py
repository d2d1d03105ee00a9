"""Kueue's versions without a conversion webhook: a body respelled for the version it is read at.

Our CRDs serve every version with conversion None: the API server returns what was written with
only ``apiVersion`` rewritten. :func:`events.kueue_versions.respell` is the reader's half of the
story; these tests pin its renames and show, on our Kueue-style example corpus, that an object
written at one version and read at any other means the same to our parser once respelled.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from events.kueue_versions import respell
from events.manifests import Document, load, normalize, read_documents

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "kueue-examples"
G = "kueue.x-k8s.io"


def obj(kind: str, version: str, spec: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": f"{G}/{version}", "kind": kind, "metadata": {"name": "x"}}
    if spec is not None:
        body["spec"] = spec
    body.update(rest)
    return body


CASES = [
    pytest.param(obj("ClusterQueue", "v1beta2", {"cohort": "all"}),
                 obj("ClusterQueue", "v1beta2", {"cohortName": "all"}),
                 id="v1beta1 cohort read as v1beta2 becomes cohortName"),
    pytest.param(obj("ClusterQueue", "v1beta1", {"cohortName": "all"}),
                 obj("ClusterQueue", "v1beta1", {"cohort": "all"}),
                 id="v1beta2 cohortName read as v1beta1 becomes cohort"),
    pytest.param(obj("ClusterQueue", "v1beta2", {"cohort": "a", "cohortName": "b"}),
                 obj("ClusterQueue", "v1beta2", {"cohort": "a", "cohortName": "b"}),
                 id="conflicting spellings are left for the parser to refuse"),
    pytest.param(obj("ClusterQueue", "v1beta2", {"cohort": "", "cohortName": "b"}),
                 obj("ClusterQueue", "v1beta2", {"cohortName": "b"}), id="an empty old spelling is dropped"),
    pytest.param(obj("ClusterQueue", "v1beta2", {"admissionChecks": ["prov"]}),
                 obj("ClusterQueue", "v1beta2", {"admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}]}}),
                 id="v1beta1 admissionChecks become admissionChecksStrategy"),
    pytest.param(obj("ClusterQueue", "v1beta2", {"flavorFungibility": {"whenCanBorrow": "Borrow",
                                                                       "whenCanPreempt": "Preempt"}}),
                 obj("ClusterQueue", "v1beta2", {"flavorFungibility": {"whenCanBorrow": "MayStopSearch",
                                                                       "whenCanPreempt": "MayStopSearch"}}),
                 id="v1beta1 Borrow and Preempt become MayStopSearch"),
    pytest.param(obj("ClusterQueue", "v1beta1", {"flavorFungibility": {"whenCanBorrow": "Borrow"}}),
                 obj("ClusterQueue", "v1beta1", {"flavorFungibility": {"whenCanBorrow": "Borrow"}}),
                 id="v1beta1 keeps its deprecated spellings"),
    pytest.param(obj("Cohort", "v1beta2", {"parent": "root"}), obj("Cohort", "v1beta2", {"parentName": "root"}),
                 id="v1alpha1 parent read as v1beta2 becomes parentName"),
    pytest.param(obj("Cohort", "v1alpha1", {"parentName": "root"}), obj("Cohort", "v1alpha1", {"parent": "root"}),
                 id="parentName read as v1alpha1 becomes parent"),
    pytest.param(obj("Cohort", "v1beta1", {"parent": "root"}), obj("Cohort", "v1beta1", {"parent": "root"}),
                 id="v1beta1 takes both cohort parent spellings"),
    pytest.param(obj("Workload", "v1beta2", {"priorityClassName": "high", "priorityClassSource": "",
                                             "priority": 5}),
                 obj("Workload", "v1beta2", {"priorityClassRef": {"group": "scheduling.k8s.io",
                                                                  "kind": "PriorityClass", "name": "high"},
                                             "priority": 5}),
                 id="v1beta1 pod priority class read as v1beta2 becomes priorityClassRef"),
    pytest.param(obj("Workload", "v1beta2", {"priorityClassName": "wpc",
                                             "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}),
                 obj("Workload", "v1beta2", {"priorityClassRef": {"group": G, "kind": "WorkloadPriorityClass",
                                                                  "name": "wpc"}}),
                 id="v1beta1 workload priority class read as v1beta2 becomes priorityClassRef"),
    pytest.param(obj("Workload", "v1beta2", {"priorityClassSource": "",
                                             "priorityClassRef": {"group": G, "kind": "WorkloadPriorityClass",
                                                                  "name": "wpc"}}),
                 obj("Workload", "v1beta2", {"priorityClassRef": {"group": G, "kind": "WorkloadPriorityClass",
                                                                  "name": "wpc"}}),
                 id="an empty priorityClassSource (Kueue's v1beta1 default) is dropped in v1beta2"),
    pytest.param(obj("Workload", "v1beta1", {"priorityClassRef": {"group": G, "kind": "WorkloadPriorityClass",
                                                                  "name": "wpc"}}),
                 obj("Workload", "v1beta1", {"priorityClassName": "wpc",
                                             "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"}),
                 id="v1beta2 priorityClassRef read as v1beta1 becomes priorityClassName and Source"),
    pytest.param(obj("Workload", "v1beta2", {}, status={"accumulatedPastExexcutionTimeSeconds": 30}),
                 obj("Workload", "v1beta2", {}, status={"accumulatedPastExecutionTimeSeconds": 30}),
                 id="v1beta1's misspelt execution time is respelt in v1beta2"),
    pytest.param(obj("LocalQueue", "v1beta2", {"clusterQueue": "cq"}, status={"flavorUsage": []}),
                 obj("LocalQueue", "v1beta2", {"clusterQueue": "cq"}, status={"flavorsUsage": []}),
                 id="LocalQueue flavorUsage becomes flavorsUsage in v1beta2"),
    pytest.param(obj("LocalQueue", "v1beta1", {"clusterQueue": "cq"}, status={"flavorsUsage": []}),
                 obj("LocalQueue", "v1beta1", {"clusterQueue": "cq"}, status={"flavorUsage": []}),
                 id="LocalQueue flavorsUsage becomes flavorUsage in v1beta1"),
    pytest.param({"apiVersion": "batch/v1", "kind": "Job", "spec": {"cohort": "x"}},
                 {"apiVersion": "batch/v1", "kind": "Job", "spec": {"cohort": "x"}}, id="other groups untouched"),
]


@pytest.mark.parametrize(("body", "want"), CASES)
def test_respell(body: dict[str, Any], want: dict[str, Any]) -> None:
    before = copy.deepcopy(body)
    assert respell(body) == want
    assert body == before  # the input is not modified


def corpus() -> list[Document]:
    return [doc for path in sorted(CORPUS.glob("*.yaml")) for doc in read_documents(path.name, path.read_text())]


def served_versions(kind: str) -> list[str]:
    return ["v1alpha1", "v1beta1", "v1beta2"] if kind == "Cohort" else ["v1beta1", "v1beta2"]


def test_the_corpus_is_what_our_parser_accepts() -> None:
    files = {p.name: p.read_text() for p in sorted(CORPUS.glob("*.yaml"))}
    loaded = load(files)
    kinds = {doc.body["kind"] for doc, _ in loaded}
    assert kinds == {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "Workload", "WorkloadPriorityClass",
                     "AdmissionCheck", "ProvisioningRequestConfig", "Configuration", "MultiKueueConfig",
                     "MultiKueueCluster"}
    versions = {doc.body["apiVersion"] for doc, _ in loaded}
    assert {f"{G}/v1alpha1", f"{G}/v1beta1", f"{G}/v1beta2"} <= versions


@pytest.mark.parametrize("doc", [d for d in corpus() if d.body["apiVersion"].startswith(f"{G}/")],
                         ids=lambda d: f"{d.file}#{d.index} {d.body['kind']} {d.body['apiVersion'].split('/')[1]}")
def test_an_example_read_at_any_served_version_means_the_same(doc: Document) -> None:
    """Conversion None: read at another version, the stored body only changes apiVersion."""
    want = normalize(doc)
    for version in served_versions(doc.body["kind"]):
        read = {**copy.deepcopy(doc.body), "apiVersion": f"{G}/{version}"}
        assert normalize(Document(doc.file, doc.index, respell(read))) == want, version


def test_corpus_names_are_unique_per_kind() -> None:
    """The integration test applies the examples together: no two objects of a kind share a name."""
    seen = [(d.body["kind"], d.body["metadata"]["name"]) for d in corpus() if d.body["kind"] != "Configuration"]
    assert len(seen) == len(set(seen))
