"""Scheduler shards: the same work decided by 1, 2 and 4 shards on the local Kafka broker.

The scenario is Kueue's large-scale shape, scaled down to fit a shared 2-core machine: COHORTS
cohorts x QUEUES ClusterQueues (cpu nominal 20, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority), per ClusterQueue 35 small (1 cpu, 150 ms, priority 50),
11 medium (5 cpu, 350 ms, 100) and 4 large (20 cpu, 700 ms, 200) workloads, all submitted at
the start (simulated time: the figures are CPU and wall time of deciding, not of waiting).

For each shard count: a fresh topic prefix with that many partitions; the objects are published
through the router (``services.runtime.shards.RoutingLog``, as the watcher does); then one
process per shard runs that shard's scheduler, actuator and simulated cluster
(``drive_until_idle`` on ``KafkaLog(shard=N, role="all")``, its own transactional writer) until
idle. Reported: wall time until every shard is done, and per shard its process CPU, cycles and
decisions. The decisions of every run are compared per workload with the 1-shard run.

``--embedded`` runs the same over the embedded log instead (one SQLite file, shard N its topics
``….shard-N``, each shard's process its own writer): for sizes the shared broker is too slow for.

``--realtime`` runs instead the large-scale scenario at its real pace, as ``python -m bench kafka
--only large-scale`` does (``bench.kafka.measure_baseline``, mode ``procs``; default full size,
10 cohorts x 100 ClusterQueues, 50,000 workloads): topics with a partition per shard, the
configuration and the arrivals (on the wall clock) published through the router with the trees
dealt evenly (:func:`balanced`), and per shard ``kueuelog run scheduler --shard N``, ``run
actuator --shard N`` and ``run simcluster --shard N`` as processes. Reported per run: what the
Kafka bench reports (wall, time to admission per class, usage), and per shard its scheduler's
CPU and peak RSS, cycles and decisions, with its admissions per workload compared with the
1-shard run's.

``python -m bench.shards [--cohorts C] [--queues Q] [--shards 1,2,4] [--embedded | --realtime]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events import objects as o
from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ObjectApplied
from events.shardmap import ShardMap

if TYPE_CHECKING:
    from bench.kafka import BaselineResult, ShardFigures
    from tests.infra.kafka import LocalKafka

CLASSES = (("small", 35, 1000, 150, 50), ("medium", 11, 5000, 350, 100), ("large", 4, 20000, 700, 200))


def scenario(cohorts: int, queues: int) -> list[o.AnyObject]:
    policy = o.PreemptionPolicy(within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY,
                                reclaim_within_cohort=o.ReclaimWithinCohort.ANY)
    objs: list[o.AnyObject] = [o.ResourceFlavor(name="default")]
    workloads: list[o.Workload] = []
    for c in range(cohorts):
        for q in range(queues):
            cq, ns = f"cq-{c}-{q}", f"ns-{c}-{q}"
            objs.append(o.ClusterQueue(
                name=cq, cohort=f"cohort-{c}", namespace_selector=o.LabelSelector(), preemption=policy,
                resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                    o.FlavorQuotas(name="default", resources=(
                        ("cpu", o.Quota(nominal=20_000, borrowing_limit=100_000)),)),)),)))
            objs.append(o.LocalQueue(namespace=ns, name="lq", cluster_queue=cq))
            n = 0
            for name, count, cpu, run_ms, prio in CLASSES:
                for i in range(count):
                    workloads.append(o.Workload(
                        namespace=ns, name=f"{name}-{i}", uid=f"{ns}-{name}-{i}", queue_name="lq",
                        pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", cpu),)),),
                        creation_time=n, priority=prio, annotations=((SIM_DURATION_ANNOTATION, f"{run_ms}ms"),)))
                    n += 1
    workloads.sort(key=lambda w: (w.creation_time or 0, w.namespace, w.name))
    return objs + workloads


def balanced(shards: int, cohorts: int) -> ShardMap:
    """Cohorts dealt round robin: equal trees, so equal shares of the work (how a user sizes shards
    when the trees are alike; the hash alone may put two of a few trees on one shard)."""
    return ShardMap(shards=shards, trees=tuple((f"cohort-{c}", c % shards) for c in range(cohorts)))


EMBEDDED = "embedded:"  # a "bootstrap" naming a directory: the embedded log there


def open_shard(bootstrap: str, prefix: str, shards: int, shard: int) -> Any:
    """Shard ``shard``'s log: a KafkaLog partition, or with ``embedded:DIR`` the embedded log's view."""
    if bootstrap.startswith(EMBEDDED):
        from services.runtime.shards import ShardView
        from services.runtime.sqlite import SqliteLog

        log = SqliteLog(bootstrap[len(EMBEDDED):], durable=False)
        return log if shard == 0 else ShardView(log, shard, owns=True)
    from services.runtime.kafka import KafkaLog, KafkaSettings

    return KafkaLog(KafkaSettings(bootstrap_servers=bootstrap, shards=shards), prefix=prefix, shard=shard,
                    role="all")


def publish(bootstrap: str, prefix: str, shard_map: ShardMap, objs: Sequence[o.AnyObject]) -> None:
    from services.runtime.shards import RoutingLog

    if bootstrap.startswith(EMBEDDED):
        from services.runtime.shards import embedded_shards
        from services.runtime.sqlite import SqliteLog

        logs = embedded_shards(SqliteLog(bootstrap[len(EMBEDDED):], durable=False), shard_map.shards)
    else:
        from services.runtime.kafka import KafkaLog, KafkaSettings

        settings = KafkaSettings(bootstrap_servers=bootstrap, shards=shard_map.shards)
        logs = [KafkaLog(settings, prefix=prefix, shard=s) for s in range(shard_map.shards)]
    router = RoutingLog(logs, shard_map, topics=Topics(prefix=prefix))
    try:
        envs = [Envelope(id=f"bench:{i}", source="bench", cluster="sim",
                         event=ObjectApplied(time=getattr(obj, "creation_time", None) or 0, object=obj))
                for i, obj in enumerate(objs)]
        for i in range(0, len(envs), 2000):
            router.append(router.topics.cluster_events, [(event_key(e), encode(e)) for e in envs[i:i + 2000]])
    finally:
        router.close()


def worker(bootstrap: str, prefix: str, shards: int, shard: int) -> dict[str, Any]:
    """One shard's loop until idle, in this process; what it did."""
    from events.codec import decode_decision
    from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload
    from services.app.driver import drive_until_idle

    topics = Topics(prefix=prefix)
    log = open_shard(bootstrap, prefix, shards, shard)
    try:
        t0, c0 = time.monotonic(), time.process_time()
        result = drive_until_idle(log, topics=topics)
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        admitted: list[str] = []
        decisions = evictions = 0
        for rec in log.read(topics.decisions, 0, 10_000_000):
            d = decode_decision(rec.value)
            if isinstance(d, CycleCompleted):
                continue
            decisions += 1
            evictions += isinstance(d, EvictWorkload)
            if isinstance(d, AdmitWorkload):
                admitted.append(f"{d.namespace}/{d.name}")
    finally:
        log.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return {"shard": shard, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "cycles": result.scheduler.state.cycles,
            "decisions": decisions, "admissions": len(admitted), "evictions": evictions, "peak_rss_mb": rss,
            "admitted": sorted(set(admitted))}


def run(bootstrap: str, shards: int, cohorts: int, queues: int) -> dict[str, Any]:
    prefix = f"bench-shards-{shards}-{time.monotonic_ns()}"
    if bootstrap.startswith(EMBEDDED):
        bootstrap = f"{bootstrap}/{prefix}"  # a fresh log per shard count
    objs = scenario(cohorts, queues)
    t0 = time.monotonic()
    publish(bootstrap, prefix, balanced(shards, cohorts), objs)
    published = time.monotonic() - t0
    t1 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "bench.shards", "worker", bootstrap, prefix, str(shards),
                               str(s)], stdout=subprocess.PIPE, text=True) for s in range(shards)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    wall = time.monotonic() - t1
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a shard worker failed: {[p.returncode for p in procs]}")
    return {"shards": shards, "workloads": sum(isinstance(x, o.Workload) for x in objs),
            "publish_s": round(published, 2), "wall_s": round(wall, 2), "per_shard": outs}


def lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """One line per shard count. Every workload must be admitted in every run; how many were
    preempted first depends on where cycles cut the input (see docs/benchmarks.md), so it is shown,
    not compared."""
    out = ["shards  workloads  wall s  | per shard: cpu s / cycles / decisions / admissions / evictions / peak RSS MB"]
    for r in results:
        admitted: set[str] = set()
        for s in r["per_shard"]:
            admitted.update(s.pop("admitted"))
        done = "every workload admitted" if len(admitted) == r["workloads"] else \
            f"ONLY {len(admitted)} OF {r['workloads']} ADMITTED"
        per = "  ".join(f"#{s['shard']}: {s['cpu_s']} / {s['cycles']} / {s['decisions']} / {s['admissions']} / "
                        f"{s['evictions']} / {s['peak_rss_mb']}" for s in r["per_shard"])
        out.append(f"{r['shards']:>6}  {r['workloads']:>9}  {r['wall_s']:>6}  | {per}  ({done})")
    return out


# --- in real time: the large-scale scenario as ``bench.kafka`` runs it, with N shards -----------


def realtime(broker: LocalKafka, shards: int, cohorts: int, queues: int, run_dir: Path) -> BaselineResult:
    """The large-scale scenario (``cohorts`` x ``queues``) in real time with ``shards`` shards;
    one shard is exactly ``python -m bench kafka --only large-scale``'s run."""
    from bench.kafka import LARGE_SCALE, measure_baseline

    sizes = replace(LARGE_SCALE, baseline_cohorts=cohorts, baseline_queues=queues, shards=shards)
    return measure_baseline(broker, sizes, None, run_dir, "procs")


def _admitted(result: BaselineResult) -> dict[str, int]:
    return {w: n for f in result.per_shard for w, n in f.admitted.items()}


def _compared(figures: ShardFigures, one: dict[str, int]) -> str:
    """How shard ``figures``' admissions per workload compare with the 1-shard run's (``one``)."""
    missing = sum(1 for w in figures.admitted if w not in one)
    differ = [w for w, n in figures.admitted.items() if one.get(w, 0) != n]
    more = sum(max(0, n - one.get(w, 0)) for w, n in figures.admitted.items())
    fewer = sum(max(0, one.get(w, 0) - n) for w, n in figures.admitted.items())
    same = "the same workloads as" if not missing else f"{missing} workloads NOT admitted by"
    return (f"{same} the 1-shard run; admissions per workload differ for {len(differ):,} of {len(figures.admitted):,} "
            f"({more:,} readmissions more, {fewer:,} fewer)")


def realtime_lines(results: Sequence[BaselineResult]) -> list[str]:
    """Each run's figures (as the Kafka bench prints them), then one line per shard."""
    return [line for i in range(len(results)) for line in _run_lines(results[i], results[:i + 1])]


def _run_lines(r: BaselineResult, results: Sequence[BaselineResult]) -> list[str]:
    """Run ``r``'s lines, its shards compared with the 1-shard run among ``results`` if there is one."""
    one = next((_admitted(x) for x in results if len(x.per_shard) == 1), None)
    n = len(r.per_shard)
    complete = r.admitted_workloads == r.workloads and r.done
    out = [f"== {n} shard{'s' if n > 1 else ''}: {r.admitted_workloads:,} of {r.workloads:,} workloads "
           f"admitted, {'every one finished' if r.done else 'NOT ALL FINISHED'}{'' if complete else ' (INCOMPLETE)'}",
           *r.lines(),
           f"  the schedulers' longest time between two acknowledged heartbeats {r.heartbeat_gap_ms} ms (a leader "
           f"fenced after the session timeout, KUEUELOG_KAFKA_SESSION_TIMEOUT_MS)"]
    for f in r.per_shard:
        line = (f"  shard {f.shard}: scheduler CPU {f.cpu:.1f} s ({f.cpu / r.wall * 100:.0f}% of a core), peak RSS "
                f"{f.rss_mib:.0f} MiB, {f.cycles:,} cycles, {f.admissions:,} admissions of "
                f"{len(f.admitted):,} workloads ({len(f.finished):,} finished), {f.evictions:,} evictions, "
                f"{f.events:,} cluster events")
        if one is not None and n > 1:
            line += "; " + _compared(f, one)
        out.append(line)
    return out


def _realtime_main(args: argparse.Namespace, counts: Sequence[int]) -> None:
    import logging
    import os
    import tempfile

    import structlog

    from bench.kafka import local_broker, warm_up
    from services.runtime.kafka import KafkaSettings

    # The services' info lines (leadership, ...) would interleave with the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    cohorts, queues = args.cohorts or 10, args.queues or 100
    with local_broker() as broker, tempfile.TemporaryDirectory(prefix="kueuelog-bench-shards-") as tmp_dir:
        tmp = args.run_dir or tmp_dir  # the services' own logs
        session = KafkaSettings.from_env(bootstrap_servers="-").session_timeout_ms
        print(f"large-scale in real time, {cohorts} cohorts x {queues} ClusterQueues, shards {counts}, session "
              f"timeout {session} ms (KUEUELOG_KAFKA_SESSION_TIMEOUT_MS); broker "
              f"warm-up {warm_up(broker.bootstrap_servers):.1f} ms per transaction; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        results: list[BaselineResult] = []
        for n in counts:  # each run's lines as it ends (a full run takes minutes)
            results.append(realtime(broker, n, cohorts, queues, Path(tmp)))
            for line in _run_lines(results[-1], results):
                print(line, flush=True)
            print(f"  (load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "worker":
        bootstrap, prefix, shards, shard = argv[1], argv[2], int(argv[3]), int(argv[4])
        print(json.dumps(worker(bootstrap, prefix, shards, shard)), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.shards")
    p.add_argument("--cohorts", type=int, help="default 8, --realtime 10")
    p.add_argument("--queues", type=int, help="ClusterQueues per cohort (default 5, --realtime 100)")
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--bootstrap-servers", help="an existing broker (default: start a local one)")
    p.add_argument("--embedded", action="store_true", help="the embedded log instead of Kafka")
    p.add_argument("--run-dir", type=Path, help="--realtime: keep the services' logs here (default: a temporary "
                                                 "directory)")
    p.add_argument("--realtime", action="store_true",
                   help="the large-scale scenario in real time, each shard's services as processes (a broker of "
                        "its own)")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.shards.split(",")]
    if args.realtime:
        if args.embedded or args.bootstrap_servers:
            p.error("--realtime starts a local broker of its own: no --embedded or --bootstrap-servers")
        _realtime_main(args, counts)
        return 0
    args.cohorts, args.queues = args.cohorts or 8, args.queues or 5
    if args.embedded:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kueuelog-bench-shards-") as tmp:
            results = [run(f"{EMBEDDED}{tmp}", n, args.cohorts, args.queues) for n in counts]
    elif args.bootstrap_servers:
        results = [run(args.bootstrap_servers, n, args.cohorts, args.queues) for n in counts]
    else:
        from bench.kafka import local_broker

        with local_broker() as broker:
            results = [run(broker.bootstrap_servers, n, args.cohorts, args.queues) for n in counts]
    for line in lines(results):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
