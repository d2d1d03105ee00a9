"""The manager's actuator over simulated clusters, MultiKueue included: placements become commands
for the chosen worker's simulated cluster.

A simulated cluster's API server is the sim-cluster topic, and several simulated clusters share it,
each taking the commands that name it (``events.simcluster``, ``SimConfig.cluster``). So a worker
cluster is reached the way the manager's own simulated cluster is:

- ``PlaceWorkload``: a ``StartWorkload`` for the worker the scheduler chose (``cluster``), with the
  worker's admission and its flavors' node labels: the copy of the Job created there, unsuspended
  (used by ``kueuelog run actuator`` on Kafka and by ``kueuelog demo --clusters N``). Staged, so the loop
  (:mod:`services.actuator.loop`) commits it with the report and its consumer position in one
  transaction: a placement is carried out once, whatever crashes when.
- ``RemovePlacement``: a ``StopWorkload`` for that worker (the copy deleted there).
- The manager runs no pods of a placed workload (Kueue: the manager's Job is ``managedBy``
  MultiKueue): its ``AdmitChecked`` starts nothing on the manager, and its eviction there is
  complete as soon as it is applied (an ``EvictionCompleted`` reported with the decision: there are
  no pods to wait for). Every other decision goes to the manager's simulated cluster as before
  (:class:`~services.actuator.sim_port.SimClusterPort`).

Which workloads are MultiKueue's is read from the decisions themselves (a ``PlaceWorkload`` names
it), also from those before the committed position at recovery, so a restart changes nothing
(recovery reads them once, as the Kubernetes port does for its queue counts; the plain simulated
port read none).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    EvictionCompleted,
    EvictWorkload,
    MarkPending,
    PlacementEnd,
    PlacementWaiting,
    PlaceWorkload,
    RemovePlacement,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from events.simcluster import StartWorkload, StopWorkload, sim_cluster_topic
from services.actuator.loop import SOURCE, Staged, Tuning
from services.actuator.sim_port import SIM_TUNING, SimClusterPort


def node_selector(d: PlaceWorkload) -> tuple[tuple[str, str], ...]:
    """The worker flavors' node labels, over every podSet (a Job has one): the run's node selector
    on the worker, as the copy's pod template gets them on a real one."""
    labels: dict[str, str] = {}
    for update in d.pod_set_updates:
        labels.update(dict(update.node_selector))
    return tuple(sorted(labels.items()))


@dataclass
class SimMultiKueuePort:
    """Port and placer in one (``Actuator(log, port, placer=port)``); see the module docstring."""

    topics: Topics = field(default_factory=Topics)
    cluster_name: str = "sim"
    tuning: Tuning = SIM_TUNING
    takes_pending_marks: bool = field(default=False, init=False)
    placed: set[str] = field(default_factory=set, init=False)  # workloads placed on a worker, not finished
    _manager: SimClusterPort = field(init=False)

    def __post_init__(self) -> None:
        self._manager = SimClusterPort(self.topics, self.cluster_name, self.tuning)

    @property
    def cluster(self) -> str:
        return self.cluster_name

    def recover(self, history: Iterator[AnyDecision]) -> None:
        self.placed = set()
        for d in history:
            if isinstance(d, PlaceWorkload | RemovePlacement):
                self._note(d)

    def _note(self, d: PlaceWorkload | RemovePlacement) -> None:
        """A finished workload is done with: forgotten, so the set holds what may still be placed."""
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, PlaceWorkload):
            self.placed.add(key)
        elif d.reason == PlacementEnd.WORKLOAD_FINISHED:
            self.placed.discard(key)

    deferred: int = 0  # nothing is ever deferred

    async def before_batch(self, batch: int) -> None:
        """Nothing is ever deferred."""

    async def apply(self, decision: PlaceWorkload | RemovePlacement) -> Sequence[Staged]:
        key = f"{decision.namespace}/{decision.name}"
        topic = sim_cluster_topic(self.topics)
        self._note(decision)
        if isinstance(decision, PlaceWorkload):
            return [(topic, key, encode(StartWorkload(
                time=decision.time, cluster=decision.cluster, decision_id=decision.id, namespace=decision.namespace,
                name=decision.name, admission=decision.admission, node_selector=node_selector(decision))))]
        return [(topic, key, encode(StopWorkload(
            time=decision.time, cluster=decision.cluster, decision_id=decision.id, namespace=decision.namespace,
            name=decision.name, reason=str(decision.reason))))]

    async def nominate(self, decision: PlacementWaiting) -> None:
        """The simulated clusters keep no Workload status."""

    async def start(self, decision: AdmitWorkload | AdmitChecked) -> Sequence[Staged]:
        if isinstance(decision, AdmitChecked) and f"{decision.namespace}/{decision.name}" in self.placed:
            return ()  # it runs on its worker, not here
        return await self._manager.start(decision)

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        if f"{decision.namespace}/{decision.name}" not in self.placed:
            return await self._manager.stop(decision)
        env = Envelope(id=f"{SOURCE}:{self.cluster_name}:{decision.id}:evicted", source=SOURCE,
                       cluster=self.cluster_name,
                       event=EvictionCompleted(time=decision.time, namespace=decision.namespace, name=decision.name))
        return [(self.topics.cluster_events, event_key(env), encode(env))]

    async def mark_pending(self, decision: MarkPending) -> None:
        """Never called (``takes_pending_marks`` is False)."""

    async def write_status(self, decision: UpdateWorkloadStatus | UpdateLocalQueueFairSharing) -> None:
        """The simulated clusters keep no Workload or LocalQueue status."""

    async def after_batch(self) -> None:
        """Nothing to flush."""
