"""The simulated cluster's actuation port: a decision becomes a command record on the sim-cluster topic.

The simulated cluster's API server is a log topic, so the port calls nothing: it returns the
``StartWorkload`` / ``StopWorkload`` record, and the loop (:mod:`services.actuator.loop`)
commits it with the report and the consumer position in one transaction — each decision is
applied exactly once, whatever crashes when. Nothing here ever waits, so the loop over this
port can be stepped synchronously (:meth:`~services.actuator.loop.Actuator.step_now`).

Durations are not the actuator's business: how long a workload runs is a property of the
cluster that runs it, so the simulated cluster looks it up (``services.simcluster.durations``);
the port passes on what the decision says (namespace/name and admission). Pending marks are
not for a cluster: the port does not take them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from events.codec import encode
from events.envelope import Topics
from events.messages import (
    AdmitChecked,
    AdmitWorkload,
    AnyDecision,
    EvictWorkload,
    MarkPending,
    UpdateLocalQueueFairSharing,
    UpdateWorkloadStatus,
)
from events.simcluster import CreateProvisioningRequest, StartWorkload, StopWorkload, sim_cluster_topic
from services.actuator.loop import Staged, Tuning

SIM_TUNING: Final = Tuning(batch_size=5000, max_attempts=5)
"""Local records are cheap: large batches (fewer commits); nothing to wait for between attempts."""


@dataclass(frozen=True)
class SimClusterPort:
    """The simulated cluster's port: a command record on the sim-cluster topic."""

    topics: Topics = field(default_factory=Topics)
    cluster_name: str = "sim"
    tuning: Tuning = SIM_TUNING
    takes_pending_marks: bool = field(default=False, init=False)

    @property
    def cluster(self) -> str:
        return self.cluster_name

    def recover(self, history: Iterator[AnyDecision]) -> None:
        """Nothing to rebuild (``history`` is not read)."""

    deferred: int = 0  # nothing is ever deferred

    async def before_batch(self, batch: int) -> None:
        """Nothing is ever deferred."""

    async def start(self, decision: AdmitWorkload | AdmitChecked) -> Sequence[Staged]:
        key = f"{decision.namespace}/{decision.name}"
        if isinstance(decision, AdmitWorkload) and decision.admission_checks:
            # Quota reserved; it starts once its admission checks are Ready (AdmitChecked). Its
            # ProvisioningRequests are created now, for the simulated autoscaler to answer.
            return [(sim_cluster_topic(self.topics), key, encode(CreateProvisioningRequest(
                time=decision.time, cluster=self.cluster_name, decision_id=f"{decision.id}:{plan.name}",
                namespace=decision.namespace, workload=decision.name, plan=plan)))
                for plan in decision.provisioning_requests or ()]
        if isinstance(decision, AdmitChecked) and decision.failed_to_start:
            return ()
        cmd = StartWorkload(time=decision.time, cluster=self.cluster_name, decision_id=decision.id,
                            namespace=decision.namespace, name=decision.name, admission=decision.admission)
        return [(sim_cluster_topic(self.topics), f"{decision.namespace}/{decision.name}", encode(cmd))]

    async def stop(self, decision: EvictWorkload) -> Sequence[Staged]:
        cmd = StopWorkload(time=decision.time, cluster=self.cluster_name, decision_id=decision.id,
                           namespace=decision.namespace, name=decision.name, reason=decision.reason)
        # The simulated cluster deletes the workload's ProvisioningRequests with its pods.
        return [(sim_cluster_topic(self.topics), f"{decision.namespace}/{decision.name}", encode(cmd))]

    async def mark_pending(self, decision: MarkPending) -> None:
        """Never called (``takes_pending_marks`` is False)."""

    async def write_status(self, decision: UpdateWorkloadStatus | UpdateLocalQueueFairSharing) -> None:
        """The simulated cluster keeps no Workload status (the scheduler's state is what simulate shows)."""

    async def after_batch(self) -> None:
        """Nothing to flush."""
