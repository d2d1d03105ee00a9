"""Golden logs: committed runs of the whole loop, replayed on every test run.

Every recorded decision must be re-derived byte for byte from the recorded
input; a change of behaviour shows up here first. Regenerate with
``python -m tests.golden.regenerate`` only when the change is intended.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.envelope import Topics
from services.app.logview import replay
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _load(path: Path, directory: Path) -> SqliteLog:
    topics = Topics()
    names = {"cluster-events": topics.cluster_events, "decisions": topics.decisions}
    records: dict[str, list[tuple[str, bytes]]] = {name: [] for name in names.values()}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        value = json.dumps(row["value"], separators=(",", ":"), ensure_ascii=False).encode()
        records[names[row["topic"]]].append((row["key"], value))
    log = SqliteLog(directory)
    for topic, recs in records.items():
        log.append(topic, recs)
    return log


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.jsonl")), ids=lambda p: p.stem)
def test_golden_log_replays_byte_for_byte(path: Path, tmp_path: Path) -> None:
    log = _load(path, tmp_path)
    report = replay(log, Topics(), verify=True)
    assert report.cycles > 10
    assert report.mismatches == []
    state = report.scheduler.state if report.scheduler else None
    assert state is not None
    assert state.workloads and all(r.finished for r in state.workloads.values()), "every workload ran to the end"
    log.close()


def test_golden_logs_exist_and_cover_preemption() -> None:
    text = (GOLDEN / "preemption-and-fair-sharing.jsonl").read_text(encoding="utf-8")
    assert '"type":"evict"' in text
    assert "InCohortFairSharing" in text or "InClusterQueue" in text


def test_a_changed_decision_in_a_golden_log_is_caught(tmp_path: Path) -> None:
    path = GOLDEN / "examples-morning.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if '"type":"admit"' in line and '"on-demand"' in line:
            lines[i] = line.replace('"on-demand"', '"spot"', 1)
            break
    else:
        raise AssertionError("no admission on on-demand in the golden log")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("\n".join(lines) + "\n", encoding="utf-8")
    log = _load(tampered, tmp_path / "log")
    assert list(Scheduler(log).replay(0, verify=True))
    log.close()
