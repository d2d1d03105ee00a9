"""waitForPodsReady through the services on the embedded log: a stuck gang is evicted at the timeout,
retried with back-off, deactivated at the limit; the scheduler wakes at its deadlines (simulated time:
the driver jumps there; real time: the DeadlineTicker); and ``replay --verify`` reproduces it all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_DURATION_ANNOTATION, SIM_READY_AFTER_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import ClockTicked, DeactivateWorkload, EvictWorkload
from services.app.driver import Loop, drive_until_idle
from services.app.logview import explain, replay
from services.core.state import State
from services.runtime.sqlite import SqliteLog
from services.scheduler.deadlines import SOURCE, DeadlineTicker
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimConfig
from tests.builders import a_cluster_queue, a_configuration, a_flavor, a_job, a_local_queue, build_state

T = Topics()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    log = SqliteLog(tmp_path / "log", durable=False)
    yield log
    log.close()


def _manifests() -> str:
    objects = [
        a_configuration().wait_for_pods_ready(timeout="2m", requeuingStrategy={"backoffLimitCount": 2}),
        a_flavor("default-flavor"), a_cluster_queue("cq").flavor("default-flavor", cpu="8"),
        a_local_queue("default", "lq", "cq"),
        a_job("default", "stuck", "lq").parallelism(4).request(cpu="1").created(0)
        .annotate(SIM_READY_AFTER_ANNOTATION, "never"),
        a_job("default", "fine", "lq").parallelism(4).request(cpu="1").created(1)
        .annotate(SIM_DURATION_ANNOTATION, "30m"),
    ]
    return yaml.safe_dump_all([b.obj() for b in objects], sort_keys=False)


def test_a_stuck_gang_is_evicted_retried_with_back_off_and_deactivated_and_replay_verifies(log: SqliteLog) -> None:
    arrivals = ArrivalStream.from_files(log, {"cluster.yaml": _manifests()}, topics=T)
    result = drive_until_idle(log, topics=T, arrivals=arrivals)
    decisions = [decode_decision(r.value) for r in log.read(T.decisions, 0, 100_000)]
    evictions = [d for d in decisions if isinstance(d, EvictWorkload) and "stuck" in d.name]
    assert [d.reason for d in evictions] == ["PodsReadyTimeout", "PodsReadyTimeout", "Deactivated"]
    assert isinstance(evictions[-1], DeactivateWorkload)
    assert evictions[-1].underlying_cause == "RequeuingLimitExceeded"
    # Timeout 2m after each admission; back-off 60 s, then 120 s.
    times = [d.time - evictions[0].time for d in evictions]
    assert times == [0, 60_000 + 120_000, 60_000 + 120_000 + 120_000 + 120_000]
    fine = next(r for r in result.scheduler.state.workloads.values() if r.obj.owner and r.obj.owner.name == "fine")
    assert fine.finished
    ticks = [decode_envelope(r.value) for r in log.read(T.cluster_events, 0, 100_000)]
    assert any(e.source == SOURCE and isinstance(e.event, ClockTicked) for e in ticks), "woken by deadline ticks"
    report = replay(log, T, verify=True)
    assert report.mismatches == []
    text = "\n".join(explain(log, T, "default/stuck"))
    assert "evicted: PodsReadyTimeout: Exceeded the PodsReady timeout" in text
    assert "evicted and deactivated: Deactivated (RequeuingLimitExceeded)" in text
    assert "deactivated (RequeuingLimitExceeded: exceeding the maximum number of re-queuing retries)" in text


def test_explain_shows_when_a_backing_off_workload_is_retried(log: SqliteLog) -> None:
    arrivals = ArrivalStream.from_files(log, {"cluster.yaml": _manifests()}, topics=T)
    loop = Loop.recovered(log, topics=T, config=SimConfig(), arrivals=arrivals, cut_short_steps=False)
    for _ in range(10_000):  # until the stuck gang's first eviction has completed: it backs off
        loop.round()
        rec = next((r for r in loop.scheduler.state.workloads.values()
                    if r.obj.owner and r.obj.owner.name == "stuck"), None)
        if rec is not None and rec.requeue_at is not None and rec.pending:
            break
    text = "\n".join(explain(log, T, "default/stuck"))
    assert "backing off after PodsReady timeout #1: queued again at 2025-01-01T00:03:00Z" in text, text
    assert "requeueState: count 1, requeueAt 2025-01-01T00:03:00Z" in text


def _state_with_a_deadline() -> State:
    from events.messages import ClockTicked as Tick
    from services.core.cycle import run_cycle
    from services.core.state import fold
    from tests.builders import a_workload

    state = build_state(a_configuration().wait_for_pods_ready(timeout="2m"), a_flavor("f"),
                        a_cluster_queue("cq").flavor("f", cpu="1"), a_local_queue("ns", "lq", "cq"),
                        a_workload("ns", "w").queue("lq").request(cpu="1").created(0))
    fold(state, Tick(time=state.now))
    run_cycle(state)
    return state


def test_the_deadline_ticker_appends_one_tick_when_the_deadline_comes(log: SqliteLog) -> None:
    state = _state_with_a_deadline()
    deadline = state.now + 120_000
    now = [state.now + 1_000]
    ticker = DeadlineTicker(log, lambda: now[0], topics=T)
    assert ticker.due_in_seconds(state) == 119.0
    assert not ticker.tick(state), "not yet"
    now[0] = deadline + 7
    assert ticker.tick(state)
    assert not ticker.tick(state), "once per deadline, even before the scheduler folds it"
    [rec] = log.read(T.cluster_events, 0, 10)
    env = decode_envelope(rec.value)
    assert isinstance(env.event, ClockTicked) and env.event.time == deadline + 7 and env.source == SOURCE


def test_the_documented_stuck_gang_demo_ends_with_the_gang_deactivated(log: SqliteLog) -> None:
    """docs/stuck-gang.yaml, as ``kueuelog demo docs/stuck-gang.yaml`` runs it."""
    path = Path(__file__).resolve().parents[2] / "docs" / "stuck-gang.yaml"
    arrivals = ArrivalStream.from_files(log, {path.name: path.read_text(encoding="utf-8")}, topics=T)
    result = drive_until_idle(log, topics=T, arrivals=arrivals)
    by_job = {r.obj.owner.name: r for r in result.scheduler.state.workloads.values() if r.obj.owner}
    assert not by_job["stuck"].active and by_job["stuck"].deactivation_cause == "RequeuingLimitExceeded"
    assert by_job["fine"].finished
    assert replay(log, T, verify=True).mismatches == []
