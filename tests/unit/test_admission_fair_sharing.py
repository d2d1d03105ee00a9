"""Admission fair sharing (Kueue's ``AdmissionFairSharing``): services/core/admissionfair.py.

The arithmetic and ordering cases restate, as our own tables, what Kueue's unit tests check
(``pkg/util/admissionfairsharing/admission_fair_sharing_test.go``,
``pkg/scheduler/scheduler_afs_test.go``); the rest checks the ledger over the log's time,
the entry penalty, what is shown (LocalQueue status, explain, metric) and replay.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from events import objects as o
from events.messages import ClockTicked, CycleCompleted, ObjectApplied, UpdateLocalQueueFairSharing, WorkloadFinished
from services.app.cli import main
from services.app.simulate import admission_fair_sharing_rows, result_list
from services.core import admissionfair as afs
from services.core.answer import answer, pending_order
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, fold
from services.scheduler.metrics import SchedulerMetrics
from services.web.model import overview
from services.web.visibility import cluster_queue_pending
from tests.builders import (
    Builder,
    a_cluster_queue,
    a_configuration,
    a_flavor,
    a_local_queue,
    a_workload,
    build_state,
    simulate,
)

NANO = 10**9
WEEK_MS = 168 * 3_600_000
FIVE_MIN_MS = 300_000


# --- arithmetic (Kueue's admission_fair_sharing_test.go, restated) ------------------------------


def test_alpha_is_the_share_of_the_new_sample_and_zero_without_a_half_life():
    assert afs.alpha(600_000, 600_000) == 0.5
    assert afs.alpha(300_000, 0) == 0.0
    assert 0 < afs.alpha(FIVE_MIN_MS, WEEK_MS) < 0.001


def test_multiplying_rounds_down_to_a_nano_unit():
    assert afs.mul({"cpu": 3 * NANO}, 0.5) == {"cpu": 1_500_000_000}
    assert afs.mul({"cpu": 1}, 0.999) == {"cpu": 0}
    assert afs.mul({"memory": 64 * 2**40 * NANO}, 1e-9)["memory"] > 0  # large quantities stay exact


def test_decay_accumulates_below_a_milli_unit_with_a_long_half_life():
    consumed: dict[str, int] = {}
    previous = 0
    for _ in range(3):
        consumed = afs.decayed(consumed, {"cpu": 2 * NANO, "nvidia.com/gpu": NANO}, FIVE_MIN_MS, WEEK_MS)
        assert consumed["cpu"] > previous and consumed["nvidia.com/gpu"] > 0
        assert consumed["cpu"] - previous < 10**6  # each sample adds less than a milli-unit, and it is kept
        previous = consumed["cpu"]


def test_decay_converges_on_the_half_life_curve_and_never_exceeds_the_usage():
    consumed: dict[str, int] = {}
    for half_lives, want in ((1, 1.0), (2, 1.5), (3, 1.75)):
        for _ in range(2016):  # 168h / 5m samples per half-life
            consumed = afs.decayed(consumed, {"cpu": 2 * NANO}, FIVE_MIN_MS, WEEK_MS)
        assert abs(consumed["cpu"] / NANO - want) <= 0.001, half_lives
        assert consumed["cpu"] <= 2 * NANO


@pytest.mark.parametrize(("consumed", "penalty", "lq_weight", "weights", "want"), [
    pytest.param({"gpu-logical": 2}, {}, 1000, (), 2.0, id="an unlisted resource weighs 1"),
    pytest.param({"gpu-logical": 2}, {}, 1000, (("gpu-logical", 3.0),), 6.0, id="an explicit weight"),
    pytest.param({"cpu": 4, "gpu-logical": 2}, {}, 1000, (("cpu", 1.0), ("gpu-logical", 5.0)), 14.0,
                 id="several resources"),
    pytest.param({"gpu-logical": 10}, {}, 1000, (("gpu-logical", 0.0),), 0.0, id="a weight of 0 counts nothing"),
    pytest.param({}, {"gpu-logical": 3}, 1000, (), 3.0, id="a pending penalty counts"),
    pytest.param({"gpu-logical": 2}, {"gpu-logical": 1}, 2000, (("gpu-logical", 4.0),), 6.0,
                 id="consumed and penalty over the LocalQueue's weight"),
    pytest.param({}, {}, 0, (), math.inf, id="a LocalQueue of weight 0 comes last even when idle"),
])
def test_usage_is_the_weighted_sum_over_the_local_queue_weight(consumed, penalty, lq_weight, weights, want):
    cfg = o.Configuration(admission_fair_sharing=True, afs_resource_weights=weights)
    entry = afs.LocalQueueUsage(consumed={k: v * NANO for k, v in consumed.items()},
                                penalties={"ns/w": {k: v * NANO for k, v in penalty.items()}} if penalty else {})
    assert afs.usage_value(cfg, entry, lq_weight) == want


def test_a_quantity_is_written_in_kubernetes_canonical_form():
    assert afs.quantity(31_999_000_000) == "31999m"
    assert afs.quantity(3 * NANO) == "3"
    assert afs.quantity(1_031_424) == "1031424n"


# --- ordering (Kueue's scheduler_afs_test.go, restated) --------------------------------------------


def _world(*workloads: Builder, usage: dict[str, str] | None = None, configured: bool = True,
           cpu: str = "8") -> list[Builder]:
    usage = usage or {}
    out: list[Builder] = []
    if configured:
        # No sample falls between the LocalQueues (time 0) and the workloads (2025): the seeded
        # histories stay as given, as in Kueue's tests, where no sampling runs.
        out.append(a_configuration().admission_fair_sharing(usageHalfLifeTime="168h", usageSamplingInterval="876000h"))
    out += [a_flavor("default"),
            a_cluster_queue("cq1").flavor("default", cpu=cpu, memory="8Gi").admission_fair_sharing()]
    for name in ("lq-a", "lq-b", "lq-c", "lq-zero"):
        lq = a_local_queue("default", name, "cq1").weight("0" if name == "lq-zero" else "1")
        if name in usage:
            lq = lq.consumed(cpu=usage[name])
        out.append(lq)
    return out + list(workloads)


def _wl(name: str, lq: str, cpu: str, created: int) -> Builder:
    return a_workload("default", name).queue(lq).request(cpu=cpu).created(created)


@pytest.mark.parametrize(("usage", "workloads", "configured", "admitted", "pending"), [
    pytest.param({"lq-a": "8", "lq-b": "2"}, [_wl("wl-a1", "lq-a", "8", 1), _wl("wl-b1", "lq-b", "8", 2)], True,
                 ["default/wl-b1"], ["default/wl-a1"], id="the less active LocalQueue goes first"),
    pytest.param({"lq-a": "0", "lq-zero": "0"}, [_wl("wl-z1", "lq-zero", "8", 1), _wl("wl-a1", "lq-a", "8", 2)],
                 True, ["default/wl-a1"], ["default/wl-z1"], id="a LocalQueue of weight 0 is never favoured"),
    pytest.param({"lq-a": "8", "lq-b": "2"}, [_wl("wl-a1", "lq-a", "8", 1), _wl("wl-b1", "lq-b", "8", 2)], False,
                 ["default/wl-a1"], ["default/wl-b1"], id="without the Configuration block usage is ignored"),
    pytest.param({"lq-a": "4", "lq-b": "4"},
                 [_wl("wl-a1", "lq-a", "4", 1), _wl("wl-a2", "lq-a", "4", 2), _wl("wl-b1", "lq-b", "4", 3),
                  _wl("wl-b2", "lq-b", "4", 4)], True,
                 ["default/wl-a1", "default/wl-b1"], ["default/wl-a2", "default/wl-b2"],
                 id="one workload from each LocalQueue when quota is limited"),
    pytest.param({"lq-a": "2", "lq-b": "2", "lq-c": "2"},
                 [_wl("wl-a1", "lq-a", "4", 1), _wl("wl-b1", "lq-b", "3", 2), _wl("wl-c1", "lq-c", "1", 3)], True,
                 ["default/wl-a1", "default/wl-b1", "default/wl-c1"], [],
                 id="equal usage: the usual order"),
    pytest.param({"lq-a": "8"}, [_wl("wl-a1", "lq-a", "8", 1), _wl("wl-b1", "lq-b", "8", 2)], True,
                 ["default/wl-b1"], ["default/wl-a1"], id="a LocalQueue without history has no usage"),
])
def test_kueue_afs_scheduling_cases(usage, workloads, configured, admitted, pending):
    out = simulate(*_world(*workloads, usage=usage, configured=configured))
    assert sorted(out.admitted()) == admitted
    for key in pending:
        assert out.wl(key).admission is None


def test_the_head_of_a_heavier_local_queue_waits_and_explain_says_why():
    state = build_state(*_world(_wl("wl-a1", "lq-a", "8", 1), _wl("wl-b1", "lq-b", "8", 2),
                                usage={"lq-a": "8", "lq-b": "2"}))
    assert [r.key for r in pending_order(state, "cq1")] == ["default/wl-b1", "default/wl-a1"]
    listed = cluster_queue_pending(state, "cq1")["items"]  # Kueue's visibility API, in the same order
    assert [(i["metadata"]["name"], i["positionInClusterQueue"]) for i in listed] == [("wl-b1", 0), ("wl-a1", 1)]
    why = answer(state, "default/wl-a1")
    assert why.position == 2
    assert why.fair_share == ("admission fair sharing: its LocalQueue default/lq-a has usage 8, "
                              "LocalQueue default/lq-b has 2 and goes first")
    assert "Admission fair sharing: its LocalQueue" in why.paragraph()
    assert why.to_json()["admissionFairSharing"] == why.fair_share
    assert answer(state, "default/wl-b1").fair_share == ""
    run_cycle(state)
    assert state.workloads["default/wl-b1"].admission is not None


@pytest.mark.parametrize(("configured", "victim"), [
    pytest.param(True, "default/old-a", id="the heavier LocalQueue's workload goes first"),
    pytest.param(False, "default/new-b", id="without it: the most recently admitted goes first"),
])
def test_preemption_within_the_cluster_queue_takes_the_heavier_local_queue_first(configured, victim):
    """Kueue's ``CandidatesOrdering``: among candidates of the same ClusterQueue from different
    LocalQueues, the one whose LocalQueue has the higher usage is preempted first, before
    priority and admission time are compared."""
    world = _world(
        a_workload("default", "old-a").queue("lq-a").request(cpu="4").created(1)
        .admitted("cq1", {"cpu": "default"}, at_seconds=10),
        a_workload("default", "new-b").queue("lq-b").request(cpu="4").created(2)
        .admitted("cq1", {"cpu": "default"}, at_seconds=20),
        a_workload("default", "urgent").queue("lq-c").request(cpu="4").priority(100).created(30),
        usage={"lq-a": "6", "lq-b": "1"}, configured=configured)
    cq = next(b for b in world if b.obj()["kind"] == "ClusterQueue")
    cq.preemption(within="LowerPriority")
    assert simulate(*world, cycles=1).preempted() == [victim]


# --- the ledger over the log's time ------------------------------------------------------------------


def _afs_state(half_life: str = "10m", interval: str = "5m") -> State:
    return build_state(a_configuration().admission_fair_sharing(usageHalfLifeTime=half_life,
                                                                usageSamplingInterval=interval),
                       a_flavor("default"),
                       a_cluster_queue("cq1").flavor("default", cpu="8").admission_fair_sharing(),
                       a_local_queue("default", "lq-a", "cq1"), a_local_queue("default", "lq-b", "cq1"))


def _submit(state: State, name: str, lq: str, cpu: str, at_s: int) -> None:
    from events.manifests import Document, normalize

    obj = normalize(Document("t.yaml", 1, _wl(name, lq, cpu, at_s).obj()))
    assert obj is not None
    fold(state, ObjectApplied(time=at_s * 1000, object=obj))


def test_an_admission_charges_the_entry_penalty_and_sampling_decays_toward_the_admitted_usage():
    state = _afs_state()
    _submit(state, "w", "lq-a", "4", 0)
    run_cycle(state)
    a = afs.alpha(FIVE_MIN_MS, 600_000)
    penalty = math.floor(4 * NANO * float(repr(a)))
    assert state.afs["default/lq-a"].consumed == {"cpu": penalty}  # admitted at once: settled
    assert state.afs["default/lq-b"].consumed == {}
    fold(state, ClockTicked(time=600_000))  # two samples, each decaying toward the 4 cpu admitted
    entry = state.afs["default/lq-a"]
    assert entry.last_update == 600_000
    assert penalty < entry.consumed["cpu"] < 4 * NANO
    fold(state, WorkloadFinished(time=600_000, namespace="default", name="w"))
    before = entry.consumed["cpu"]
    fold(state, ClockTicked(time=1_200_000))  # nothing admitted now: the history halves every 10m
    assert entry.consumed["cpu"] == pytest.approx(before / 2, rel=1e-6)
    assert afs.status(state, "default/lq-a") == {"consumedResources": {"cpu": afs.quantity(entry.consumed["cpu"])},
                                                 "lastUpdate": 1_200_000}


def test_a_half_life_of_zero_forgets_usage_at_each_sample():
    state = _afs_state(half_life="0s")
    _submit(state, "w", "lq-a", "4", 0)
    run_cycle(state)
    fold(state, ClockTicked(time=FIVE_MIN_MS))
    assert state.afs["default/lq-a"].consumed == {}


def test_a_penalty_pending_admission_checks_is_dropped_when_its_workload_goes():
    state = _afs_state()
    state.afs["default/lq-a"].penalties["default/gone"] = {"cpu": 5}
    fold(state, ClockTicked(time=1))
    assert state.afs["default/lq-a"].penalties == {}


def test_without_the_configuration_block_there_is_no_ledger_and_the_queue_is_plain():
    state = build_state(a_flavor("default"),
                        a_cluster_queue("cq1").flavor("default", cpu="8").admission_fair_sharing(),
                        a_local_queue("default", "lq-a", "cq1"))
    _submit(state, "w", "lq-a", "4", 0)
    run_cycle(state)
    assert state.afs == {}


# --- what is shown and replay ------------------------------------------------------------------------


def test_simulate_lists_each_local_queue_with_its_admission_fair_sharing_status():
    out = simulate(*_world(_wl("wl-a1", "lq-a", "4", 1), usage={"lq-b": "1500m"}))
    items = result_list(out.result)["items"]
    lqs = {i["metadata"]["name"]: i for i in items if i["kind"] == "LocalQueue"}
    assert sorted(lqs) == ["lq-a", "lq-b", "lq-c", "lq-zero"]
    status = lqs["lq-b"]["status"]["fairSharing"]["admissionFairSharingStatus"]
    assert status["consumedResources"] == {"cpu": "1500m"} and status["lastUpdate"].endswith("Z")
    assert lqs["lq-a"]["status"]["fairSharing"]["admissionFairSharingStatus"]["consumedResources"]["cpu"] != "0"
    assert lqs["lq-zero"]["spec"]["fairSharing"] == {"weight": "0"}


def test_simulate_prints_a_table_of_local_queue_usage_after_the_workloads(tmp_path: Path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all([b.obj() for b in _world(usage={"lq-a": "3"})]))
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Admission fair sharing" in out and "default/lq-a" in out and "cpu=3" in out
    assert admission_fair_sharing_rows(build_state(*_world(configured=False))) == []


def test_the_web_overview_shows_each_local_queues_history():
    state = build_state(*_world(usage={"lq-a": "3"}))
    lqs = {lq["name"]: lq for lq in overview(state, 0)["localQueues"]}
    assert lqs["lq-a"]["admissionFairSharingStatus"]["consumedResources"] == {"cpu": "3"}
    assert lqs["lq-a"]["admissionFairSharingStatus"]["usage"] == 3.0
    assert "admissionFairSharingStatus" not in overview(build_state(*_world(configured=False)), 0)["localQueues"][0]


def test_the_usage_gauge_has_kueues_name_and_labels():
    state = build_state(*_world(usage={"lq-a": "3"}))
    registry = CollectorRegistry()
    SchedulerMetrics(registry).refresh(state)
    value = registry.get_sample_value("kueue_local_queue_admission_fair_sharing_usage",
                                      {"name": "lq-a", "namespace": "default", "cluster_queue": "cq1"})
    assert value == 3.0


def test_applying_recorded_cycles_and_snapshots_reproduce_the_ledger(tmp_path: Path):
    live = _afs_state()
    shadow = _afs_state()
    for i in range(12):
        for s in (live, shadow):
            _submit(s, f"w{i}", "lq-a" if i % 3 else "lq-b", "2", 60 * i)
            if i % 4 == 3:
                fold(s, WorkloadFinished(time=60_000 * i, namespace="default", name=f"w{i - 3}"))
        result = run_cycle(live)
        record = CycleCompleted(cycle=live.cycles, input_offset=0, time=live.now, decisions=len(result.decisions),
                                admitted_heads=tuple(result.admitted_heads), heads=tuple(result.heads))
        apply_cycle(shadow, result.decisions, record)
        encoded = encode_state(live)
        assert encode_state(shadow) == encoded
        assert encode_state(decode_state(encoded)) == encoded
    assert live.afs["default/lq-a"].consumed and live.afs["default/lq-b"].consumed


def _fair_sharing_news(state: State) -> list[tuple[str, tuple[tuple[str, str], ...], int]]:
    return [(f"{d.namespace}/{d.name}", d.consumed_resources, d.last_update)
            for d in run_cycle(state).decisions if isinstance(d, UpdateLocalQueueFairSharing)]


def test_each_sample_is_said_once_to_the_local_queues_status():
    """Kueue's LocalQueue controller writes status.fairSharing at every usageSamplingInterval: a
    decision says each LocalQueue's status when a sample changed it, and only then."""
    state = _afs_state()
    _submit(state, "w", "lq-a", "4", 0)
    first = _fair_sharing_news(state)
    # Every LocalQueue's status starts when the ledger does (Kueue initializes it); lq-a's entry
    # penalty settled at the admission, in that same cycle.
    penalty = afs.quantity(state.afs["default/lq-a"].consumed["cpu"])
    assert first == [("default/lq-a", (("cpu", penalty),), 0), ("default/lq-b", (), 0)]
    assert _fair_sharing_news(state) == []  # nothing sampled since: nothing said
    fold(state, ClockTicked(time=200_000))
    assert _fair_sharing_news(state) == []  # before the next sample
    fold(state, ClockTicked(time=300_000))
    news = _fair_sharing_news(state)
    assert [(key, when) for key, _, when in news] == [("default/lq-a", 300_000), ("default/lq-b", 300_000)]
    assert news[0][1] == (("cpu", afs.quantity(state.afs["default/lq-a"].consumed["cpu"])),)
    again = decode_state(encode_state(state))
    assert _fair_sharing_news(again) == []  # what was said is part of the snapshot
