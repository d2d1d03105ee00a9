"""Two-phase admission through Kafka: what an admission check costs.

The timed baseline (bench.kafka's, the scheduler, actuator and simulated cluster in one process
over a local broker, real clock) three times: without checks; with every ClusterQueue behind a
ProvisioningRequest check whose class is provisioned at once; and with one provisioned after 1 s.
For each: wall time, CPU, the share of quota held and of quota running (``usage`` / ``running``),
and, with checks, the admission latency a check adds — from the ``AdmitWorkload`` record
(quota reserved) to the ``AdmitChecked`` record (Admitted), by Kafka record timestamps — p50/p99.

    .venv/bin/python -m bench.checks [--quick] [--baseline-seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import msgspec
import structlog

from bench.kafka import (
    FULL,
    QUICK,
    Sizes,
    _baseline_result,
    _BaselineRun,
    baseline_objects,
    local_broker,
    make_topics,
    percentile,
    proc_cpu_seconds,
    read_all,
    warm_up,
)
from events import objects as o
from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import Document
from events.messages import AdmitChecked, AdmitWorkload
from events.simautoscaler import Behaviour
from services.app.driver import run_all
from services.runtime.clock import wall_clock_ms
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.simcluster.arrivals import ArrivalStream, arrival_schedule
from services.simcluster.cluster import SimConfig

CLASS = "bench.autoscaling.x-k8s.io"
CHECK = o.AdmissionCheck(name="prov", controller_name="kueue.x-k8s.io/provisioning-request",
                         parameters_kind="ProvisioningRequestConfig", parameters_name="prc")
CONFIG = o.ProvisioningRequestConfig(name="prc", provisioning_class_name=CLASS)


def checked_objects(sizes: Sizes, start_ms: int, checks: bool) -> list[tuple[Document, o.AnyObject]]:
    objects, _ = baseline_objects(sizes, start_ms)
    if not checks:
        return objects
    out: list[tuple[Document, o.AnyObject]] = [(Document("checks.yaml", 1, None), CHECK),
                                               (Document("checks.yaml", 2, None), CONFIG)]
    for doc, obj in objects:
        if isinstance(obj, o.ClusterQueue):
            obj = msgspec.structs.replace(obj, admission_checks=("prov",))
        out.append((doc, obj))
    return out


def _run(bootstrap: str, topics: Topics, sizes: Sizes, broker_pid: int | None, checks: bool,
         after_ms: int) -> _BaselineRun:
    config = SimConfig(provisioning=((CLASS, Behaviour("succeed", after_ms)),))
    with KafkaLog(KafkaSettings(bootstrap_servers=bootstrap), prefix=topics.prefix, role="all") as log:

        async def main() -> _BaselineRun:
            stop = asyncio.Event()
            if not await log.acquire("scheduler", stop):
                raise RuntimeError("did not become the leader")
            start = wall_clock_ms() + 500
            arrivals = ArrivalStream(log, arrival_schedule(checked_objects(sizes, start, checks), start=start),
                                     topics=topics)
            limit = asyncio.get_running_loop().call_later(1800, stop.set)  # a safety net, not a measure
            cpu, bcpu = time.process_time(), proc_cpu_seconds(broker_pid)
            result = await run_all(log, clock="real", stop=stop, arrivals=arrivals, topics=topics, config=config,
                                   until_done=True)
            wall = wall_clock_ms() / 1000 - start / 1000
            limit.cancel()
            return _BaselineRun(wall=wall, cpu=time.process_time() - cpu,
                                broker_cpu=proc_cpu_seconds(broker_pid) - bcpu, done=result.done, mode="all")

        return asyncio.run(main())


def check_latency_ms(bootstrap: str, topics: Topics) -> list[float]:
    """Per admission behind checks: AdmitWorkload record -> AdmitChecked record (ms)."""
    reserved: dict[str, int] = {}
    out: list[float] = []
    for ts, value in asyncio.run(read_all(bootstrap, topics.decisions)):
        d = decode_decision(value)
        key = f"{d.namespace}/{d.name}" if isinstance(d, AdmitWorkload | AdmitChecked) else ""
        if isinstance(d, AdmitWorkload) and d.admission_checks:
            reserved[key] = ts
        elif isinstance(d, AdmitChecked) and key in reserved:
            out.append(ts - reserved.pop(key))
    return out


def main(*, quick: bool, baseline_seconds: float | None) -> Iterator[str]:
    sizes = QUICK if quick else FULL
    if baseline_seconds is not None:
        sizes = replace(sizes, baseline_until_ms=int(baseline_seconds * 1000))
    queues = sizes.baseline_cohorts * sizes.baseline_queues
    # The services' info lines (leadership, ...) would interleave with the figures.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with local_broker() as broker, tempfile.TemporaryDirectory(prefix="kueuelog-bench-"):
        bootstrap = broker.bootstrap_servers
        yield (f"Admission-check benchmark: local broker {broker.version}; {os.cpu_count()} CPUs; baseline "
               f"{sizes.baseline_cohorts} cohorts x {sizes.baseline_queues} ClusterQueues, arrivals "
               f"{'all' if sizes.baseline_until_ms is None else f'of the first {sizes.baseline_until_ms // 1000} s'}")
        yield f"  broker warm-up (JIT): {warm_up(bootstrap):.1f} ms per transaction at the end"
        for label, checks, after_ms in (("no checks", False, 0), ("check Ready at once", True, 0),
                                        ("check provisioned after 1 s", True, 1000)):
            topics = Topics(prefix=f"checks-{int(time.time())}-{after_ms}-{int(checks)}")
            make_topics(bootstrap, topics)
            run = _run(bootstrap, topics, sizes, broker.pid, checks, after_ms)
            result = _baseline_result(bootstrap, topics, sizes, queues, run)
            line = (f"  {label:<28} {result.workloads} workloads: wall {result.wall:.1f} s, makespan "
                    f"{result.makespan:.1f} s, CPU {result.cpu:.1f} s (broker {result.broker_cpu:.1f} s), quota held "
                    f"{result.usage:.1f} %, running {result.running:.1f} %, done={result.done}")
            yield line
            if checks:
                lat = check_latency_ms(bootstrap, topics)
                yield (f"  {'':<28} reservation -> Admitted: p50 {percentile(lat, 50):.0f} ms, "
                       f"p99 {percentile(lat, 99):.0f} ms over {len(lat)} admissions")


def cli(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checks", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the quick baseline (2 x 3 queues, 6 s of arrivals)")
    p.add_argument("--baseline-seconds", type=float, metavar="S", help="only the baseline's first S s of arrivals")
    args = p.parse_args(argv)
    for line in main(quick=args.quick, baseline_seconds=args.baseline_seconds):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
