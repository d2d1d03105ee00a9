"""Canonical encoding of the scheduler state.

The canonical part of the state (objects, workload records, clock, counters)
is encoded as JSON with every mapping in sorted order, so that two states are
equal exactly when their encodings are byte-identical. The derived indices
(quota tree, queues) are left out: they are rebuilt from the rest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import objects as o
from events.messages import Condition
from services.core.state import State, WorkloadRecord, admission_usage

_encoder = msgspec.json.Encoder(order="sorted")


def _record(rec: WorkloadRecord) -> dict[str, Any]:
    return {
        "obj": rec.obj,
        "seq": rec.seq,
        "queue_time": rec.queue_time,
        "priority": rec.priority,
        "priority_error": rec.priority_error,
        "admission": rec.admission,
        "reserved_at": rec.reserved_at,
        "evicting": rec.evicting,
        "finished": rec.finished,
        "inadmissible": rec.inadmissible,
        "conditions": list(rec.conditions.values()),
        "pending_reason": rec.pending_reason,
        "last_tried": None if rec.last_tried is None else sorted([*k, v] for k, v in rec.last_tried.items()),
        "last_generation": list(rec.last_generation),
        "sticky": rec.sticky,
    }


def canonical(state: State) -> dict[str, Any]:
    return {
        "now": state.now,
        "seq": state.seq,
        "cycles": state.cycles,
        "flavors": state.flavors,
        "cluster_queues": state.cluster_queues,
        "cohorts": state.cohorts,
        "local_queues": state.local_queues,
        "namespaces": state.namespaces,
        "workload_priority_classes": state.workload_priority_classes,
        "priority_classes": state.priority_classes,
        "admission_checks": state.admission_checks,
        "provisioning_configs": state.provisioning_configs,
        "config": state.config,
        "workloads": {k: _record(r) for k, r in state.workloads.items()},
        "anomalies": state.anomalies,
        "anomaly_count": state.anomaly_count,
        "held": list(state.held),
        "epoch": state.epoch,
        "generations": state.generations,
    }


def encode_state(state: State) -> bytes:
    return _encoder.encode(canonical(state))


class _RecordWire(msgspec.Struct, kw_only=True):
    obj: o.Workload
    seq: int
    queue_time: int
    priority: int
    priority_error: str
    admission: o.Admission | None
    reserved_at: int | None
    evicting: bool
    finished: bool
    inadmissible: bool
    conditions: list[Condition]
    pending_reason: str
    last_tried: list[list[int]] | None
    last_generation: list[int]
    sticky: bool


class _StateWire(msgspec.Struct, kw_only=True):
    now: int
    seq: int
    cycles: int
    flavors: dict[str, o.ResourceFlavor]
    cluster_queues: dict[str, o.ClusterQueue]
    cohorts: dict[str, o.Cohort]
    local_queues: dict[str, o.LocalQueue]
    namespaces: dict[str, o.Namespace]
    workload_priority_classes: dict[str, o.WorkloadPriorityClass]
    priority_classes: dict[str, o.PriorityClass]
    admission_checks: dict[str, o.AdmissionCheck]
    provisioning_configs: dict[str, o.ProvisioningRequestConfig]
    config: o.Configuration
    workloads: dict[str, _RecordWire]
    anomalies: list[str]
    anomaly_count: int
    held: list[str]
    epoch: int
    generations: dict[str, int]


_decoder = msgspec.json.Decoder(_StateWire)


def decode_state(data: bytes) -> State:
    """The inverse of :func:`encode_state`; derived indices are rebuilt on first use."""
    wire = _decoder.decode(data)
    state = State()
    for name in ("now", "seq", "cycles", "flavors", "cluster_queues", "cohorts", "local_queues", "namespaces",
                 "workload_priority_classes", "priority_classes", "admission_checks", "provisioning_configs",
                 "config", "anomalies", "anomaly_count"):
        setattr(state, name, getattr(wire, name))
    for key, r in wire.workloads.items():
        rec = WorkloadRecord(obj=r.obj, seq=r.seq, queue_time=r.queue_time, priority=r.priority,
                             priority_error=r.priority_error, admission=r.admission, reserved_at=r.reserved_at,
                             evicting=r.evicting, finished=r.finished, inadmissible=r.inadmissible,
                             pending_reason=r.pending_reason)
        rec.usage = admission_usage(r.admission) if r.admission is not None else {}
        rec.last_tried = None if r.last_tried is None else {(a, b): c for a, b, c in r.last_tried}
        rec.last_generation = (r.last_generation[0], r.last_generation[1])
        rec.sticky = r.sticky
        for c in r.conditions:
            rec.conditions[c.type] = c
        state.workloads[key] = rec
    state.held = dict.fromkeys(wire.held)
    state.generations = dict(wire.generations)
    state.mark_dirty()
    state.epoch = wire.epoch
    for key, r in wire.workloads.items():
        state.workloads[key].inadmissible = r.inadmissible  # mark_dirty reset them; the snapshot knows better
    return state
