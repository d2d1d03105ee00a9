"""A damaged record in the scheduler's own topics never stops recovery, replay, explain or tail.

Decisions are derived from the input, so the cycle a damaged decision record belonged to is
decided again at recovery (the same state and input give the same decisions); ``replay --verify``
reports it, and ``explain`` and ``tail`` say which record they skipped. Snapshots are only a
cache: a damaged one is passed over for an older one, or for the log itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import load
from events.messages import AdmitWorkload
from services.app.logview import explain, replay, tail
from services.core.snapshot import encode_state
from services.runtime.sqlite import SqliteLog, table_name
from services.scheduler.service import Scheduler
from tests.unit.test_scheduler_service import _append_objects

T = Topics()
EXAMPLES = sorted(str(p) for p in Path("examples").glob("*.yaml"))
GARBAGE = b'{"type": "admit", not json'


def _scheduled_log(tmp_path: Path, *, snapshot_every: int = 50_000) -> tuple[SqliteLog, Scheduler]:
    log = SqliteLog(tmp_path)
    _append_objects(log, [obj for _, obj in load({f: Path(f).read_text() for f in EXAMPLES})], "seed")
    live = Scheduler(log, batch_size=25, snapshot_every=snapshot_every)
    while live.step():
        pass
    return log, live


def _damage(log: SqliteLog, topic: str, offset: int) -> None:
    log._db.execute(f'UPDATE "t_{table_name(topic)}" SET value = ? WHERE off = ?', (GARBAGE, offset))


def _first_admission(log: SqliteLog) -> tuple[int, AdmitWorkload]:
    for rec in log.read(T.decisions, 0, 100_000):
        d = decode_decision(rec.value)
        if isinstance(d, AdmitWorkload):
            return rec.offset, d
    raise AssertionError("the examples admit workloads")


def test_recovery_decides_a_damaged_cycle_again_and_reaches_the_same_state(tmp_path: Path) -> None:
    log, live = _scheduled_log(tmp_path)
    offset, _ = _first_admission(log)
    _damage(log, T.decisions, offset)
    restarted = Scheduler(log)
    restarted.recover()
    assert restarted.stats.unreadable_decisions == 1
    assert encode_state(restarted.state) == encode_state(live.state)


def test_replay_verify_names_the_damaged_record_and_explain_and_tail_skip_it(tmp_path: Path) -> None:
    log, _ = _scheduled_log(tmp_path)
    offset, admitted = _first_admission(log)
    _damage(log, T.decisions, offset)
    report = replay(log, T, verify=True)
    assert report.unreadable_decisions == 1
    assert any(f"offset {offset}" in problem for _, problem in report.mismatches)
    assert f"decision record {offset}: unreadable" in "\n".join(
        explain(log, T, f"{admitted.namespace}/{admitted.name}"))
    lines: list[str] = []
    stop = asyncio.Event()

    def emit(line: str) -> None:
        lines.append(line)
        if "unreadable" in line:
            stop.set()

    async def follow() -> None:
        await asyncio.wait_for(tail(log, T, types=set(), queue=None, from_start=True, emit=emit, stop=stop), 60)

    asyncio.run(follow())
    assert any(line.startswith(f"decision record {offset}: unreadable") for line in lines)


def test_a_damaged_snapshot_is_passed_over_for_the_log(tmp_path: Path) -> None:
    log, live = _scheduled_log(tmp_path, snapshot_every=20)
    snapshots = log.end_offset(T.snapshots)
    assert snapshots >= 2
    _damage(log, T.snapshots, snapshots - 1)
    restarted = Scheduler(log)
    restarted.recover()
    assert restarted.stats.unreadable_snapshots == 1
    assert encode_state(restarted.state) == encode_state(live.state)
    assert restarted.next_input == live.next_input
