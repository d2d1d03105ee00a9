"""Fold is total: odd but legal histories are recorded as anomalies, never raised, and bounded."""

from __future__ import annotations

from events.messages import EvictionCompleted, ObjectDeleted, WorkloadFinished
from services.core.state import MAX_ANOMALIES, State, fold


def test_odd_facts_are_counted_and_the_latest_kept() -> None:
    state = State()
    fold(state, WorkloadFinished(time=1, namespace="ns", name="ghost"))
    fold(state, EvictionCompleted(time=2, namespace="ns", name="ghost"))
    fold(state, ObjectDeleted(time=3, kind="ClusterQueue", name="never-was"))
    assert state.anomaly_count == 3
    assert state.anomalies == [
        "finish of unknown or finished Workload ns/ghost",
        "eviction completion for ns/ghost, which is not being evicted",
        "delete of unknown ClusterQueue never-was",
    ]
    for i in range(MAX_ANOMALIES * 2):
        fold(state, WorkloadFinished(time=4, namespace="ns", name=f"ghost-{i}"))
    assert state.anomaly_count == 3 + MAX_ANOMALIES * 2
    assert len(state.anomalies) == MAX_ANOMALIES
    assert state.anomalies[-1] == f"finish of unknown or finished Workload ns/ghost-{MAX_ANOMALIES * 2 - 1}"
