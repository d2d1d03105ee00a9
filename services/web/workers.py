"""MultiKueue's worker clusters as the views show them: per worker, what is placed and runs there.

From the scheduler's folded state alone (so ``kueuelog serve`` shows it from the log, as the demo's
terminal view does): a workload is *placed* on a worker from its ``multikueue.place`` until its
placement is removed, *running* there once the worker reported its pods ready, *finished* there
when it finished while placed there (``status.clusterName`` stays).
"""

from __future__ import annotations

from typing import Any

from events.cluster import ConditionStatus, ConditionType
from services.core.placement import worker_lost
from services.core.state import State


def worker_clusters(state: State) -> list[dict[str, Any]]:
    """One entry per worker cluster (a MultiKueueCluster, or a worker whose watcher spoke), by name."""
    mk = state.multikueue
    placed: dict[str, int] = {}
    running: dict[str, int] = {}
    for key in sorted(mk.placements):
        cluster = mk.placements[key].cluster
        placed[cluster] = placed.get(cluster, 0) + 1
        rec = state.workloads.get(key)
        ready = rec.conditions.get(ConditionType.PODS_READY) if rec is not None else None
        if ready is not None and ready.status == ConditionStatus.TRUE:
            running[cluster] = running.get(cluster, 0) + 1
    finished: dict[str, int] = {}
    for key in sorted(mk.cluster_names):
        rec = state.workloads.get(key)
        if rec is not None and rec.finished:
            finished[mk.cluster_names[key]] = finished.get(mk.cluster_names[key], 0) + 1
    out = []
    for name in sorted(set(mk.clusters) | set(mk.workers)):
        view = mk.workers.get(name)
        out.append({"name": name, "active": not worker_lost(state, name), "placed": placed.get(name, 0),
                    "running": running.get(name, 0), "finished": finished.get(name, 0),
                    "clusterQueues": len(view.cluster_queues) if view is not None else 0})
    return out
