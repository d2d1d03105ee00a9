"""The embedded log: every topic of a data directory in one SQLite database.

Write-ahead log, ``synchronous=FULL``: a committed transaction survives a crash
of the process or the machine. Any number of processes may read and append;
one writer per role is enforced with an exclusive file lock (its
:class:`FileLocks` leadership), which the operating system releases when the
holder dies.

What is refused when opened, with one line naming the file: a file that is not
an SQLite database, an empty (0-byte) file, an SQLite database that is not a
kueuelog log (its ``application_id`` is another program's, or it has tables but
not ours). A log on a read-only file system (an archived copy) opens read-only:
it can be replayed, explained and tailed; a write to it is a final error. A
write that fails for a reason that may pass (disk full, I/O error, a lock held
too long) is rolled back and raised as a retriable :class:`LogError` with
SQLite's own reason, so the service backs off and tries again.
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

from services.runtime.log import Leadership, LogError, Record, RecordWaiter, WriterLockHeld

DB_FILE = "log.db"
APPLICATION_ID = 0x6B75656C  # "kuel" in the database header: this file is a kueuelog log


_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _table(topic: str) -> str:
    return "t_" + table_name(topic)


def table_name(topic: str) -> str:
    """The name under which :meth:`SqliteLog.topics` lists ``topic``."""
    return _SAFE.sub("_", topic)


class FileLocks:
    """The embedded log's leadership: one exclusive file lock per role. A second holder is refused
    at once (:class:`WriterLockHeld`), and a lock once taken cannot be taken away (the operating
    system keeps it until the holder releases it or dies), so a writer never learns that it lost
    its role: ``holds`` is always true."""

    def __init__(self, log: SqliteLog) -> None:
        self._log = log

    async def acquire(self, role: str, stop: asyncio.Event | None = None) -> bool:
        self._log.exclusive(role)
        return True

    def holds(self, role: str) -> bool:
        return True

    def release(self, role: str) -> None:
        self._log.release(role)


class SqliteLog:
    """The embedded log: one SQLite database per data directory."""

    waiter: RecordWaiter | None = None  # no notifications: readers poll

    def __init__(self, directory: str | os.PathLike[str], *, create: bool = True, durable: bool = True) -> None:
        """``durable=False`` (``synchronous=OFF``) trades crash safety for speed: for scratch logs
        and benchmark fixtures only, never for a log whose decisions matter."""
        self.directory = Path(directory)
        path = self.directory / DB_FILE
        if create and not self.directory.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
        if create and not path.exists():
            self._create(path)
        if not path.exists() and not create:
            raise LogError(f"no embedded log at {self.directory} (expected {DB_FILE})", retriable=False)
        if path.exists() and path.stat().st_size == 0:
            raise LogError(f"{path}: an empty file is not a kueuelog log (was it truncated?)", retriable=False)
        self.read_only = path.exists() and not (os.access(self.directory, os.W_OK) and os.access(path, os.W_OK))
        self._known: set[str] = set()
        self._locks: dict[str, int] = {}
        self.leadership: Leadership = FileLocks(self)
        try:
            self._db = self._connect(path) if not self.read_only else self._connect_read_only(path)
            self._check_identity(path, must_exist=self.read_only or not create)
            if not self.read_only:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=OFF")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS positions (grp TEXT NOT NULL, topic TEXT NOT NULL, "
                    "next_offset INTEGER NOT NULL, PRIMARY KEY (grp, topic))"
                )
                self._db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        except sqlite3.DatabaseError as e:
            raise LogError(f"{path}: not a readable kueuelog log ({e})", retriable=False) from None

    @staticmethod
    def _create(path: Path) -> None:
        """Make a new, complete log under a temporary name and link it into place, so that no
        reader ever opens a half-made one (an empty file, or a database without its tables)."""
        staging = path.with_name(f".{path.name}.{os.getpid()}.new")
        staging.unlink(missing_ok=True)
        db = sqlite3.connect(staging, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE positions (grp TEXT NOT NULL, topic TEXT NOT NULL, "
                       "next_offset INTEGER NOT NULL, PRIMARY KEY (grp, topic))")
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        finally:
            db.close()  # the last connection checkpoints and removes the -wal file
        try:
            os.link(staging, path)
        except FileExistsError:
            pass  # another process made it first: theirs is as good
        finally:
            staging.unlink(missing_ok=True)

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout=30000")
        db.execute("PRAGMA mmap_size=1073741824")  # reads of a long log come straight from the page cache
        return db

    @staticmethod
    def _connect_read_only(path: Path) -> sqlite3.Connection:
        """A log on a read-only file system. SQLite reads a WAL database there when its -wal and
        -shm files exist; a cleanly closed log has neither, and all of it is in the main file, so
        it is read as immutable."""
        wal = path.with_name(path.name + "-wal")
        mode = "ro" if wal.exists() and wal.stat().st_size > 0 else "ro&immutable=1"
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True, timeout=30.0,
                             isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout=30000")
        return db

    def _check_identity(self, path: Path, *, must_exist: bool) -> None:
        """Refuse a database that is not a kueuelog log (raises sqlite3.DatabaseError for a file
        that is not a database at all). ``must_exist``: a new, empty database is refused too."""
        (app_id,) = self._db.execute("PRAGMA application_id").fetchone()
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id in (0, APPLICATION_ID) and "positions" in tables:
            return  # ours (0: written before the id existed)
        if app_id == 0 and not tables:
            if not must_exist:
                return  # a new log
            raise LogError(f"{path}: an SQLite database with no topics is not a kueuelog log", retriable=False)
        whose = f"application_id {app_id:#x}" if app_id else f"tables {', '.join(sorted(tables)[:5])}"
        raise LogError(f"{path}: an SQLite database, but not a kueuelog log ({whose})", retriable=False)

    # --- topics ----------------------------------------------------------------------------

    def _ensure(self, topic: str) -> str:
        table = _table(topic)
        if topic not in self._known:
            if self.read_only:
                self._refuse_write()
            self._db.execute(
                f'CREATE TABLE IF NOT EXISTS "{table}" '
                "(off INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL)"
            )
            self._known.add(topic)
        return table

    def _existing(self, topic: str) -> str | None:
        """The table of ``topic`` when it exists (reads never create one on a read-only log)."""
        if not self.read_only:
            return self._ensure(topic)
        table = _table(topic)
        if topic not in self._known:
            row = self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name = ?", (table,)).fetchone()
            if row is None:
                return None
            self._known.add(topic)
        return table

    def _refuse_write(self) -> None:
        raise LogError(f"the log at {self.directory} is read-only (a read-only file system); it can be "
                       f"replayed, explained and tailed, not written", retriable=False)

    def topics(self) -> list[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 't\\_%' ESCAPE '\\'")
        return sorted(r[0][2:] for r in rows)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            self._refuse_write()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise LogError(f"cannot start a write transaction: {e}", retriable=True) from e
        try:
            yield self._db
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback()
            # "database is locked", a full disk and I/O trouble may pass; a constraint violation will not.
            raise LogError(f"write to {self.directory / DB_FILE} failed: {e}",
                           retriable=isinstance(e, sqlite3.OperationalError)) from e
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        # SQLite rolls back by itself on some errors (SQLITE_FULL, SQLITE_IOERR): then there is
        # nothing left to roll back, and trying would hide the real cause behind "no transaction".
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

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
        table = self._existing(topic)
        if table is None:
            return []
        rows = self._db.execute(
            f'SELECT off, key, value FROM "{table}" WHERE off >= ? ORDER BY off LIMIT ?', (start, limit)
        ).fetchall()
        return [Record(topic, off, key, value) for off, key, value in rows]  # BLOBs come back as bytes

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]:
        """(offset, value) pairs only: the fast path for folding a long log."""
        table = self._existing(topic)
        if table is None:
            return []
        return self._db.execute(
            f'SELECT off, value FROM "{table}" WHERE off >= ? ORDER BY off LIMIT ?', (start, limit)
        ).fetchall()

    def end_offset(self, topic: str) -> int:
        table = self._existing(topic)
        if table is None:
            return 0
        (end,) = self._db.execute(f'SELECT COALESCE(MAX(off) + 1, 0) FROM "{table}"').fetchone()
        return int(end)

    def position(self, group: str, topic: str) -> int:
        row = self._db.execute("SELECT next_offset FROM positions WHERE grp = ? AND topic = ?",
                               (group, topic)).fetchone()
        return int(row[0]) if row else 0

    def positions(self) -> list[tuple[str, str, int]]:
        """Every committed consumer position: (group, topic, next offset), sorted."""
        rows = self._db.execute("SELECT grp, topic, next_offset FROM positions ORDER BY grp, topic").fetchall()
        return [(str(g), str(t), int(n)) for g, t, n in rows]

    def span(self, topic: str) -> tuple[int, int, int]:
        """(records, lowest offset, highest offset) of ``topic``; offsets are contiguous in a sound log."""
        table = self._existing(topic)
        if table is None:
            return 0, 0, -1
        count, low, high = self._db.execute(f'SELECT COUNT(*), MIN(off), MAX(off) FROM "{table}"').fetchone()
        return int(count), int(low if low is not None else 0), int(high if high is not None else -1)

    def integrity(self) -> list[str]:
        """SQLite's own check of the file (b-trees, pages, indices): the problems it finds, [] when sound."""
        try:
            rows = [str(r[0]) for r in self._db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            return [str(e)]
        return [] if rows == ["ok"] else rows

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
        if self.read_only:
            self._refuse_write()
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


