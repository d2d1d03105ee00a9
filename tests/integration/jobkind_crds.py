"""Minimal CRDs for the workload kinds of ``events.jobkinds`` (JobSet, PyTorchJob, RayJob, ...), for
tests against a real kube-apiserver: each kind served at the version the registry reads, any
object accepted (``x-kubernetes-preserve-unknown-fields``), with a status subresource as the
real operators' CRDs have. Our own, built from the registry; not the operators' schemas."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import jobkinds


def minimal_crd(kind: jobkinds.JobKind) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{kind.plural}.{kind.group}"}
    if kind.group.endswith((".k8s.io", ".kubernetes.io")):
        # A protected group (sparkoperator.k8s.io): the API server wants the approval annotation; an
        # "unapproved" value is accepted, as the Spark operator's own CRDs carry.
        metadata["annotations"] = {"api-approved.kubernetes.io": "unapproved, kueuelog tests"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": kind.group,
            "scope": "Namespaced",
            "names": {"kind": kind.kind, "plural": kind.plural, "singular": kind.kind.lower(),
                      "listKind": f"{kind.kind}List"},
            "versions": [{
                "name": kind.version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                "subresources": {"status": {}},
            }],
        },
    }


async def ensure_job_kind_crds(api: client.ApiClient, *names: str) -> None:
    """The CRDs of the named kinds (``JobSet``, ``PyTorchJob``, ...), created unless present."""
    ext = client.ApiextensionsV1Api(api)
    for kind in jobkinds.OTHER_KINDS:
        if kind.kind not in names:
            continue
        try:
            await ext.create_custom_resource_definition(minimal_crd(kind))
        except ApiException as e:
            if e.status != 409:
                raise
