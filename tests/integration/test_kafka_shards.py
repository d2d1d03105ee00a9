"""Two scheduler shards on a real Kafka broker: the watcher's routing puts each cohort tree on its
shard's partition, each shard's loop (its own transactional writer) decides only its trees, and
together they decide what one unsharded scheduler decides; replay verifies each shard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import decode_envelope
from events.envelope import Topics
from events.messages import ObjectApplied, TreeAdopted
from events.shardmap import ShardMap
from services.app.logview import replay
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.runtime.shards import RoutingLog, recorded_map
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import seed_all
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_namespace, a_workload
from tests.infra.kafka import LocalKafka
from tests.shardrun import objects, run_sharded

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MAP = ShardMap(shards=2, trees=(("blue", 1), ("red", 0), ("solo", 1)))


def cluster() -> list[Builder]:
    """Three trees: red (two ClusterQueues sharing a cohort) on shard 0; blue (a nested cohort) and
    solo (no cohort) on shard 1; more work than quota everywhere, with preemption."""
    out: list[Builder] = [a_namespace("ns"), a_flavor("default"), a_cohort("blue"), a_cohort("blue-a").parent("blue")]
    for cq, cohort in (("red-1", "red"), ("red-2", "red"), ("blue-1", "blue-a"), ("blue-2", "blue"), ("solo", "")):
        b = a_cluster_queue(cq).flavor("default", cpu="4").preemption(within="LowerPriority", reclaim="Any")
        out += [b.cohort(cohort) if cohort else b, a_local_queue("ns", f"lq-{cq}", cq)]
    for i in range(20):
        cq = ("red-1", "red-2", "blue-1", "blue-2", "solo")[i % 5]
        w = a_workload("ns", f"wl{i}").queue(f"lq-{cq}").request(cpu=str(1 + i % 3)).priority(100 * (i % 2)) \
            .created(10 * i)
        w.body["metadata"]["annotations"] = {SIM_DURATION_ANNOTATION: f"{1 + i % 4}m"}
        out.append(w)
    return out


@pytest.fixture
def settings(kafka_broker: LocalKafka) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers, session_timeout_ms=2000,
                         heartbeat_interval_ms=300, shards=2)


@pytest.fixture
def prefix(kafka_topic_prefix: str) -> str:
    return kafka_topic_prefix.rstrip("-")


@pytest.fixture
def shard_logs(settings: KafkaSettings, prefix: str) -> Iterator[tuple[list[KafkaLog], list[KafkaLog]]]:
    """Each shard's writer (role ``all``: scheduler, actuator and simulated cluster in one process),
    and each shard's publisher view (no role, as the watcher opens it)."""
    writers = [KafkaLog(settings, prefix=prefix, shard=s, role="all") for s in range(2)]
    publishers = [KafkaLog(settings, prefix=prefix, shard=s) for s in range(2)]
    yield writers, publishers
    for lg in writers + publishers:
        lg.close()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.app.cli", *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})}, check=False)


def _tail_until(*where: str, want: Callable[[list[str]], bool], seconds: float = 120) -> list[str]:
    """``kueuelog tail --from-start --type Admit --shard all``, read until ``want`` holds of its lines
    (a deadline poll: it follows forever), then stopped with SIGINT."""
    proc = subprocess.Popen([sys.executable, "-m", "services.app.cli", "tail", "--from-start", "--type", "Admit",
                             *where, "--shard", "all"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        while not want(lines):
            assert time.monotonic() < deadline, f"tail printed only {lines}"
            line = proc.stdout.readline()
            assert line, f"tail ended after {lines}"
            lines.append(line.rstrip("\n"))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    return lines


def test_two_shards_on_kafka_decide_what_one_scheduler_decides(
        shard_logs: tuple[list[KafkaLog], list[KafkaLog]], settings: KafkaSettings, prefix: str,
        tmp_path: Path) -> None:
    writers, publishers = shard_logs
    topics = Topics(prefix=prefix)
    sharded = run_sharded(writers, MAP, objects(cluster()), publishers=publishers, topics=topics)
    embedded = SqliteLog(tmp_path / "one", durable=False)
    try:
        unsharded = run_sharded([embedded], ShardMap(shards=1), objects(cluster()), topics=topics)
    finally:
        embedded.close()

    assert sharded.decisions == unsharded.decisions
    assert all(n > 0 for n in sharded.per_shard), f"both shards decided: {sharded.per_shard}"
    # Each shard's partition holds its own trees only (and every cluster-scoped object).
    for shard, log in enumerate(writers):
        names = {decode_envelope(r.value).event.object.name  # type: ignore[union-attr]
                 for r in log.read(topics.cluster_events, 0, 100_000)
                 if isinstance(decode_envelope(r.value).event, ObjectApplied)}
        queues = {n for n in names if n.startswith(("red", "blue", "solo"))}
        assert queues == ({"red-1", "red-2"} if shard == 0 else {"blue", "blue-a", "blue-1", "blue-2", "solo"})
        assert recorded_map(log, topics) == MAP
    for shard, log in enumerate(writers):
        report = replay(log, topics, verify=True)
        assert report.mismatches == [] and report.cycles == sharded.cycles[shard]

    # The command line, per shard and across them.
    where = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix", prefix]
    one = _cli("replay", "--verify", *where, "--shard", "1", env={"KUEUELOG_KAFKA_SHARDS": "2"})
    assert f"verify: all {sharded.cycles[1]} cycles reproduce" in one.stdout, one.stdout + one.stderr
    every = _cli("replay", "--verify", *where, "--shard", "all")
    assert every.returncode == 0, every.stdout + every.stderr
    assert f"shard 0: verify: all {sharded.cycles[0]} cycles reproduce" in every.stdout, every.stdout
    assert f"shard 1: verify: all {sharded.cycles[1]} cycles reproduce" in every.stdout, every.stdout
    every_workload = {f"ns/wl{i}:" for i in range(20)}
    lines = _tail_until(*where, want=lambda seen: every_workload <= {w for line in seen for w in line.split()})
    assert any(line.startswith("shard 0: ") for line in lines) and any(line.startswith("shard 1: ") for line in lines)
    assert next(line for line in lines if "ns/wl2:" in line).startswith("shard 1: ")
    explained = _cli("explain", "ns/wl2", *where, "--shard", "all")  # wl2 is blue-1's: shard 1
    assert explained.returncode == 0 and "shard 1" in explained.stdout and "blue-1" in explained.stdout, \
        explained.stdout + explained.stderr


def test_a_tree_is_handed_over_between_shards_on_kafka(
        shard_logs: tuple[list[KafkaLog], list[KafkaLog]], prefix: str) -> None:
    """The red tree moves from shard 0 to shard 1 on the broker: the marker on partition 0, the
    released state in shard 0's scheduler transaction (a topic of its own), the adoption on
    partition 1; shard 1 then holds red's ClusterQueues and workloads as shard 0 had them."""
    writers, publishers = shard_logs
    topics = Topics(prefix=prefix)
    seed_all(RoutingLog(publishers, MAP, topics=topics), objects(cluster()), topics=topics)

    def settle(log: KafkaLog) -> Scheduler:
        sched = Scheduler(log, topics)
        sched.recover()
        while sched.step():
            pass
        return sched

    before = [settle(log) for log in writers]
    red = {key: rec.admission for key, rec in before[0].state.workloads.items()}
    assert any(adm is not None for adm in red.values()) and "red-1" in before[0].state.cluster_queues
    moved = ShardMap(shards=2, trees=(("blue", 1), ("red", 1), ("solo", 1)))
    routing = RoutingLog(publishers, moved, topics=topics)
    old = settle(writers[0])
    assert "red-1" not in old.state.cluster_queues and not old.state.workloads
    assert routing.pump() == 1
    new = settle(writers[1])
    assert {"red-1", "red-2", "blue-1", "solo"} <= set(new.state.cluster_queues)
    assert {key: new.state.workloads[key].admission for key in red} == red
    assert isinstance(decode_envelope(writers[1].read(topics.cluster_events, 0, 100_000)[-1].value).event, TreeAdopted)
    for log in writers:
        assert replay(log, topics, verify=True).mismatches == []
