"""MultiKueue over simulated clusters: the manager's actuator places workloads on simulated workers.

The simulated counterpart of :mod:`services.actuator.multikueue`, for ``kueuelog demo --clusters N``
and the tests: every simulated cluster (the manager, ``worker-1`` ...) reads the one sim-cluster
topic and carries out the commands addressed to it (``events.simcluster``: a command's ``cluster``).

- ``PlaceWorkload``: a ``StartWorkload`` for the worker, with the worker's admission and its
  flavors' node labels as the run's node selector; the worker's simulated cluster runs it and
  reports its readiness and its finish under the worker's name, which the scheduler takes as the
  manager's workload's (``services.core.placement.route``).
- ``RemovePlacement``: a ``StopWorkload`` for the worker, unless the workload finished there (its
  run is over already; nothing is left to collect).
- The manager's own ``AdmitChecked`` of a placed workload starts nothing on the manager (the Job
  there is ``managedBy: kueue.x-k8s.io/multikueue``: its pods run on the worker only).

Which workloads are placed is read from the decisions alone (the placer notes them as it applies
them; after a restart the port rebuilds them from the decisions before the actuator's position),
so a crash anywhere neither starts a workload twice nor on two clusters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from events.codec import encode
from events.envelope import Topics
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    PlacementEnd,
    PlaceWorkload,
    RemovePlacement,
)
from events.simcluster import StartWorkload, StopWorkload, sim_cluster_topic
from services.actuator.loop import Staged
from services.actuator.sim_port import SimClusterPort


@dataclass
class Placements:
    """Where each workload is placed (workload key -> worker), from the decisions applied."""

    on: dict[str, str] = field(default_factory=dict)

    def note(self, d: AnyDecision) -> None:
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, PlaceWorkload):
            self.on[key] = d.cluster
        elif isinstance(d, RemovePlacement) and d.reason != PlacementEnd.STALE_COPY and self.on.get(key) == d.cluster:
            del self.on[key]


def node_selector(d: PlaceWorkload) -> tuple[tuple[str, str], ...]:
    """The worker flavors' node labels, over every podSet (a Job has one)."""
    labels: dict[str, str] = {}
    for update in d.pod_set_updates:
        labels.update(dict(update.node_selector))
    return tuple(sorted(labels.items()))


@dataclass(frozen=True)
class SimPlacer:
    """Applies placements to the simulated workers: commands on the sim-cluster topic."""

    placements: Placements
    topics: Topics = field(default_factory=Topics)

    async def apply(self, d: PlaceWorkload | RemovePlacement) -> Sequence[Staged]:
        self.placements.note(d)
        key = f"{d.namespace}/{d.name}"
        topic = sim_cluster_topic(self.topics)
        if isinstance(d, PlaceWorkload):
            return [(topic, key, encode(StartWorkload(
                time=d.time, cluster=d.cluster, decision_id=d.id, namespace=d.namespace, name=d.name,
                admission=d.admission, node_selector=node_selector(d))))]
        if d.reason == PlacementEnd.WORKLOAD_FINISHED:
            return ()
        return [(topic, key, encode(StopWorkload(time=d.time, cluster=d.cluster, decision_id=d.id,
                                                 namespace=d.namespace, name=d.name, reason=str(d.reason))))]


@dataclass(frozen=True)
class ManagerSimPort(SimClusterPort):
    """The manager's simulated cluster: as :class:`SimClusterPort`, but a placed workload's
    admission starts nothing here (it runs on its worker)."""

    placements: Placements = field(default_factory=Placements)

    def recover(self, history: Iterator[AnyDecision]) -> None:
        self.placements.on.clear()
        for d in history:
            self.placements.note(d)

    async def start(self, decision: AdmitWorkload | AdmitChecked) -> Sequence[Staged]:
        if isinstance(decision, AdmitChecked) and f"{decision.namespace}/{decision.name}" in self.placements.on:
            return ()
        return await super().start(decision)
