"""``kueuelog log check``: a sound log passes, and each kind of damage is named with where it is."""

from __future__ import annotations

from pathlib import Path

from events.codec import encode
from events.envelope import Envelope, Topics
from events.messages import ClockTicked
from services.app.logcheck import check_log
from services.runtime.sqlite import SqliteLog, table_name

T = Topics()


def _tick(i: int) -> bytes:
    return encode(Envelope(id=f"tick-{i}", source="ticker", event=ClockTicked(time=1_000 * i)))


def _log(tmp_path: Path) -> SqliteLog:
    log = SqliteLog(tmp_path)
    log.transact({T.cluster_events: [("", _tick(i)) for i in range(3)]}, {("scheduler", T.cluster_events): 3})
    return log


def test_a_sound_log_has_no_problems(tmp_path: Path) -> None:
    report = check_log(_log(tmp_path), T)
    assert report.sound, report.problems
    assert f"topic {T.cluster_events}: 3 records, offsets 0-2" in report.lines


def test_undecodable_records_are_named_by_topic_and_offset(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(T.cluster_events, [("", b"\xff\xfe not json"), ("", b"[" * 5000 + b"]" * 5000)])
    log.append(T.decisions, [("", b'{"type": "admit"')])
    report = check_log(log, T)
    assert not report.sound
    assert any(p.startswith(f"{T.cluster_events} offset 3: ") for p in report.problems)
    assert any(p.startswith(f"{T.cluster_events} offset 4: ") for p in report.problems)
    assert any(p.startswith(f"{T.decisions} offset 0: ") for p in report.problems)


def test_a_gap_in_offsets_and_a_position_past_the_end_are_reported(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log._db.execute(f'DELETE FROM "t_{table_name(T.cluster_events)}" WHERE off = 1')
    log.commit("actuator", T.decisions, 7)
    report = check_log(log, T)
    assert any("offsets are not contiguous" in p for p in report.problems)
    assert any("consumer actuator" in p and "beyond the end" in p for p in report.problems)


def test_the_command_exits_0_when_sound_1_when_damaged_and_4_for_a_file_that_is_no_log(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from services.app.cli import main

    sound = tmp_path / "sound"
    _log(sound).close()
    assert main(["log", "check", str(sound)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("log check: sound")
    damaged = tmp_path / "damaged"
    log = _log(damaged)
    log.append(T.cluster_events, [("", b"{broken")])
    log.close()
    assert main(["log", "check", str(damaged)]) == 1
    out = capsys.readouterr().out
    assert f"PROBLEM {T.cluster_events} offset 3: " in out and "log check: 1 problem(s)" in out
    other = tmp_path / "other"
    other.mkdir()
    (other / "log.db").write_bytes(b"\0" * 10)
    assert main(["log", "check", str(other)]) == 4
