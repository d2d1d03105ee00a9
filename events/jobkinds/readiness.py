"""Whether all of a job's pods are ready, read from its status as Kueue's integration for the kind
reads it (``GenericJob.PodsReady``): what waitForPodsReady waits for.

- JobSet: the replicated Jobs ready or succeeded (``status.replicatedJobsStatus[].ready +
  succeeded``) add up to the replicated Jobs asked for (``replicas``, 1 when unset).
- Kubeflow jobs and MPIJob: a ``Running`` condition with status True.
- RayCluster: ``status.state`` is ``ready``; RayJob: its cluster's (``status.rayClusterStatus.state``);
  RayService: a ``Ready`` condition with status True.
- AppWrapper: a ``PodsReady`` condition with status True.
- SparkApplication: ``status.applicationState.state`` is RUNNING and at least ``executor.instances``
  executors (``status.executorState``) are RUNNING or COMPLETED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

PodsReadyOf = Callable[[Mapping[str, Any]], bool]


def _status(body: Mapping[str, Any]) -> Mapping[str, Any]:
    status = body.get("status")
    return status if isinstance(status, Mapping) else {}


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def never(_body: Mapping[str, Any]) -> bool:
    return False


def condition(kind: str) -> PodsReadyOf:
    """Ready when ``status.conditions`` has ``kind`` with status True."""

    def ready(body: Mapping[str, Any]) -> bool:
        conditions = _status(body).get("conditions")
        return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
                   for c in (conditions if isinstance(conditions, list) else []))

    return ready


def jobset(body: Mapping[str, Any]) -> bool:
    spec = body.get("spec")
    jobs = spec.get("replicatedJobs") if isinstance(spec, Mapping) else None
    wanted = sum(_int(j.get("replicas"), 1) for j in (jobs if isinstance(jobs, list) else []) if isinstance(j, Mapping))
    statuses = _status(body).get("replicatedJobsStatus")
    ready = sum(_int(s.get("ready")) + _int(s.get("succeeded"))
                for s in (statuses if isinstance(statuses, list) else []) if isinstance(s, Mapping))
    return ready == wanted


def ray_cluster(body: Mapping[str, Any]) -> bool:
    return _status(body).get("state") == "ready"


def ray_job(body: Mapping[str, Any]) -> bool:
    cluster = _status(body).get("rayClusterStatus")
    return isinstance(cluster, Mapping) and cluster.get("state") == "ready"


def spark(body: Mapping[str, Any]) -> bool:
    status = _status(body)
    app = status.get("applicationState")
    if not isinstance(app, Mapping) or app.get("state") != "RUNNING":
        return False
    spec = body.get("spec")
    executor = spec.get("executor") if isinstance(spec, Mapping) else None
    wanted = _int(executor.get("instances")) if isinstance(executor, Mapping) else 0
    states = status.get("executorState")
    running = sum(1 for s in (states.values() if isinstance(states, Mapping) else []) if s in ("RUNNING", "COMPLETED"))
    return running >= wanted
