"""The embedded log: every topic of a data directory in one SQLite database.

Write-ahead log, ``synchronous=FULL``: a committed transaction survives a crash
of the process or the machine. Any number of processes may read and append;
one writer per role is enforced with an exclusive file lock
(:meth:`SqliteLog.exclusive`), which the operating system releases when the
holder dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path

from services.runtime.log import LogError, Record, WriterLockHeld

DB_FILE = "log.db"


_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _table(topic: str) -> str:
    return "t_" + _SAFE.sub("_", topic)


class SqliteLog:
    """The embedded log: one SQLite database per data directory."""

    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True, durable: bool = True) -> None:
        """``durable=False`` (``synchronous=OFF``) trades crash safety for speed: for scratch logs
        and benchmark fixtures only, never for a log whose decisions matter."""
        self.directory = Path(directory)
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        elif not (self.directory / DB_FILE).exists():
            raise LogError(f"no embedded log at {self.directory} (expected {DB_FILE})", retriable=False)
        self._db = sqlite3.connect(self.directory / DB_FILE, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=OFF")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA mmap_size=1073741824")  # reads of a long log come straight from the page cache
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS positions (grp TEXT NOT NULL, topic TEXT NOT NULL, "
            "next_offset INTEGER NOT NULL, PRIMARY KEY (grp, topic))"
        )
        self._known: set[str] = set()
        self._locks: dict[str, int] = {}

    # --- topics ----------------------------------------------------------------------------

    def _ensure(self, topic: str) -> str:
        table = _table(topic)
        if topic not in self._known:
            self._db.execute(
                f'CREATE TABLE IF NOT EXISTS "{table}" '
                "(off INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL)"
            )
            self._known.add(topic)
        return table

    def topics(self) -> list[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 't\\_%' ESCAPE '\\'")
        return sorted(r[0][2:] for r in rows)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise LogError(f"cannot start a write transaction: {e}", retriable=True) from e
        try:
            yield self._db
        except sqlite3.Error as e:
            self._db.execute("ROLLBACK")
            # "database is locked" and I/O trouble may pass; a constraint violation will not.
            raise LogError(f"write failed: {e}", retriable=isinstance(e, sqlite3.OperationalError)) from e
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            try:
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as e:
                self._db.execute("ROLLBACK")
                raise LogError(f"commit failed: {e}", retriable=True) from e

    def _append_in(self, db: sqlite3.Connection, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]:
        table = self._ensure(topic)
        (end,) = db.execute(f'SELECT COALESCE(MAX(off) + 1, 0) FROM "{table}"').fetchone()
        offsets = list(range(end, end + len(records)))
        db.executemany(f'INSERT INTO "{table}" (off, key, value) VALUES (?, ?, ?)',
                       [(off, key, value) for off, (key, value) in zip(offsets, records, strict=True)])
        return offsets

    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]:
        """Append records atomically; returns their offsets once they are durable."""
        self._ensure(topic)
        with self._write() as db:
            return self._append_in(db, topic, records)

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        """Appends and consumer-position commits, all or nothing."""
        for topic in appends:
            self._ensure(topic)
        with self._write() as db:
            out = {topic: self._append_in(db, topic, recs) for topic, recs in appends.items()}
            db.executemany(
                "INSERT INTO positions (grp, topic, next_offset) VALUES (?, ?, ?) "
                "ON CONFLICT (grp, topic) DO UPDATE SET next_offset = excluded.next_offset",
                [(grp, topic, off) for (grp, topic), off in commits.items()],
            )
        return out

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]:
        table = self._ensure(topic)
        rows = self._db.execute(
            f'SELECT off, key, value FROM "{table}" WHERE off >= ? ORDER BY off LIMIT ?', (start, limit)
        ).fetchall()
        return [Record(topic, off, key, value) for off, key, value in rows]  # BLOBs come back as bytes

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        """(offset, value) pairs only: the fast path for folding a long log."""
        table = self._ensure(topic)
        return self._db.execute(
            f'SELECT off, value FROM "{table}" WHERE off >= ? ORDER BY off LIMIT ?', (start, limit)
        ).fetchall()

    def end_offset(self, topic: str) -> int:
        table = self._ensure(topic)
        (end,) = self._db.execute(f'SELECT COALESCE(MAX(off) + 1, 0) FROM "{table}"').fetchone()
        return int(end)

    def position(self, group: str, topic: str) -> int:
        row = self._db.execute("SELECT next_offset FROM positions WHERE grp = ? AND topic = ?",
                               (group, topic)).fetchone()
        return int(row[0]) if row else 0

    def commit(self, group: str, topic: str, next_offset: int) -> None:
        self.transact({}, {(group, topic): next_offset})

    async def follow(self, topic: str, start: int, *, limit: int = 1000,
                     poll_seconds: float = 0.02) -> AsyncIterator[list[Record]]:
        """Batches of new records from ``start`` on, forever (polling; SQLite has no notifications)."""
        offset = start
        while True:
            batch = self.read(topic, offset, limit)
            if batch:
                offset = batch[-1].offset + 1
                yield batch
            else:
                await asyncio.sleep(poll_seconds)

    # --- single writer ---------------------------------------------------------------------

    def exclusive(self, name: str) -> None:
        """Take the exclusive lock ``name`` for this process (raises WriterLockHeld if taken)."""
        if name in self._locks:
            return
        path = self.directory / f"{name}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WriterLockHeld(name, path) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._locks[name] = fd

    def release(self, name: str) -> None:
        fd = self._locks.pop(name, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def close(self) -> None:
        for name in list(self._locks):
            self.release(name)
        self._db.close()


