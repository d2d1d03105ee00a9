"""Minimal CRDs for the workload kinds of ``events.jobkinds`` (JobSet, PyTorchJob, RayJob, ...), for
tests against a real kube-apiserver: each kind served at the version the registry reads, any
object accepted (``x-kubernetes-preserve-unknown-fields``), with a status subresource as the
real operators' CRDs have; TrainJob and its runtimes (ClusterTrainingRuntime, TrainingRuntime) with
a structural schema of the fields kueuelog reads. Our own, built from the registry; not the
operators' schemas."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import jobkinds
from events.jobkinds import trainjob

_OPEN: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _trainjob_schema() -> dict[str, Any]:
    """TrainJob's fields kueuelog reads, typed (with the API's defaults for the runtime reference);
    the rest of ``spec`` and ``status`` kept as written. Unknown top-level fields are pruned."""
    ref = {"type": "object", "properties": {
        "name": {"type": "string"},
        "apiGroup": {"type": "string", "default": trainjob.GROUP},
        "kind": {"type": "string", "default": trainjob.CLUSTER_RUNTIME}}}
    trainer = {**_OPEN, "properties": {"numNodes": {"type": "integer", "minimum": 1},
                                       "resourcesPerNode": _OPEN}}
    spec = {**_OPEN, "properties": {"runtimeRef": ref, "suspend": {"type": "boolean"}, "trainer": trainer,
                                    "runtimePatches": {"type": "array", "items": _OPEN}}}
    return {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                             "metadata": {"type": "object"}, "spec": spec, "status": _OPEN}}


def _runtime_schema() -> dict[str, Any]:
    """A training runtime's fields kueuelog reads: ``mlPolicy`` and the JobSet ``template``."""
    spec = {**_OPEN, "properties": {"mlPolicy": _OPEN, "template": _OPEN}}
    return {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                             "metadata": {"type": "object"}, "spec": spec}}


def runtime_crd(kind: str) -> dict[str, Any]:
    """ClusterTrainingRuntime (cluster-scoped) or TrainingRuntime, at the version TrainJob is read."""
    plural = trainjob.RUNTIME_PLURALS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{trainjob.GROUP}"},
        "spec": {
            "group": trainjob.GROUP,
            "scope": "Cluster" if kind == trainjob.CLUSTER_RUNTIME else "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{"name": trainjob.VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": _runtime_schema()}}],
        },
    }


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
                "schema": {"openAPIV3Schema": _trainjob_schema() if kind is trainjob.TRAINJOB else _OPEN},
                "subresources": {"status": {}},
            }],
        },
    }


async def ensure_job_kind_crds(api: client.ApiClient, *names: str) -> None:
    """The CRDs of the named kinds (``JobSet``, ``PyTorchJob``, ...), created unless present; with
    TrainJob, its runtimes' too."""
    ext = client.ApiextensionsV1Api(api)
    crds = [minimal_crd(k) for k in jobkinds.OTHER_KINDS if k.kind in names]
    if trainjob.TRAINJOB.kind in names:
        crds += [runtime_crd(k) for k in trainjob.RUNTIME_KINDS]
    for crd in crds:
        try:
            await ext.create_custom_resource_definition(crd)
        except ApiException as e:
            if e.status != 409:
                raise
