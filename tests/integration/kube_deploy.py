"""Applying deploy/ to the test control plane through kubernetes-asyncio (no kubectl).

Shared by test_kube_crds.py, test_kube_rbac.py and test_kube_e2e.py: create-or-replace for
the kinds deploy/ holds, the CRDs made servable (Established, then listable: right after
Established the apiserver answers 429 for a moment), a client that acts as one of
deploy/base's ServiceAccounts (the admin impersonates it), and a deadline poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.infra.kube import LocalControlPlane
from tests.infra.pytest_kube import load_configuration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUEUE_GROUP = "kueue.x-k8s.io"
NAMESPACE = "kueuelog-system"


def service_account(name: str) -> str:
    """The user name a ServiceAccount of deploy/base authenticates as."""
    return f"system:serviceaccount:{NAMESPACE}:{name}"


@contextlib.asynccontextmanager
async def as_service_account(plane: LocalControlPlane, name: str) -> AsyncIterator[client.ApiClient]:
    """A client whose every request the admin (system:masters) makes as ServiceAccount ``name``
    (``Impersonate-User``): what it may do is exactly what deploy/base's RBAC grants it."""
    api = client.ApiClient(configuration=await load_configuration(plane), header_name="Impersonate-User",
                           header_value=service_account(name))
    try:
        yield api
    finally:
        await api.close()


async def eventually(check: Callable[[], Awaitable[Any]], *, timeout: float = 30.0, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def read_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def crd_documents() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in read_yaml(DEPLOY / "crds" / "kustomization.yaml")[0]["resources"]:
        out.extend(read_yaml(DEPLOY / "crds" / name))
    return out


def base_documents(*kinds: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in read_yaml(DEPLOY / "base" / "kustomization.yaml")[0]["resources"]:
        out.extend(d for d in read_yaml(DEPLOY / "base" / name) if not kinds or d["kind"] in kinds)
    return out


def error_causes(exc: ApiException) -> tuple[str, list[tuple[str, str]]]:
    """(message, [(field, cause message)]) of a Status error body."""
    body = json.loads(exc.body)
    causes = [(c.get("field", ""), c.get("message", "")) for c in (body.get("details") or {}).get("causes", [])]
    return body.get("message", ""), causes


async def create_or_replace(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Create ``obj``; if it exists, replace it (keeping its resourceVersion)."""
    kind, meta = obj["kind"], obj["metadata"]
    name, namespace = meta["name"], meta.get("namespace")
    ops: dict[str, tuple[Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]],
                         Callable[..., Awaitable[Any]], bool]] = {}
    ext, core, rbac, apps = (client.ApiextensionsV1Api(api), client.CoreV1Api(api),
                             client.RbacAuthorizationV1Api(api), client.AppsV1Api(api))
    ops = {
        "CustomResourceDefinition": (ext.create_custom_resource_definition, ext.read_custom_resource_definition,
                                     ext.replace_custom_resource_definition, False),
        "Namespace": (core.create_namespace, core.read_namespace, core.replace_namespace, False),
        "ClusterRole": (rbac.create_cluster_role, rbac.read_cluster_role, rbac.replace_cluster_role, False),
        "ClusterRoleBinding": (rbac.create_cluster_role_binding, rbac.read_cluster_role_binding,
                               rbac.replace_cluster_role_binding, False),
        "ServiceAccount": (core.create_namespaced_service_account, core.read_namespaced_service_account,
                           core.replace_namespaced_service_account, True),
        "ConfigMap": (core.create_namespaced_config_map, core.read_namespaced_config_map,
                      core.replace_namespaced_config_map, True),
        "Deployment": (apps.create_namespaced_deployment, apps.read_namespaced_deployment,
                       apps.replace_namespaced_deployment, True),
    }
    create, read, replace, namespaced = ops[kind]
    try:
        if namespaced:
            await create(namespace, obj)
        else:
            await create(obj)
        return
    except ApiException as exc:
        if exc.status != 409:
            raise
    existing = await (read(name, namespace) if namespaced else read(name))
    body = {**obj, "metadata": {**meta, "resourceVersion": existing.metadata.resource_version}}
    await (replace(name, namespace, body) if namespaced else replace(name, body))


@contextlib.asynccontextmanager
async def rbac_applied(api: client.ApiClient, path: Path) -> AsyncIterator[None]:
    """The ClusterRoles and ClusterRoleBindings of ``path`` in force for the block, then deleted: the
    control plane is shared by the whole run, and a role left behind would widen what a later test
    proves its service account cannot do (tests/integration/test_kube_rbac.py)."""
    objs = [o for o in read_yaml(path) if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for obj in objs:
        await create_or_replace(api, obj)
    try:
        yield
    finally:
        await revoke_rbac(api, [(o["kind"], o["metadata"]["name"]) for o in reversed(objs)])


_SENTINEL = "kueuelog-test-rbac-sentinel"
_SENTINEL_USER = "kueuelog-test-rbac-sentinel-user"


async def revoke_rbac(api: client.ApiClient, objects: list[tuple[str, str]]) -> None:
    """Delete the ClusterRoles and ClusterRoleBindings named (kind, name), and return once the
    apiserver's authorizer has seen it (its cache follows the API a moment behind).

    A sentinel binding created before the deletions and deleted after them tells when: the
    authorizer sees bindings in the order they changed, so once it denies the sentinel's user,
    every deletion before it is in force too."""
    rbac = client.RbacAuthorizationV1Api(api)
    await create_or_replace(api, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": _SENTINEL},
        "rules": [{"apiGroups": ["kueuelog.test"], "resources": ["sentinels"], "verbs": ["get"]}]})
    await create_or_replace(api, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": _SENTINEL},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": _SENTINEL},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": _SENTINEL_USER}]})
    await eventually(lambda: _sentinel_allowed(api, want=True), what="the authorizer to see the sentinel binding")
    for kind, name in [*objects, ("ClusterRoleBinding", _SENTINEL), ("ClusterRole", _SENTINEL)]:
        delete = rbac.delete_cluster_role if kind == "ClusterRole" else rbac.delete_cluster_role_binding
        try:
            await delete(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    await eventually(lambda: _sentinel_allowed(api, want=False),
                     what="the authorizer to see the RBAC deletions")


async def _sentinel_allowed(api: client.ApiClient, *, want: bool) -> bool:
    review = await client.AuthorizationV1Api(api).create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user=_SENTINEL_USER, resource_attributes=client.V1ResourceAttributes(
            group="kueuelog.test", resource="sentinels", verb="get"))))
    return bool(review.status.allowed) == want


def served_versions(crd: dict[str, Any]) -> list[str]:
    return [v["name"] for v in crd["spec"]["versions"] if v["served"]]


async def apply_crds(api: client.ApiClient) -> list[dict[str, Any]]:
    """Apply every CRD of deploy/crds and wait until each served version can be listed."""
    crds = crd_documents()
    for crd in crds:
        await create_or_replace(api, crd)
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for crd in crds:
        name = crd["metadata"]["name"]

        async def established(name: str = name) -> bool:
            got = await ext.read_custom_resource_definition(name)
            conditions = (got.status.conditions or []) if got.status else []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        await eventually(established, what=f"CRD {name} to be Established")
        for version in served_versions(crd):

            async def servable(version: str = version, plural: str = crd["spec"]["names"]["plural"],
                               group: str = crd["spec"]["group"]) -> bool:
                try:
                    await custom.list_cluster_custom_object(group, version, plural, limit=1)
                except ApiException as exc:
                    if exc.status in (404, 429, 503):  # storage still (re)initialising
                        return False
                    raise
                return True

            await eventually(servable, what=f"{name} {version} to be listable")
    return crds
