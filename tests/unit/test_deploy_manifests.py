"""deploy/, the Dockerfile and docker-compose.yml: what a cluster operator applies is what we mean.

Static checks (no server): every YAML parses, kustomizations list what exists, the CRDs
agree with our parser (enums, limits, quantity syntax), the Deployments carry image,
probes, security context and ServiceAccount, each ClusterRole grants exactly its
service's needs, and the Strimzi topics are the ones ``events.envelope.Topics`` names.
The API server's view of the same files is in tests/integration/test_kube_crds.py and
test_kube_rbac.py.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from events import manifests, multikueue_manifest
from events import objects as o
from events.cluster import POD_PRIORITY_CLASS_SOURCE, WORKLOAD_PRIORITY_CLASS_SOURCE
from events.envelope import Topics
from events.quantity import QuantityError, parse_fraction
from services.runtime.kafka import LEASES_SUFFIX
from services.runtime.kafka_acls import Acl, Op, Pattern, Resource, role_acls
from services.runtime.shards import hand_over_topic, held_topic, shard_map_topic

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
IMAGE = "ghcr.io/kueuelog/kueuelog:0.1.0"
NAMESPACE = "kueuelog-system"
SERVICES = ("watcher", "scheduler", "actuator")
# The actuator talks to the cluster it runs in (and runs the job reconciler) only when told to.
SERVICE_FLAGS: dict[str, list[str]] = {"watcher": [], "scheduler": [], "actuator": ["--kube"]}
KUEUE_KINDS = {
    "ResourceFlavor": ("resourceflavors", "Cluster"),
    "ClusterQueue": ("clusterqueues", "Cluster"),
    "LocalQueue": ("localqueues", "Namespaced"),
    "Cohort": ("cohorts", "Cluster"),
    "Workload": ("workloads", "Namespaced"),
    "WorkloadPriorityClass": ("workloadpriorityclasses", "Cluster"),
    "AdmissionCheck": ("admissionchecks", "Cluster"),
    "ProvisioningRequestConfig": ("provisioningrequestconfigs", "Cluster"),
    "MultiKueueConfig": ("multikueueconfigs", "Cluster"),
    "MultiKueueCluster": ("multikueueclusters", "Cluster"),
}
WITH_STATUS = {"ClusterQueue", "LocalQueue", "Workload", "Cohort", "AdmissionCheck", "MultiKueueCluster"}
# Served versions of each kind (Kueue's, plus v1alpha1 Cohort, which our parser accepts); v1beta2 stores.
VERSIONS = {kind: ["v1alpha1", "v1beta1", "v1beta2"] if kind == "Cohort" else ["v1beta1", "v1beta2"]
            for kind in KUEUE_KINDS}


@functools.cache
def docs(path: Path) -> list[dict[str, Any]]:
    """The documents of a file, parsed once (tests only read them)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def all_yaml() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def base_objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in sorted((DEPLOY / "base").glob("*.yaml")):
        if p.name != "kustomization.yaml":
            out.extend(docs(p))
    return out


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in base_objects() if d["kind"] == kind}


def crds(group: str = "kueue.x-k8s.io") -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted((DEPLOY / "crds").glob("*.yaml")):
        if p.name != "kustomization.yaml":
            (doc,) = docs(p)
            if doc["spec"]["group"] == group:
                out[doc["spec"]["names"]["kind"]] = doc
    return out


def test_the_provisioning_request_crd_is_the_autoscalers_kind_with_status() -> None:
    (pr,) = crds("autoscaling.x-k8s.io").values()
    spec = pr["spec"]
    assert (pr["metadata"]["name"], spec["names"]["kind"], spec["scope"]) == (
        "provisioningrequests.autoscaling.x-k8s.io", "ProvisioningRequest", "Namespaced")
    (v1,) = spec["versions"]
    assert (v1["name"], v1["storage"], v1["subresources"]) == ("v1", True, {"status": {}})
    props = v1["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {"provisioningClassName", "parameters", "podSets"}
    assert set(props["status"]["properties"]) == {"conditions", "provisioningClassDetails"}


def schema(kind: str, version: str = "v1beta1") -> dict[str, Any]:
    (v,) = [v for v in crds()[kind]["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def at(node: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split("."):
        if part.endswith("[]"):
            node = node["properties"][part[:-2]]["items"]
        else:
            node = node["properties"][part]
    return node


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}".lstrip("."))
    if "items" in node:
        yield from walk(node["items"], path + "[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], path + "{}")


# --- files and kustomizations ----------------------------------------------------------------


@pytest.mark.parametrize("path", all_yaml(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_under_deploy_parses(path: Path) -> None:
    parsed = docs(path)
    assert parsed, f"{path} is empty"
    for d in parsed:
        assert isinstance(d, dict) and d.get("apiVersion") and d.get("kind"), f"{path}: not a Kubernetes object"


def test_kustomizations_list_exactly_the_files_there() -> None:
    top = docs(DEPLOY / "kustomization.yaml")[0]
    assert top["resources"] == ["crds", "base"]
    for sub in ("crds", "base"):
        listed = docs(DEPLOY / sub / "kustomization.yaml")[0]["resources"]
        present = sorted(p.name for p in (DEPLOY / sub).glob("*.yaml") if p.name != "kustomization.yaml")
        assert sorted(listed) == present, sub


# --- CRDs ------------------------------------------------------------------------------------


def test_one_crd_per_kueue_kind_with_kueues_names_and_scope() -> None:
    got = crds()
    assert set(got) == set(KUEUE_KINDS)
    for kind, (plural, scope) in KUEUE_KINDS.items():
        spec = got[kind]["spec"]
        assert got[kind]["metadata"]["name"] == f"{plural}.kueue.x-k8s.io"
        assert spec["group"] == "kueue.x-k8s.io"
        assert (spec["names"]["plural"], spec["names"]["kind"], spec["scope"]) == (plural, kind, scope)
    assert got["ClusterQueue"]["spec"]["names"]["shortNames"] == ["cq"]
    assert got["LocalQueue"]["spec"]["names"]["shortNames"] == ["queue", "queues", "lq"]
    assert got["Workload"]["spec"]["names"]["shortNames"] == ["wl"]
    assert got["ResourceFlavor"]["spec"]["names"]["shortNames"] == ["flavor", "flavors", "rf"]


def test_every_kind_served_at_each_version_stored_as_v1beta2_with_one_schema() -> None:
    """Conversion None: the API server stores what was written and only rewrites apiVersion on read,
    so every version has the same schema (the union of the spellings) or a read would prune."""
    for kind, crd in crds().items():
        versions = crd["spec"]["versions"]
        assert [v["name"] for v in versions] == VERSIONS[kind], kind
        assert [v["name"] for v in versions if v["storage"]] == ["v1beta2"], kind
        assert all(v["served"] for v in versions)
        assert crd["spec"]["conversion"] == {"strategy": "None"}
        for v in versions[1:]:
            assert v["schema"] == versions[0]["schema"], (kind, v["name"])
            assert v.get("subresources") == versions[0].get("subresources"), (kind, v["name"])


def test_both_spellings_are_in_the_schema_of_every_version() -> None:
    for kind, paths in [
        ("ClusterQueue", ["spec.cohort", "spec.cohortName", "spec.admissionChecks", "spec.admissionChecksStrategy"]),
        ("Cohort", ["spec.parent", "spec.parentName"]),
        ("Workload", ["spec.priorityClassName", "spec.priorityClassSource", "spec.priorityClassRef",
                      "status.accumulatedPastExexcutionTimeSeconds", "status.accumulatedPastExecutionTimeSeconds"]),
        ("LocalQueue", ["status.flavorUsage", "status.flavorsUsage"]),
    ]:
        for version in VERSIONS[kind]:
            for path in paths:
                assert at(schema(kind, version), path), (kind, version, path)


def test_no_yaml_anchors_in_the_crds() -> None:
    """kubectl and kustomize read these files: every node is spelled out."""
    for p in sorted((DEPLOY / "crds").glob("*.yaml")):
        assert not re.search(r"[&*]id\d+", p.read_text()), p


def test_status_subresources() -> None:
    for kind, crd in crds().items():
        for v in crd["spec"]["versions"]:
            has_status = v.get("subresources", {}).get("status") == {}
            assert has_status == (kind in WITH_STATUS), kind
            assert ("status" in v["schema"]["openAPIV3Schema"]["properties"]) == (kind in WITH_STATUS), kind


@pytest.mark.parametrize(("kind", "columns"), [
    ("ClusterQueue", [("Cohort", 0), ("Strategy", 1), ("Pending Workloads", 0), ("Admitted Workloads", 0)]),
    ("LocalQueue", [("ClusterQueue", 0), ("Pending Workloads", 0), ("Admitted Workloads", 0)]),
    ("Workload", [("Queue", 0), ("Reserved in", 0), ("Admitted", 0), ("Finished", 0), ("Age", 0)]),
    ("WorkloadPriorityClass", [("Value", 0), ("Age", 0)]),
])
def test_printer_columns_like_kueue(kind: str, columns: list[tuple[str, int]]) -> None:
    for v in crds()[kind]["spec"]["versions"]:
        got = [(c["name"], c.get("priority", 0)) for c in v["additionalPrinterColumns"]]
        assert got == columns
    paths = {c["name"]: c["jsonPath"] for c in crds()["Workload"]["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert paths["Reserved in"] == ".status.admission.clusterQueue"
    assert paths["Admitted"] == ".status.conditions[?(@.type=='Admitted')].status"


@pytest.mark.parametrize("kind", sorted(KUEUE_KINDS))
def test_schemas_are_structural_and_keep_no_unknown_fields(kind: str) -> None:
    """As in Kueue's CRDs: no x-kubernetes-preserve-unknown-fields, the pod templates included."""
    preserved = set()
    for path, node in walk(schema(kind)):
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
        else:
            assert node.get("type") in ("object", "array", "string", "integer", "boolean"), path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.add(path)
        if node.get("type") == "object" and path and path != "metadata" and not node.get(
                "x-kubernetes-preserve-unknown-fields"):
            assert "properties" in node or "additionalProperties" in node, f"{kind} {path}: an empty object"
    assert preserved == set()


@pytest.mark.parametrize(("kind", "path", "enum"), [
    ("ClusterQueue", "spec.queueingStrategy", [str(v) for v in o.QueueingStrategy]),
    ("ClusterQueue", "spec.stopPolicy", [str(v) for v in o.StopPolicy]),
    ("LocalQueue", "spec.stopPolicy", [str(v) for v in o.StopPolicy]),
    ("ClusterQueue", "spec.preemption.withinClusterQueue", [str(v) for v in o.WithinClusterQueue]),
    ("ClusterQueue", "spec.preemption.reclaimWithinCohort", [str(v) for v in o.ReclaimWithinCohort]),
    ("ClusterQueue", "spec.preemption.borrowWithinCohort.policy", [str(v) for v in o.BorrowWithinCohortPolicy]),
    # v1beta1 also takes the deprecated spellings, as the parser does.
    ("ClusterQueue", "spec.flavorFungibility.whenCanBorrow", [*(str(v) for v in o.WhenCanBorrow), "Borrow"]),
    ("ClusterQueue", "spec.flavorFungibility.whenCanPreempt", [*(str(v) for v in o.WhenCanPreempt), "Preempt"]),
    ("ClusterQueue", "spec.flavorFungibility.preference", [str(v) for v in o.FungibilityPreference]),
    ("ClusterQueue", "spec.namespaceSelector.matchExpressions[].operator", ["In", "NotIn", "Exists", "DoesNotExist"]),
    ("ResourceFlavor", "spec.nodeTaints[].effect", ["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    ("MultiKueueCluster", "spec.clusterSource.kubeConfig.locationType", list(multikueue_manifest.LOCATION_TYPES)),
    ("Workload", "spec.priorityClassSource",
     [WORKLOAD_PRIORITY_CLASS_SOURCE, POD_PRIORITY_CLASS_SOURCE, ""]),
])
def test_enums_are_the_parsers(kind: str, path: str, enum: list[str]) -> None:
    assert at(schema(kind), path)["enum"] == enum


@pytest.mark.parametrize(("kind", "path", "limit"), [
    ("ClusterQueue", "spec.resourceGroups", manifests.MAX_RESOURCE_GROUPS),
    ("ClusterQueue", "spec.resourceGroups[].flavors", manifests.MAX_FLAVORS_PER_GROUP),
    ("ClusterQueue", "spec.resourceGroups[].coveredResources", manifests.MAX_RESOURCES_PER_GROUP),
    ("Cohort", "spec.resourceGroups", manifests.MAX_RESOURCE_GROUPS),
    ("Cohort", "spec.resourceGroups[].flavors", manifests.MAX_FLAVORS_PER_GROUP),
    ("Workload", "spec.podSets", manifests.MAX_POD_SETS),
    ("ResourceFlavor", "spec.nodeTaints", manifests.MAX_FLAVOR_TAINTS),
    ("ResourceFlavor", "spec.tolerations", manifests.MAX_FLAVOR_TOLERATIONS),
    ("MultiKueueConfig", "spec.clusters", multikueue_manifest.MAX_CLUSTERS),
])
def test_list_limits_are_the_parsers(kind: str, path: str, limit: int) -> None:
    assert at(schema(kind), path)["maxItems"] == limit


def test_required_fields() -> None:
    assert at(schema("ClusterQueue"), "spec.resourceGroups[].flavors[].resources[]")["required"] == [
        "name", "nominalQuota"]
    assert at(schema("ClusterQueue"), "spec.resourceGroups[]")["required"] == ["coveredResources", "flavors"]
    assert at(schema("LocalQueue"), "spec")["required"] == ["clusterQueue"]
    assert schema("WorkloadPriorityClass")["required"] == ["value"]
    assert at(schema("AdmissionCheck"), "spec")["required"] == ["controllerName"]
    assert at(schema("Workload"), "spec.podSets")["minItems"] == 1
    assert at(schema("ClusterQueue"), "spec.namespaceSelector")["x-kubernetes-map-type"] == "atomic"


QUANTITY_SAMPLES = ["0", "1", "12", "500m", "0.5", ".5", "1.", "+1", "36Gi", "1Ki", "2k", "3M", "1e3", "1E3",
                    "1e-3", "2.5e+2", "-1", "-500m", "12 cpus", "1 Gi", "Gi", "", "1GiB", "1ki", "0x10", "1e3.5",
                    "1.2.3", "e3"]


@pytest.mark.parametrize("sample", QUANTITY_SAMPLES)
def test_quantity_pattern_accepts_what_the_parser_accepts(sample: str) -> None:
    """A string quota is valid for the API server exactly when our parser reads it as >= 0."""
    pattern = at(schema("ClusterQueue"), "spec.resourceGroups[].flavors[].resources[].nominalQuota")["pattern"]
    try:
        parser_ok = parse_fraction(sample) >= 0
    except QuantityError:
        parser_ok = False
    assert (re.fullmatch(pattern, sample) is not None) == parser_ok


# --- Deployments, ServiceAccounts, configuration --------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_deployment(service: str) -> None:
    dep = by_kind("Deployment")[f"kueuelog-{service}"]
    assert dep["metadata"]["namespace"] == NAMESPACE
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert spec["serviceAccountName"] == f"kueuelog-{service}"
    assert f"kueuelog-{service}" in by_kind("ServiceAccount")
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    assert container["command"] + container["args"] == ["kueuelog", "run", service, *SERVICE_FLAGS[service]]
    assert container["name"] == service
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["envFrom"] == [{"configMapRef": {"name": "kueuelog-config"}}]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert secrets == {
        # Each role its own credential: a compromised watcher cannot write decisions.
        "KUEUELOG_KAFKA_SASL_USERNAME": {"name": f"kueuelog-kafka-{service}", "key": "username", "optional": True},
        "KUEUELOG_KAFKA_SASL_PASSWORD": {"name": f"kueuelog-kafka-{service}", "key": "password", "optional": True},
    }
    # A read-only root file system still needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]


def test_scheduler_runs_active_and_standby_without_any_api_access() -> None:
    dep = by_kind("Deployment")["kueuelog-scheduler"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert by_kind("ServiceAccount")["kueuelog-scheduler"]["automountServiceAccountToken"] is False
    assert "kueuelog-scheduler" not in by_kind("ClusterRole")
    assert "kueuelog-scheduler" not in by_kind("ClusterRoleBinding")
    assert not by_kind("Role") and not by_kind("RoleBinding")
    assert by_kind("Deployment")["kueuelog-watcher"]["spec"]["replicas"] == 1
    assert by_kind("Deployment")["kueuelog-actuator"]["spec"]["replicas"] == 1


def _environment(monkeypatch: pytest.MonkeyPatch, settings: dict[str, str]) -> None:
    """Exactly ``settings`` as the process's KUEUELOG_... (and KUBECONFIG) environment."""
    for key in list(os.environ):
        if key.startswith("KUEUELOG_") or key == "KUBECONFIG":
            monkeypatch.delenv(key)
    for key, value in settings.items():
        monkeypatch.setenv(key, value)


def _run_settings(args: argparse.Namespace) -> tuple[bool, str | None, str, str, tuple[int, bool]]:
    """What ``run`` resolves from its flags and environment, as this file checks it."""
    from services.app.assembly import run_options

    o = run_options(args)
    return o.kube, o.kubeconfig, o.cluster, o.policy, (o.http.port, o.http.explicit)


@pytest.mark.parametrize("service", SERVICES)
def test_deployment_runs_what_the_cli_accepts_with_the_config_map(service: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line and environment of the pod, through the CLI's own parsing: the watcher and
    the actuator talk to Kubernetes in-cluster, and every service serves its probes' port."""
    from services.app.cli import build_parser

    container = by_kind("Deployment")[f"kueuelog-{service}"]["spec"]["template"]["spec"]["containers"][0]
    data = by_kind("ConfigMap")["kueuelog-config"]["data"]
    _environment(monkeypatch, data)
    args = build_parser().parse_args(container["args"])
    assert args.service == service
    kube, kubeconfig, cluster, policy, (port, explicit) = _run_settings(args)
    assert kube is (service != "scheduler")
    assert kubeconfig is None, "in-cluster configuration"
    assert cluster == data["KUEUELOG_CLUSTER"]
    assert policy == data["KUEUELOG_JOB_POLICY"] == "suspend"
    assert (port, explicit) == (container["ports"][0]["containerPort"], True)
    assert (args.topic_prefix, args.shard) == (data["KUEUELOG_TOPIC_PREFIX"], int(data["KUEUELOG_SHARD"]))


def test_docker_compose_commands_are_ones_the_cli_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.app.cli import build_parser

    compose = docs(ROOT / "docker-compose.yml")[0]["services"]
    for name, s in compose.items():
        if name in ("kafka", "web") or s.get("profiles"):
            continue  # a profile's service is not part of `docker compose up` (the multicluster demo: below)
        _environment(monkeypatch, {k: str(v) for k, v in s["environment"].items()})
        args = build_parser().parse_args(s["command"])
        kube, _, cluster, _, (port, explicit) = _run_settings(args)
        assert not kube, f"{name}: docker-compose has no Kubernetes: the simulated cluster stands in"
        assert cluster == s["environment"]["KUEUELOG_CLUSTER"], name
        assert (port, explicit) == (int(s["environment"]["KUEUELOG_HTTP_PORT"]), True), name


REQUIRED_SETTINGS = {
    "KUEUELOG_KAFKA_BOOTSTRAP_SERVERS", "KUEUELOG_CLUSTER", "KUEUELOG_SHARD", "KUEUELOG_TOPIC_PREFIX",
    "KUEUELOG_KAFKA_SECURITY_PROTOCOL", "KUEUELOG_KAFKA_SASL_MECHANISM",
}


def test_config_map_holds_the_settings_and_no_credentials() -> None:
    cm = by_kind("ConfigMap")["kueuelog-config"]
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert set(cm["data"]) >= REQUIRED_SETTINGS
    assert all(isinstance(v, str) for v in cm["data"].values())
    assert not [k for k in cm["data"] if re.search("PASSWORD|USERNAME|SECRET|TOKEN|JAAS", k)]
    assert cm["data"]["KUEUELOG_TOPIC_PREFIX"] == Topics().prefix
    assert not by_kind("Secret"), "credentials are never committed"
    assert by_kind("Namespace").keys() == {NAMESPACE}


# --- RBAC ------------------------------------------------------------------------------------

KUEUE_READ = ["admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
              "provisioningrequestconfigs", "resourceflavors", "workloadpriorityclasses", "workloads"]
EXPECTED_RULES = {
    "watcher": {
        *(("kueue.x-k8s.io", r, v) for r in KUEUE_READ for v in ("get", "list", "watch")),
        *(("batch", "jobs", v) for v in ("get", "list", "watch")),
        *(("", "namespaces", v) for v in ("get", "list", "watch")),
        *(("scheduling.k8s.io", "priorityclasses", v) for v in ("get", "list", "watch")),
        # the autoscaler's answers to ProvisioningRequests (services/watcher/provisioning.py)
        *(("autoscaling.x-k8s.io", "provisioningrequests", v) for v in ("list", "watch")),
        # DRA: the templates a queued pod's claims name (services/watcher/kube.py ClaimTemplates).
        *(("resource.k8s.io", "resourceclaimtemplates", v) for v in ("list", "watch")),
    },
    # Derived from the calls of services/actuator/kube_port.py (KubeCalls get / merge patch) and of the
    # job reconciler that runs in the same process (services/actuator/job_reconciler.py): nothing more.
    "actuator": {
        # kube.py reads, unsuspends and suspends Jobs; jobs.py lists and watches the queued ones,
        # reads one again after a conflict and suspends (or rejects) it.
        *(("batch", "jobs", v) for v in ("get", "list", "watch", "patch")),
        # jobs.py creates a Job's Workload and reads it to write Finished; kube.py watches them
        # (services/actuator/informer.py), reads one after a conflict and patches its pending-reason
        # annotation.
        *(("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch", "create", "patch")),
        ("kueue.x-k8s.io", "workloads/status", "patch"),
        # MultiKueue (services/actuator/multikueue.py): a worker's MultiKueueCluster; a worker Job's
        # status copied to the manager's Job.
        ("kueue.x-k8s.io", "multikueueclusters", "get"),
        ("batch", "jobs/status", "patch"),
        ("kueue.x-k8s.io", "resourceflavors", "get"),
        # kube.py watches the queues whose status it writes (read when not watched yet).
        *(("kueue.x-k8s.io", r, v) for r in ("clusterqueues", "localqueues") for v in ("get", "list", "watch")),
        *(("kueue.x-k8s.io", r, "patch") for r in ("clusterqueues/status", "localqueues/status")),
        # jobs.py resolves a Workload's priority as Kueue's prepareWorkload does.
        ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
        *(("scheduling.k8s.io", "priorityclasses", v) for v in ("get", "list")),
        ("", "events", "create"),
        # the provisioning-request admission check (services/actuator/kube_port.py): create a
        # workload's requests and PodTemplates; on eviction find its requests and delete them.
        *(("autoscaling.x-k8s.io", "provisioningrequests", v) for v in ("create", "list", "delete")),
        *(("", "podtemplates", v) for v in ("create", "delete")),
    },
}


def flatten(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected rule fields: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


@pytest.mark.parametrize("service", sorted(EXPECTED_RULES))
def test_cluster_role_grants_exactly_what_the_service_needs(service: str) -> None:
    role = by_kind("ClusterRole")[f"kueuelog-{service}"]
    granted = flatten(role["rules"])
    assert not [g for g in granted if "*" in g], "no wildcards"
    assert granted == EXPECTED_RULES[service]
    binding = by_kind("ClusterRoleBinding")[f"kueuelog-{service}"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": f"kueuelog-{service}"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"kueuelog-{service}", "namespace": NAMESPACE}]


def test_only_the_expected_roles_exist() -> None:
    assert set(by_kind("ClusterRole")) == set(by_kind("ClusterRoleBinding")) == {
        "kueuelog-watcher", "kueuelog-actuator"}


# --- Strimzi ---------------------------------------------------------------------------------


def strimzi(kind: str) -> list[dict[str, Any]]:
    return [d for d in docs(DEPLOY / "strimzi" / "kafka.yaml") if d["kind"] == kind]


def test_strimzi_topics_are_the_ones_the_code_uses() -> None:
    topics = {t["spec"]["topicName"]: t for t in strimzi("KafkaTopic")}
    names = Topics()
    assert set(topics) == {names.cluster_events, names.decisions, names.snapshots, names.dead_letters,
                           f"{names.prefix}.{LEASES_SUFFIX}", shard_map_topic(names), hand_over_topic(names),
                           held_topic(names)}
    snapshots = topics[names.snapshots]["spec"]["config"]
    assert snapshots["cleanup.policy"] == "compact"
    assert snapshots["max.message.bytes"] == 104857600
    # The input and decision logs are the truth: one ordered partition, kept forever.
    for name in (names.cluster_events, names.decisions):
        assert topics[name]["spec"]["partitions"] == 1
        assert topics[name]["spec"]["config"]["retention.ms"] == -1
    (kafka,) = strimzi("Kafka")
    for t in topics.values():
        assert t["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]


def test_strimzi_cluster_is_kraft_with_a_node_pool() -> None:
    (kafka,) = strimzi("Kafka")
    (pool,) = strimzi("KafkaNodePool")
    assert kafka["metadata"]["annotations"] == {"strimzi.io/node-pools": "enabled", "strimzi.io/kraft": "enabled"}
    assert pool["metadata"]["labels"]["strimzi.io/cluster"] == kafka["metadata"]["name"]
    assert sorted(pool["spec"]["roles"]) == ["broker", "controller"]
    assert "zookeeper" not in kafka["spec"]
    # The bootstrap address in kueuelog-config is this cluster's.
    bootstrap = by_kind("ConfigMap")["kueuelog-config"]["data"]["KUEUELOG_KAFKA_BOOTSTRAP_SERVERS"]
    assert bootstrap == f"{kafka['metadata']['name']}-kafka-bootstrap.{kafka['metadata']['namespace']}.svc:9092"


def _strimzi_acls(user: dict[str, Any]) -> list[Acl]:
    out = []
    for a in user["spec"]["authorization"]["acls"]:
        res = a["resource"]
        if res["type"] == "cluster":
            name, pattern = "kafka-cluster", Pattern.LITERAL
        else:
            name, pattern = res["name"], Pattern(res["patternType"])
        assert a["host"] == "*"
        out.append(Acl(Resource(res["type"]), name, pattern, tuple(Op(o) for o in a["operations"])))
    return sorted(out)


def test_strimzi_users_are_one_per_role_with_exactly_the_acls_of_the_code() -> None:
    users = {u["metadata"]["name"]: u for u in strimzi("KafkaUser")}
    expected = role_acls(Topics())
    assert set(users) == {f"kueuelog-{role}" for role in expected}
    for role, acls in expected.items():
        user = users[f"kueuelog-{role}"]
        auth = user["spec"]["authentication"]
        assert auth["type"] == "scram-sha-512"
        assert auth["password"]["valueFrom"]["secretKeyRef"] == {"name": f"kueuelog-kafka-{role}", "key": "password"}
        assert _strimzi_acls(user) == acls, role
    assert by_kind("ConfigMap")["kueuelog-config"]["data"]["KUEUELOG_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"


def test_no_role_may_create_topics_or_write_what_another_role_owns() -> None:
    acls = role_acls(Topics())
    names = Topics()

    def writers(topic: str) -> set[str]:
        return {role for role, rs in acls.items() for a in rs
                if a.resource == Resource.TOPIC and Op.WRITE in a.operations
                and (a.name == topic or (a.pattern == Pattern.PREFIX and topic.startswith(a.name)))}

    assert writers(names.decisions) == {"scheduler"}
    assert writers(names.snapshots) == {"scheduler"}
    # The scheduler appends only clock ticks there, when one of its deadlines comes (waitForPodsReady).
    assert writers(names.cluster_events) == {"watcher", "actuator", "simcluster", "scheduler"}
    assert not any(Op.WRITE in a.operations for a in acls["reader"])
    assert all(op.value != "Create" for rs in acls.values() for a in rs for op in a.operations)


# --- image and docker-compose ----------------------------------------------------------------


def test_dockerfile() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert "RUN pip install . && rm -rf /src" in lines
    assert not [line for line in lines if "[dev]" in line or "tests" in line.split()]
    users = [line for line in lines if line.startswith("USER ")]
    assert users == ["USER 10001:10001"], "a numeric non-root user, so runAsNonRoot can be verified"
    assert lines.index(users[0]) > max(i for i, line in enumerate(lines) if line.startswith("RUN "))
    assert 'ENTRYPOINT ["kueuelog"]' in lines


def test_docker_compose_runs_the_services_over_the_unchanged_broker() -> None:
    compose = docs(ROOT / "docker-compose.yml")[0]["services"]
    kafka = compose["kafka"]
    assert kafka["image"] == "apache/kafka:4.1.1"
    assert kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:9092"
    services = {name: s for name, s in compose.items() if name not in ("kafka", "web") and not s.get("profiles")}
    assert set(services) == {"scheduler", "scheduler-standby", "actuator", "simcluster"}
    ports = set()
    for name, s in services.items():
        assert s["image"] == IMAGE, name
        assert s["command"][0] == "run", name
        assert set(s["environment"]) >= REQUIRED_SETTINGS, name
        ports.add(s["environment"]["KUEUELOG_HTTP_PORT"])
        assert "kafka" in s["depends_on"], name
    assert services["scheduler"]["build"] == "."
    assert services["scheduler"]["command"] == services["scheduler-standby"]["command"] == ["run", "scheduler"]
    assert len(ports) == len(services), "they share the broker's network namespace: one port each"


def test_docker_compose_serves_the_web_view_read_only_over_the_same_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.app.cli import build_parser

    compose = docs(ROOT / "docker-compose.yml")[0]["services"]
    web = compose["web"]
    assert web["image"] == IMAGE and "kafka" in web["depends_on"]
    assert set(web["environment"]) >= REQUIRED_SETTINGS
    _environment(monkeypatch, {k: str(v) for k, v in web["environment"].items()})
    args = build_parser().parse_args(web["command"])
    assert args.command == "serve" and args.host == "0.0.0.0"
    assert f"{args.port}:{args.port}" in compose["kafka"]["ports"], "published where the namespace is"
    shared = {n: s for n, s in compose.items() if n != "kafka" and s.get("network_mode") == "service:kafka"}
    assert set(shared) == {n for n in compose if n != "kafka" and not compose[n].get("profiles")}
    ports = {s["environment"]["KUEUELOG_HTTP_PORT"] for s in shared.values()}
    assert len(ports) == len(shared), "one port each in the shared network namespace"


def test_docker_compose_shows_multikueue_with_a_manager_and_simulated_workers() -> None:
    """The "multicluster" profile runs `kueuelog demo --clusters N` with the web view published;
    its command is one the CLI accepts, on an image that has everything it needs (no manifests
    to read: the world is generated)."""
    from services.app.cli import build_parser

    compose = docs(ROOT / "docker-compose.yml")[0]["services"]
    mc = compose["multicluster"]
    assert mc["profiles"] == ["multicluster"] and mc["image"] == IMAGE
    args = build_parser().parse_args(mc["command"])
    assert args.command == "demo" and args.clusters >= 2 and not args.files, "the generated world"
    assert args.web and args.web_host == "0.0.0.0" and args.keep_serving
    assert f"{args.web_port}:{args.web_port}" in mc["ports"]
    assert args.dir.startswith("/home/kueuelog/"), "written where the image's user may write"
    assert "network_mode" not in mc and "depends_on" not in mc, "its own embedded log: no broker"


def test_the_web_view_runs_read_only_with_the_readers_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.app.cli import build_parser

    dep = by_kind("Deployment")["kueuelog-web"]
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] >= 2, "any number of read-only replicas"
    assert spec["automountServiceAccountToken"] is False
    assert by_kind("ServiceAccount")["kueuelog-web"]["automountServiceAccountToken"] is False
    assert "kueuelog-web" not in by_kind("ClusterRole") and "kueuelog-web" not in by_kind("ClusterRoleBinding")
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    args = build_parser().parse_args(container["args"])
    assert container["command"] == ["kueuelog"] and args.command == "serve" and args.host == "0.0.0.0"
    assert container["ports"] == [{"name": "http", "containerPort": args.port, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]}
    assert set(secrets.values()) == {"kueuelog-kafka-reader"}, "reads every topic, writes none"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    service = by_kind("Service")["kueuelog-web"]
    assert service["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
