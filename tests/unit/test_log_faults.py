"""The embedded log under faults: files that are not logs, read-only copies, a full disk.

Read-only and disk-full cases need a read-only bind mount and a small tmpfs; both are
made here (the suite runs as root in CI). Where mounting is not allowed the test is
skipped with the reason printed, never silently passed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.log import LogError
from services.runtime.sqlite import DB_FILE, SqliteLog


def _refusal(directory: Path, *, create: bool = False) -> str:
    with pytest.raises(LogError) as info:
        SqliteLog(directory, create=create)
    assert not info.value.retriable
    return str(info.value)


@pytest.mark.parametrize("create", [False, True], ids=["opened for reading", "opened by a service"])
def test_a_file_that_is_not_a_database_is_refused_naming_it(tmp_path: Path, create: bool) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is a text file, not SQLite\n" * 200)
    message = _refusal(tmp_path, create=create)
    assert str(tmp_path / DB_FILE) in message
    assert "not a readable kueuelog log" in message and "not a database" in message


@pytest.mark.parametrize("create", [False, True], ids=["opened for reading", "opened by a service"])
def test_an_empty_file_is_not_a_log(tmp_path: Path, create: bool) -> None:
    (tmp_path / DB_FILE).write_bytes(b"")
    assert "an empty file is not a kueuelog log" in _refusal(tmp_path, create=create)


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    message = _refusal(tmp_path, create=True)
    assert "not a kueuelog log" in message and "customers" in message


def test_a_database_with_another_application_id_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.execute("PRAGMA application_id=42")
    db.execute("CREATE TABLE positions (x)")
    db.commit()
    db.close()
    assert "application_id 0x2a" in _refusal(tmp_path, create=True)


def test_an_empty_database_is_a_new_log_only_for_a_writer(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / DB_FILE).execute("PRAGMA user_version=1").connection.close()
    assert "no topics" in _refusal(tmp_path, create=False)
    log = SqliteLog(tmp_path, create=True)
    assert log.append("t", [("k", b"v")]) == [0]
    log.close()
    assert SqliteLog(tmp_path, create=False).read("t", 0)[0].value == b"v"


def test_a_log_from_before_the_application_id_still_opens(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    log.append("t", [("k", b"v")])
    log._db.execute("PRAGMA application_id=0")
    log.close()
    assert SqliteLog(tmp_path, create=False).end_offset("t") == 1


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = f"cannot mount here ({done.stderr.strip() or done.returncode}): this fault cannot be made"
        print(reason, file=sys.stderr)
        pytest.skip(reason)


@contextlib.contextmanager
def _read_only_view(directory: Path, view: Path) -> Iterator[Path]:
    view.mkdir()
    _mount("--bind", str(directory), str(view))
    try:
        _mount("-o", "remount,bind,ro", str(view))
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_a_read_only_copy_can_be_read_not_written(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log")
    log.transact({"events": [("a", b"1"), ("b", b"2")]}, {("g", "events"): 1})
    log.close()
    with _read_only_view(tmp_path / "log", tmp_path / "ro") as ro:
        archived = SqliteLog(ro, create=False)
        assert archived.read_only
        assert [r.value for r in archived.read("events", 0)] == [b"1", b"2"]
        assert archived.end_offset("events") == 2 and archived.position("g", "events") == 1
        assert archived.read("no-such-topic", 0) == [] and archived.end_offset("no-such-topic") == 0
        for write in (lambda: archived.append("events", [("c", b"3")]),
                      lambda: archived.exclusive("scheduler")):
            with pytest.raises(LogError, match="read-only") as info:
                write()
            assert not info.value.retriable
        archived.close()


def test_replay_reads_a_read_only_demo_log(tmp_path: Path) -> None:
    """An SRE inspects an archived copy: replay and explain work on a read-only file system."""
    cli = [sys.executable, "-m", "services.app.cli"]
    examples = sorted(str(p) for p in Path("examples").glob("*.yaml"))
    subprocess.run([*cli, "demo", *examples, "--dir", str(tmp_path / "log")], check=True, capture_output=True)
    with _read_only_view(tmp_path / "log", tmp_path / "ro") as ro:
        replay = subprocess.run([*cli, "replay", str(ro)], capture_output=True, text=True, check=False)
        assert replay.returncode == 0, replay.stderr
        assert "replayed" in replay.stdout and "Traceback" not in replay.stderr


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    _mount("-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount))
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_a_retriable_error_with_the_real_cause_and_loses_nothing(small_disk: Path) -> None:
    log = SqliteLog(small_disk / "log")
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 200_000)
    committed = 0
    with pytest.raises(LogError) as info:
        for i in range(1000):
            log.transact({"events": [(f"k{i}", b"x" * 4000)]}, {("g", "events"): i + 1})
            committed = i + 1
    assert info.value.retriable
    assert "full" in str(info.value) and "no transaction is active" not in str(info.value)
    # Nothing half-applied: the records and the position moved together.
    assert log.end_offset("events") == committed == log.position("g", "events")
    filler.unlink()  # space comes back: writing goes on where it stopped
    log.transact({"events": [("after", b"y")]}, {("g", "events"): committed + 1})
    assert log.end_offset("events") == committed + 1 == log.position("g", "events")
    log.close()
