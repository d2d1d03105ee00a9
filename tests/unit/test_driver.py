"""The one loop that steps scheduler, actuator and simulated cluster: however it is driven (the
deterministic driver, the demo's stepping with a hook between rounds, ``run all`` in simulated
time), the same input gives the same log, byte for byte."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_DURATION_ANNOTATION as DURATION_ANNOTATION
from events.envelope import Topics
from events.simcluster import sim_cluster_topic
from services.actuator.loop import Actuator
from services.actuator.sim_port import SimClusterPort
from services.app.driver import Loop, NotIdle, Round, drive, drive_until_idle, run_all
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream, read_files
from services.simcluster.cluster import SimCluster, SimConfig
from tests.builders import a_job

T = Topics()
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
TOPICS = (T.cluster_events, T.decisions, sim_cluster_topic(T))


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[SqliteLog, SqliteLog]]:
    a, b = SqliteLog(tmp_path / "a", durable=False), SqliteLog(tmp_path / "b", durable=False)
    yield a, b
    a.close()
    b.close()


def arrivals(log: SqliteLog) -> ArrivalStream:
    """The example cluster and queues, and two teams' Jobs arriving over an hour: enough to queue,
    borrow and finish, in a fraction of the examples' time."""
    files = read_files([p for p in EXAMPLES if not p.name.startswith("20-")])
    jobs = [a_job(team, f"job-{i}", "default").request(cpu=str(4 + 4 * (i % 3)), memory="4Gi")
            .created(9 * 3600 + 120 * i).annotate(DURATION_ANNOTATION, f"{5 + i % 4}m")
            for i, team in enumerate(["team-a", "team-b"] * 10)]
    files["jobs.yaml"] = yaml.safe_dump_all([j.obj() for j in jobs], sort_keys=False)
    return ArrivalStream.from_files(log, files, topics=T)


def dump(log: SqliteLog) -> dict[str, list[bytes]]:
    return {t: [r.value for r in log.read(t, 0, 1_000_000)] for t in TOPICS}


def demo_style(log: SqliteLog, *, cut_short_steps: bool) -> tuple[Loop, list[Round], int]:
    """As the demo steps: services built by hand, a hook between rounds."""
    config = SimConfig()
    loop = Loop(Scheduler(log, topics=T, cut_short_steps=cut_short_steps),
                Actuator(log, SimClusterPort(T, config.cluster), topics=T),
                SimCluster.simulated(log, config, T), arrivals(log))
    between: list[Round] = []
    rounds = drive(loop, between=between.append)
    return loop, between, rounds


def test_demo_style_stepping_writes_what_drive_until_idle_writes(logs: tuple[SqliteLog, SqliteLog]) -> None:
    a, b = logs
    driven = drive_until_idle(a, arrivals=arrivals(a))
    loop, between, rounds = demo_style(b, cut_short_steps=False)
    assert sum(b'"admit"' in v for v in dump(a)[T.decisions]) >= 20, "every Job is admitted (one twice)"
    assert dump(b) == dump(a)
    assert rounds == driven.rounds
    assert loop.scheduler.state.cycles == driven.scheduler.state.cycles
    assert len(between) == rounds - 1, "the hook runs after every round but the last"
    assert Round.ADVANCED in between and Round.BUSY in between


async def test_run_all_in_simulated_time_is_the_same_loop(logs: tuple[SqliteLog, SqliteLog]) -> None:
    a, b = logs
    result = await asyncio.wait_for(run_all(a, arrivals=arrivals(a), topics=T), timeout=120)
    loop, _, _ = demo_style(b, cut_short_steps=True)  # run_all's scheduler cuts long steps short
    assert result.done
    assert dump(a) == dump(b)
    assert result.scheduler.state.cycles == loop.scheduler.state.cycles


def test_a_loop_that_does_not_finish_in_its_rounds_says_so(logs: tuple[SqliteLog, SqliteLog]) -> None:
    a, _ = logs
    loop = Loop.recovered(a, topics=T, config=SimConfig(), arrivals=arrivals(a))
    with pytest.raises(NotIdle, match="still busy after 3 rounds"):
        drive(loop, max_rounds=3)
