"""A publisher SIGKILLed at random points while it routes a cluster over three shards (queues
after their workloads, so that safe moves are cut short too), then restarted until it finishes:
every shard ends up with what it needs, nothing twice, and the shards decide what one unsharded
scheduler decides; each shard's log replays exactly."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import decode_envelope
from events.envelope import Topics
from events.messages import ObjectApplied, ObjectDeleted
from events.shardmap import ShardMap
from services.app.logview import replay
from services.runtime.shards import embedded_shards
from services.runtime.sqlite import SqliteLog
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_namespace, a_workload
from tests.shardrun import ShardOutcome, decisions_of, objects, run_sharded

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

T = Topics()
SHARDS = 3
KILLS = 8


def cluster() -> list[Builder]:
    """Workloads first, then namespaces, flavors, cohorts, ClusterQueues and LocalQueues, so
    the workloads wait on shard 0 and move when their queue comes."""
    workloads: list[Builder] = []
    queues: list[Builder] = [a_namespace("ns"), a_flavor("default"), a_flavor("spare")]
    for t in range(6):
        queues.append(a_cohort(f"root{t}"))
        for c in range(2):
            name = f"cq{t}-{c}"
            queues += [a_cluster_queue(name).flavor("default", cpu="4").cohort(f"root{t}")
                       .preemption(within="LowerPriority", reclaim="Any"),
                       a_local_queue("ns", f"lq-{name}", name)]
            for i in range(4):
                w = a_workload("ns", f"wl-{name}-{i}").queue(f"lq-{name}").request(cpu=str(1 + i % 3)) \
                    .priority(100 * (i % 2)).created(10 * i + t)
                w.body["metadata"]["annotations"] = {SIM_DURATION_ANNOTATION: f"{1 + i}m"}
                workloads.append(w)
    return workloads[:24] + queues + workloads[24:]


def _next(proc: subprocess.Popen[str], word: str) -> str:
    """The publisher's next line starting with ``word`` (its log lines, e.g. a repair, go by)."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith(word):
            return line.strip()
        print("publisher:", line.strip())
    raise AssertionError(f"the publisher ended before saying {word!r}")


def published(directory: Path) -> int:
    log = SqliteLog(directory)
    try:
        return sum(shard.end_offset(T.cluster_events) for shard in embedded_shards(log, SHARDS))
    finally:
        log.close()


def test_a_killed_publisher_loses_and_doubles_nothing(tmp_path: Path) -> None:
    builders = cluster()
    manifests = tmp_path / "m.yaml"
    manifests.write_text(yaml.safe_dump_all([b.obj() for b in builders], sort_keys=False))
    directory = tmp_path / "log"
    SqliteLog(directory).close()
    rng = random.Random(23)
    cmd = [sys.executable, "-m", "tests.shardpublish", str(directory), str(SHARDS), str(manifests)]
    kills, sizes = 0, []
    while True:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        appends = _next(proc, "ready").split()[1]
        if kills < KILLS and int(appends) > 1:
            # After a few appends (0-3), a random moment later: in the pause, or inside the
            # next append (between its writes to the shards).
            for _ in range(rng.randrange(min(int(appends) - 1, 4))):
                _next(proc, "appended")
            time.sleep(rng.uniform(0, 0.02))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            sizes.append(published(directory))
            continue
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        break
    assert kills >= 3 and len(set(sizes)) >= 3, f"the kills did not land at several points: {sizes}"

    log = SqliteLog(directory, create=False)
    shards = embedded_shards(log, SHARDS)
    live: Counter[str] = Counter()
    for shard in shards:
        for rec in shard.read(T.cluster_events, 0, 100_000):
            ev = decode_envelope(rec.value).event
            if isinstance(ev, ObjectApplied) and hasattr(ev.object, "namespace") and ev.object.namespace:
                live[f"{type(ev.object).__name__}/{ev.object.name}"] += 1
            elif isinstance(ev, ObjectDeleted):
                live[f"{ev.kind}/{ev.name}"] -= 1
    assert set(live.values()) == {1}, f"an object on no shard or on two: {live}"
    sharded = ShardOutcome()
    for shard in shards:
        from services.app.driver import drive_until_idle

        sharded.cycles.append(drive_until_idle(shard, topics=T).scheduler.state.cycles)
        sharded.per_shard.append(decisions_of(shard, sharded))
        assert replay(shard, T, verify=True).mismatches == []
    log.close()

    one = SqliteLog(tmp_path / "one", durable=False)
    unsharded = run_sharded([one], ShardMap(shards=1), objects(builders))
    one.close()
    assert sharded.decisions == unsharded.decisions
    assert sum(n > 0 for n in sharded.per_shard) >= 2
