"""A real log whose ``transact`` fails on chosen calls: the process "dies" before that commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.runtime.log import LogError
from services.runtime.sqlite import SqliteLog


class CrashingLog:
    def __init__(self, inner: SqliteLog, crash_on: set[int]) -> None:
        self.inner, self.crash_on, self.calls = inner, crash_on, 0

    def transact(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                 commits: Mapping[tuple[str, str], int]) -> dict[str, list[int]]:
        self.calls += 1
        if self.calls in self.crash_on:
            raise LogError("simulated crash before commit", retriable=False)
        return self.inner.transact(appends, commits)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)
