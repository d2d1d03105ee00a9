"""``kueuelog demo --clusters N``: MultiKueue over a manager and N simulated worker clusters.

The whole loop on one embedded log, in simulated time, as ``kueuelog demo`` runs it for one cluster:
the arrivals (the manager's objects under the manager's name, each worker's under its own, as its
watcher would publish them), the scheduler, the manager's actuator, and one simulated cluster per
cluster — the manager's and each worker's, all on the sim-cluster topic, each with its own position
(``SimConfig.group``) and carrying out only the commands addressed to it.

A workload submitted on the manager reserves the manager's quota, is placed on one worker
(``multikueue.place``), and the manager's actuator starts it there (``services.actuator.sim_multikueue``),
with the worker flavor's node labels; the worker reports its readiness and its finish under its own
name, the manager's workload finishes, and the placement is removed.

The workers' watchers are never silent: whenever simulated time moves on (to a report, an arrival
or a deadline), each worker first says it is alive at the new time (a ``ClockTicked`` under its
name, as ``kueuelog watch --heartbeat`` does), so no worker is taken as lost for being idle.

Manifests: given files (objects of a worker annotated ``kueuelog.io/cluster: NAME``, as for
``simulate``), or the generated world of :func:`services.simcluster.multicluster.demo_manifests`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from events import objects as o
from events.codec import encode
from events.envelope import Envelope, Topics, event_key
from events.manifests import ManifestError, format_time, load
from events.messages import ClockTicked
from services.actuator.loop import Actuator
from services.actuator.sim_multikueue import SimMultiKueuePort
from services.app.convert import expand
from services.app.demo import DemoResult, _Decisions, _outcome, _usage_table
from services.app.driver import Round, drive_live
from services.app.multicluster_input import clusters_of
from services.core.podsready import next_deadline
from services.runtime.sqlite import SqliteLog
from services.scheduler.deadlines import tick_envelope
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import Arrival, ArrivalStream, envelope
from services.simcluster.cluster import GROUP, SimCluster, SimConfig
from services.simcluster.multicluster import demo_manifests
from services.web.workers import worker_clusters

MANAGER = "sim"  # the manager's cluster name on the log, as in the one-cluster demo
MAX_CLUSTERS = 20  # a MultiKueueConfig names at most 20 clusters


def generated_files(clusters: int, jobs: int) -> dict[str, str]:
    """The generated world as one manifest file (what ``--clusters N`` runs without FILEs)."""
    return {"<generated>": yaml.safe_dump_all(demo_manifests(clusters, jobs=jobs), sort_keys=False)}


def schedule(files: Mapping[str, str]) -> tuple[list[Arrival], list[str]]:
    """(the arrivals, the worker clusters): the MultiKueueClusters first (a worker's objects are its
    own only once the manager knows it), then the other objects in input order, then the Workloads
    at their creationTimestamps; each object under its cluster's name."""
    objects = load(files, expand=expand)
    clusters = clusters_of(objects)
    workers = sorted(obj.name for _, obj in objects if isinstance(obj, o.MultiKueueCluster))
    if not workers:
        raise ValueError("no MultiKueueCluster in the manifests: `kueuelog demo --clusters` needs worker "
                         "clusters (or give no FILE to run the generated world)")

    def order(i: int, obj: o.AnyObject) -> tuple[int, int, int]:
        if isinstance(obj, o.MultiKueueCluster):
            return (0, 0, i)
        if isinstance(obj, o.Workload):
            return (obj.creation_time or 0, 2, i)
        return (0, 1, i)

    keyed = sorted((order(i, obj), doc, obj) for i, (doc, obj) in enumerate(objects))
    arrivals = [Arrival(k[0], envelope(doc, obj, time=k[0], cluster=clusters.get(id(obj), MANAGER)))
                for k, doc, obj in keyed]
    return arrivals, workers


@dataclass
class MultiLoop:
    """Scheduler, the manager's actuator, and a simulated cluster per cluster, stepped in turn."""

    scheduler: Scheduler
    actuator: Actuator[SimMultiKueuePort]
    manager: SimCluster
    workers: dict[str, SimCluster]
    arrivals: ArrivalStream
    heartbeat_at: int = -1

    @property
    def sims(self) -> list[SimCluster]:
        return [self.manager, *(self.workers[n] for n in sorted(self.workers))]

    def round(self) -> tuple[Round, int]:
        """As :meth:`services.app.driver.Loop.round`, over every simulated cluster."""
        return self._round(), 0

    def _round(self) -> Round:
        by_scheduler = self.scheduler.step()
        did = self.actuator.step_now() + sum(s.step() for s in self.sims)
        if did or (by_scheduler and (self.scheduler.last_events or self.scheduler.last_decisions)):
            return Round.BUSY
        if self._advance():
            return Round.ADVANCED
        if by_scheduler:
            return Round.BUSY
        done = self.arrivals.exhausted and all(s.done() for s in self.sims)
        return Round.FINISHED if done else Round.STALLED

    def _advance(self) -> bool:
        """Everything idle: the workers say they are alive at the next time anything happens, then
        (next round) the earliest time source acts: a cluster's report, an arrival, a deadline."""
        if not all(s.system_idle() for s in self.sims):
            return False
        due = [(t, i) for i, s in enumerate(self.sims) if (t := s.next_due()) is not None]
        arrival = self.arrivals.next_due()
        deadline = next_deadline(self.scheduler.state)
        times = [t for t in (min(due)[0] if due else None, arrival, deadline) if t is not None]
        if not times:
            return False
        t = min(times)
        log, topics = self.manager.log, self.manager.topics
        if t > self.heartbeat_at:
            self.heartbeat_at = t
            log.append(topics.cluster_events, [_heartbeat(n, t) for n in sorted(self.workers)])
            return True
        if due and min(due)[0] == t:
            return self.sims[min(due)[1]].jump() > 0
        if arrival == t:
            return self.arrivals.release_until(t) > 0
        log.append(topics.cluster_events, [tick_envelope(t, MANAGER)])
        return True


def _heartbeat(cluster: str, at: int) -> tuple[str, bytes]:
    env = Envelope(id=f"sim:heartbeat:{cluster}:{at}", source="watcher", cluster=cluster, event=ClockTicked(time=at))
    return event_key(env), encode(env)


def build(log: SqliteLog, topics: Topics, files: Mapping[str, str], default_duration_ms: int) -> MultiLoop:
    arrivals, workers = schedule(files)
    port = SimMultiKueuePort(topics, MANAGER)
    actuator = Actuator(log, port, topics=topics, placer=port)
    manager = SimCluster.simulated(log, SimConfig(cluster=MANAGER, default_duration_ms=default_duration_ms), topics)
    sims = {n: SimCluster.simulated(log, SimConfig(cluster=n, default_duration_ms=default_duration_ms,
                                                   group=f"{GROUP}-{n}"), topics)
            for n in workers}
    stream = ArrivalStream(log, arrivals, topics=topics)
    return MultiLoop(Scheduler(log, topics=topics), actuator, manager, sims, stream)


@dataclass
class WorkerCounts:
    placements: int = 0  # PlaceWorkload decisions for it, over the run
    finished: int = 0  # workloads that finished there


@dataclass
class MultiDemoResult(DemoResult):
    workers: dict[str, WorkerCounts] = field(default_factory=dict)
    placed_twice: list[str] = field(default_factory=list)  # workloads running in two clusters at once: none
    example: str = ""  # a placed workload's key, for the hints


class _Placed:
    """Checks after every round that no workload runs in two simulated clusters at once."""

    def __init__(self) -> None:
        self.twice: list[str] = []

    def check(self, loop: MultiLoop) -> None:
        running: dict[str, str] = {}
        for name in sorted(loop.workers):
            for key in sorted(loop.workers[name].state.runs):
                if key in running:
                    self.twice.append(f"{key} on {running[key]} and {name}")
                running[key] = name


def _workers_table(loop: MultiLoop, decisions: _Decisions) -> Table:
    """Per worker, what the scheduler sees (``services.web.workers``, as the web view shows it)."""
    table = Table(title="Worker clusters", expand=True)
    for col in ("WORKER", "ACTIVE", "RUNNING", "PLACED", "PLACEMENTS", "FINISHED"):
        table.add_column(col, justify="left" if col == "WORKER" else "right")
    for w in worker_clusters(loop.scheduler.state):
        name = w["name"]
        table.add_row(name, "yes" if w["active"] else "lost", str(w["running"]), str(w["placed"]),
                      str(decisions.placements.get(name, 0)), str(w["finished"]))
    return table


def _view(loop: MultiLoop, decisions: _Decisions, total: int) -> Group:
    state = loop.scheduler.state
    done = sum(1 for r in state.workloads.values() if r.finished)
    header = (f"simulated time {format_time(state.now) if state.now else '-'}   workers {len(loop.workers)}   "
              f"workloads {total}   finished {done}   admissions {decisions.admissions}   "
              f"placements {sum(decisions.placements.values())}   cycles {state.cycles}")
    latest = "\n".join(decisions.latest) or "(no decisions yet)"
    return Group(Panel(header, title="kueuelog demo: MultiKueue"), _workers_table(loop, decisions),
                 _usage_table(loop.scheduler), Panel(latest, title="latest decisions"))


def run_multicluster_demo(files: Mapping[str, str], directory: Path, *, console: Console, pace: float = 0.0,
                          default_duration_ms: int = 60_000) -> MultiDemoResult:
    topics = Topics()
    log = SqliteLog(directory)
    log.exclusive("scheduler")
    loop = build(log, topics, files, default_duration_ms)
    total = sum(1 for a in loop.arrivals.pending if isinstance(getattr(a.envelope.event, "object", None), o.Workload))
    decisions = _Decisions(log, topics)
    placed = _Placed()
    with Live(_view(loop, decisions, total), console=console, refresh_per_second=8, transient=False,
              auto_refresh=False) as live:
        def redraw() -> None:
            decisions.poll()
            live.update(_view(loop, decisions, total), refresh=True)

        drive_live(loop, redraw, pace=pace, each=lambda: placed.check(loop))
    return _result(loop, log, directory, decisions, placed)


def _result(loop: MultiLoop, log: SqliteLog, directory: Path, decisions: _Decisions,
            placed: _Placed) -> MultiDemoResult:
    base = _outcome(loop.scheduler, decisions, directory)
    state = loop.scheduler.state
    counts = {name: WorkerCounts(placements=decisions.placements.get(name, 0))
              for name in sorted({*loop.workers, *decisions.placements})}
    for key, cluster in state.multikueue.cluster_names.items():
        done = state.workloads.get(key)
        if done is not None and done.finished:
            counts.setdefault(cluster, WorkerCounts()).finished += 1
    result = MultiDemoResult(
        **{f.name: getattr(base, f.name) for f in fields(DemoResult)}, workers=counts, placed_twice=placed.twice,
        example=min(state.multikueue.cluster_names, default=min(state.workloads, default="NAMESPACE/NAME")))
    log.close()
    return result


def summary(result: MultiDemoResult) -> list[str]:
    total = sum(c.placements for c in result.workers.values())
    lines = [
        f"{result.workloads} workloads, {result.finished} finished; {result.admissions} admissions, "
        f"{result.evictions} evictions, {total} placements on {len(result.workers)} worker clusters "
        f"in {result.cycles} cycles ({result.decisions} decisions)",
    ]
    for name in sorted(result.workers):
        c = result.workers[name]
        lines.append(f"  {name}: {c.placements} placed, {c.finished} finished there")
    lines.append("  no workload ran in two clusters at once" if not result.placed_twice
                 else f"  RAN IN TWO CLUSTERS AT ONCE: {'; '.join(result.placed_twice)}")
    lines += [
        f"the event log is in {result.directory}",
        f"  kueuelog replay {result.directory} --verify",
        f"  kueuelog explain {result.example} --log {result.directory}",
        f"  kueuelog tail --log {result.directory} --from-start --type AdmitChecked",
    ]
    return lines


def demo_command(args: argparse.Namespace) -> int:
    """``kueuelog demo --clusters N [FILE...]``: exit 2 on bad input, with a one-line error."""
    from services.app import viewcli
    from services.app.demo import new_directory
    from services.runtime.manifestfiles import read_manifests

    if args.clusters < 1 or args.clusters > MAX_CLUSTERS:
        print(f"error: --clusters: between 1 and {MAX_CLUSTERS} worker clusters (MultiKueueConfig "
              f"spec.clusters holds at most {MAX_CLUSTERS}), got {args.clusters}", file=sys.stderr)
        return 2
    if args.jobs < 0:
        print(f"error: --jobs: a number of Jobs, 0 or more, got {args.jobs}", file=sys.stderr)
        return 2
    directory = Path(args.dir) if args.dir else new_directory(Path.cwd())
    if directory.exists() and any(directory.iterdir()):
        print(f"error: {directory} is not empty; the demo writes a fresh log", file=sys.stderr)
        return 2
    try:
        files = read_manifests(args.files) if args.files else generated_files(args.clusters, args.jobs)
        _, workers = schedule(files)  # every error in the input before the log is made
    except (ManifestError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if len(workers) != args.clusters:
        print(f"error: --clusters {args.clusters}, but the manifests name {len(workers)} MultiKueueClusters "
              f"({', '.join(workers)})", file=sys.stderr)
        return 2
    console = Console()
    result = viewcli.run_with_views(args, directory, console, lambda: run_multicluster_demo(
        files, directory, console=console, pace=args.pace, default_duration_ms=args.default_duration * 1000), summary)
    if result.placed_twice:
        print(f"error: a workload ran in two clusters at once: {result.placed_twice[0]}", file=sys.stderr)
        return 1
    return 0
