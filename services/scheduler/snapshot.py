"""Canonical encoding of the scheduler state.

The canonical part of the state (objects, workload records, clock, counters)
is encoded as JSON with every mapping in sorted order, so that two states are
equal exactly when their encodings are byte-identical. The derived indices
(quota tree, queues) are left out: they are rebuilt from the rest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.scheduler.state import State, WorkloadRecord

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
    }


def encode_state(state: State) -> bytes:
    return _encoder.encode(canonical(state))
