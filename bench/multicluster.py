"""MultiKueue placement throughput: 10 simulated worker clusters, one scheduler, the embedded log.

A manager with 100 ClusterQueues (each with the multikueue AdmissionCheck) and 10 workers with 100
ClusterQueues each (4 cpu per queue) are seeded, each worker's objects under its own cluster name.
Jobs (1 cpu) then arrive in waves of ``wave`` at a time on the manager; after each wave the
scheduler steps until it has nothing left to do, and every workload's placement decision is found
on the decisions topic. Reported: placements per second (wall clock, scheduler folding and
deciding, the log's commits included) and, per workload, submission (its envelope appended) to its
placement committed (``PlaceWorkload`` on the decisions topic: what the worker's actuator acts on),
p50 and p99. Kueue's MultiKueue dispatches about 1.3 workloads/s on its own performance harness
(``test/performance/multikueue``), for comparison.

``python -m bench.multicluster [--jobs N] [--wave W]``. The same world through Kafka, with the
services as processes and to running on the worker: ``bench.multicluster_kafka``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from events.codec import decode_decision, encode
from events.envelope import Envelope, Topics
from events.messages import ObjectApplied, PlaceWorkload
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster import multicluster as mc

T0 = 1_735_689_600_000
MULTIKUEUE_FIGURE = 1.3  # workloads/s, Kueue's MultiKueue performance test


def run(clusters: int = 10, queues: int = 100, jobs: int = 3000, wave: int = 100) -> dict[str, float]:
    topics = Topics()
    with tempfile.TemporaryDirectory() as tmp:
        log = SqliteLog(Path(tmp))
        try:
            seed = [("seed", encode(Envelope(id=f"s{i}", source="watcher", cluster=c,
                                             event=ObjectApplied(time=T0, object=obj))))
                    for i, (c, obj) in enumerate(mc.world(clusters, queues, worker_cpu="4"))]
            log.append(topics.cluster_events, seed)
            sched = Scheduler(log, topics)
            while sched.step():
                pass
            submitted: dict[str, float] = {}
            latencies: list[float] = []
            offset = log.end_offset(topics.decisions)
            placed = 0
            start = time.perf_counter()
            for w in range(0, jobs, wave):
                batch = []
                for i in range(w, min(jobs, w + wave)):
                    wl = mc.job(f"job-{i}", i % queues, "1", "2025-01-01T00:00:00Z")
                    ev = ObjectApplied(time=T0 + i, object=wl)
                    batch.append((f"{wl.namespace}/{wl.name}",
                                  encode(Envelope(id=f"j{i}", source="watcher", event=ev))))
                now = time.perf_counter()
                for key, _ in batch:
                    submitted[key] = now
                log.append(topics.cluster_events, batch)
                while sched.step():
                    pass
                done = time.perf_counter()
                for rec in log.read(topics.decisions, offset, 1_000_000):
                    d = decode_decision(rec.value)
                    if isinstance(d, PlaceWorkload):
                        placed += 1
                        latencies.append(done - submitted[f"{d.namespace}/{d.name}"])
                    offset = rec.offset + 1
            elapsed = time.perf_counter() - start
        finally:
            log.close()
    latencies.sort()
    return {"placed": placed, "seconds": elapsed, "per_second": placed / elapsed,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def main(jobs: int = 3000, wave: int = 100) -> Iterator[str]:
    r = run(jobs=jobs, wave=wave)
    yield (f"multicluster (embedded log, 10 workers x 100 ClusterQueues, {jobs} jobs in waves of {wave}): "
           f"{r['placed']:.0f} placed in {r['seconds']:.1f} s = {r['per_second']:.0f} placements/s "
           f"({r['per_second'] / MULTIKUEUE_FIGURE:.0f}x MultiKueue's ~{MULTIKUEUE_FIGURE}/s); submission -> "
           f"placement committed p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.multicluster")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--wave", type=int, default=100)
    args = parser.parse_args()
    for line in main(args.jobs, args.wave):
        print(line, flush=True)
    sys.exit(0)
