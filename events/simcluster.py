"""The simulated cluster's API: the records of the ``<prefix>.sim-cluster`` topic.

The simulated cluster stands in for a Kubernetes API server, and like one it
is a shared record that two parties write: the actuator writes *commands*
(start this admitted workload, stop this evicted one — the equivalent of
unsuspending or suspending a Job), and the simulated cluster writes *status*
(this run started at T and will end at T + duration; it reported pods ready,
finished, eviction completed — the equivalent of a kubelet writing Pod status).

Both live here, in the contract package, because the actuator and the
simulated cluster must not import each other: they meet only in this topic.
Status records make the simulated cluster's state a pure fold of the topic, so
it can be rebuilt after a crash by re-reading the topic from offset 0 (start
times and end times, which came from a clock, are recorded, not recomputed).

Same evolution rules as ``events.messages``: explicit stable tags, new fields
only with defaults.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

import msgspec

from events.codec import decode_error
from events.envelope import Topics
from events.objects import Admission, ProvisioningRequestPlan


def sim_cluster_topic(topics: Topics) -> str:
    """The simulated API server's topic, next to the others under the same prefix."""
    return f"{topics.prefix}.sim-cluster"


class SimRecord(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A record of the sim-cluster topic. ``time`` is when it happened (ms); ``cluster``
    names the simulated cluster it is for, so several can share one topic."""

    time: int = 0
    cluster: str = ""


# --- commands (written by the actuator) ------------------------------------------------------


class StartWorkload(SimRecord, frozen=True, tag="sim.start-workload"):
    """Run an admitted workload (Kubernetes: unsuspend the Job with the flavors' node labels)."""

    decision_id: str
    namespace: str
    name: str
    admission: Admission
    # The node labels its pods are bound to (Kubernetes: the pod template's nodeSelector): a
    # MultiKueue worker's flavors' labels for a placed workload; left out otherwise.
    node_selector: tuple[tuple[str, str], ...] | msgspec.UnsetType = msgspec.UNSET


class StopWorkload(SimRecord, frozen=True, tag="sim.stop-workload"):
    """Stop an evicted workload's pods (Kubernetes: suspend the Job)."""

    decision_id: str
    namespace: str
    name: str
    reason: str = ""


class CreateProvisioningRequest(SimRecord, frozen=True, tag="sim.create-provisioning-request"):
    """Create a ProvisioningRequest (and its PodTemplates) for a workload's provisioning check;
    the simulated autoscaler answers it. ``decision_id`` is the admission's id and the request's
    name, so that a command carried out twice creates one request."""

    decision_id: str
    namespace: str
    workload: str
    plan: ProvisioningRequestPlan


# --- status (written by the simulated cluster itself) ----------------------------------------


class ReportKind(StrEnum):
    PODS_READY = "pods-ready"
    FINISHED = "finished"
    EVICTION_COMPLETED = "eviction-completed"


class RunStarted(SimRecord, frozen=True, tag="sim.run-started"):
    """Run number ``run`` of a workload began at ``time``; its timeline is fixed from now on."""

    decision_id: str
    namespace: str
    name: str
    run: int  # 1 for the first start of this workload, 2 after a re-admission, ...
    ready_at: int
    end_at: int
    duration_source: str = ""  # "annotation" or "default": for explain-style debugging
    node_selector: tuple[tuple[str, str], ...] | msgspec.UnsetType = msgspec.UNSET  # as its StartWorkload said


class Reported(SimRecord, frozen=True, tag="sim.reported"):
    """The simulated cluster reported ``kind`` to cluster-events (in the same transaction).

    ``n`` counts reports of this kind for this workload (1, 2, ...) and makes the
    envelope id deterministic; ``run`` is the run it ended or made ready (0: none was
    running, e.g. a stop for a workload that already finished)."""

    kind: ReportKind
    namespace: str
    name: str
    n: int
    run: int = 0
    decision_id: str = ""  # the stop command an eviction completion answers
    envelope_id: str = ""


class RequestCreated(SimRecord, frozen=True, tag="sim.request-created"):
    """A ProvisioningRequest was created at ``time``: its answers (``events.simautoscaler``) are
    due from then on, the ``answered`` first ones already reported."""

    decision_id: str
    namespace: str
    workload: str
    plan: ProvisioningRequestPlan


class RequestAnswered(SimRecord, frozen=True, tag="sim.request-answered"):
    """Answer ``n`` (1, 2, ...) of a ProvisioningRequest was reported to cluster-events; with
    ``deleted``, the request was deleted (its workload stopped): nothing more is reported."""

    namespace: str
    name: str
    n: int
    deleted: bool = False
    decision_id: str = ""
    request_id: str = ""  # the RequestCreated's decision id: a request re-created under its name is another


SimClusterRecord = (StartWorkload | StopWorkload | RunStarted | Reported | CreateProvisioningRequest
                    | RequestCreated | RequestAnswered)

SIM_RECORD_TYPES: Final = frozenset(
    str(msgspec.inspect.type_info(cls).tag)  # type: ignore[attr-defined]
    for cls in (StartWorkload, StopWorkload, RunStarted, Reported, CreateProvisioningRequest, RequestCreated,
                RequestAnswered)
)

_decoder: Final = msgspec.json.Decoder(SimClusterRecord)


def decode_sim_record(data: bytes) -> SimClusterRecord:
    """One sim-cluster record; :class:`UnknownEventType` for a newer producer's type,
    :class:`MalformedRecord` for anything else that is wrong."""
    try:
        record: SimClusterRecord = _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise decode_error(data, SIM_RECORD_TYPES, e) from None
    return record
