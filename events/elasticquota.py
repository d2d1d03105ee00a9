"""ACK's ``ElasticQuotaTree`` (seed 003) read, validated and translated into Kueue objects.

The tree (``scheduling.sigs.k8s.io/v1beta1``, effective only in ``kube-system``) is a hierarchy of
quotas; each node has ``min`` (guaranteed: lent when idle, taken back by preemption) and ``max``
(the cap, borrowed quota included); leaves own namespaces. Translation (printed by
``kueuelog convert``):

* every leaf becomes a ClusterQueue named after the leaf, in the Cohort of its parent:
  ``nominalQuota = min``, ``borrowingLimit = max - min`` (no limit where ``max`` names no such
  resource), no ``lendingLimit`` (all of ``min`` may be lent), ``reclaimWithinCohort: Any``,
  ``withinClusterQueue: LowerPriority``, BestEffortFIFO (ACK schedules pods one by one), a
  namespaceSelector of its namespaces, and the annotation ``kueuelog.io/reclaim-within:
  NominalQuota`` (below);
* every inner node becomes a Cohort (``parentName`` its parent) whose own ``nominalQuota`` is its
  ``min`` less its children's (so the subtree holds exactly ``min``) and whose
  ``borrowingLimit`` is ``max - min`` (so the subtree never uses more than ``max``);
* each bound namespace gets a LocalQueue ``default`` pointing to its leaf, the name Kueue's
  LocalQueueDefaulting gives Jobs without a queue-name label;
* quota is on ResourceFlavor ``default`` (written out here), or on the flavor a leaf's
  ``attributes.resourceflavors`` names (the user's ResourceFlavor; only its ``nodeLabels`` are
  meant to count, as in ACK).

The reclaim rule. ACK takes lent ``min`` back only up to the reclaiming quota's own ``min``:
beyond it, a quota uses idle quota but preempts nobody. Kueue's hierarchical reclaim goes further
(a ClusterQueue may preempt for quota its parent Cohort holds through an idle sibling), so a
plain translation would admit more than ACK does. The annotation makes a ClusterQueue preempt in
its cohort tree only for a workload that fits in its own nominal quota
(``services.core.preemption``); without it (every Kueue manifest) nothing changes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from events.cluster import (
    KUEUE_GROUP,
    NAMESPACE_NAME_LABEL,
    POD_PRIORITY_CLASS_SOURCE,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    RECLAIM_WITHIN_ANNOTATION,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)
from events.manifests import Document, ManifestError, _check_resource_name, _Ctx
from events.quantity import format_amount

API_VERSION: Final = "scheduling.sigs.k8s.io/v1beta1"
KIND: Final = "ElasticQuotaTree"
EFFECTIVE_NAMESPACE: Final = "kube-system"
RECLAIM_ANNOTATION: Final = RECLAIM_WITHIN_ANNOTATION
RECLAIM_WITHIN_NOMINAL: Final = "NominalQuota"
DEFAULT_FLAVOR: Final = "default"
DEFAULT_LOCAL_QUEUE: Final = "default"
FLAVOR_ATTRIBUTE: Final = "resourceflavors"
KUEUE_V1: Final = f"{KUEUE_GROUP}/v1beta1"
NAME_LABEL: Final = NAMESPACE_NAME_LABEL
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
REPLICATED: Final = {("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "ReplicaSet")}

# The seed's rules, in its words (translated), as errors quote them.
RULE_MIN_MAX: Final = "min must be less than or equal to max within one quota (同一个弹性配额中的Min≤Max)"
RULE_CHILDREN: Final = "the children's min must sum to at most the parent's min (子级弹性配额的Min之和≤父级的Min)"
RULE_ROOT: Final = "the root's min must equal its max (Root节点的Min=Max)"
RULE_CAPACITY: Final = "the root's min must not exceed the cluster's resources (Root节点的Min=Max≤集群总资源)"
RULE_LEAF_NS: Final = "only leaf quotas own namespaces (Namespace只与弹性配额的叶子节点有对应关系)"
RULE_ONE_LEAF: Final = "a namespace belongs to one leaf only (同一个Namespace只能归属于一个叶子节点)"
RULE_UNIQUE: Final = "quota names must be unique within the tree"


class _RawNode(msgspec.Struct, forbid_unknown_fields=True):
    name: str | None = None
    min: dict[str, Any] | None = None
    max: dict[str, Any] | None = None
    namespaces: list[str] | None = None
    children: list[_RawNode] | None = None
    attributes: dict[str, str] | None = None


class _RawSpec(msgspec.Struct, forbid_unknown_fields=True):
    root: _RawNode | None = None


@dataclass
class QuotaNode:
    name: str
    path: str  # where it is in the manifest: spec.root.children[0]...
    min: dict[str, int]
    max: dict[str, int]
    namespaces: tuple[str, ...] = ()
    flavor: str = DEFAULT_FLAVOR
    children: list[QuotaNode] = field(default_factory=list)
    parent: QuotaNode | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> list[QuotaNode]:
        """This node and its descendants, parents first (the manifest's order)."""
        out = [self]
        for c in self.children:
            out.extend(c.walk())
        return out


@dataclass
class Tree:
    doc: Document
    name: str
    namespace: str
    root: QuotaNode

    @property
    def effective(self) -> bool:
        return self.namespace == EFFECTIVE_NAMESPACE


# --- reading and validation ----------------------------------------------------------------------


def read_tree(doc: Document) -> Tree:
    """One ElasticQuotaTree document, validated as seed 003 states (raises ManifestError)."""
    body = doc.body
    raw_meta = body.get("metadata")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    name = meta.get("name")
    ctx = _Ctx(doc, KIND, name if isinstance(name, str) else "")
    if not isinstance(name, str) or not name:
        raise ctx.error("metadata.name", "required field is missing")
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL_RE.fullmatch(namespace):
        raise ctx.error("metadata.namespace", f"invalid value {str(namespace)[:100]!r}: must be a namespace name")
    ctx = _Ctx(doc, KIND, f"{namespace}/{name}")
    extra = sorted(set(body) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if extra:
        raise ctx.error(extra[0], "unknown field")
    _check_depth(ctx, body.get("spec"))
    spec = ctx.convert(body.get("spec") or {}, _RawSpec, "spec")
    if spec.root is None:
        raise ctx.error("spec.root", "required field is missing")
    root = _node(ctx, spec.root, "spec.root", None)
    _validate(ctx, root)
    return Tree(doc=doc, name=name, namespace=str(namespace), root=root)


def _amounts(ctx: _Ctx, raw: dict[str, Any] | None, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, value in sorted((raw or {}).items()):
        _check_resource_name(ctx, resource, f"{path}.{resource}")
        out[resource] = ctx.amount(resource, value, f"{path}.{resource}")
    return out


def _check_depth(ctx: _Ctx, spec: Any) -> None:
    """Refuse a tree deeper than MAX_DEPTH before anything recurses into it (iteratively)."""
    root = spec.get("root") if isinstance(spec, dict) else None
    stack: list[tuple[Any, str, int]] = [(root, "spec.root", 1)]
    while stack:
        node, path, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        if depth > MAX_DEPTH:
            raise ctx.error(path, f"the tree is nested deeper than {MAX_DEPTH} levels")
        children = node.get("children")
        if isinstance(children, list):
            stack.extend((c, f"{path}.children[{i}]", depth + 1) for i, c in enumerate(children))


MAX_DEPTH: Final = 32
"""The deepest tree taken, root included (ours: a tree read from the API server has no YAML bound)."""


def _node(ctx: _Ctx, raw: _RawNode, path: str, parent: QuotaNode | None, depth: int = 1) -> QuotaNode:
    if depth > MAX_DEPTH:
        raise ctx.error(path, f"the tree is nested deeper than {MAX_DEPTH} levels")
    if not raw.name:
        raise ctx.error(f"{path}.name", "required field is missing")
    if len(raw.name) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(raw.name):
        raise ctx.error(f"{path}.name", f"invalid value {raw.name[:100]!r}: a quota becomes a ClusterQueue or "
                                        "Cohort of that name, so it must be a lowercase RFC 1123 subdomain "
                                        "(e.g. 'root.a.1')")
    flavor = (raw.attributes or {}).get(FLAVOR_ATTRIBUTE, DEFAULT_FLAVOR)
    if not _DNS_SUBDOMAIN_RE.fullmatch(flavor):
        raise ctx.error(f"{path}.attributes.{FLAVOR_ATTRIBUTE}", f"invalid value {flavor[:100]!r}: must name a "
                                                                 "ResourceFlavor")
    node = QuotaNode(name=raw.name, path=path, min=_amounts(ctx, raw.min, f"{path}.min"),
                     max=_amounts(ctx, raw.max, f"{path}.max"), namespaces=tuple(raw.namespaces or ()),
                     flavor=flavor, parent=parent)
    for i, ns in enumerate(node.namespaces):
        if len(ns) > 63 or not _DNS_LABEL_RE.fullmatch(ns):
            raise ctx.error(f"{path}.namespaces[{i}]", f"invalid value {ns[:100]!r}: must be a namespace name")
    node.children = [_node(ctx, c, f"{path}.children[{i}]", node, depth + 1) for i, c in enumerate(raw.children or [])]
    return node


def _text(resource: str, amount: int) -> str:
    return format_amount(resource, amount)


def _validate(ctx: _Ctx, root: QuotaNode) -> None:
    seen: dict[str, QuotaNode] = {}
    owner: dict[str, QuotaNode] = {}
    nodes = root.walk()
    for node in nodes:
        if node.name in seen:
            raise ctx.error(f"{node.path}.name", f"{node.name!r} is also the name of {seen[node.name].path}: "
                                                 f"{RULE_UNIQUE}")
        seen[node.name] = node
    for node in nodes:
        _check_min_max(ctx, node)
    for node in nodes:
        _check_children(ctx, node)
    for node in nodes:
        if node.namespaces and not node.is_leaf:
            raise ctx.error(f"{node.path}.namespaces", f"{node.name} has children: {RULE_LEAF_NS}")
        for i, ns in enumerate(node.namespaces):
            if ns in owner:
                where = "twice in it" if owner[ns] is node else f"also in {owner[ns].name}"
                raise ctx.error(f"{node.path}.namespaces[{i}]", f"namespace {ns} is {where}: {RULE_ONE_LEAF}")
            owner[ns] = node
    for r in sorted(set(root.min) | set(root.max)):
        low, high = root.min.get(r), root.max.get(r)
        if low != high:
            shown = "(none)" if low is None else _text(r, low), "(none)" if high is None else _text(r, high)
            raise ctx.error(f"{root.path}.{'min' if low is None else 'max'}.{r}",
                            f"{root.name}: min {shown[0]} != max {shown[1]}: {RULE_ROOT}")


def _check_min_max(ctx: _Ctx, node: QuotaNode) -> None:
    for r, low in node.min.items():
        high = node.max.get(r)
        if high is not None and low > high:
            raise ctx.error(f"{node.path}.min.{r}",
                            f"{node.name}: min {_text(r, low)} > max {_text(r, high)}: {RULE_MIN_MAX}")


def _check_children(ctx: _Ctx, node: QuotaNode) -> None:
    if not node.children:
        return
    for r in sorted({r for c in node.children for r in c.min}):
        total = sum(c.min.get(r, 0) for c in node.children)
        own = node.min.get(r, 0)
        if total > own:
            names = " + ".join(f"{c.name} {_text(r, c.min.get(r, 0))}" for c in node.children)
            raise ctx.error(f"{node.path}.min.{r}", f"{node.name}: children's min {names} = {_text(r, total)} > "
                                                    f"min {_text(r, own)}: {RULE_CHILDREN}")


def capacity_problem(tree: Tree, capacity: dict[str, int]) -> str | None:
    """Where the cluster's capacity is known (``capacity``: resource -> allocatable, summed over
    nodes): the root's min must not exceed it. A message naming node, field and rule, or None."""
    root = tree.root
    for r, low in sorted(root.min.items()):
        have = capacity.get(r)
        if have is not None and low > have:
            return (f"ElasticQuotaTree {tree.namespace}/{tree.name}: {root.path}.min.{r}: {root.name}: min "
                    f"{_text(r, low)} > the cluster's {_text(r, have)} allocatable: {RULE_CAPACITY}")
    return None


# --- translation ---------------------------------------------------------------------------------


def _quota_entry(resource: str, nominal: int, limit: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": resource, "nominalQuota": _text(resource, nominal)}
    if limit is not None:
        out["borrowingLimit"] = _text(resource, limit)
    return out


def _subtree_flavors(node: QuotaNode) -> list[str]:
    out: list[str] = []
    for n in node.walk():
        if n.is_leaf and n.flavor not in out:
            out.append(n.flavor)
    return out


def _resources(node: QuotaNode) -> list[str]:
    return sorted({r for n in node.walk() for r in (*n.min, *n.max)})


def _cohort(node: QuotaNode) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node.parent is not None:
        spec["parentName"] = node.parent.name
    resources = _resources(node)
    flavors = []
    for i, flavor in enumerate(_subtree_flavors(node)):
        entries = []
        for r in resources:
            own = node.min.get(r, 0) - sum(c.min.get(r, 0) for c in node.children) if i == 0 else 0
            limit = None
            if node.parent is not None and r in node.max:
                limit = node.max[r] - node.min.get(r, 0)
            entries.append(_quota_entry(r, own, limit))
        flavors.append({"name": flavor, "resources": entries})
    if resources:
        spec["resourceGroups"] = [{"coveredResources": resources, "flavors": flavors}]
    return {"apiVersion": KUEUE_V1, "kind": "Cohort", "metadata": {"name": node.name}, "spec": spec}


def _cluster_queue(node: QuotaNode) -> dict[str, Any]:
    resources = sorted({*node.min, *node.max})
    entries = []
    for r in resources:
        nominal = node.min.get(r, 0)
        limit = node.max[r] - nominal if node.parent is not None and r in node.max else None
        entries.append(_quota_entry(r, nominal, limit))
    spec: dict[str, Any] = {}
    if node.parent is not None:
        spec["cohort"] = node.parent.name
    if resources:
        spec["resourceGroups"] = [{"coveredResources": resources,
                                   "flavors": [{"name": node.flavor, "resources": entries}]}]
    if node.namespaces:
        spec["namespaceSelector"] = {"matchExpressions": [
            {"key": NAME_LABEL, "operator": "In", "values": list(node.namespaces)}]}
    spec["queueingStrategy"] = "BestEffortFIFO"
    spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    return {"apiVersion": KUEUE_V1, "kind": "ClusterQueue",
            "metadata": {"name": node.name, "annotations": {RECLAIM_ANNOTATION: RECLAIM_WITHIN_NOMINAL}},
            "spec": spec}


def tree_manifests(tree: Tree) -> list[dict[str, Any]]:
    """The Kueue manifests an effective tree stands for, in an order they can be applied in."""
    nodes = tree.root.walk()
    out: list[dict[str, Any]] = []
    if any(n.is_leaf and n.flavor == DEFAULT_FLAVOR for n in nodes):
        out.append({"apiVersion": KUEUE_V1, "kind": "ResourceFlavor", "metadata": {"name": DEFAULT_FLAVOR},
                    "spec": {}})
    out += [_cohort(n) for n in nodes if not n.is_leaf]
    out += [_cluster_queue(n) for n in nodes if n.is_leaf]
    out += [{"apiVersion": KUEUE_V1, "kind": "LocalQueue",
             "metadata": {"name": DEFAULT_LOCAL_QUEUE, "namespace": ns},
             "spec": {"clusterQueue": n.name}} for n in nodes if n.is_leaf for ns in n.namespaces]
    return out


def bindings(tree: Tree) -> dict[str, str]:
    """namespace -> the leaf that owns it."""
    return {ns: n.name for n in tree.root.walk() if n.is_leaf for ns in n.namespaces}


def tree_notes(tree: Tree) -> list[str]:
    notes = [
        f"ElasticQuotaTree {tree.namespace}/{tree.name}: ClusterQueues carry the annotation "
        f"{RECLAIM_ANNOTATION}: {RECLAIM_WITHIN_NOMINAL} (ACK reclaims lent min only up to the reclaiming "
        "quota's own min); Kueue itself ignores it and would also reclaim for quota borrowed from idle siblings",
        "Jobs, Pods and Deployment/StatefulSet/ReplicaSet pods in a bound namespace need no queue-name label: "
        f"they go to LocalQueue {DEFAULT_LOCAL_QUEUE!r} (Kueue does the same for Jobs with LocalQueueDefaulting; "
        "for Pods and replicas only with its pod integration and manageJobsWithoutQueueName)",
    ]
    flavors = sorted({n.flavor for n in tree.root.walk() if n.is_leaf} - {DEFAULT_FLAVOR})
    if flavors:
        notes.append(f"ResourceFlavor(s) {', '.join(flavors)} must exist; ACK uses only their nodeLabels, Kueue "
                     "also their nodeTaints and tolerations")
    if len(_subtree_flavors(tree.root)) > 1:
        notes.append("leaves use different flavors: Kueue bounds an inner node's max per flavor, ACK its sum")
    return notes


# --- namespace routing ---------------------------------------------------------------------------


def workload_name_for_pod(pod_name: str, pod_uid: str) -> str:
    """Kueue's workload name for a Pod owner (``pod-<name>-<hash>``, the hash over kind, group,
    name and uid as for any owner)."""
    digest = hashlib.sha1(f"Pod\n\n{pod_name}\n{pod_uid}".encode(), usedforsecurity=False).hexdigest()
    return f"{f'pod-{pod_name}'[:247]}-{digest[:5]}"


def _labels(meta: dict[str, Any]) -> dict[str, Any]:
    labels = meta.get("labels")
    return labels if isinstance(labels, dict) else {}


def pod_workload(meta: dict[str, Any], pod_spec: Any, namespace: str, queue: str) -> dict[str, Any]:
    """The Workload a pod stands for (Kueue's pod integration: one pod, one podSet of count 1)."""
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()[:32])
    wl_meta: dict[str, Any] = {
        "name": workload_name_for_pod(name, uid), "namespace": namespace,
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True}],
    }
    for key in ("creationTimestamp", "labels", "annotations"):
        if meta.get(key) is not None:
            wl_meta[key] = meta[key]
    spec: dict[str, Any] = {"queueName": queue,
                            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod_spec}}]}
    pcn = pod_spec.get("priorityClassName") if isinstance(pod_spec, dict) else None
    priority_label = _labels(meta).get(PRIORITY_CLASS_LABEL)
    if priority_label:
        spec["priorityClassName"] = priority_label
        spec["priorityClassSource"] = WORKLOAD_PRIORITY_CLASS_SOURCE
    elif pcn:
        spec["priorityClassName"] = pcn
        spec["priorityClassSource"] = POD_PRIORITY_CLASS_SOURCE
    return {"apiVersion": KUEUE_V1, "kind": "Workload", "metadata": wl_meta, "spec": spec}


MAX_REPLICAS: Final = 10_000
"""The most pods ``simulate`` makes of one Deployment / StatefulSet / ReplicaSet (ours)."""


def _object(ctx: _Ctx, value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ctx.error(field, f"expected an object, got {type(value).__name__}")
    return value


def replica_pods(ctx: _Ctx, body: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """(metadata, pod spec) of each replica of a Deployment / StatefulSet / ReplicaSet, named
    ``<owner>-<ordinal>`` (the simulated cluster's stand-in for the controllers' names)."""
    meta = _object(ctx, body.get("metadata"), "metadata")
    spec = _object(ctx, body.get("spec"), "spec")
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= MAX_REPLICAS:
        raise ctx.error("spec.replicas", f"must be an integer from 0 to {MAX_REPLICAS} (the most kueuelog "
                                         f"simulates), got {str(replicas)[:40]}")
    template = _object(ctx, spec.get("template"), "spec.template")
    tmeta = _object(ctx, template.get("metadata"), "spec.template.metadata")
    pod_spec = _object(ctx, template.get("spec"), "spec.template.spec")
    out = []
    for i in range(replicas):
        pmeta = {"name": f"{meta.get('name')}-{i}", "labels": tmeta.get("labels"),
                 "annotations": tmeta.get("annotations"), "creationTimestamp": meta.get("creationTimestamp")}
        out.append(({k: val for k, val in pmeta.items() if val is not None}, pod_spec))
    return out


class Router:
    """Rewrites workload documents by namespace: what the tree's namespaces mean for them."""

    def __init__(self, bound: dict[str, str]) -> None:
        self.bound = bound

    def __call__(self, doc: Document) -> list[Document] | None:
        body = doc.body
        if not isinstance(body, dict):
            return None
        key = (body.get("apiVersion"), body.get("kind"))
        if key not in {("batch/v1", "Job"), ("v1", "Pod"), *REPLICATED}:
            return None
        raw_meta = body.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        namespace = meta.get("namespace") or "default"
        if namespace not in self.bound:
            # not ours: a Job is left alone; a Pod or a serving object too when it names a queue
            # (Kueue's pod integration takes it: events.jobkinds.pod_documents), else it has no workload
            return None if key == ("batch/v1", "Job") or QUEUE_NAME_LABEL in _labels(meta) else []
        if QUEUE_NAME_LABEL in _labels(meta):
            return None if key == ("batch/v1", "Job") else self._pods(doc, body, meta, namespace, key)
        if key == ("batch/v1", "Job"):
            labels = {**_labels(meta), QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE}
            return [Document(doc.file, doc.index, {**body, "metadata": {**meta, "labels": labels}})]
        return self._pods(doc, body, meta, namespace, key)

    def _pods(self, doc: Document, body: dict[str, Any], meta: dict[str, Any], namespace: str,
              key: tuple[Any, Any]) -> list[Document]:
        name = meta.get("name")
        ctx = _Ctx(doc, str(key[1]), f"{namespace}/{name}" if isinstance(name, str) else "")
        if not isinstance(name, str) or not name:
            raise ctx.error("metadata.name", "required field is missing (simulate names no pods from generateName)")
        if len(name) > 240 or not _DNS_SUBDOMAIN_RE.fullmatch(name):
            raise ctx.error("metadata.name", f"invalid value {name[:100]!r}: must be a lowercase RFC 1123 subdomain")
        queue = str(_labels(meta).get(QUEUE_NAME_LABEL) or DEFAULT_LOCAL_QUEUE)
        if key == ("v1", "Pod"):
            pods = [(meta, _object(ctx, body.get("spec"), "spec"))]
        else:
            pods = replica_pods(ctx, body)
        return [Document(doc.file, doc.index, pod_workload(m, s, namespace, queue)) for m, s in pods]


# --- the front end -------------------------------------------------------------------------------


@dataclass
class Translation:
    manifests: list[tuple[Document, Any]]
    notes: list[str]
    rewrite: Router | None


def convert_trees(docs: Sequence[Document]) -> Translation:
    """Every ElasticQuotaTree document: the last effective one (kube-system) translated, the others
    validated only."""
    trees = [read_tree(d) for d in docs]
    effective = [t for t in trees if t.effective]
    notes = [f"ElasticQuotaTree {t.namespace}/{t.name} (document {t.doc.index} of {t.doc.file}) is not in "
             f"{EFFECTIVE_NAMESPACE}: validated, not in effect (ACK's scheduler reads only {EFFECTIVE_NAMESPACE})"
             for t in trees if not t.effective]
    names = {t.name for t in effective}
    if len(names) > 1:
        first, second = effective[0], next(t for t in effective if t.name != effective[0].name)
        raise ManifestError(second.doc.file, second.doc.index, f"{KIND} {second.namespace}/{second.name}",
                            "metadata.name", f"{EFFECTIVE_NAMESPACE} already has ElasticQuotaTree {first.name} "
                                             "(one tree per cluster is in effect)")
    if not effective:
        return Translation(manifests=[], notes=notes, rewrite=None)
    tree = effective[-1]  # applied again: the last version is the one in effect
    manifests = [(tree.doc, m) for m in tree_manifests(tree)]
    return Translation(manifests=manifests, notes=notes + tree_notes(tree), rewrite=Router(bindings(tree)))

