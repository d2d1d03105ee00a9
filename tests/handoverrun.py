"""The participants of a tree hand-over as processes to be SIGKILLed, over one embedded log
(``tests/integration/test_handover_sigkill.py``):

``python -m tests.handoverrun publish LOG`` is the watcher: built with the new shard map (so it
starts the hand-overs), it publishes the second phase's events one append at a time (finishes and
new workloads through the router; finishes that a tree's old shard's own services report, straight
onto that shard), skipping what an earlier run already published, then pumps the hand-overs until
every tree is adopted and every report forwarded, and says ``done``.

``python -m tests.handoverrun schedule LOG SHARD`` is shard SHARD's scheduler: recovered, then
stepping until killed.

The cluster, the two maps and the phases are here too, so the test and the processes agree."""

from __future__ import annotations

import sys
import time

from events.codec import decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import WorkloadFinished
from events.shardmap import ShardMap
from services.runtime.log import Log
from services.runtime.shards import RoutingLog, embedded_shards, held_topic
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_namespace, a_workload

T = Topics()
SHARDS = 3
TREES = 6
PER_TREE = 6  # workloads per tree in the first phase; 4 fit, 2 wait
BEFORE = ShardMap(shards=SHARDS, trees=tuple((f"t{t}", t % SHARDS) for t in range(TREES)))
AFTER = ShardMap(shards=SHARDS, trees=tuple((f"t{t}", (t + 1) % SHARDS) for t in range(TREES)))
PAUSE_S = 0.01


def first_phase() -> list[Builder]:
    out: list[Builder] = [a_namespace("ns"), a_flavor("default")]
    for t in range(TREES):
        out += [a_cohort(f"t{t}"), a_cluster_queue(f"cq{t}").flavor("default", cpu="4").cohort(f"t{t}"),
                a_local_queue("ns", f"lq{t}", f"cq{t}")]
        out += [a_workload("ns", f"w{t}-{i}").queue(f"lq{t}").request(cpu="1").created(10 * i + t)
                for i in range(PER_TREE)]
    return out


def _finish(t: int, i: int, source: str) -> Envelope:
    return Envelope(id=f"phase2-finish-{t}-{i}", source=source,
                    event=WorkloadFinished(time=1_000_000 + 10 * i + t, namespace="ns", name=f"w{t}-{i}"))


def second_phase() -> list[tuple[int | None, Envelope]]:
    """(shard to append to directly, or None: through the router; the envelope), in order: per
    tree, three of its admitted workloads finish (one reported by its old shard's own services)
    and one new workload comes; after that, everything fits."""
    from services.simcluster.arrivals import envelope
    from tests.shardrun import objects

    out: list[tuple[int | None, Envelope]] = []
    for t in range(TREES):
        old = BEFORE.shard_of(f"t{t}")
        out += [(None, _finish(t, 0, "watcher")), (old, _finish(t, 1, "simcluster")), (None, _finish(t, 2, "watcher"))]
        [(doc, obj)] = objects([a_workload("ns", f"n{t}").queue(f"lq{t}").request(cpu="1").created(2000 + t)])
        out.append((None, envelope(doc, obj, time=2_000_000 + t, cluster="sim")))
    return out


def published(shards: list[Log]) -> set[str]:
    """Envelope ids already on any shard's cluster-events or held for a hand-over."""
    done: set[str] = set()
    for log in shards:
        for topic in (T.cluster_events, held_topic(T)):
            offset = 0
            while batch := log.read_values(topic, offset, 5000):
                done.update(decode_envelope(value).id for _, value in batch)
                offset = batch[-1][0] + 1
    return done


def publish(directory: str) -> int:
    log = SqliteLog(directory, durable=True, create=False)
    shards = embedded_shards(log, SHARDS)
    router = RoutingLog(shards, AFTER, topics=T)
    done = published(shards)
    todo = [(shard, env) for shard, env in second_phase() if env.id not in done]
    print(f"ready {len(todo)}", flush=True)
    for shard, env in todo:
        target: Log | RoutingLog = router if shard is None else shards[shard]
        target.append(T.cluster_events, [(event_key(env), encode(env))])
        print("appended", flush=True)
        time.sleep(PAUSE_S)
    while router.router.in_transit() or router.pump():
        router.pump()
        time.sleep(PAUSE_S)
    print("done", flush=True)
    log.close()
    return 0


def schedule(directory: str, shard: int) -> int:
    log = SqliteLog(directory, durable=True, create=False)
    sched = Scheduler(embedded_shards(log, SHARDS)[shard], T)
    sched.recover()
    print("ready", flush=True)
    while True:
        if not sched.step():
            time.sleep(PAUSE_S)


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(publish(args[1]) if args[0] == "publish" else schedule(args[1], int(args[2])))
