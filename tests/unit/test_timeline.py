"""``simulate --until``: simulated time, a simulated cluster with pod slots, and seed 001's deadlock."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.app.simulate import fold_files, run
from services.app.timeline import ready_after_ms, run_until
from services.core.state import State

CASE = Path(__file__).resolve().parents[1] / "cases" / "001-all-or-nothing-wait-for-pods-ready.yaml"
T0 = 1_735_689_600_000
MIN = 60_000


def _seed_001(*, wait: bool) -> State:
    _, *docs = list(yaml.safe_load_all(CASE.read_text(encoding="utf-8")))
    docs[0]["waitForPodsReady"]["enable"] = wait
    return fold_files({"case.yaml": yaml.safe_dump_all(docs)})


def _job(state: State, name: str):
    return next(r for r in state.workloads.values() if r.obj.owner is not None and r.obj.owner.name == name)


def test_without_wait_for_pods_ready_two_half_started_gangs_deadlock() -> None:
    state = _seed_001(wait=False)
    run_until(state, 2 * 60 * MIN, 10_000, slots=6)
    for name in ("gang-a", "gang-b"):
        rec = _job(state, name)
        assert rec.admission is not None and not rec.finished, f"{name} holds its quota and never finishes"
    assert state.now == T0 + 120 * MIN


def test_with_wait_for_pods_ready_the_second_gang_backs_off_and_both_finish() -> None:
    state = _seed_001(wait=True)
    run_until(state, 2 * 60 * MIN, 10_000, slots=6)
    a, b = _job(state, "gang-a"), _job(state, "gang-b")
    assert a.finished and a.requeue_count == 0
    assert b.finished
    # gang-b: admitted at 0:00 once gang-a is ready, timed out at 0:02, back-off 60 s; again at
    # 0:03 -> 0:05, 120 s; again at 0:07 -> 0:09, 240 s; at 0:13 gang-a (done at 0:10) left room.
    assert b.requeue_count == 3
    assert b.past_execution_ms == 3 * 2 * MIN
    assert b.conditions["Finished"].last_transition_time == T0 + 23 * MIN


def test_without_until_time_stands_still() -> None:
    state = _seed_001(wait=True)
    result = run(state, None)
    assert result.converged and state.now == T0
    assert _job(state, "gang-b").admission is None, "blockAdmission: gang-a is not ready, no time passes"


@pytest.mark.parametrize(("annotations", "want"), [
    pytest.param((), 0, id="none: ready at once"),
    pytest.param((("kueuelog.io/sim-ready-after", "90s"),), 90_000, id="a duration"),
    pytest.param((("kueuelog.io/sim-ready-after", "never"),), None, id="never"),
    pytest.param((("kueuelog.io/sim-ready-after", "soon"),), 0, id="a bad value: at once, as a bad sim-duration"),
])
def test_sim_ready_after(annotations: tuple[tuple[str, str], ...], want: int | None) -> None:
    assert ready_after_ms(annotations) == want


def test_the_readmes_example_is_the_case() -> None:
    """docs/all-or-nothing.yaml (the README's example) holds the case's manifests, unchanged."""
    _, *docs = list(yaml.safe_load_all(CASE.read_text(encoding="utf-8")))
    example = Path(__file__).resolve().parents[2] / "docs" / "all-or-nothing.yaml"
    assert list(yaml.safe_load_all(example.read_text(encoding="utf-8"))) == docs
