"""``kueuelog demo``: the whole loop on the embedded default, with a live view.

A simulated cluster is seeded from manifest files (``examples/`` by default):
queues and flavors at time 0, then every Job at its creationTimestamp. The
scheduler, the actuator and the simulated cluster run over a fresh embedded
log in simulated time; the live view shows ClusterQueue usage, pending counts
and the latest decisions as the simulated morning unfolds. The log is left on
disk for ``kueuelog replay``, ``explain`` and ``tail``.

The demo steps the services with the one loop of :mod:`services.app.driver`
(as :func:`~services.app.driver.drive_until_idle` does), in one thread, with a
hook between rounds that refreshes the view and paces the run for human eyes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import format_time
from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload, PlaceWorkload, RemovePlacement
from events.quantity import format_amount
from services.actuator.loop import Actuator
from services.actuator.sim_port import SimClusterPort
from services.app.convert import expand
from services.app.driver import Loop, drive_live
from services.app.logview import format_decision
from services.core.quota import cluster_queue_key
from services.runtime.clock import wall_clock_ms
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream, read_files
from services.simcluster.cluster import SimCluster, SimConfig

VIEW_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


@dataclass
class DemoResult:
    directory: Path
    workloads: int
    finished: int
    admissions: int
    evictions: int
    cycles: int
    decisions: int
    simulated_ms: int
    waits_ms: dict[str, list[int]] = field(default_factory=dict)


class _Decisions:
    """Follows the decisions topic for the view and the summary (MultiKueue's placements included,
    for ``demo --clusters``)."""

    def __init__(self, log: SqliteLog, topics: Topics) -> None:
        self.log, self.topics, self.offset = log, topics, 0
        self.latest: deque[str] = deque(maxlen=10)
        self.admissions = self.evictions = 0
        self.first_admit: dict[str, int] = {}
        self.placements: dict[str, int] = {}  # worker cluster -> PlaceWorkload decisions for it

    def poll(self) -> None:
        while batch := self.log.read(self.topics.decisions, self.offset, 2000):
            for rec in batch:
                d = decode_decision(rec.value)
                if isinstance(d, CycleCompleted):
                    continue
                if isinstance(d, AdmitWorkload):
                    self.admissions += 1
                    self.first_admit.setdefault(f"{d.namespace}/{d.name}", d.time)
                elif isinstance(d, EvictWorkload):
                    self.evictions += 1
                elif isinstance(d, PlaceWorkload):
                    self.placements[d.cluster] = self.placements.get(d.cluster, 0) + 1
                elif not isinstance(d, RemovePlacement):
                    continue
                line = format_decision(d)
                if line:
                    self.latest.append(line)
            self.offset = batch[-1].offset + 1


def _usage_table(scheduler: Scheduler) -> Table:
    state = scheduler.state
    table = Table(title="ClusterQueues", expand=True)
    table.add_column("CLUSTERQUEUE")
    table.add_column("COHORT")
    for res in VIEW_RESOURCES:
        table.add_column(f"{res} used / nominal", justify="right")
    table.add_column("ADMITTED", justify="right")
    table.add_column("PENDING", justify="right")
    for name in sorted(state.cluster_queues):
        cq = state.cluster_queues[name]
        if not state.index.nodes:
            continue
        node = state.index.nodes.get(cluster_queue_key(name))
        cells = []
        for res in VIEW_RESOURCES:
            used = sum(v for (f, r), v in (node.usage.items() if node else []) if r == res)
            nominal = sum(q.nominal for (f, r), q in (node.quotas.items() if node else []) if r == res)
            cells.append("-" if not nominal and not used else
                         f"{format_amount(res, used)} / {format_amount(res, nominal)}")
        queue = state.index.queues.get(name)
        admitted = len(state.index.admitted.get(name, {}))
        table.add_row(name, cq.cohort or "-", *cells, str(admitted), str(len(queue) if queue else 0))
    return table


def _view(scheduler: Scheduler, decisions: _Decisions, sim_now: int, finished_count: int, total: int) -> Group:
    header = (f"simulated time {format_time(sim_now) if sim_now else '-'}   "
              f"workloads {total}   finished {finished_count}   admissions {decisions.admissions}   "
              f"evictions {decisions.evictions}   cycles {scheduler.state.cycles}")
    latest = "\n".join(decisions.latest) or "(no decisions yet)"
    return Group(Panel(header, title="kueuelog demo"), _usage_table(scheduler),
                 Panel(latest, title="latest decisions"))


def new_directory(base: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(wall_clock_ms() // 1000))
    path = base / f"kueuelog-demo-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"kueuelog-demo-{stamp}-{n}"
    return path


def run_demo(paths: Sequence[str], directory: Path, *, console: Console, pace: float = 0.0,
             default_duration_ms: int = 60_000) -> DemoResult:
    topics = Topics()
    log = SqliteLog(directory)
    log.exclusive("scheduler")
    config = SimConfig(default_duration_ms=default_duration_ms)
    arrivals = ArrivalStream.from_files(log, read_files(paths), topics=topics, expand=expand)
    total = sum(1 for a in arrivals.pending if type(a.envelope.event).__name__ == "ObjectApplied"
                and type(getattr(a.envelope.event, "object", None)).__name__ == "Workload")
    scheduler = Scheduler(log, topics=topics)
    loop = Loop(scheduler, Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                SimCluster.simulated(log, config, topics), arrivals)
    decisions = _Decisions(log, topics)
    with Live(_view(scheduler, decisions, 0, 0, total), console=console, refresh_per_second=8,
              transient=False, auto_refresh=False) as live:

        def redraw() -> None:
            decisions.poll()
            done = sum(1 for r in scheduler.state.workloads.values() if r.finished)
            live.update(_view(scheduler, decisions, scheduler.state.now, done, total), refresh=True)

        drive_live(loop, redraw, pace=pace)
    result = _outcome(scheduler, decisions, directory)
    log.close()
    return result


def _outcome(scheduler: Scheduler, decisions: _Decisions, directory: Path) -> DemoResult:
    """A finished demo's figures (its snapshot written first, for later commands' recovery)."""
    scheduler.write_snapshot()
    waits: dict[str, list[int]] = {}
    for key, rec in scheduler.state.workloads.items():
        if key in decisions.first_admit and rec.obj.creation_time is not None:
            cq = rec.admission.cluster_queue if rec.admission else _last_queue(scheduler, key)
            waits.setdefault(cq, []).append(decisions.first_admit[key] - rec.obj.creation_time)
    return DemoResult(
        directory=directory, workloads=len(scheduler.state.workloads),
        finished=sum(1 for r in scheduler.state.workloads.values() if r.finished),
        admissions=decisions.admissions, evictions=decisions.evictions, cycles=scheduler.state.cycles,
        decisions=scheduler.stats.decisions, simulated_ms=scheduler.state.now, waits_ms=waits,
    )


def _last_queue(scheduler: Scheduler, key: str) -> str:
    rec = scheduler.state.workloads[key]
    lq = scheduler.state.local_queues.get(f"{rec.obj.namespace}/{rec.obj.queue_name}")
    return lq.cluster_queue if lq else "?"


def summary(result: DemoResult) -> list[str]:
    lines = [
        f"{result.workloads} workloads, {result.finished} finished; {result.admissions} admissions, "
        f"{result.evictions} evictions in {result.cycles} cycles ({result.decisions} decisions)",
    ]
    for cq in sorted(result.waits_ms):
        waits = result.waits_ms[cq]
        lines.append(f"  {cq}: {len(waits)} admitted, average wait {sum(waits) / len(waits) / 1000:.0f} s, "
                     f"longest {max(waits) / 1000:.0f} s")
    lines += [
        f"the event log is in {result.directory}",
        f"  kueuelog replay {result.directory} --verify",
        f"  kueuelog explain team-a/release-000 --log {result.directory}",
        f"  kueuelog tail --log {result.directory} --from-start --type Evict",
    ]
    return lines
