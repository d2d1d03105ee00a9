"""SparkApplication (``sparkoperator.k8s.io/v1beta2``, Kueue's alpha integration, feature gate
SparkApplicationIntegration): two podSets, ``driver`` (1) and ``executor`` (``spec.executor.instances``,
0 when unset); held by ``spec.suspend``.

Each podSet's pod is built as Kueue's integration builds it (not as the Spark operator does): a
single container (``spark-kubernetes-driver`` / ``spark-kubernetes-executor``) requesting the role's
``coreRequest`` and ``memory`` (Java notation, ``1g`` = ``1Gi``), limited by ``coreLimit``,
``memoryLimit`` and ``gpu``, then the role's ``sidecars`` and ``initContainers``, its
``priorityClassName``, ``nodeSelector``, ``affinity`` and ``tolerations``; labels and annotations
from its ``template`` with the role's own. The memory overhead the operator adds is not counted
(Kueue does not count it either). Refused as Kueue's webhook refuses them: a mode other than
``cluster``, ``dynamicAllocation.enabled`` (Kueue takes it only with workload slicing).

Kueue writes an admission into the role itself (``spec.driver.nodeSelector``, ``.tolerations``,
``.labels``, ``.annotations``), not into a template: :attr:`PodSetSource.flat`. Kueue moves a global
``spec.nodeSelector`` into the roles at admission; kueuelog refuses a queued SparkApplication with one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.jobkinds import readiness
from events.jobkinds.base import (
    Finished,
    JobKind,
    PathPart,
    PodSetSource,
    boolean,
    count,
    mapping,
    sequence,
    text,
)
from events.podspec import Where

GROUP, VERSION = "sparkoperator.k8s.io", "v1beta2"
DRIVER, EXECUTOR = "driver", "executor"
_CONTAINER = {DRIVER: "spark-kubernetes-driver", EXECUTOR: "spark-kubernetes-executor"}
_JAVA_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}


def java_memory(value: str) -> str:
    """Spark's memory notation (``512m``, ``2g``) as a Kubernetes quantity (``512Mi``, ``2Gi``)."""
    unit = value[-1:].lower()
    return value[:-1] + _JAVA_UNITS[unit] if unit in _JAVA_UNITS else value


def _role_container(where: Where, role: Mapping[str, Any], at: tuple[PathPart, ...], name: str) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if (cores := text(where, role.get("coreRequest"), (*at, "coreRequest"))):
        requests["cpu"] = cores
    if (limit := text(where, role.get("coreLimit"), (*at, "coreLimit"))):
        limits["cpu"] = limit
    if (memory := text(where, role.get("memory"), (*at, "memory"))):
        requests["memory"] = java_memory(memory)
    if (memory_limit := text(where, role.get("memoryLimit"), (*at, "memoryLimit"))):
        limits["memory"] = java_memory(memory_limit)
    gpu = mapping(where, role.get("gpu"), (*at, "gpu"))
    gpu_name = text(where, gpu.get("name"), (*at, "gpu", "name"))
    quantity = count(where, gpu.get("quantity"), (*at, "gpu", "quantity"), 0)
    if gpu_name and quantity > 0:
        limits[gpu_name] = quantity
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"name": name, **({"resources": resources} if resources else {})}


def _template(where: Where, body: Mapping[str, Any], role_name: str) -> tuple[Mapping[str, Any], dict[str, Any]]:
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    at: tuple[PathPart, ...] = ("spec", role_name)
    role = mapping(where, spec.get(role_name), at)
    pod_spec: dict[str, Any] = {"containers": [_role_container(where, role, at, _CONTAINER[role_name])]}
    for field, key in (("sidecars", "containers"), ("initContainers", "initContainers")):
        extra = sequence(where, role.get(field), (*at, field))
        if extra:
            pod_spec[key] = [*pod_spec.get(key, []), *extra]
    for field in ("priorityClassName", "nodeSelector", "affinity", "tolerations"):
        if role.get(field):
            pod_spec[field] = role[field]
    template = mapping(where, role.get("template"), (*at, "template"))
    meta = mapping(where, template.get("metadata"), (*at, "template", "metadata"))
    labels = {**(meta.get("labels") or {}), **mapping(where, role.get("labels"), (*at, "labels")),
              "sparkoperator.k8s.io/app-name": str((body.get("metadata") or {}).get("name") or ""),
              "spark-role": role_name}
    annotations = {**(meta.get("annotations") or {}), **mapping(where, role.get("annotations"), (*at, "annotations"))}
    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return role, {"metadata": metadata, "spec": pod_spec}


def _pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    mode = text(where, spec.get("mode"), ("spec", "mode"))
    if mode != "cluster":
        raise where.error("spec.mode", f"invalid value {mode!r}: only cluster mode is supported for a kueue "
                                       "managed job")
    dynamic = mapping(where, spec.get("dynamicAllocation"), ("spec", "dynamicAllocation"))
    if boolean(where, dynamic.get("enabled"), ("spec", "dynamicAllocation", "enabled")):
        raise where.error("spec.dynamicAllocation.enabled", "a kueue managed job can use dynamicAllocation only "
                                                            "with workload slicing, which kueuelog does not have")
    if spec.get("nodeSelector"):
        raise where.error("spec.nodeSelector", "not supported by kueuelog yet on a queued SparkApplication "
                                               "(Kueue moves it into the driver and executor at admission); "
                                               "set spec.driver.nodeSelector and spec.executor.nodeSelector")
    _, driver = _template(where, body, DRIVER)
    executor_role, executor = _template(where, body, EXECUTOR)
    instances = count(where, executor_role.get("instances"), ("spec", EXECUTOR, "instances"), 0)
    return [PodSetSource(DRIVER, 1, driver, ("spec", DRIVER), flat=True),
            PodSetSource(EXECUTOR, instances, executor, ("spec", EXECUTOR), flat=True)]


def _finished(body: Mapping[str, Any]) -> Finished | None:
    """Kueue's SparkApplication: ended at ``status.applicationState.state`` COMPLETED (succeeded),
    FAILED or SUBMISSION_FAILED, with the state's ``errorMessage``."""
    status = body.get("status")
    app = status.get("applicationState") if isinstance(status, Mapping) else None
    state = app.get("state") if isinstance(app, Mapping) else None
    if state not in ("COMPLETED", "FAILED", "SUBMISSION_FAILED"):
        return None
    message = app.get("errorMessage") if isinstance(app, Mapping) else None
    return Finished(state == "COMPLETED", message if isinstance(message, str) else "")


def _priority(body: Mapping[str, Any]) -> str:
    """The driver's priority class (the first podSet's, as Kueue reads it from the built template)."""
    spec = body.get("spec")
    driver = spec.get(DRIVER) if isinstance(spec, Mapping) else None
    name = driver.get("priorityClassName") if isinstance(driver, Mapping) else None
    return name if isinstance(name, str) else ""


SPARKAPPLICATION = JobKind(group=GROUP, version=VERSION, kind="SparkApplication", plural="sparkapplications",
                           suspend_path=("spec", "suspend"), pod_sets=_pod_sets, finished=_finished,
                           priority_class=_priority, pods_ready=readiness.spark)
