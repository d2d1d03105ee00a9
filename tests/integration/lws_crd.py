"""A minimal LeaderWorkerSet CRD (``leaderworkerset.x-k8s.io/v1``) for tests against a real
kube-apiserver: our own structural schema of the fields kueuelog reads (``spec.replicas``,
``spec.leaderWorkerTemplate.size``, ``leaderTemplate``, ``workerTemplate``; the pod templates kept
whole), with the LWS API's defaults for ``replicas`` and ``size`` (1) and a status subresource as
the real CRD has. Not the LWS project's schema."""

from __future__ import annotations

from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.jobkinds import serving as s
from tests.integration.test_kube_watcher import eventually

GROUP: Final = s.LWS_GROUP
VERSION: Final = "v1"
PLURAL: Final = "leaderworkersets"

_TEMPLATE: Final = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def lws_crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["leaderWorkerTemplate"],
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "minimum": 0, "default": 1},
            "leaderWorkerTemplate": {
                "type": "object",
                "required": ["workerTemplate"],
                "properties": {
                    "size": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                    "leaderTemplate": _TEMPLATE,
                    "workerTemplate": _TEMPLATE,
                },
            },
            "rolloutStrategy": _TEMPLATE,
        },
    }
    status_schema = {"type": "object", "properties": {
        "replicas": {"type": "integer", "format": "int32"},
        "readyReplicas": {"type": "integer", "format": "int32"},
        "updatedReplicas": {"type": "integer", "format": "int32"},
    }}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": "LeaderWorkerSet", "plural": PLURAL, "singular": "leaderworkerset",
                      "listKind": "LeaderWorkerSetList", "shortNames": ["lws"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec_schema, "status": status_schema}}},
                "subresources": {"status": {}},
            }],
        },
    }


async def ensure_lws_crd(api: client.ApiClient) -> None:
    """The CRD, created unless present, and served."""
    try:
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(lws_crd())
    except ApiException as e:
        if e.status != 409:
            raise
    co = client.CustomObjectsApi(api)

    async def servable() -> bool:
        try:
            await co.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
        except ApiException as e:
            if e.status in (404, 429, 503):
                return False
            raise
        return True

    await eventually(servable, what="the LeaderWorkerSet CRD to be served")
