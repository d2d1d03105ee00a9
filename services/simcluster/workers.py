"""A simulated MultiKueue worker cluster: its simulated cluster, and its watcher's heartbeat.

The manager's actuator reaches a simulated worker through the sim-cluster topic
(``services.actuator.sim_multikueue``: a placement is a ``StartWorkload`` naming the worker). A
worker is one :class:`~services.simcluster.cluster.SimCluster` in real time whose ``cluster`` is
the worker's name, so it takes only the commands for it and its reports (pods ready, finished)
reach cluster-events under that name, where the scheduler folds them into that worker's view
(``services.core.placement.route``). It commits its position under a consumer group of its own
(``simcluster.<name>``), so any number of workers share the topic.

A worker whose simulated cluster has nothing to report would look silent to the scheduler and be
lost after ``workerLostTimeout``; so, as a real worker's watcher does (``run watcher
--heartbeat``), it appends a ``ClockTicked`` under its name every ``heartbeat_s`` while it runs.
Stopping it (or killing its process) is a worker whose watcher went silent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Sequence

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.messages import ClockTicked
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log, LogError
from services.runtime.supervise import POLL_SECONDS, report_unavailable
from services.simcluster.cluster import SimCluster, SimConfig
from services.simcluster.runner import run_simcluster

HEARTBEAT_SOURCE = "heartbeat"


def worker_config(name: str, *, default_duration_ms: int = 60_000) -> SimConfig:
    return SimConfig(cluster=name, default_duration_ms=default_duration_ms, group=f"simcluster.{name}")


def beat(log: Log, topics: Topics, name: str, now: int) -> None:
    """One heartbeat of worker ``name`` at ``now`` (ms); two in the same millisecond are one."""
    env = Envelope(id=f"tick:{name}:{now}", source=HEARTBEAT_SOURCE, cluster=name, event=ClockTicked(time=now))
    log.append(topics.cluster_events, [(event_key(env), encode(env))])


async def run_heartbeat(log: Log, stop: asyncio.Event, *, name: str, topics: Topics, interval_s: float,
                        wall_clock: Callable[[], int] = wall_clock_ms) -> int:
    beats = 0
    while not stop.is_set():
        try:
            beat(log, topics, name, wall_clock())
            beats += 1
        except LogError as e:
            if not e.retriable:
                raise
            report_unavailable(f"heartbeat {name}", e, interval_s)  # the next beat is the retry
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    return beats


async def run_worker(log: Log, stop: asyncio.Event, *, name: str, topics: Topics | None = None,
                     heartbeat_s: float = 1.0, default_duration_ms: int = 60_000,
                     poll_seconds: float = POLL_SECONDS) -> SimCluster:
    """Worker ``name`` until ``stop``: its simulated cluster (real time) and its heartbeat. ``log``
    is the worker's own (on Kafka: opened with a role of its own, e.g. ``simcluster-<name>``)."""
    topics = topics or Topics()
    sim, _ = await asyncio.gather(
        run_simcluster(log, stop, clock="real", config=worker_config(name, default_duration_ms=default_duration_ms),
                       topics=topics, long_poll=True, poll_seconds=poll_seconds),
        run_heartbeat(log, stop, name=name, topics=topics, interval_s=heartbeat_s))
    return sim


async def _serve(bootstrap: str, prefix: str, names: list[str], heartbeat_s: float, duration_ms: int) -> None:
    from services.runtime.kafka import KafkaLog, KafkaSettings

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    topics = Topics(prefix=prefix)
    logs = [KafkaLog(KafkaSettings(bootstrap_servers=bootstrap), prefix=prefix, role=f"simcluster-{n}")
            for n in names]
    try:
        await asyncio.gather(*(run_worker(log, stop, name=n, topics=topics, heartbeat_s=heartbeat_s,
                                          default_duration_ms=duration_ms) for log, n in zip(logs, names, strict=True)))
    finally:
        for log in logs:
            log.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m services.simcluster.workers --bootstrap-servers B --workers worker-1,worker-2``:
    simulated MultiKueue workers on Kafka, in one process, until SIGINT or SIGTERM."""
    p = argparse.ArgumentParser(prog="python -m services.simcluster.workers", description=main.__doc__)
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT,...")
    p.add_argument("--topic-prefix", default="kueuelog")
    p.add_argument("--workers", required=True, metavar="NAME,...", help="the workers' MultiKueueCluster names")
    p.add_argument("--heartbeat", type=float, default=1.0, metavar="SECONDS",
                   help="each worker's heartbeat interval (its watcher's --heartbeat)")
    p.add_argument("--default-duration", type=float, default=60.0, metavar="SECONDS",
                   help=f"how long a workload runs without a {SIM_DURATION_ANNOTATION} annotation")
    args = p.parse_args(argv)
    names = [n for n in args.workers.split(",") if n]
    if not names or not 0 < args.heartbeat <= 3600:
        p.error("--workers: at least one name; --heartbeat: between 0 and 3600 seconds")
    asyncio.run(_serve(args.bootstrap_servers, args.topic_prefix, names, args.heartbeat,
                       int(args.default_duration * 1000)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
