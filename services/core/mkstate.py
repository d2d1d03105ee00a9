"""MultiKueue's canonical scheduler state: the manager's MultiKueue objects, each worker cluster's
own queues (folded from that worker's watcher, namespaced by cluster) and where each workload is
placed. Plain msgspec data, so snapshots hold it as it is (``services.core.snapshot``); the
behaviour is in :mod:`services.core.placement`.
"""

from __future__ import annotations

import msgspec

from events import objects as o


class WorkerView(msgspec.Struct, kw_only=True):
    """What a worker cluster's watcher said: the queue objects the worker's own admission reads,
    and the newest time anything came from it (its watcher's heartbeat)."""

    flavors: dict[str, o.ResourceFlavor] = {}
    cluster_queues: dict[str, o.ClusterQueue] = {}
    cohorts: dict[str, o.Cohort] = {}
    local_queues: dict[str, o.LocalQueue] = {}  # namespace/name
    namespaces: dict[str, o.Namespace] = {}
    last_seen: int = 0
    # Copies of manager workloads its watcher reported there (by workload key), and those whose
    # removal was decided since (asked again when the worker comes back after being lost).
    copies: dict[str, None] = {}
    gc_requested: dict[str, None] = {}


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """A workload placed on a worker: the worker's admission, since when, and by which check."""

    cluster: str
    check: str
    admission: o.Admission
    at: int = 0


class MultiKueueState(msgspec.Struct, kw_only=True):
    configs: dict[str, o.MultiKueueConfig] = {}
    clusters: dict[str, o.MultiKueueCluster] = {}
    workers: dict[str, WorkerView] = {}  # by MultiKueueCluster name
    placements: dict[str, Placement] = {}  # by workload key
    # status.clusterName by workload key: set by a placement, kept when the workload finishes there,
    # cleared when it is evicted or its worker lost (as Kueue clears it), dropped with the workload.
    cluster_names: dict[str, str] = {}
