"""The Workload CRD's ``spec.podSets[].template``: a structural schema of core/v1 PodTemplateSpec.

Kueue's own CRD spells the whole PodTemplateSpec out (controller-gen from the Go types); ours is
derived the same way from the Kubernetes API itself: the OpenAPI v3 document a kube-apiserver serves
at ``/openapi/v3/api/v1``. :func:`pod_template_schema` turns its ``PodTemplateSpec`` into a schema a
CRD accepts (structural: every node typed, ``$ref`` / ``allOf`` resolved, no ``oneOf``), keeping what
constrains the shape (types, formats, ``required``) and leaving out what a CRD cannot or should not
carry for an embedded core type: descriptions (size), defaults (the Job controller and the kubelet
default pods, not the Workload), enums (a newer kubelet's values must not be refused) and the
list-map markers (a CRD list-map needs every key required or defaulted). Embedded ObjectMeta keeps
the five fields an embedded object may have, as in Kueue's CRD.

``deploy/crds/workload.yaml`` holds the result; ``tests/integration/test_kube_crds.py`` regenerates
it from the test API server and fails when they drift. To refresh the CRD after a Kubernetes
upgrade: ``kubectl get --raw /openapi/v3/api/v1 | .venv/bin/python -m tests.infra.pod_template_schema``.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
                    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_PREFIX = "#/components/schemas/"
_SPECIAL: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
    },
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "type": "object",
        "properties": {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
    },
}
_KEEP = ("type", "format", "required", "x-kubernetes-map-type")


def _resolve(node: Mapping[str, Any]) -> str | None:
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf") or []) == 1:
        ref = node["allOf"][0].get("$ref")
    return str(ref)[len(_PREFIX):] if ref else None


def _convert(node: Mapping[str, Any], schemas: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    name = _resolve(node)
    if name is not None:
        if name in _SPECIAL:
            return copy.deepcopy(_SPECIAL[name])
        if name in path:
            raise ValueError(f"recursive schema {' -> '.join((*path, name))}")
        return _convert(schemas[name], schemas, (*path, name))
    out: dict[str, Any] = {k: copy.deepcopy(node[k]) for k in _KEEP if k in node}
    if node.get("x-kubernetes-list-type") in ("atomic", "set"):
        out["x-kubernetes-list-type"] = node["x-kubernetes-list-type"]
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {k: _convert(v, schemas, path) for k, v in sorted(node["properties"].items())}
    if isinstance(node.get("additionalProperties"), Mapping):
        out["additionalProperties"] = _convert(node["additionalProperties"], schemas, path)
    if "items" in node:
        out["items"] = _convert(node["items"], schemas, path)
    if "type" not in out and "anyOf" not in out:
        raise ValueError(f"untyped schema under {' -> '.join(path)}: {sorted(node)}")
    return out


def pod_template_schema(openapi: Mapping[str, Any]) -> dict[str, Any]:
    """core/v1 PodTemplateSpec of an OpenAPI v3 document (``/openapi/v3/api/v1``) as a CRD schema."""
    schemas = openapi["components"]["schemas"]
    name = "io.k8s.api.core.v1.PodTemplateSpec"
    return _convert(schemas[name], schemas, (name,))


def template_schemas(crd: Mapping[str, Any]) -> dict[str, Any]:
    """Each served version's ``spec.podSets[].template`` schema in a Workload CRD."""
    return {v["name"]: v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["podSets"]["items"]
            ["properties"]["template"] for v in crd["spec"]["versions"]}


def rewrite_workload_crd(path: Path, openapi: Mapping[str, Any]) -> None:
    """Put the PodTemplateSpec of ``openapi`` into every version of the Workload CRD at ``path``."""
    text = path.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    crd = yaml.safe_load(text)
    schema = pod_template_schema(openapi)
    for template in template_schemas(crd).values():
        description = template.get("description")
        template.clear()
        template.update({"description": description, **schema} if description else schema)
    path.write_text(header + dump(crd))


class _NoAliases(yaml.SafeDumper):
    """A CRD is read by kubectl and kustomize: spell every node out, no YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_NoAliases, sort_keys=False, width=110, allow_unicode=True)


if __name__ == "__main__":
    # kubectl get --raw /openapi/v3/api/v1 | .venv/bin/python -m tests.infra.pod_template_schema
    rewrite_workload_crd(Path(__file__).resolve().parents[2] / "deploy" / "crds" / "workload.yaml",
                         json.load(sys.stdin))
