"""MultiKueue placements through Kafka: 10 simulated worker clusters, the services as deployed.

On the bench's local broker (``bench.kafka.local_broker``), topics of its own:

- the world of ``bench.multicluster`` is seeded into cluster-events: the manager's 100 ClusterQueues
  behind the multikueue AdmissionCheck, and 10 workers with 100 ClusterQueues of 4 cpu each, every
  worker's objects under its own cluster name (as its watcher publishes them);
- the scheduler runs as its own process (``kueuelog run scheduler``), the manager's actuator as its
  own (``kueuelog run actuator``: a placement becomes a start on the chosen worker's simulated
  cluster, ``services.actuator.sim_multikueue``), and the 10 workers in a third
  (``python -m services.simcluster.workers``: each its own simulated cluster in real time, its own
  transactional writer and consumer group, a heartbeat every 5 s);
- the bench process submits 1-cpu Jobs (Workloads, ``ObjectApplied`` on the manager) either as fast
  as the producer takes them (``rate`` 0: the placement rate the services sustain) or at a steady
  ``rate`` per second, and follows decisions and cluster-events with a read_committed consumer.

Per workload: submission (its append acknowledged) -> placement committed (``PlaceWorkload`` visible
on the decisions topic) and -> running on the worker (that worker's simulated cluster reports its
pods ready, ``PodsReady`` under the worker's name, visible on cluster-events: the run started
there). Placements per second = workloads placed / (last placement visible - first submission
acknowledged). Kueue's MultiKueue dispatches about 1.3 workloads/s on its performance harness
(``test/performance/multikueue``); no workload here finishes during the run (1 h runs).

``python -m bench.multicluster_kafka [--jobs N] [--rate R] [--clusters C] [--queues Q]``; in
``make bench`` through ``python -m bench kafka`` (``--only multicluster``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition

from bench.kafka import (
    REPO,
    local_broker,
    make_topics,
    new_producer,
    new_reader,
    percentile,
    proc_cpu_seconds,
    start_service_process,
    stop_process,
)
from bench.multicluster import MULTIKUEUE_FIGURE
from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ObjectApplied, PlaceWorkload, PodsReady
from events.simcluster import sim_cluster_topic
from services.runtime.clock import wall_clock_ms
from services.runtime.kafka import HEADERS, KafkaLog, KafkaSettings
from services.scheduler.service import GROUP as SCHEDULER_GROUP
from services.simcluster import multicluster as mc

_RUNS = itertools.count()
HEARTBEAT_S = 5.0
RUN_SECONDS = 3600.0  # nothing finishes during a run


@dataclass
class Result:
    clusters: int
    queues: int
    jobs: int
    rate: int
    submitted: int = 0
    placed_at: dict[str, float] = field(default_factory=dict)  # workload key -> visible (perf_counter)
    running_at: dict[str, float] = field(default_factory=dict)
    acked_at: dict[str, float] = field(default_factory=dict)
    workers: dict[str, str] = field(default_factory=dict)  # where each ran
    cpu: dict[str, float] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # services that stepped down (exit 5), restarted
    seconds: float = 0.0

    def _latencies(self, seen: dict[str, float]) -> list[float]:
        return [1000 * (seen[k] - self.acked_at[k]) for k in seen if k in self.acked_at]

    def lines(self) -> Iterator[str]:
        how = f"at {self.rate}/s" if self.rate else "as fast as submitted"
        first = min(self.acked_at.values(), default=0.0)
        placed, running = self._latencies(self.placed_at), self._latencies(self.running_at)
        span = max(self.placed_at.values(), default=first) - first
        rate = len(self.placed_at) / span if span > 0 else 0.0
        yield (f"multicluster through Kafka ({self.clusters} simulated workers x {self.queues} ClusterQueues, "
               f"{self.jobs} jobs {how}): {len(self.placed_at)} placed, {len(self.running_at)} running on their "
               f"worker, in {span:.1f} s = {rate:.0f} placements/s ({rate / MULTIKUEUE_FIGURE:.0f}x MultiKueue's "
               f"~{MULTIKUEUE_FIGURE}/s); {len(set(self.workers.values()))} workers used")
        yield (f"  submission -> placement committed p50 {percentile(placed, 50):.0f} ms, p99 "
               f"{percentile(placed, 99):.0f} ms; -> running on the worker (its PodsReady) p50 "
               f"{percentile(running, 50):.0f} ms, p99 {percentile(running, 99):.0f} ms")
        restarts = "".join(f"; {k} stepped down {n}x (restarted)" for k, n in self.restarts.items())
        yield "  CPU s: " + ", ".join(f"{k} {v:.1f}" for k, v in self.cpu.items()) + restarts


def _seed(bootstrap: str, topics: Topics, clusters: int, queues: int) -> int:
    """The world into cluster-events, each object under its cluster's name; returns the end offset."""
    now = wall_clock_ms()
    records = []
    for i, (cluster, obj) in enumerate(mc.world(clusters, queues, worker_cpu="4")):
        env = Envelope(id=f"bench-mk-seed:{i}", source="watcher", cluster=cluster,
                       event=ObjectApplied(time=now, object=obj))
        records.append((event_key(env), encode(env)))
    with KafkaLog(KafkaSettings(bootstrap_servers=bootstrap), prefix=topics.prefix) as log:
        log.ensure_topics([sim_cluster_topic(topics)])
        log.append(topics.cluster_events, records)
        return log.end_offset(topics.cluster_events)


def _start_workers(bootstrap: str, topics: Topics, clusters: int, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "services.simcluster.workers", "--bootstrap-servers", bootstrap,
             "--topic-prefix", topics.prefix, "--workers", ",".join(mc.worker_names(clusters)),
             "--heartbeat", str(HEARTBEAT_S), "--default-duration", str(RUN_SECONDS)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


async def _wait_folded(bootstrap: str, topics: Topics, end: int, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    with KafkaLog(KafkaSettings(bootstrap_servers=bootstrap), prefix=topics.prefix) as log:
        deadline = time.perf_counter() + 300
        while log.position(SCHEDULER_GROUP, topics.cluster_events) < end:
            for name, p in procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"the {name} process exited with {p.returncode}")
            if time.perf_counter() > deadline:
                raise RuntimeError("the scheduler did not fold the seeded world within 300 s")
            await asyncio.sleep(0.2)


async def _follow(bootstrap: str, topics: Topics, r: Result, workers: set[str], stop: asyncio.Event) -> None:
    reader = new_reader(bootstrap)
    await reader.start()
    try:
        tps = [TopicPartition(topics.decisions, 0), TopicPartition(topics.cluster_events, 0)]
        reader.assign(tps)
        for tp in tps:
            await reader.seek_to_beginning(tp)
        while not stop.is_set():
            got = await reader.getmany(*tps, timeout_ms=100, max_records=10_000)
            now = time.perf_counter()
            for m in got.get(tps[0], []):
                if m.value and b'"multikueue.place"' in m.value:
                    d = decode_decision(m.value)
                    if isinstance(d, PlaceWorkload):
                        key = f"{d.namespace}/{d.name}"
                        r.placed_at.setdefault(key, now)
                        r.workers[key] = d.cluster
            for m in got.get(tps[1], []):
                if m.value and b'"workload.pods-ready"' in m.value:
                    env = decode_envelope(m.value)
                    if isinstance(env.event, PodsReady) and env.cluster in workers:
                        r.running_at.setdefault(f"{env.event.namespace}/{env.event.name}", now)
    finally:
        await reader.stop()


async def _submit(bootstrap: str, topics: Topics, r: Result, queues: int) -> None:
    producer = new_producer(bootstrap)
    await producer.start()
    try:
        t0 = time.perf_counter()
        futures = []
        for i in range(r.jobs):
            if r.rate:
                wait = t0 + i / r.rate - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
            wl = mc.job(f"job-{i}", i % queues, "1", "2025-01-01T00:00:00Z")
            key = f"{wl.namespace}/{wl.name}"
            env = Envelope(id=f"bench-mk-job:{i}", source="watcher", event=ObjectApplied(time=wall_clock_ms(),
                                                                                          object=wl))
            fut = await producer.send(topics.cluster_events, encode(env), key=event_key(env).encode(), partition=0,
                                      headers=HEADERS)
            fut.add_done_callback(lambda _f, k=key: r.acked_at.setdefault(k, time.perf_counter()))
            futures.append(fut)
        await asyncio.gather(*futures)
        r.submitted = len(futures)
    finally:
        await producer.stop()


async def measure(bootstrap: str, run_dir: Path, *, clusters: int = 10, queues: int = 100, jobs: int = 2000,
                  rate: int = 0, broker_pid: int | None = None, timeout_s: float = 600) -> Result:
    topics = Topics(prefix=f"bench-mk-{os.getpid()}-{next(_RUNS)}")
    make_topics(bootstrap, topics)
    end = _seed(bootstrap, topics, clusters, queues)
    r = Result(clusters=clusters, queues=queues, jobs=jobs, rate=rate)
    starts: dict[str, Callable[[int], subprocess.Popen[bytes]]] = {
        "scheduler": lambda n: start_service_process("scheduler", bootstrap, topics.prefix,
                                                     run_dir / f"scheduler-{topics.prefix}-{n}.log"),
        "actuator": lambda n: start_service_process("actuator", bootstrap, topics.prefix,
                                                    run_dir / f"actuator-{topics.prefix}-{n}.log"),
        "workers": lambda n: _start_workers(bootstrap, topics, clusters, run_dir / f"workers-{topics.prefix}-{n}.log")}
    procs = {name: start(0) for name, start in starts.items()}
    try:
        await _wait_folded(bootstrap, topics, end, procs)
        before = {name: proc_cpu_seconds(p.pid) for name, p in procs.items()}
        broker_before = proc_cpu_seconds(broker_pid)
        stop = asyncio.Event()
        follower = asyncio.create_task(_follow(bootstrap, topics, r, set(mc.worker_names(clusters)), stop))
        t = time.perf_counter()
        await _submit(bootstrap, topics, r, queues)
        while len(r.running_at) < jobs and time.perf_counter() - t < timeout_s:
            for name, p in list(procs.items()):
                if p.poll() is None:
                    continue
                if p.returncode != 5:
                    raise RuntimeError(f"the {name} process exited with {p.returncode}")
                # It stepped down (its session starved on a loaded machine): a standby would take over.
                r.restarts[name] = r.restarts.get(name, 0) + 1
                procs[name] = starts[name](r.restarts[name])
                before[name] = 0.0
            await asyncio.sleep(0.1)
        r.seconds = time.perf_counter() - t
        stop.set()
        await follower
        # (of a restarted service, its last process's, from its start)
        r.cpu = {name: proc_cpu_seconds(p.pid) - before[name] for name, p in procs.items()}
        r.cpu["broker"] = proc_cpu_seconds(broker_pid) - broker_before
    finally:
        for p in procs.values():
            stop_process(p)
    return r


def main(bootstrap: str, run_dir: Path, *, quick: bool = False, broker_pid: int | None = None) -> Iterator[str]:
    """The burst (as fast as submitted) and a steady rate; ``quick``: fewer jobs."""
    runs = ((500, 0),) if quick else ((3000, 0), (1000, 100))
    for jobs, rate in runs:
        yield from asyncio.run(measure(bootstrap, run_dir, jobs=jobs, rate=rate, broker_pid=broker_pid)).lines()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.multicluster_kafka")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=0, help="submissions per second (0: as fast as taken)")
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--queues", type=int, default=100)
    args = parser.parse_args()
    with local_broker() as broker, tempfile.TemporaryDirectory(prefix="kueuelog-bench-mk-") as tmp:
        result = asyncio.run(measure(broker.bootstrap_servers, Path(tmp), clusters=args.clusters, queues=args.queues,
                                     jobs=args.jobs, rate=args.rate, broker_pid=broker.pid))
        for line in result.lines():
            print(line, flush=True)
    sys.exit(0)
