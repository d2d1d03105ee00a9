"""The read-only follower behind the web view and ``get pending``, and the view's JSON.

A follower that applies the recorded cycles slice by slice ends in the state replay reaches; one
told to stop at an input offset ends where ``replay --until`` would have applied its last cycle;
the overview's numbers agree with the state."""

from __future__ import annotations

from pathlib import Path

from events.envelope import Topics
from events.manifests import load
from services.app.follow import Follower
from services.app.logview import replay
from services.core.snapshot import encode_state
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.web import model
from tests.unit.test_scheduler_service import _append_objects

T = Topics()
EXAMPLES = sorted(str(p) for p in Path("examples").glob("*.yaml"))


def _log(tmp_path: Path) -> SqliteLog:
    log = SqliteLog(tmp_path)
    _append_objects(log, [obj for _, obj in load({f: Path(f).read_text() for f in EXAMPLES})], "seed")
    live = Scheduler(log, batch_size=25)
    while live.step():
        pass
    return log


def test_a_follower_in_small_slices_reaches_the_state_replay_reaches(tmp_path: Path) -> None:
    log = _log(tmp_path)
    follower = Follower(log, T)
    seen_cycles = []
    while True:
        before = follower.decisions_offset
        follower.advance(lambda s: seen_cycles.append(s.cycles), max_records=7)
        if follower.decisions_offset == before:
            break
    report = replay(log, T, verify=False, until=follower.input_offset)
    assert report.scheduler is not None
    assert encode_state(follower.state) == encode_state(report.scheduler.state)
    assert seen_cycles == list(range(1, follower.state.cycles + 1)), "on_cycle once per applied cycle, in order"


def test_a_follower_stops_before_the_first_cycle_after_its_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    follower = Follower(log, T, until_input=40)
    follower.catch_up()
    assert follower.input_offset <= 40
    assert follower.state.cycles > 0


def test_the_overview_counts_what_the_state_holds(tmp_path: Path) -> None:
    log = _log(tmp_path)
    follower = Follower(log, T, until_input=60)
    history = model.UsageHistory(limit=4)
    follower.catch_up()
    follower2 = Follower(log, T, until_input=60)
    while True:
        before = follower2.decisions_offset
        follower2.advance(history.record, max_records=50)
        if follower2.decisions_offset == before:
            break
    state = follower.state
    doc = model.overview(state, follower.input_offset)
    pending = sum(1 for r in state.workloads.values() if r.pending)
    assert doc["workloads"]["pending"] == pending
    assert sum(cq["pending"] for cq in doc["clusterQueues"]) + sum(
        1 for r in state.workloads.values() if r.pending and not r.queued_in) == pending
    assert sum(lq["pending"] for lq in doc["localQueues"]) == pending
    for cq in doc["clusterQueues"]:
        for r in cq["resources"]:
            assert r["borrowed"]["value"] == max(0.0, r["used"]["value"] - r["nominal"]["value"])
    names = {root["name"] for root in doc["cohorts"]}
    assert names, "the examples have cohorts"
    series = history.series()
    assert len(series["times"]) <= 4 + 1, "thinned by half past its bound"
    assert set(series["clusterQueues"]) <= {cq["name"] for cq in doc["clusterQueues"]}
    listed = model.workloads(state, status="pending")
    assert listed["total"] == pending and all(w["status"] == "pending" for w in listed["items"])


def test_explain_from_a_followers_state_is_explain_at_its_offset(tmp_path: Path) -> None:
    from services.app.explainer import explain

    log = _log(tmp_path)
    follower = Follower(log, T, until_input=80)
    follower.catch_up()
    keys = sorted(follower.state.workloads)
    assert keys
    for key in keys[:: max(1, len(keys) // 8)]:
        fast = explain(log, T, key, now=(follower.state, follower.input_offset)).to_json()
        slow = explain(log, T, key, at=follower.input_offset).to_json()
        assert fast == slow, key
