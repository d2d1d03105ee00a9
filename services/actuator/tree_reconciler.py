"""ACK's ElasticQuotaTree on a real cluster: the tree in ``kube-system`` kept as Kueue objects.

A cluster that runs ACK's capacity scheduling has an ``ElasticQuotaTree`` and no Kueue queues.
This reconciler makes the Kueue objects the tree stands for (exactly what ``kueuelog convert``
prints: :func:`events.elasticquota.tree_manifests`) and keeps them in step with the tree, so the
watcher, scheduler and actuator then work with ordinary Kueue objects:

- every ``interval`` seconds it reads the trees in ``kube-system`` (one is in effect; a 404 means
  the CRD is not installed: no tree);
- it server-side-applies (field manager ``kueuelog-elasticquotatree``) each object, labelled
  ``kueuelog.io/elastic-quota-tree: <tree>``, parents before children;
- it deletes the labelled objects the tree no longer stands for (all of them when the tree is
  gone), children before parents;
- the tree's ``status`` gets, per node, its ``min``, ``max`` and ``used`` (a leaf's from its
  ClusterQueue's ``status.flavorsUsage``, which the actuator writes; a parent's the sum);
- where nodes report ``status.allocatable``, a root ``min`` above their sum is refused (the seed's
  ``Root min = max <= the cluster's resources``); without nodes nothing is known, nothing checked;
- a tree that fails validation changes nothing: the objects of the last good tree stay, and the
  error (naming node and field) is logged and counted, once per resourceVersion.

Level-triggered polling, not a watch: the tree changes rarely and a pass is a handful of calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.cluster import ELASTIC_QUOTA_TREE_LABEL, KUEUE_GROUP
from events.elasticquota import (
    EFFECTIVE_NAMESPACE,
    KIND,
    QuotaNode,
    Tree,
    capacity_problem,
    convert_trees,
    read_tree,
)
from events.manifests import Document, ManifestError
from events.quantity import QuantityError, format_amount, to_amount
from services.actuator.kubeapi import KubeApiError, status_retriable

TREE_LABEL: Final = ELASTIC_QUOTA_TREE_LABEL
FIELD_MANAGER: Final = "kueuelog-elasticquotatree"
TREES_PATH: Final = f"/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/{EFFECTIVE_NAMESPACE}/elasticquotatrees"
KUEUE: Final = f"/apis/{KUEUE_GROUP}/v1beta1"
PLURALS: Final = {"ResourceFlavor": "resourceflavors", "Cohort": "cohorts", "ClusterQueue": "clusterqueues",
                  "LocalQueue": "localqueues"}
APPLY_ORDER: Final = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")

_log = structlog.get_logger(__name__)

Key = tuple[str, str, str]  # kind, namespace, name


async def raw_call(api: client.ApiClient, method: str, path: str, *, body: Any = None,
                   query: list[tuple[str, str]] | None = None, content_type: str = "application/json",
                   timeout: float = 30.0) -> Any:
    """One API call on a plain path, JSON in and out; errors as :class:`KubeApiError`."""
    try:
        resp = await api.call_api(
            path, method, query_params=query or [], body=body,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=timeout),
        )
        try:
            text = await resp.read()
        finally:
            resp.release()
    except ApiException as e:
        raise KubeApiError(f"{method} {path}: HTTP {e.status}: {e.reason}",
                           retriable=status_retriable(int(e.status or 0)), status=int(e.status or 0)) from e
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise KubeApiError(f"{method} {path}: {type(e).__name__}: {e}", retriable=True) from e
    if resp.status >= 300:
        raise KubeApiError(f"{method} {path}: HTTP {resp.status}: {text[:200]!r}",
                           retriable=status_retriable(resp.status), status=resp.status)
    return json.loads(text) if text else None


def object_path(kind: str, namespace: str, name: str = "") -> str:
    plural = PLURALS[kind]
    base = f"{KUEUE}/namespaces/{namespace}/{plural}" if namespace else f"{KUEUE}/{plural}"
    return f"{base}/{name}" if name else base


def desired_objects(trees: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The labelled Kueue objects the trees in kube-system stand for (raises ManifestError)."""
    docs = [Document(f"cluster:{EFFECTIVE_NAMESPACE}", i + 1, {"apiVersion": "scheduling.sigs.k8s.io/v1beta1",
                                                              "kind": KIND, **t}) for i, t in enumerate(trees)]
    translation = convert_trees(docs)
    out = []
    name = ""
    for doc, body in translation.manifests:
        name = str(doc.body["metadata"]["name"])
        meta = dict(body["metadata"])
        meta["labels"] = {**(meta.get("labels") or {}), TREE_LABEL: name}
        out.append({**body, "metadata": meta})
    return out, name


def _leaf_usage(cq: dict[str, Any]) -> dict[str, int]:
    """A ClusterQueue's usage per resource, summed over flavors, from the status the actuator writes."""
    out: dict[str, int] = {}
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
        for entry in (flavor or {}).get("resources") or []:
            resource, total = entry.get("name"), entry.get("total")
            if isinstance(resource, str) and total is not None:
                with contextlib.suppress(QuantityError):
                    out[resource] = out.get(resource, 0) + to_amount(resource, total)
    return out


def tree_status(tree: Tree, usage: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The tree's ``status``: per node (parents first) its min, max and used, as quantities; a leaf's
    used is its ClusterQueue's (``usage``: leaf name -> resource -> amount), a parent's the sum."""
    def used(node: QuotaNode) -> dict[str, int]:
        if node.is_leaf:
            return dict(usage.get(node.name, {}))
        total: dict[str, int] = {}
        for child in node.children:
            for r, v in used(child).items():
                total[r] = total.get(r, 0) + v
        return total

    def text(values: dict[str, int]) -> dict[str, str]:
        return {r: format_amount(r, v) for r, v in sorted(values.items())}

    return {"nodes": [{"name": n.name, "parent": n.parent.name if n.parent else "", "min": text(n.min),
                       "max": text(n.max), "used": text(used(n))} for n in tree.root.walk()]}


def key_of(body: dict[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return str(body.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass
class TreeStats:
    WHOSE: ClassVar[str] = "the ElasticQuotaTree reconciler's"
    passes: int = 0
    applied: int = 0  # objects server-side applied
    deleted: int = 0  # objects deleted: no longer in the tree
    invalid: int = 0  # tree versions refused (validation)
    errors: int = 0  # API errors (the pass is retried at the next interval)
    status_writes: int = 0  # the tree's status (per-node usage) written


class TreeReconciler:
    """Keeps the Kueue objects of the ElasticQuotaTree in kube-system (see the module docstring)."""

    def __init__(self, api: client.ApiClient, *, interval: float = 2.0, request_timeout: float = 30.0) -> None:
        self.api, self.interval, self.request_timeout = api, interval, request_timeout
        self.stats = TreeStats()
        self._refused: str = ""  # resourceVersions of the last refused trees (reported once)

    async def _call(self, method: str, path: str, *, body: Any = None, query: list[tuple[str, str]] | None = None,
                    content_type: str = "application/json") -> Any:
        return await raw_call(self.api, method, path, body=body, query=query, content_type=content_type,
                              timeout=self.request_timeout)

    async def _trees(self) -> list[dict[str, Any]] | None:
        """The trees in kube-system; None when the CRD is not installed."""
        try:
            data = await self._call("GET", TREES_PATH)
        except KubeApiError as e:
            if e.not_found:
                return None
            raise
        items = data.get("items") if isinstance(data, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def _existing(self) -> list[Key]:
        out: list[Key] = []
        for kind in APPLY_ORDER:
            data = await self._call("GET", f"{KUEUE}/{PLURALS[kind]}", query=[("labelSelector", TREE_LABEL)])
            for item in (data or {}).get("items") or []:
                meta = item.get("metadata") or {}
                out.append((kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")))
        return out

    async def reconcile(self) -> None:
        """One pass: apply what the tree stands for, delete what it no longer does."""
        self.stats.passes += 1
        trees = await self._trees()
        try:
            desired, tree_name = desired_objects(trees or [])
        except ManifestError as e:
            versions = ",".join(str((t.get("metadata") or {}).get("resourceVersion")) for t in trees or [])
            if versions != self._refused:
                self._refused = versions
                self.stats.invalid += 1
                _log.error("elasticquotatree.invalid", error=str(e))
            return
        problem = await self._over_capacity(trees or [], tree_name)
        if problem is not None:
            if problem != self._refused:
                self._refused = problem
                self.stats.invalid += 1
                _log.error("elasticquotatree.invalid", error=problem)
            return
        self._refused = ""
        for body in sorted(desired, key=lambda b: APPLY_ORDER.index(str(b["kind"]))):
            kind, namespace, name = key_of(body)
            await self._call("PATCH", object_path(kind, namespace, name), body=body,
                             query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                             content_type="application/apply-patch+yaml")
            self.stats.applied += 1
        await self._status(trees or [], tree_name)
        wanted = {key_of(b) for b in desired}
        stale = [k for k in await self._existing() if k not in wanted]
        for kind, namespace, stale_name in sorted(stale, key=lambda k: -APPLY_ORDER.index(k[0])):
            with contextlib.suppress(KubeApiError):  # already gone is as good
                await self._call("DELETE", object_path(kind, namespace, stale_name))
                self.stats.deleted += 1

    def _tree(self, trees: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], Tree] | None:
        body = next((t for t in trees if (t.get("metadata") or {}).get("name") == name), None)
        if body is None:
            return None
        return body, read_tree(Document(f"cluster:{EFFECTIVE_NAMESPACE}", 1, {**body, "kind": KIND}))

    async def _over_capacity(self, trees: list[dict[str, Any]], name: str) -> str | None:
        """The seed's ``root min <= the cluster's resources``, where nodes report allocatable."""
        found = self._tree(trees, name)
        if found is None:
            return None
        nodes = (await self._call("GET", "/api/v1/nodes") or {}).get("items") or []
        capacity: dict[str, int] = {}
        for node in nodes:
            for resource, value in ((node.get("status") or {}).get("allocatable") or {}).items():
                with contextlib.suppress(QuantityError):
                    capacity[resource] = capacity.get(resource, 0) + to_amount(resource, value)
        return capacity_problem(found[1], capacity) if nodes else None

    async def _status(self, trees: list[dict[str, Any]], name: str) -> None:
        """The tree in effect gets its per-node usage as ``status`` (when it changed)."""
        found = self._tree(trees, name)
        if found is None:
            return
        body, tree = found
        cqs = await self._call("GET", f"{KUEUE}/clusterqueues", query=[("labelSelector", f"{TREE_LABEL}={name}")])
        usage = {str((cq.get("metadata") or {}).get("name")): _leaf_usage(cq) for cq in (cqs or {}).get("items") or []}
        status = tree_status(tree, usage)
        if body.get("status") == status:
            return
        await self._call("PATCH", f"{TREES_PATH}/{name}/status", body={"status": status},
                         content_type="application/merge-patch+json")
        self.stats.status_writes += 1

    async def run(self, stop: asyncio.Event) -> TreeStats:
        while not stop.is_set():
            try:
                await self.reconcile()
            except KubeApiError as e:
                self.stats.errors += 1
                _log.warning("elasticquotatree.error", error=str(e), retriable=e.retriable)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
        return self.stats
