"""Kueue's baseline and large-scale scenarios through the services, as timed arrival streams in
simulated time.

The 15,000 workloads of the baseline shape (50,000 of the large-scale one) arrive at the generator's intervals
(small every 100 ms, medium every 500 ms, large every 1,200 ms per ClusterQueue)
onto an embedded log; the scheduler, the actuator and the simulated cluster
run them (small 200 ms, medium 500 ms, large 1,000 ms) in simulated time. From
the log alone: the simulated makespan, the average time to admission per
class and the ClusterQueues' usage of their nominal quota.
"""

from __future__ import annotations

import resource
import tempfile
import time
from collections import defaultdict

from bench.scenarios import Scenario, baseline, large_scale
from events import objects as o
from events.cluster import SIM_DURATION_ANNOTATION as DURATION_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import Document
from events.messages import AdmitWorkload, EvictionCompleted, ObjectApplied, WorkloadFinished
from services.app.driver import drive_until_idle
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import ArrivalStream, arrival_schedule

NOMINAL_MILLI_CPU_PER_QUEUE = 20_000


def main() -> list[str]:
    return [*run("baseline", baseline(timed=True)), *run("large-scale", large_scale())]


def run(name: str, scenario: Scenario) -> list[str]:
    """``scenario`` through scheduler, actuator and simulated cluster on an embedded log."""
    queues = sum(1 for obj in scenario.objects if isinstance(obj, o.ClusterQueue))
    objects: list[tuple[Document, o.AnyObject]] = []
    for i, obj in enumerate(scenario.objects):
        if isinstance(obj, o.Workload):
            ms = scenario.runtime_ms[f"{obj.namespace}/{obj.name}"]
            obj = o.Workload(namespace=obj.namespace, name=obj.name, uid=obj.uid, queue_name=obj.queue_name,
                             pod_sets=obj.pod_sets, priority=obj.priority, creation_time=obj.creation_time,
                             annotations=((DURATION_ANNOTATION, str(ms)),))
        objects.append((Document("baseline.yaml", i + 1, None), obj))
    topics = Topics()
    with tempfile.TemporaryDirectory(prefix="kueuelog-bench-") as tmp:
        log = SqliteLog(tmp, durable=False)
        arrivals = ArrivalStream(log, arrival_schedule(objects), topics=topics)
        wall, cpu = time.perf_counter(), time.process_time()
        result = drive_until_idle(log, topics=topics, arrivals=arrivals)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        waits: dict[str, list[int]] = defaultdict(list)
        running_since: dict[str, int] = {}
        admissions = 0
        first_admit: dict[str, int] = {}
        offset = 0
        while batch := log.read(topics.decisions, offset, 20_000):
            for rec in batch:
                d = decode_decision(rec.value)
                if isinstance(d, AdmitWorkload):
                    admissions += 1
                    key = f"{d.namespace}/{d.name}"
                    running_since[key] = d.time
                    first_admit.setdefault(key, d.time)
            offset = batch[-1].offset + 1
        created: dict[str, int] = {}
        cpu_of: dict[str, int] = {}
        used_ms = 0
        last = 0
        offset = 0
        events = 0
        while batch := log.read(topics.cluster_events, offset, 20_000):
            for rec in batch:
                ev = decode_envelope(rec.value).event
                events += 1
                last = max(last, ev.time)
                if isinstance(ev, ObjectApplied) and isinstance(ev.object, o.Workload):
                    key = f"{ev.object.namespace}/{ev.object.name}"
                    created[key] = ev.object.creation_time or 0
                    cpu_of[key] = dict(ev.object.pod_sets[0].requests)["cpu"]
                elif isinstance(ev, WorkloadFinished | EvictionCompleted):
                    key = f"{ev.namespace}/{ev.name}"
                    if key in running_since:
                        used_ms += (ev.time - running_since.pop(key)) * cpu_of[key]
            offset = batch[-1].offset + 1
        for key, at in first_admit.items():
            waits[scenario.klass[key]].append(at - created[key])
        log.close()
    start = min(created.values())
    makespan = last - start
    usage = used_ms / (NOMINAL_MILLI_CPU_PER_QUEUE * queues * makespan) * 100 if makespan else 0.0
    avg = ", ".join(f"{k} {sum(v) / len(v) / 1000:.1f} s" for k, v in sorted(waits.items()))
    return [
        f"{name} through the services (embedded log, simulated time): {len(created):,} workloads, "
        f"{events:,} cluster events, {result.scheduler.state.cycles:,} cycles, {admissions:,} admissions",
        f"  simulated makespan {makespan / 1000:.1f} s; average time to admission: {avg}; "
        f"usage of nominal quota {usage:.1f}%",
        f"  ran in {wall:.0f} s wall, {cpu:.0f} s CPU ({len(created) / wall:,.0f} workloads/s through the loop); "
        f"peak RSS {rss:.0f} MiB",
    ]


if __name__ == "__main__":
    for line in main():
        print(line, flush=True)
