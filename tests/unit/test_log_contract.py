"""The log port's contract on the embedded SQLite backend (the same suite runs against Kafka in
tests/integration/test_kafka_log.py), and what only the embedded backend promises."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.runtime.log import LogError, WriterLockHeld
from services.runtime.sqlite import SqliteLog
from tests.log_contract import LogContract


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    lg = SqliteLog(tmp_path / "log")
    yield lg
    lg.close()


@pytest.fixture
def topic() -> Callable[[str], str]:
    return lambda name: name


class TestSqliteLogContract(LogContract):
    pass


def test_embedded_offsets_are_contiguous(log: SqliteLog) -> None:
    assert log.append("a", [("k1", b"1"), ("k2", b"2")]) == [0, 1]
    assert log.transact({"a": [("k3", b"3")]}, {}) == {"a": [2]}
    assert log.end_offset("a") == 3


def test_the_single_writer_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    first = SqliteLog(tmp_path)
    first.exclusive("scheduler")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path.cwd())!r})
        from services.runtime.log import WriterLockHeld
        from services.runtime.sqlite import SqliteLog
        try:
            SqliteLog({str(tmp_path)!r}).exclusive("scheduler")
        except WriterLockHeld:
            sys.exit(3)
        sys.exit(0)
    """)
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 3
    first.release("scheduler")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    first.close()


def test_the_lock_dies_with_its_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path.cwd())!r})
        from services.runtime.sqlite import SqliteLog
        SqliteLog({str(tmp_path)!r}).exclusive("scheduler")
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    log = SqliteLog(tmp_path)
    with pytest.raises(WriterLockHeld):
        log.exclusive("scheduler")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    log.exclusive("scheduler")  # the OS released it
    log.close()


def _append_forever(directory: str, ready: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    log = SqliteLog(directory)
    ready.set()
    i = 0
    while True:
        # Large transactions, so that a kill lands inside one most of the time.
        log.transact({"t": [(f"k{i}", os.urandom(2048)) for _ in range(500)]}, {("w", "t"): i})
        i += 1


@pytest.mark.parametrize("round_", range(3))
def test_a_writer_killed_mid_transaction_leaves_the_log_intact(tmp_path: Path, round_: int) -> None:
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_append_forever, args=(str(tmp_path), ready))
    proc.start()
    assert ready.wait(30)
    log = SqliteLog(tmp_path)
    deadline_rows = 500 * (2 + round_)
    while log.end_offset("t") < deadline_rows:
        pass  # busy-wait on the log itself: the writer makes progress or the test times out
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    end = log.end_offset("t")
    records = log.read("t", 0, end + 1)
    assert end % 500 == 0, "a transaction was half applied"
    assert [r.offset for r in records] == list(range(end))
    assert log.position("w", "t") == end // 500 - 1
    log.append("t", [("after", b"ok")])  # and it is still writable
    log.close()


def test_opening_a_missing_log_without_create_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LogError, match="no embedded log"):
        SqliteLog(tmp_path / "nowhere", create=False)
