"""Seed 003 (ACK capacity scheduling): an ElasticQuotaTree as a front end, end to end in ``simulate``.

The tree is examples/ack/elasticquotatree.yaml: root (min = max = 40 CPUs) -> root.a, root.b
(min 20, max 40) -> leaves root.a.1 ... root.b.2 (min 10, max 20), one namespace each. Each
namespace runs a Deployment ``nginxN`` of 5 replicas of 5 CPUs; the seed's expected outcome is
checked after each step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from events.manifests import load
from events.messages import ObjectApplied
from services.app.convert import expand
from services.app.simulate import run
from services.core.state import State, fold

TREE = Path("examples/ack/elasticquotatree.yaml").read_text(encoding="utf-8")
NAMESPACES = ("namespace1", "namespace2", "namespace3", "namespace4")


def deployment(ns: str, name: str, *, at: str, replicas: int = 5, cpu: str = "5", extra: str = "",
               duration: str = "") -> str:
    annotations = f", annotations: {{kueuelog.io/sim-duration: {duration}}}" if duration else ""
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{at}"}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}{annotations}}}
    spec:
{extra}      containers:
      - name: nginx
        image: nginx
        resources: {{requests: {{cpu: "{cpu}"}}}}
"""


class Cluster:
    """The simulated cluster, one applied file at a time, cycles run to quiescence after each."""

    def __init__(self, *texts: str) -> None:
        self.state = State()
        self.files: dict[str, str] = {}
        for text in texts:
            self.apply(text)

    def apply(self, text: str) -> Cluster:
        name = f"step-{len(self.files)}.yaml"
        self.files[name] = text
        # Every step re-reads the tree (routing needs it) but folds only the new step's objects.
        for doc, obj in load(self.files, expand=expand):
            if doc.file == name:
                time = getattr(obj, "creation_time", None) or 0
                fold(self.state, ObjectApplied(time=time, object=obj))
        assert run(self.state, None).converged
        return self

    def running(self) -> tuple[int, ...]:
        out = dict.fromkeys(NAMESPACES, 0)
        for rec in self.state.workloads.values():
            if rec.admission is not None and not rec.evicting:
                out[rec.obj.namespace] += 1
        return tuple(out.values())

    def cluster_queue_of(self, ns: str) -> set[str]:
        return {r.admission.cluster_queue for r in self.state.workloads.values()
                if r.obj.namespace == ns and r.admission is not None}


def test_seed_003_walk_through_borrow_up_to_max_then_reclaim_down_to_min() -> None:
    cluster = Cluster(TREE)
    # namespace1: idle quota is borrowed up to root.a.1's max of 20: 4 pods run, 1 is pending.
    assert cluster.apply(deployment("namespace1", "nginx1", at="2026-01-01T00:00:00Z")).running() == (4, 0, 0, 0)
    assert cluster.cluster_queue_of("namespace1") == {"root.a.1"}
    # namespace2 the same: root's 40 CPUs are all in use.
    assert cluster.apply(deployment("namespace2", "nginx2", at="2026-01-01T00:01:00Z")).running() == (4, 4, 0, 0)
    # namespace3: root.a's borrowers give back until root.b.1 has its min of 10: 2 of its pods run,
    # although root.b.2 is idle (ACK reclaims only up to the reclaimer's own min). The victims are
    # the most recently created (here: admitted) pods of equal priority: namespace2's.
    assert cluster.apply(deployment("namespace3", "nginx3", at="2026-01-01T00:02:00Z")).running() == (4, 2, 2, 0)
    # namespace4 the same: every leaf ends at its min.
    assert cluster.apply(deployment("namespace4", "nginx4", at="2026-01-01T00:03:00Z")).running() == (2, 2, 2, 2)
    reasons = {c.reason for r in cluster.state.workloads.values() if (c := r.conditions.get("Preempted"))}
    assert reasons == {"InCohortReclamation"}
    assert sum(1 for r in cluster.state.workloads.values() if r.pending) == 12


def test_without_the_reclaim_rule_kueue_lets_root_b_1_reclaim_for_idle_root_b_2_quota() -> None:
    """The same tree as plain Kueue objects (annotation removed): root.b.1 gets 4 pods, not 2."""
    plain_files = {"tree.yaml": TREE}
    docs = load(plain_files, expand=expand)
    from events import objects as o

    state = State()
    for _, obj in docs:
        if isinstance(obj, o.ClusterQueue):
            obj = o.ClusterQueue(**{f: getattr(obj, f) for f in obj.__struct_fields__ if f != "preemption"},
                                 preemption=o.PreemptionPolicy(reclaim_within_cohort=o.ReclaimWithinCohort.ANY,
                                                               within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY))
        fold(state, ObjectApplied(time=0, object=obj))
    cluster = Cluster()
    cluster.state = state
    cluster.files = dict(plain_files)
    cluster.apply(deployment("namespace1", "nginx1", at="2026-01-01T00:00:00Z"))
    cluster.apply(deployment("namespace2", "nginx2", at="2026-01-01T00:01:00Z"))
    assert cluster.apply(deployment("namespace3", "nginx3", at="2026-01-01T00:02:00Z")).running()[2] == 4


def test_a_namespace_in_no_leaf_is_left_alone_and_jobs_and_pods_need_no_queue_label() -> None:
    job = """
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: namespace1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, resources: {requests: {cpu: "3"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: lone, namespace: namespace2, creationTimestamp: "2026-01-01T00:00:01Z"}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: unbound, creationTimestamp: "2026-01-01T00:00:02Z"}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: unqueued, namespace: unbound}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, resources: {requests: {cpu: "3"}}}]
"""
    cluster = Cluster(TREE, job)
    admitted = {(r.obj.namespace, r.obj.owner.kind if r.obj.owner else "", r.admission.cluster_queue)
                for r in cluster.state.workloads.values() if r.admission is not None}
    assert admitted == {("namespace1", "Job", "root.a.1"), ("namespace2", "Pod", "root.a.2")}
    assert all(r.obj.namespace != "unbound" for r in cluster.state.workloads.values())


def test_a_resource_flavor_binding_puts_the_leafs_pods_on_the_flavors_nodes() -> None:
    tree = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: spot}
spec:
  nodeLabels: {instance-type: spot}
---
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    max: {cpu: 999900, memory: 400000Gi, nvidia.com/gpu: 100000}
    min: {cpu: 999900, memory: 400000Gi, nvidia.com/gpu: 100000}
    children:
    - name: child
      attributes: {resourceflavors: spot}
      namespaces: [default]
      max: {cpu: 99, memory: 40Gi, nvidia.com/gpu: 10}
      min: {cpu: 99, memory: 40Gi, nvidia.com/gpu: 10}
"""
    cluster = Cluster(tree, deployment("default", "web", at="2026-01-01T00:00:00Z", replicas=2))
    recs = [r for r in cluster.state.workloads.values() if r.admission is not None]
    assert len(recs) == 2
    assert {a.flavors for r in recs for a in r.admission.pod_set_assignments} == {(("cpu", "spot"),)}


@pytest.mark.parametrize(
    ("mutation", "field", "words"),
    [
        pytest.param(("root.a.1", "min", "cpu", 30), "spec.root.children[0].children[0].min.cpu",
                     "root.a.1: min 30 > max 20: min must be less than or equal to max within one quota",
                     id="min <= max"),
        pytest.param(("root.a", "min", "cpu", 15), "spec.root.children[0].min.cpu",
                     "root.a: children's min root.a.1 10 + root.a.2 10 = 20 > min 15: the children's min must "
                     "sum to at most the parent's min", id="children's min <= parent's min"),
        pytest.param(("root", "max", "cpu", 50), "spec.root.max.cpu",
                     "root: min 40 != max 50: the root's min must equal its max", id="root min == max"),
        pytest.param(("root.a", "namespaces", None, ["namespace9"]), "spec.root.children[0].namespaces",
                     "root.a has children: only leaf quotas own namespaces", id="namespaces only on leaves"),
        pytest.param(("root.b.2", "namespaces", None, ["namespace1"]),
                     "spec.root.children[1].children[1].namespaces[0]",
                     "namespace namespace1 is also in root.a.1: a namespace belongs to one leaf only",
                     id="a namespace in one leaf"),
        pytest.param(("root.b.2", "name", None, "root.a.1"), "spec.root.children[1].children[1].name",
                     "'root.a.1' is also the name of spec.root.children[0].children[0]: quota names must be "
                     "unique within the tree", id="names unique"),
    ],
)
def test_each_of_the_seeds_rules_is_refused_naming_the_node_and_field(
    mutation: tuple[str, str, str | None, object], field: str, words: str
) -> None:
    import yaml

    from events.manifests import ManifestError

    body = yaml.safe_load(TREE)
    node_name, key, resource, value = mutation

    def find(n: dict) -> dict:  # type: ignore[type-arg]
        if n["name"] == node_name:
            return n
        for c in n.get("children", []):
            if (hit := find(c)) is not None:
                return hit
        return None  # type: ignore[return-value]

    node = find(body["spec"]["root"])
    if resource is None:
        node[key] = value
    else:
        node[key][resource] = value
    with pytest.raises(ManifestError) as e:
        load({"tree.yaml": yaml.safe_dump(body)}, expand=expand)
    assert e.value.field == field
    assert words in e.value.message
    assert e.value.obj == "ElasticQuotaTree kube-system/elasticquotatree"


def test_seed_003_walk_through_on_the_simulated_cluster(tmp_path: Path) -> None:
    """The same walk-through through the services (watcher arrivals, scheduler, actuator, simulated
    cluster) in simulated time: Deployments arrive a minute apart and run for ten hours."""
    from events.envelope import Topics
    from services.actuator.loop import Actuator
    from services.actuator.sim_port import SimClusterPort
    from services.app.driver import Loop, drive
    from services.runtime.sqlite import SqliteLog
    from services.scheduler.service import Scheduler
    from services.simcluster.arrivals import ArrivalStream
    from services.simcluster.cluster import SimCluster, SimConfig

    topics = Topics()
    log = SqliteLog(tmp_path / "log", durable=False)
    files = {"tree.yaml": TREE}
    for i, ns in enumerate(NAMESPACES, start=1):
        files[f"{ns}.yaml"] = deployment(ns, f"nginx{i}", at=f"2026-01-01T00:0{i}:00Z", duration="10h")
    config = SimConfig()
    loop = Loop(Scheduler(log, topics=topics), Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                SimCluster.simulated(log, config, topics),
                ArrivalStream.from_files(log, files, topics=topics, expand=expand))
    seen: list[tuple[int, ...]] = []

    def record(_: object) -> None:
        out = dict.fromkeys(NAMESPACES, 0)
        for rec in loop.scheduler.state.workloads.values():
            if rec.admission is not None and not rec.evicting and not rec.finished:
                out[rec.obj.namespace] += 1
        if not seen or seen[-1] != tuple(out.values()):
            seen.append(tuple(out.values()))

    drive(loop, between=record)
    log.close()
    for step in ((4, 0, 0, 0), (4, 4, 0, 0), (4, 2, 2, 0), (2, 2, 2, 2)):
        assert step in seen, seen
    assert seen.index((4, 2, 2, 0)) < seen.index((2, 2, 2, 2))
    assert all(s[2] <= 2 for s in seen[: seen.index((2, 2, 2, 2)) + 1]), "root.b.1 never reclaims past its min"


def test_status_and_explain_speak_in_tree_terms() -> None:
    from services.core.treeview import pending_in_tree_terms, preempted_in_tree_terms, tree_status

    cluster = Cluster(TREE)
    for i, ns in enumerate(NAMESPACES[:3], start=1):
        cluster.apply(deployment(ns, f"nginx{i}", at=f"2026-01-01T00:0{i}:00Z"))
    status = {n["name"]: n for n in tree_status(cluster.state)}
    assert list(status) == ["root", "root.a", "root.a.1", "root.a.2", "root.b", "root.b.1", "root.b.2"]
    assert status["root"]["used"] == {"cpu": "40"} and status["root"]["max"] == {"cpu": "40", "memory": "40Gi"}
    assert (status["root.a"]["min"]["cpu"], status["root.a"]["max"]["cpu"], status["root.a"]["used"]) == (
        "20", "40", {"cpu": "30"})
    assert status["root.b.1"]["used"] == {"cpu": "10"} and status["root.b.2"]["used"] == {}
    by_owner = {r.obj.owner.name: r for r in cluster.state.workloads.values() if r.obj.owner}
    assert pending_in_tree_terms(cluster.state, by_owner["nginx1-4"])[0] == \
        "root.a.1 is at max 20 cpu: 5 cpu more does not fit"
    assert pending_in_tree_terms(cluster.state, by_owner["nginx3-2"]) == [
        "root is at max 40 cpu: 5 cpu more does not fit",
        "root.b.1 would go past its min 10 cpu (uses 10 cpu): beyond its min it only borrows idle quota and "
        "reclaims nothing"]
    reclaimed = sorted(filter(None, (preempted_in_tree_terms(cluster.state, r) for r in by_owner.values())))
    assert reclaimed == ["reclaimed 5 cpu of root.b.1's min from root.a.2"] * 2
    assert pending_in_tree_terms(cluster.state, by_owner["nginx1-0"]) == [], "admitted"


def test_tree_metrics_per_node() -> None:
    from prometheus_client import generate_latest

    from services.scheduler.metrics import SchedulerMetrics

    cluster = Cluster(TREE, deployment("namespace1", "nginx1", at="2026-01-01T00:00:00Z"))
    metrics = SchedulerMetrics()
    metrics.refresh(cluster.state)
    text = generate_latest(metrics.registry).decode()
    assert 'kueuelog_elastic_quota_tree_node{node="root.a.1",parent="root.a",resource="cpu",value="used"} 20.0' in text
    assert 'kueuelog_elastic_quota_tree_node{node="root.a.1",parent="root.a",resource="cpu",value="max"} 20.0' in text
    assert 'kueuelog_elastic_quota_tree_node{node="root",parent="",resource="cpu",value="min"} 40.0' in text


def test_simulate_prints_the_tree_after_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from services.app.cli import main

    workloads = tmp_path / "w.yaml"
    workloads.write_text(deployment("namespace1", "nginx1", at="2026-01-01T00:00:00Z"))
    assert main(["simulate", "examples/ack/elasticquotatree.yaml", str(workloads)]) == 0
    out = capsys.readouterr().out
    assert "ElasticQuotaTree" in out
    assert "root.a.1" in out and "cpu=20" in out


def test_explain_on_the_log_speaks_in_tree_terms(tmp_path: Path) -> None:
    from events.envelope import Topics
    from services.actuator.loop import Actuator
    from services.actuator.sim_port import SimClusterPort
    from services.app.driver import Loop
    from services.app.logview import explain
    from services.runtime.sqlite import SqliteLog
    from services.scheduler.service import Scheduler
    from services.simcluster.arrivals import ArrivalStream
    from services.simcluster.cluster import SimCluster, SimConfig

    topics = Topics()
    log = SqliteLog(tmp_path / "log", durable=False)
    files = {"tree.yaml": TREE}
    for i, ns in enumerate(NAMESPACES[:3], start=1):
        files[f"{ns}.yaml"] = deployment(ns, f"nginx{i}", at=f"2026-01-01T00:0{i}:00Z", duration="10h")
    config = SimConfig()
    loop = Loop(Scheduler(log, topics=topics), Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                SimCluster.simulated(log, config, topics),
                ArrivalStream.from_files(log, files, topics=topics, expand=expand))

    def settled() -> bool:
        running = sum(1 for r in loop.scheduler.state.workloads.values()
                      if r.obj.namespace == "namespace3" and r.admission is not None and not r.evicting)
        return running == 2 and not any(r.evicting for r in loop.scheduler.state.workloads.values())

    for _ in range(10_000):
        loop.round()
        if settled():
            break
    assert settled()
    held = explain(log, topics, "namespace3/nginx3-4")
    assert "  tree: root is at max 40 cpu: 5 cpu more does not fit" in held
    victims = [key for key, r in loop.scheduler.state.workloads.items() if r.conditions.get("Preempted")]
    assert victims
    assert any(line.startswith("  tree: reclaimed 5 cpu of root.b.1's min from root.a.")
               for line in explain(log, topics, victims[0]))
    log.close()


@pytest.mark.parametrize(
    ("doc", "where", "words"),
    [
        pytest.param({"spec": {"replicas": 2**40}}, "(Deployment namespace1/d): spec.replicas",
                     "must be an integer from 0 to 10000", id="too many replicas"),
        pytest.param({"spec": {"replicas": "3"}}, "(Deployment namespace1/d): spec.replicas", "got 3",
                     id="replicas not an integer"),
        pytest.param({"spec": {"template": "x"}}, "(Deployment namespace1/d): spec.template",
                     "expected an object, got str", id="template not an object"),
        pytest.param({"metadata": {"name": "Bad_Name", "namespace": "namespace1"}},
                     "(Deployment namespace1/Bad_Name): metadata.name", "RFC 1123", id="bad name"),
        pytest.param({"metadata": {"name": None, "namespace": "namespace1"}}, "(Deployment): metadata.name",
                     "required field is missing", id="no name"),
    ],
)
def test_a_bad_deployment_in_a_bound_namespace_is_refused_by_field(doc: dict, where: str, words: str) -> None:  # type: ignore[type-arg]
    import yaml

    from events.manifests import ManifestError

    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "namespace1"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}}
    for key, value in doc.items():
        body[key] = {**body[key], **value} if isinstance(value, dict) else value  # type: ignore[dict-item]
    with pytest.raises(ManifestError) as e:
        load({"t.yaml": TREE, "d.yaml": yaml.safe_dump(body)}, expand=expand)
    assert where in str(e.value)
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("annotation", "preemption", "words"),
    [
        pytest.param("Nominal", {"reclaimWithinCohort": "Any"}, "unsupported value 'Nominal'", id="bad value"),
        pytest.param("NominalQuota", {}, "needs spec.preemption.reclaimWithinCohort other than Never", id="Never"),
        pytest.param("NominalQuota", {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
                     "cannot be combined with spec.preemption.borrowWithinCohort", id="borrowWithinCohort"),
    ],
)
def test_the_reclaim_annotation_is_refused_where_it_cannot_hold(annotation: str, preemption: dict, words: str) -> None:  # type: ignore[type-arg]
    import yaml

    from events.manifests import ManifestError

    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
          "metadata": {"name": "cq", "annotations": {"kueuelog.io/reclaim-within": annotation}},
          "spec": {"cohort": "c", "preemption": preemption}}
    with pytest.raises(ManifestError) as e:
        load({"cq.yaml": yaml.safe_dump(cq)})
    assert e.value.field == "metadata.annotations.kueuelog.io/reclaim-within"
    assert words in e.value.message


def test_root_min_above_the_clusters_capacity_names_the_rule() -> None:
    from events.elasticquota import capacity_problem, read_tree
    from events.manifests import Document, read_documents

    (doc,) = read_documents("tree.yaml", TREE)
    tree = read_tree(Document(doc.file, doc.index, doc.body))
    assert capacity_problem(tree, {"cpu": 56_000, "memory": 224 * 2**30}) is None
    assert capacity_problem(tree, {}) is None, "unknown capacity: nothing to check"
    assert capacity_problem(tree, {"cpu": 30_000}) == (
        "ElasticQuotaTree kube-system/elasticquotatree: spec.root.min.cpu: root: min 40 > the cluster's 30 "
        "allocatable: the root's min must not exceed the cluster's resources (Root节点的Min=Max≤集群总资源)")


def test_a_tree_deeper_than_32_levels_is_refused_before_anything_recurses() -> None:
    from events.elasticquota import read_tree
    from events.manifests import Document, ManifestError

    node: dict[str, object] = {"name": "leaf"}
    for i in range(2000):
        node = {"name": f"n{i}", "children": [node]}
    body = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "t", "namespace": "kube-system"}, "spec": {"root": node}}
    with pytest.raises(ManifestError) as e:
        read_tree(Document("api", 1, body))
    assert e.value.message == "the tree is nested deeper than 32 levels"
    assert e.value.field == "spec.root" + ".children[0]" * 32
