"""Kubeflow's training jobs: ``kubeflow.org/v1`` PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob and
``kubeflow.org/v2beta1`` MPIJob. A map of replica specs (``<field>.<ReplicaType>``), one podSet per
replica type present, in the kind's fixed order and named after the type in lowercase, of
``replicas`` (1 when unset) pods; held by ``spec.runPolicy.suspend``. Their priority class is
``spec.runPolicy.schedulingPolicy.priorityClass``, else the first replica template's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.jobkinds import readiness
from events.jobkinds.base import (
    JobKind,
    PathPart,
    PodSetsOf,
    PodSetSource,
    PriorityOf,
    conditions_finished,
    count,
    mapping,
    pod_set_name,
    pod_template,
)
from events.podspec import Where


def _replica_specs(field: str, order: tuple[str, ...]) -> PodSetsOf:
    def pod_sets(where: Where, body: Mapping[str, Any]) -> list[PodSetSource]:
        spec = mapping(where, body.get("spec"), ("spec",), required=True)
        replicas = mapping(where, spec.get(field), ("spec", field), required=True)
        unknown = sorted(str(k) for k in replicas if k not in order)
        if unknown:
            raise where.error(f"spec.{field}.{unknown[0]}",
                              f"unknown replica type: {body.get('kind')} takes {', '.join(order)}")
        out: list[PodSetSource] = []
        for replica_type in order:
            if replicas.get(replica_type) is None:
                continue
            at: tuple[PathPart, ...] = ("spec", field, replica_type)
            rs = mapping(where, replicas[replica_type], at)
            path = (*at, "template")
            out.append(PodSetSource(pod_set_name(where, replica_type, at), count(where, rs.get("replicas"),
                                    (*at, "replicas"), 1), pod_template(where, rs.get("template"), path), path))
        if not out:
            raise where.error(f"spec.{field}", f"must have at least one of {', '.join(order)}")
        return out

    return pod_sets


def _priority(field: str, order: tuple[str, ...]) -> PriorityOf:
    def priority_class(body: Mapping[str, Any]) -> str:
        spec = body.get("spec") or {}
        policy = (spec.get("runPolicy") or {}).get("schedulingPolicy") or {}
        if isinstance(policy, Mapping) and isinstance(policy.get("priorityClass"), str) and policy["priorityClass"]:
            return str(policy["priorityClass"])
        replicas = spec.get(field) or {}
        for replica_type in order:
            pod_spec = ((replicas.get(replica_type) or {}).get("template") or {}).get("spec") or {}
            name = pod_spec.get("priorityClassName") if isinstance(pod_spec, Mapping) else None
            if isinstance(name, str) and name:
                return name
        return ""

    return priority_class


def _kubeflow(kind: str, plural: str, field: str, order: tuple[str, ...], version: str = "v1") -> JobKind:
    return JobKind(group="kubeflow.org", version=version, kind=kind, plural=plural,
                   suspend_path=("spec", "runPolicy", "suspend"), pod_sets=_replica_specs(field, order),
                   priority_class=_priority(field, order), finished=conditions_finished("Succeeded", "Failed"),
                   pods_ready=readiness.condition("Running"))


PYTORCHJOB = _kubeflow("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", ("Master", "Worker"))
TFJOB = _kubeflow("TFJob", "tfjobs", "tfReplicaSpecs", ("Chief", "Master", "PS", "Worker", "Evaluator"))
XGBOOSTJOB = _kubeflow("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", ("Master", "Worker"))
PADDLEJOB = _kubeflow("PaddleJob", "paddlejobs", "paddleReplicaSpecs", ("Master", "Worker"))
JAXJOB = _kubeflow("JAXJob", "jaxjobs", "jaxReplicaSpecs", ("Worker",))
MPIJOB = _kubeflow("MPIJob", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"), version="v2beta1")

KINDS = (PYTORCHJOB, TFJOB, XGBOOSTJOB, PADDLEJOB, JAXJOB, MPIJOB)
