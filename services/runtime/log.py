"""The log port: what every backend (SQLite in ``sqlite.py``, Kafka in ``kafka.py``) provides.

A log is a set of named topics, each an append-only sequence of records with
monotonically increasing offsets from 0, plus committed consumer positions.
The one operation that makes exactly-once processing possible is
:meth:`Log.transact`: appends to several topics and consumer-position commits
in one atomic transaction, so a consumer's output and its input position are
never out of step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


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


class WriterLockHeld(LogError):
    def __init__(self, name: str, path: Path) -> None:
        super().__init__(f"another process holds the {name} lock ({path}); only one {name} may write",
                         retriable=True)


class Log(Protocol):
    def append(self, topic: str, records: Sequence[tuple[str, bytes]]) -> list[int]: ...

    def read(self, topic: str, start: int, limit: int = 1000) -> list[Record]: ...

    def end_offset(self, topic: str) -> int: ...

    def read_values(self, topic: str, start: int, limit: int = 1000) -> list[tuple[int, bytes]]: ...

    def position(self, group: str, topic: str) -> int: ...

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]: ...

    def close(self) -> None: ...


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


def caught_up(log: Log, group: str, topic: str) -> bool:
    """Has ``group`` committed the end of ``topic``?"""
    return at_end(log, topic, log.position(group, topic))


def at_end(log: Log, topic: str, position: int) -> bool:
    """Is ``position`` the end of ``topic``? (Past the end offset, or with only control records
    left between it and the end.)"""
    return position >= log.end_offset(topic) or not log.read(topic, position, 1)


