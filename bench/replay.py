"""Benchmarks of the log path: fold throughput and the replay of a 1,000,000-event log.

The log is made by the real scheduler service (``Scheduler.step`` over an
embedded log, as in production) fed with the Kueue baseline shape repeated:
every workload is submitted, then (when admitted) applied, ready and finished,
as an actuator and a cluster would report — about four cluster events per
workload. Building it is not what is measured; replaying it is:

- fold: decode and fold every cluster event, no cycles (the lower bound);
- replay: fold and re-run every recorded cycle at its input offset (``kueuelog replay``);
- replay --verify: the same, comparing every decision byte for byte.
"""

from __future__ import annotations

import heapq
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.scenarios import baseline
from events import objects as o
from events.codec import decode_decision, encode
from events.envelope import Envelope, Topics
from events.messages import (
    AdmitWorkload,
    ClusterEvent,
    DecisionApplied,
    EvictionCompleted,
    EvictWorkload,
    ObjectApplied,
    PodsReady,
    WorkloadFinished,
)
from services.app.logview import replay
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler, bulk_fold

ROUND_MS = 90_000  # one baseline round of arrivals, then the next
TICK_MS = 100  # how much simulated time one scheduler read covers


@dataclass
class LogStats:
    events: int
    decisions: int
    cycles: int
    build_seconds: float


def build_log(directory: Path, target_events: int, *, slowdown: int = 1) -> LogStats:
    """``slowdown`` stretches the arrival intervals: 1 is Kueue's baseline (more work arrives
    than the quota can run, queues grow), 3 is a cluster that keeps up."""
    start = time.perf_counter()
    topics = Topics()
    log = SqliteLog(directory, durable=False)
    sched = Scheduler(log, topics=topics, batch_size=1000, snapshot_every=10**12)
    base = baseline(timed=True)
    config = [obj for obj in base.objects if not isinstance(obj, o.Workload)]
    workloads = [obj for obj in base.objects if isinstance(obj, o.Workload)]
    n = 0
    out: list[tuple[str, bytes]] = []

    def emit(ev: ClusterEvent) -> None:
        nonlocal n
        out.append(("k", encode(Envelope(id=f"bench:{n}", source="bench", event=ev))))
        n += 1

    for obj in config:
        emit(ObjectApplied(time=0, object=obj))
    runtime: dict[str, int] = {}
    arrivals: list[tuple[int, int, o.Workload]] = []
    for r in range(target_events // (4 * len(workloads)) + 1):
        for i, wl in enumerate(workloads):
            renamed = o.Workload(namespace=wl.namespace, name=f"r{r}-{wl.name}", uid=f"r{r}-{wl.uid}",
                                 queue_name=wl.queue_name, pod_sets=wl.pod_sets, priority=wl.priority,
                                 creation_time=((wl.creation_time or 0) + r * ROUND_MS) * slowdown)
            arrivals.append((renamed.creation_time or 0, r * len(workloads) + i, renamed))
            runtime[f"{renamed.namespace}/{renamed.name}"] = base.runtime_ms[f"{wl.namespace}/{wl.name}"]
    arrivals.sort(key=lambda a: (a[0], a[1]))
    arrivals.reverse()
    finishing: list[tuple[int, str]] = []
    decisions_read = 0
    while n < target_events and (arrivals or finishing):
        # A live scheduler sees whatever arrived since its last read: batch by TICK_MS of simulated time.
        due = min(arrivals[-1][0] if arrivals else 1 << 62, finishing[0][0] if finishing else 1 << 62)
        now = -(-due // TICK_MS) * TICK_MS
        while arrivals and arrivals[-1][0] <= now and n < target_events:
            emit(ObjectApplied(time=now, object=arrivals.pop()[2]))
        while finishing and finishing[0][0] <= now and n < target_events:
            _, key = heapq.heappop(finishing)
            ns, name = key.split("/", 1)
            emit(WorkloadFinished(time=now, namespace=ns, name=name))
        while out:
            log.append(topics.cluster_events, out)
            out.clear()
            while sched.step():
                pass
            for rec in log.read(topics.decisions, decisions_read, 1_000_000):
                d = decode_decision(rec.value)
                if isinstance(d, AdmitWorkload):
                    emit(DecisionApplied(time=now, decision_id=d.id, namespace=d.namespace, name=d.name))
                    emit(PodsReady(time=now, namespace=d.namespace, name=d.name))
                    heapq.heappush(finishing, (now + runtime[f"{d.namespace}/{d.name}"], f"{d.namespace}/{d.name}"))
                elif isinstance(d, EvictWorkload):
                    emit(EvictionCompleted(time=now, namespace=d.namespace, name=d.name))
                decisions_read = rec.offset + 1
    stats = LogStats(events=log.end_offset(topics.cluster_events), decisions=log.end_offset(topics.decisions),
                     cycles=sched.state.cycles, build_seconds=time.perf_counter() - start)
    log.close()
    return stats


def _timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(title: str, target_events: int, slowdown: int) -> list[str]:
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kueuelog-bench-") as tmp:
        stats = build_log(Path(tmp), target_events, slowdown=slowdown)
        lines.append(f"{title}: {stats.events:,} cluster events, {stats.decisions:,} decision records, "
                     f"{stats.cycles:,} cycles (built by the scheduler service in {stats.build_seconds:.0f} s)")
        log = SqliteLog(tmp, create=False)
        topics = Topics()

        def fold_only() -> int:
            s = Scheduler(log, topics=topics, batch_size=20_000)
            with bulk_fold():
                s.fold_until(log.end_offset(topics.cluster_events))
            return s.stats.events

        events, wall, _ = _timed(fold_only)
        lines.append(f"  fold only: {events:,} events in {wall:.1f} s ({events / wall:,.0f} events/s)")
        report, wall, _ = _timed(lambda: replay(log, topics, verify=False))
        lines.append(f"  replay: {report.events:,} events and {report.cycles:,} recorded cycles applied in "
                     f"{wall:.1f} s ({report.events / wall:,.0f} events/s)")
        report, wall, _ = _timed(lambda: replay(log, topics, verify=True))
        assert not report.mismatches, report.mismatches[:3]
        lines.append(f"  replay --verify: {wall:.1f} s ({report.events / wall:,.0f} events/s), every cycle re-run, "
                     f"{report.decisions:,} decisions re-derived byte for byte")
        log.close()
    return lines


def main() -> list[str]:
    return [
        *measure("1M-event log, baseline mix at a third of its arrival rate (queues keep up)", 1_000_000, 3),
        *measure("saturated baseline log (arrivals outrun the quota, queues grow)", 30_000, 1),
    ]


if __name__ == "__main__":
    for line in main():
        print(line, flush=True)
