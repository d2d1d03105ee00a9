"""A live scheduler's step commits in the background while the next one reads and decides
(``Scheduler.commit_in_background``, ``services.runtime.log.begin_transaction``): at most one
transaction in flight, committed in order, none begun after one that failed, and a snapshot
placed after the step before it has committed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from events.envelope import Topics
from services.runtime.log import BackgroundCommits, LogError, Outcome, begin_transaction
from services.runtime.sqlite import SqliteLog
from services.scheduler.runner import run_scheduler
from services.scheduler.service import Scheduler
from tests.unit.test_scheduler_service import _seed

T = Topics()


class DeferredLog(SqliteLog):
    """An embedded log whose background transactions commit only when their outcome is waited
    for (as if the broker answered then), recording the order of everything."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.events: list[str] = []
        self.begun = 0
        self.fail_next = False

    def transact_in_background(self, appends: Mapping[str, Sequence[tuple[str, bytes]]],
                               commits: Mapping[tuple[str, str], int]) -> Outcome:
        self.begun += 1
        n, fail = self.begun, self.fail_next
        self.fail_next = False
        self.events.append(f"begin {n}")

        def outcome() -> dict[str, list[int]]:
            self.events.append(f"wait {n}")
            if fail:
                raise LogError("kafka transaction: broker went away", retriable=True)
            return self.transact(appends, commits)

        return outcome

    def end_offset(self, topic: str) -> int:
        if topic == T.decisions:
            self.events.append("end of decisions")
        return super().end_offset(topic)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[DeferredLog]:
    lg = DeferredLog(tmp_path)
    yield lg
    lg.close()


def test_the_log_is_recognised_and_an_embedded_log_commits_at_once(log: DeferredLog, tmp_path: Path) -> None:
    assert isinstance(log, BackgroundCommits)
    plain = SqliteLog(tmp_path / "plain")
    assert not isinstance(plain, BackgroundCommits)
    outcome = begin_transaction(plain, {T.decisions: [("k", b"{}")]}, {})
    assert plain.end_offset(T.decisions) == 1  # committed before the outcome is asked for
    assert outcome() == {T.decisions: [0]}
    plain.close()


def test_each_step_waits_for_the_one_before_to_commit_before_beginning_its_own(log: DeferredLog) -> None:
    _seed(log)
    s = Scheduler(log, batch_size=10, commit_in_background=True)
    assert s.step()
    assert log.events == ["begin 1"]
    assert log.read(T.decisions, 0, 10) == []  # not committed yet: nothing of it is visible
    assert s.step()
    assert log.events == ["begin 1", "wait 1", "begin 2"]
    s.settle()
    assert log.events[-1] == "wait 2"
    while s.step():
        s.settle()
    assert list(Scheduler(log).replay(0, verify=True)) == []  # the log is what a plain run writes


def test_a_failed_commit_stops_the_next_step_before_it_begins_its_own(log: DeferredLog) -> None:
    _seed(log)
    s = Scheduler(log, batch_size=10, commit_in_background=True)
    log.fail_next = True
    assert s.step()
    with pytest.raises(LogError, match="broker went away"):
        s.step()
    assert log.events == ["begin 1", "wait 1"]  # no second transaction after the failed one
    assert log.read(T.decisions, 0, 10) == []
    s.settle()  # nothing left to wait for


def test_a_snapshot_is_placed_after_the_commit_of_the_step_before(log: DeferredLog) -> None:
    _seed(log)
    s = Scheduler(log, batch_size=5, snapshot_every=10, commit_in_background=True)
    for _ in range(4):
        s.step()
    s.settle()
    first = log.events.index("end of decisions")
    begun_before = [e for e in log.events[:first] if e.startswith("begin")]
    assert begun_before and f"wait {len(begun_before)}" in log.events[:first]
    assert log.read(T.snapshots, 0, 10)


async def test_the_runner_waits_for_the_last_commit_when_idle_and_before_it_stops(log: DeferredLog) -> None:
    _seed(log)
    stop = asyncio.Event()
    steps: list[int | None] = []
    task = asyncio.create_task(run_scheduler(log, stop, on_step=lambda _, events: steps.append(events),
                                             poll_seconds=0.01))
    deadline = asyncio.get_running_loop().time() + 30
    while log.begun == 0 or f"wait {log.begun}" not in log.events:  # idle: the last one waited for
        assert asyncio.get_running_loop().time() < deadline, "the runner never settled its last step"
        await asyncio.sleep(0.01)
    assert log.read(T.decisions, 0, 10)
    stop.set()
    await task
    assert all(f"wait {n}" in log.events for n in range(1, log.begun + 1))
    assert list(Scheduler(log).replay(0, verify=True)) == []
