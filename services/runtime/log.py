"""The log port: what every backend (SQLite in ``sqlite.py``, Kafka in ``kafka.py``) provides.

A log is a set of named topics, each an append-only sequence of records with
monotonically increasing offsets from 0, plus committed consumer positions.
The one operation that makes exactly-once processing possible is
:meth:`Log.transact`: appends to several topics and consumer-position commits
in one atomic transaction, so a consumer's output and its input position are
never out of step.

What differs between backends is expressed as types every backend provides, chosen
when it is built, so no caller asks a log what it is: its :class:`Leadership` (the
single writer of a role: the embedded log's file lock, Kafka's election) and its
:class:`RecordWaiter`, or None (a long-poll fetch on Kafka; the embedded log has
no notifications).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import asyncio


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    offset: int
    key: str
    value: bytes


class LogError(RuntimeError):
    """A log operation failed; ``retriable`` says whether trying again may help."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class Refused(LogError):
    """This instance may not write its role: another holds it, took it over, or fenced this one."""


class WriterLockHeld(Refused):
    def __init__(self, name: str, path: Path) -> None:
        super().__init__(f"another process holds the {name} lock ({path}); only one {name} may write",
                         retriable=True)


class LeadershipLost(Refused):
    """Another instance leads the role now, or this one never became its leader: it must stop
    writing (the process exits, and a supervisor restarts it as a standby)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class Leadership(Protocol):
    """The single writer of each role (``scheduler``, ``actuator``, ...) of one log."""

    async def acquire(self, role: str, stop: asyncio.Event | None = None) -> bool:
        """Become the writer of ``role``: True once leading, False if ``stop`` was set first. A
        backend whose roles are locks refuses a second holder at once (WriterLockHeld); one with
        an election waits here as a standby."""
        ...

    def holds(self, role: str) -> bool:
        """Not known to have lost ``role``."""
        ...

    def release(self, role: str) -> None: ...


class RecordWaiter(Protocol):
    """Readers that can wait for new records without polling."""

    async def wait_for_records(self, topic: str, start: int, timeout: float) -> bool:
        """True once ``topic`` has a record at or after ``start``; False after ``timeout`` seconds."""
        ...


class Log(Protocol):
    @property
    def leadership(self) -> Leadership: ...

    @property
    def waiter(self) -> RecordWaiter | None: ...

    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]: ...

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]: ...

    def end_offset(self, topic: str) -> int: ...

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]: ...

    def position(self, group: str, topic: str) -> int: ...

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]: ...

    def close(self) -> None: ...


Outcome = Callable[[], dict[str, list[int]]]
"""Waits for a transaction begun with :func:`begin_transaction`: its offsets, or the LogError
:meth:`Log.transact` would have raised."""


@runtime_checkable
class BackgroundCommits(Protocol):
    """A log whose transactions can run while its caller goes on (Kafka: on the client's I/O
    thread, while the caller reads and decides the next batch)."""

    def transact_in_background(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                               commits: Mapping[tuple[str, str], int]) -> Outcome: ...


def begin_transaction(log: Log, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                      commits: Mapping[tuple[str, str], int]) -> Outcome:
    """Begin ``log.transact(appends, commits)``; the outcome must be waited for before the next
    transaction begins, so that none commits after one that failed. A log that cannot commit in
    the background commits here, and the outcome is already known."""
    if isinstance(log, BackgroundCommits):
        return log.transact_in_background(appends, commits)
    done = log.transact(appends, commits)
    return lambda: done


def read_backwards(log: Log, topic: str, before: int, *, chunk: int = 64) -> Iterator[Record]:
    """Records of ``topic`` below offset ``before``, newest first.

    Offsets need not be contiguous (a Kafka topic written in transactions has a control
    record after each commit, and a compacted topic has holes), so this reads windows
    backwards instead of stepping one offset at a time."""
    hi = before
    while hi > 0:
        lo = max(0, hi - chunk)
        window = [r for r in log.read(topic, lo, hi - lo) if r.offset < hi]
        yield from reversed(window)
        hi = lo
        chunk = min(chunk * 2, 4096)


def values_of(log: Log, topic: str, start: int = 0, *, chunk: int = 5000) -> Iterator[bytes]:
    """The value of every record of ``topic`` from offset ``start``, oldest first, read ``chunk`` at
    a time (offsets may have gaps: each read goes on after the last record the previous one gave)."""
    offset = start
    while batch := log.read(topic, offset, chunk):
        yield from (r.value for r in batch)
        offset = batch[-1].offset + 1


def caught_up(log: Log, group: str, topic: str) -> bool:
    """Has ``group`` committed the end of ``topic``?"""
    return at_end(log, topic, log.position(group, topic))


def at_end(log: Log, topic: str, position: int) -> bool:
    """Is ``position`` the end of ``topic``? (Past the end offset, or with only control records
    left between it and the end.)"""
    return position >= log.end_offset(topic) or not log.read(topic, position, 1)


