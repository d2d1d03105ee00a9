"""KubeRay (``ray.io/v1``) RayCluster and RayJob, held by ``spec.suspend``, and RayService.

A cluster's podSets: ``head`` (1 pod, from ``headGroupSpec``), then one per worker group, named
after ``groupName`` in lowercase, of ``replicas`` (1 when unset) times ``numOfHosts`` pods. With
GCS fault tolerance (annotation ``ray.io/ft-enabled: "true"`` or ``gcsFaultToleranceOptions``) the
head's first container requests at least KubeRay's Redis clean-up Job (200m CPU, 256Mi).

A RayService (a long-running service: it never finishes) has the podSets of its
``rayClusterConfig`` and is held by ``spec.rayClusterConfig.suspend``.

A RayJob has its cluster's podSets from ``rayClusterSpec`` plus, in ``K8sJobMode`` (the default
``submissionMode``), a ``submitter`` podSet of 1 pod (``submitterPodTemplate``, else KubeRay's
default submitter: the head's image, 500m CPU and 200Mi requested); in ``SidecarMode`` the submitter
is a container added to the head. Refused as Kueue's webhook refuses them: a RayJob on a queue
with both ``clusterSelector`` and ``rayClusterSpec``, or with neither, or without
``shutdownAfterJobFinishes: true``; in-tree autoscaling (Kueue takes it only with workload
slicing, which kueuelog does not have); a worker group named ``head``. A RayJob with only a
``clusterSelector`` runs on an existing cluster and is not Kueue's to manage.
"""

from __future__ import annotations

import copy
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
    dotted,
    mapping,
    pod_set_name,
    pod_template,
    pods,
    sequence,
    text,
    with_container,
)
from events.podspec import Where

HEAD = "head"
SUBMITTER = "submitter"
FT_ANNOTATION = "ray.io/ft-enabled"
_REDIS_CLEANUP = {"cpu": "200m", "memory": "256Mi"}
_SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def _with_redis_cleanup(where: Where, template: Mapping[str, Any], path: tuple[PathPart, ...]) -> dict[str, Any]:
    """The head template with its first container requesting at least the Redis clean-up Job."""
    out = copy.deepcopy(dict(template))
    containers = out["spec"]["containers"]
    first = dict(containers[0]) if isinstance(containers[0], Mapping) else {}
    resources = dict(first.get("resources") or {})
    requests = dict(resources.get("requests") or {})
    for name, floor in _REDIS_CLEANUP.items():
        field = dotted((*path, "spec", "containers", 0, "resources", "requests", name))
        if name not in requests or where.amount(name, requests[name], field) < where.amount(name, floor, field):
            requests[name] = floor
    resources["requests"] = requests
    first["resources"] = resources
    out["spec"]["containers"] = [first, *containers[1:]]
    return out


def _fault_tolerant(where: Where, body: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    annotations = mapping(where, (body.get("metadata") or {}).get("annotations"), ("metadata", "annotations"))
    value = annotations.get(FT_ANNOTATION)
    return (isinstance(value, str) and value.lower() == "true") or spec.get("gcsFaultToleranceOptions") is not None


def cluster_pod_sets(where: Where, body: Mapping[str, Any], spec: Mapping[str, Any],
                     at: tuple[PathPart, ...]) -> list[PodSetSource]:
    """The podSets of a RayClusterSpec found at ``at`` (``spec`` or ``spec.rayClusterSpec``)."""
    if boolean(where, spec.get("enableInTreeAutoscaling"), (*at, "enableInTreeAutoscaling")):
        raise where.error(dotted((*at, "enableInTreeAutoscaling")),
                          "a kueue managed job should only use autoscaling when workload slicing is enabled; "
                          "kueuelog does not support workload slicing")
    head_at: tuple[PathPart, ...] = (*at, "headGroupSpec")
    head = mapping(where, spec.get("headGroupSpec"), head_at, required=True)
    head_path = (*head_at, "template")
    head_template = pod_template(where, head.get("template"), head_path)
    if _fault_tolerant(where, body, spec):
        head_template = _with_redis_cleanup(where, head_template, head_path)
    out = [PodSetSource(HEAD, 1, head_template, head_path)]
    for i, raw in enumerate(sequence(where, spec.get("workerGroupSpecs"), (*at, "workerGroupSpecs"))):
        g_at: tuple[PathPart, ...] = (*at, "workerGroupSpecs", i)
        group = mapping(where, raw, g_at)
        name = pod_set_name(where, text(where, group.get("groupName"), (*g_at, "groupName"), required=True),
                            (*g_at, "groupName"))
        if name == HEAD:
            raise where.error(dotted((*g_at, "groupName")), f"{HEAD!r} is reserved for the head group")
        replicas = count(where, group.get("replicas"), (*g_at, "replicas"), 1)
        hosts = count(where, group.get("numOfHosts"), (*g_at, "numOfHosts"), 1)
        total = pods(where, (replicas, max(hosts, 1)), (*g_at, "numOfHosts"), "replicas x numOfHosts")
        path = (*g_at, "template")
        out.append(PodSetSource(name, total, pod_template(where, group.get("template"), path), path))
    return out


def _cluster(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    return cluster_pod_sets(where, body, mapping(where, body.get("spec"), ("spec",), required=True), ("spec",))


def _submitter_template(where: Where, spec: Mapping[str, Any], head: PodSetSource) -> Mapping[str, Any]:
    if spec.get("submitterPodTemplate") is not None:
        return pod_template(where, spec["submitterPodTemplate"], ("spec", "submitterPodTemplate"))
    image = (head.template["spec"]["containers"][0] or {}).get("image", "")
    return {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "ray-job-submitter", "image": image,
                                     "resources": copy.deepcopy(_SUBMITTER_RESOURCES)}]}}


def _job(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    if spec.get("clusterSelector") and spec.get("rayClusterSpec") is not None:
        raise where.error("spec.clusterSelector", "a kueue managed job should not use an existing cluster")
    if spec.get("rayClusterSpec") is None:
        raise where.error("spec.rayClusterSpec",
                          "rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector")
    if not boolean(where, spec.get("shutdownAfterJobFinishes"), ("spec", "shutdownAfterJobFinishes")):
        raise where.error("spec.shutdownAfterJobFinishes", "a kueue managed job should delete the cluster after "
                                                           "finishing (set it to true)")
    at: tuple[PathPart, ...] = ("spec", "rayClusterSpec")
    out = cluster_pod_sets(where, body, mapping(where, spec["rayClusterSpec"], at), at)
    mode = text(where, spec.get("submissionMode"), ("spec", "submissionMode")) or "K8sJobMode"
    if mode == "K8sJobMode":
        template = _submitter_template(where, spec, out[0])
        out.append(PodSetSource(SUBMITTER, 1, template, ("spec", "submitterPodTemplate")))
    elif mode == "SidecarMode":
        head = out[0]
        sidecar = {"name": "ray-job-submitter", "resources": copy.deepcopy(_SUBMITTER_RESOURCES)}
        out[0] = PodSetSource(head.name, head.count, with_container(head.template, sidecar), head.path)
    return out


def _job_finished(body: Mapping[str, Any]) -> Finished | None:
    """Kueue's RayJob: ended when ``status.jobDeploymentStatus`` is Complete or Failed; succeeded
    when ``status.jobStatus`` is SUCCEEDED; the message is ``status.message``."""
    status = body.get("status")
    if not isinstance(status, Mapping) or status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
        return None
    message = status.get("message")
    return Finished(status.get("jobStatus") == "SUCCEEDED", message if isinstance(message, str) else "")


def _service(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
    spec = mapping(where, body.get("spec"), ("spec",), required=True)
    at: tuple[PathPart, ...] = ("spec", "rayClusterConfig")
    return cluster_pod_sets(where, body, mapping(where, spec.get("rayClusterConfig"), at, required=True), at)


def _job_managed(body: Mapping[str, Any]) -> bool:
    """A RayJob with a ``clusterSelector`` and no ``rayClusterSpec`` runs on an existing cluster."""
    spec = body.get("spec")
    return not (isinstance(spec, Mapping) and spec.get("clusterSelector") and spec.get("rayClusterSpec") is None)


RAYCLUSTER = JobKind(group="ray.io", version="v1", kind="RayCluster", plural="rayclusters",
                     suspend_path=("spec", "suspend"), pod_sets=_cluster, pods_ready=readiness.ray_cluster)
RAYJOB = JobKind(group="ray.io", version="v1", kind="RayJob", plural="rayjobs", suspend_path=("spec", "suspend"),
                 pod_sets=_job, managed=_job_managed, finished=_job_finished, pods_ready=readiness.ray_job)
RAYSERVICE = JobKind(group="ray.io", version="v1", kind="RayService", plural="rayservices",
                     suspend_path=("spec", "rayClusterConfig", "suspend"), pod_sets=_service,
                     pods_ready=readiness.condition("Ready"))
KINDS = (RAYJOB, RAYCLUSTER, RAYSERVICE)
