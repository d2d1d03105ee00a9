"""The simulated cluster: runs admitted workloads for a while and reports on them.

It stands in for Kubernetes in the demo, in simulate-through-services and in
benchmarks. Its "API server" is the log topic ``<prefix>.sim-cluster``
(``events.simcluster``): the actuator writes start/stop commands there, and
this service consumes them (consumer group ``simcluster``) and reports to
cluster-events what a cluster would: ``PodsReady`` after a configurable delay
(default 0), ``WorkloadFinished`` at start + duration, ``EvictionCompleted``
when a stop arrives — also for a workload that already finished or never
started, so that the scheduler always learns the quota is free (a duplicate
completion is harmless: the fold records an anomaly).

Where durations come from: ``services.simcluster.durations`` (the
``kueuelog.io/sim-duration`` annotation of the Workload, read from the
``ObjectApplied`` events on cluster-events; see that module for why the
simulated cluster and not the actuator owns it).

State and crashes. The state (running workloads and their timelines, report
counters, handled decision ids) is a fold of the sim-cluster topic alone: each
start writes a ``RunStarted`` record with its start, ready and end times, and
each report writes a ``Reported`` record. A step's reports to cluster-events,
its status records and its consumer position are committed in ONE
``Log.transact`` (a step that writes nothing commits nothing: its position
goes with the next one that does), so a crash loses or doubles nothing: after a restart
``recover()`` re-reads the topic from 0 and every finish that was due but not
reported (no ``Reported`` record) is still on the timeline and is reported on
the next step. Were the log ever unable to commit both topics atomically, the
order to keep is cluster-events first: reporting twice is acceptable, never
reporting is not.

Two clocks:

- **real**: times come from an injected wall clock (ms); a finish is reported
  when that clock reaches it;
- **simulated**: as fast as possible. Time is the newest time this cluster has
  seen (a command carries its decision's time, which is the newest event time
  the scheduler folded). When the whole system is idle — scheduler and actuator
  have committed the end of cluster-events and decisions, and this cluster has
  read the end of sim-cluster — :meth:`SimCluster.jump` moves the clock to the next due report and emits
  the reports due then. Idleness is stable once seen: nothing appends to those
  topics unless something reads new input, except the time sources (this
  cluster, an arrival stream), which the caller serialises. No wall clock is
  read in this mode.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

import msgspec
import structlog

from events.codec import MalformedRecord, UnknownEventType, encode
from events.envelope import Envelope, Topics, event_key
from events.messages import (
    ClockTicked,
    ClusterEvent,
    EvictionCompleted,
    PodsReady,
    ProvisioningRequestObserved,
    WorkloadFinished,
)
from events.simautoscaler import Behaviour, answers
from events.simcluster import (
    CreateProvisioningRequest,
    Reported,
    ReportKind,
    RequestAnswered,
    RequestCreated,
    RunStarted,
    SimClusterRecord,
    SimRecord,
    StartWorkload,
    StopWorkload,
    decode_sim_record,
    sim_cluster_topic,
)
from services.runtime.log import Log, Record, at_end, caught_up
from services.simcluster.durations import FOREVER, AnnotationIndex, duration_of, ready_after_of

GROUP: Final = "simcluster"
SOURCE: Final = "simcluster"
SCHEDULER_GROUP: Final = "scheduler"
ACTUATOR_GROUP: Final = "actuator"

ClockMode = Literal["simulated", "real"]

_log = structlog.get_logger(__name__)

_READY, _FINISH = 0, 1  # timeline order at equal times: pods become ready before they finish
NEVER: Final = -1  # a RunStarted's ready_at and end_at for a run whose pods never all become ready


@dataclass(frozen=True, slots=True)
class SimConfig:
    cluster: str = "sim"
    default_duration_ms: int = 60_000
    pods_ready_delay_ms: int = 0
    batch_size: int = 500
    # The simulated autoscaler: how each provisioning class answers (events.simautoscaler).
    provisioning: tuple[tuple[str, Behaviour], ...] = ()
    # The consumer group its position is committed under: one per simulated cluster when several
    # share the sim-cluster topic (the MultiKueue workers of ``services.simcluster.workers``).
    group: str = GROUP


@dataclass(slots=True)
class Run:
    run: int
    decision_id: str
    started: int
    ready_at: int
    end_at: int
    ready_reported: bool = False


@dataclass
class SimState:
    """Everything the simulated cluster knows: a fold of its status records."""

    clock: int = 0  # the newest time recorded (simulated mode: "now")
    runs: dict[str, Run] = field(default_factory=dict)  # namespace/name -> the running run
    run_counts: dict[str, int] = field(default_factory=dict)
    report_counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, key) -> n
    handled: set[str] = field(default_factory=set)  # decision ids of commands already carried out
    # (due, _READY|_FINISH, key, run): a heap with lazy deletion; stale entries are skipped on pop.
    timeline: list[tuple[int, int, str, int]] = field(default_factory=list)
    # The simulated autoscaler: ProvisioningRequests by name (namespace/name) and their answers due,
    # (due, request, n) with lazy deletion like the timeline above.
    requests: dict[str, Request] = field(default_factory=dict)
    answers_due: list[tuple[int, str, str, int]] = field(default_factory=list)  # (due, request, created_by, n)


@dataclass(slots=True)
class Request:
    workload: str  # namespace/name
    answers: list[tuple[int, ProvisioningRequestObserved]]  # (due, what the autoscaler reports then)
    created_by: str = ""  # the create command's decision id (a name is reused after a delete)
    answered: int = 0
    deleted: bool = False


StatusRecord = RunStarted | Reported | RequestCreated | RequestAnswered


def _fold_request(state: SimState, record: RequestCreated | RequestAnswered,
                  behaviours: dict[str, Behaviour]) -> bool:
    if isinstance(record, RequestCreated):
        name = f"{record.namespace}/{record.plan.name}"
        existing = state.requests.get(name)
        # Kueue reuses a request's name for the same attempt after an eviction deleted it.
        if existing is not None and (existing.created_by == record.decision_id or not existing.deleted):
            return False
        due = [(record.time + delay, ev) for delay, ev in
               answers(record.plan, record.namespace, record.workload, behaviours)]
        state.requests[name] = Request(f"{record.namespace}/{record.workload}", due, record.decision_id)
        state.handled.add(record.decision_id)
        for n, (at, _) in enumerate(due, start=1):
            heapq.heappush(state.answers_due, (at, name, record.decision_id, n))
    else:
        req = state.requests.get(f"{record.namespace}/{record.name}")
        if (req is None or (record.request_id and record.request_id != req.created_by)
                or (record.deleted and req.deleted) or (not record.deleted and req.answered >= record.n)):
            return False
        if record.deleted:
            req.deleted = True
        else:
            req.answered = record.n
    state.clock = max(state.clock, record.time)
    return True


def fold_status(state: SimState, record: StatusRecord, behaviours: dict[str, Behaviour] | None = None) -> bool:
    """Apply one status record; idempotent (returns False for one already applied), because
    the service applies its records when it writes them and sees them again when it reads."""
    if isinstance(record, RequestCreated | RequestAnswered):
        return _fold_request(state, record, behaviours or {})
    key = f"{record.namespace}/{record.name}"
    if isinstance(record, RunStarted):
        if state.run_counts.get(key, 0) >= record.run:
            return False
        state.run_counts[key] = record.run
        state.runs[key] = Run(record.run, record.decision_id, record.time, record.ready_at, record.end_at)
        state.handled.add(record.decision_id)
        # A stuck gang (kueuelog.io/sim-ready-after: never) has nothing to report until a stop.
        if record.ready_at != NEVER and (record.end_at == NEVER or record.ready_at <= record.end_at):
            heapq.heappush(state.timeline, (record.ready_at, _READY, key, record.run))
        if record.end_at != NEVER:
            heapq.heappush(state.timeline, (record.end_at, _FINISH, key, record.run))
    else:
        counter = (str(record.kind), key)
        if state.report_counts.get(counter, 0) >= record.n:
            return False
        state.report_counts[counter] = record.n
        if record.decision_id:
            state.handled.add(record.decision_id)
        run = state.runs.get(key)
        if run is not None and run.run == record.run:
            if record.kind == ReportKind.PODS_READY:
                run.ready_reported = True
            else:
                del state.runs[key]
    state.clock = max(state.clock, record.time)
    return True


def _valid(state: SimState, entry: tuple[int, int, str, int]) -> bool:
    _, what, key, run_no = entry
    run = state.runs.get(key)
    return run is not None and run.run == run_no and not (what == _READY and run.ready_reported)


@dataclass
class _Out:
    events: list[tuple[str, bytes]] = field(default_factory=list)
    status: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Stats:
    commands: int = 0
    duplicates: int = 0
    foreign: int = 0  # commands for another simulated cluster
    skipped: int = 0  # undecodable records
    reports: dict[str, int] = field(default_factory=dict)
    jumps: int = 0
    anomalies: deque[str] = field(default_factory=lambda: deque(maxlen=100))


class SimCluster:
    """The simulated cluster's state machine over a log; synchronous, so tests and the
    in-process driver can step it deterministically (asyncio runners live in services.runtime)."""

    def __init__(self, log: Log, *, mode: ClockMode, config: SimConfig, topics: Topics,
                 wall_clock: Callable[[], int] | None) -> None:
        if (mode == "real") != (wall_clock is not None):
            raise ValueError("a wall clock is required in real mode and refused in simulated mode")
        self.log = log
        self.mode: ClockMode = mode
        self.config = config
        self.topics = topics
        self.topic = sim_cluster_topic(topics)
        self._wall_clock = wall_clock
        self.behaviours = dict(config.provisioning)
        self.state = SimState()
        self.index = AnnotationIndex(log, topics)
        self.next_offset = 0
        self.stats = Stats()
        self._stale = True  # state not yet rebuilt from the log
        self._annotations_fresh = False  # the annotation index caught up during this step

    @classmethod
    def simulated(cls, log: Log, config: SimConfig | None = None, topics: Topics | None = None) -> SimCluster:
        return cls(log, mode="simulated", config=config or SimConfig(), topics=topics or Topics(), wall_clock=None)

    @classmethod
    def real(cls, log: Log, wall_clock: Callable[[], int], config: SimConfig | None = None,
             topics: Topics | None = None) -> SimCluster:
        return cls(log, mode="real", config=config or SimConfig(), topics=topics or Topics(), wall_clock=wall_clock)

    # --- recovery ----------------------------------------------------------------------------

    def invalidate(self) -> None:
        """The log failed under us: rebuild from it before the next step."""
        self._stale = True

    def recover(self) -> None:
        """Rebuild the state from the sim-cluster topic (from 0) and resume at the committed position."""
        self.state = SimState()
        self.index = AnnotationIndex(self.log, self.topics)
        offset = 0
        while batch := self.log.read(self.topic, offset, 5000):
            for rec in batch:
                # Undecodable records were (or will be) reported by the step that consumes them.
                record = self._decode(rec, quiet=True)
                if isinstance(record, StatusRecord) and self._mine(record):
                    fold_status(self.state, record, self.behaviours)
            offset = batch[-1].offset + 1
        self.next_offset = self.log.position(self.config.group, self.topic)
        self._stale = False

    # --- the live step -----------------------------------------------------------------------

    def step(self) -> int:
        """Carry out one batch of commands and report what is due; returns records read + reported."""
        if self._stale:
            self.recover()
        batch = self.log.read(self.topic, self.next_offset, self.config.batch_size)
        out = _Out()
        self._annotations_fresh = False
        self._emit_due(self._now(), out)
        for rec in batch:
            record = self._decode(rec)
            if record is None or not self._mine(record):
                continue
            if isinstance(record, StatusRecord):
                fold_status(self.state, record, self.behaviours)  # our own record read back (or a predecessor's)
                continue
            # What fell due before this command happened before it (a stop right after a start
            # finds the pods ready), and a start with no ready delay is ready at once.
            self._emit_due(self._now(record.time), out)
            if isinstance(record, StartWorkload):
                self._start(record, out)
            elif isinstance(record, CreateProvisioningRequest):
                self._create_request(record, out)
            else:
                self._stop(record, out)
            self._emit_due(self._now(record.time), out)
        self._emit_due(self._now(), out)
        if batch:
            self.next_offset = batch[-1].offset + 1
        if out.status:
            self._commit(out)
        # A batch that carried nothing out (our own status records read back, duplicates, other
        # clusters' commands) commits nothing: its position goes with the next step that writes.
        # Re-reading it after a restart is harmless, and a transaction for the position alone
        # cost the broker as much as one with records, every other step.
        return len(batch) + len(out.events)

    def _now(self, command_time: int = 0) -> int:
        if self._wall_clock is not None:
            return self._wall_clock()
        return max(self.state.clock, command_time)

    def _start(self, cmd: StartWorkload, out: _Out) -> None:
        self.stats.commands += 1
        if cmd.decision_id in self.state.handled:
            self.stats.duplicates += 1
            return
        key = f"{cmd.namespace}/{cmd.name}"
        now = self._now(cmd.time)
        annotations = self.index.lookup(key)
        if annotations is None and not self._annotations_fresh:
            # The Workload was applied before it was admitted, so catching up finds it. Only for
            # a workload not seen yet, and once per batch: on a busy cluster-events topic each
            # catch-up chases the end for tens of ms, and it stood between every command and its run.
            self.index.catch_up()
            self._annotations_fresh = True
            annotations = self.index.lookup(key)
        duration = duration_of(annotations, self.config.default_duration_ms)
        ready_after = ready_after_of(annotations, self.config.pods_ready_delay_ms)
        running = self.state.runs.get(key)
        if running is not None:
            # The scheduler admits only a workload that holds no quota, so a stop was lost
            # upstream; the new run replaces the old one, which will never report.
            self._anomaly(f"start of {key} by {cmd.decision_id} while run {running.run} "
                          f"(by {running.decision_id}) is running: replaced")
        self._record(out, RunStarted(
            time=now, cluster=self.config.cluster, decision_id=cmd.decision_id, namespace=cmd.namespace,
            name=cmd.name, run=self.state.run_counts.get(key, 0) + 1,
            # A gang that never gets all its pods never runs to its end either: it hangs until evicted.
            ready_at=NEVER if ready_after is None else now + ready_after,
            end_at=NEVER if ready_after is None or duration.ms == FOREVER else now + duration.ms,
            duration_source=duration.source, node_selector=cmd.node_selector,
        ))

    def _create_request(self, cmd: CreateProvisioningRequest, out: _Out) -> None:
        """Kubernetes: the ProvisioningRequest and its PodTemplates are created; the simulated
        autoscaler will answer it. A name that exists already is not created twice."""
        self.stats.commands += 1
        existing = self.state.requests.get(f"{cmd.namespace}/{cmd.plan.name}")
        if cmd.decision_id in self.state.handled or (existing is not None and not existing.deleted):
            self.stats.duplicates += 1
            return
        self._record(out, RequestCreated(time=self._now(cmd.time), cluster=self.config.cluster,
                                         decision_id=cmd.decision_id, namespace=cmd.namespace,
                                         workload=cmd.workload, plan=cmd.plan))

    def _delete_requests(self, namespace: str, workload: str, decision_id: str, out: _Out) -> None:
        """The workload was evicted: Kueue deletes its ProvisioningRequests, which stop answering."""
        key = f"{namespace}/{workload}"
        for name in sorted(n for n, r in self.state.requests.items() if r.workload == key and not r.deleted):
            self._record(out, RequestAnswered(time=self._now(), cluster=self.config.cluster, namespace=namespace,
                                              name=name.partition("/")[2], n=0, deleted=True,
                                              decision_id=decision_id,
                                              request_id=self.state.requests[name].created_by))

    def _stop(self, cmd: StopWorkload, out: _Out) -> None:
        self.stats.commands += 1
        if cmd.decision_id in self.state.handled:
            self.stats.duplicates += 1
            return
        self._delete_requests(cmd.namespace, cmd.name, cmd.decision_id, out)
        run = self.state.runs.get(f"{cmd.namespace}/{cmd.name}")
        # Reported even when nothing runs (finished already, never started): the scheduler
        # waits for this to release the quota, and a duplicate costs it only an anomaly.
        self._report(out, ReportKind.EVICTION_COMPLETED, cmd.namespace, cmd.name, self._now(cmd.time),
                     run=run.run if run is not None else 0, decision_id=cmd.decision_id)

    def _answer_due(self, now: int, out: _Out) -> None:
        """Report the autoscaler's answers due at or before ``now``, in time order."""
        due = self.state.answers_due
        while due and due[0][0] <= now:
            at, name, created_by, n = heapq.heappop(due)
            req = self.state.requests.get(name)
            if req is None or req.created_by != created_by or req.deleted or req.answered >= n:
                continue
            event = msgspec.structs.replace(req.answers[n - 1][1], time=at)
            env = Envelope(id=f"sim:provisioning:{name}:{created_by}:{n}", source=SOURCE, cluster=self.config.cluster,
                           event=event)
            out.events.append((event_key(env), encode(env)))
            namespace, _, pr = name.partition("/")
            self._record(out, RequestAnswered(time=at, cluster=self.config.cluster, namespace=namespace, name=pr, n=n,
                                              request_id=created_by))
            self.stats.reports["provisioning"] = self.stats.reports.get("provisioning", 0) + 1

    def _emit_due(self, now: int, out: _Out) -> None:
        """Report everything on the timeline due at or before ``now``, in time order."""
        self._answer_due(now, out)
        timeline = self.state.timeline
        while timeline and timeline[0][0] <= now:
            entry = heapq.heappop(timeline)
            if not _valid(self.state, entry):
                continue
            due, what, key, run_no = entry
            namespace, _, name = key.partition("/")
            kind = ReportKind.PODS_READY if what == _READY else ReportKind.FINISHED
            self._report(out, kind, namespace, name, due, run=run_no)

    def _report(self, out: _Out, kind: ReportKind, namespace: str, name: str, time: int, *, run: int,
                decision_id: str = "") -> None:
        key = f"{namespace}/{name}"
        n = self.state.report_counts.get((str(kind), key), 0) + 1
        envelope_id = f"sim:{kind}:{key}:{n}"
        event: ClusterEvent
        if kind == ReportKind.PODS_READY:
            event = PodsReady(time=time, namespace=namespace, name=name)
        elif kind == ReportKind.FINISHED:
            event = WorkloadFinished(time=time, namespace=namespace, name=name, succeeded=True,
                                     message=f"simulated run {run} completed")
        else:
            event = EvictionCompleted(time=time, namespace=namespace, name=name)
        env = Envelope(id=envelope_id, source=SOURCE, cluster=self.config.cluster, event=event)
        out.events.append((event_key(env), encode(env)))
        self._record(out, Reported(time=time, cluster=self.config.cluster, kind=kind, namespace=namespace,
                                   name=name, n=n, run=run, decision_id=decision_id, envelope_id=envelope_id))
        self.stats.reports[str(kind)] = self.stats.reports.get(str(kind), 0) + 1

    def _record(self, out: _Out, record: StatusRecord) -> None:
        fold_status(self.state, record, self.behaviours)
        key = record.workload if isinstance(record, RequestCreated) else record.name
        out.status.append((f"{record.namespace}/{key}", encode(record)))

    def _commit(self, out: _Out) -> None:
        appends: dict[str, list[tuple[str, bytes]]] = {}
        if out.events:
            appends[self.topics.cluster_events] = out.events
        if out.status:
            appends[self.topic] = out.status
        try:
            self.log.transact(appends, {(self.config.group, self.topic): self.next_offset})
        except BaseException:
            # The state already holds what was not committed: rebuild it from the log next time.
            self._stale = True
            raise

    # --- simulated time ----------------------------------------------------------------------

    def next_due(self) -> int | None:
        """When the next report is due (pods ready or a finish), or None if nothing runs."""
        timeline = self.state.timeline
        while timeline and not _valid(self.state, timeline[0]):
            heapq.heappop(timeline)
        due = self.state.answers_due
        while due and not self._answer_pending(due[0]):
            heapq.heappop(due)
        times = [q[0][0] for q in (timeline, due) if q]
        return min(times) if times else None

    def _answer_pending(self, entry: tuple[int, str, str, int]) -> bool:
        req = self.state.requests.get(entry[1])
        return req is not None and req.created_by == entry[2] and not req.deleted and req.answered < entry[3]

    def system_idle(self) -> bool:
        """Every consumer is at the end of its input (scheduler and actuator by their committed
        positions, this cluster by what it has read): nothing can happen until a time source acts."""
        log, t = self.log, self.topics
        # Our own position is the one in memory: a step that only read back status records does
        # not commit it (see ``step``).
        return (caught_up(log, SCHEDULER_GROUP, t.cluster_events) and caught_up(log, ACTUATOR_GROUP, t.decisions)
                and at_end(log, self.topic, self.next_offset))

    def jump(self, limit: int | None = None) -> int:
        """Simulated mode: if the system is idle, move the clock to the next due time (if it is not
        after ``limit``, e.g. another time source's next event) and report what is due; returns reports."""
        if self.mode != "simulated":
            raise RuntimeError("jump() is for simulated time; in real time reports follow the wall clock")
        if self._stale:
            self.recover()
        due = self.next_due()
        if due is None or (limit is not None and due > limit) or not self.system_idle():
            return 0
        out = _Out()
        self._emit_due(due, out)
        self._commit(out)
        self.stats.jumps += 1
        return len(out.events)

    def tick_to(self, at: int) -> bool:
        """Simulated mode, system idle and nothing due before ``at``: move time on to ``at`` with a
        clock event (the end of an admission check's back-off, which only the scheduler knows)."""
        if self._stale:
            self.recover()
        if not self.system_idle() or at <= self.state.clock:
            return False
        env = Envelope(id=f"sim:tick:{at}", source=SOURCE, cluster=self.config.cluster, event=ClockTicked(time=at))
        out = _Out(events=[(event_key(env), encode(env))])
        self._commit(out)
        self.state.clock = at
        self.stats.jumps += 1
        return True

    def done(self) -> bool:
        """Nothing runs and nothing is left to process."""
        return self.next_due() is None and self.system_idle()

    def wait_hint_ms(self) -> int | None:
        """Real mode: how long until the next report is due (None: nothing scheduled)."""
        due = self.next_due()
        if due is None or self._wall_clock is None:
            return None
        return max(0, due - self._wall_clock())

    # --- helpers -----------------------------------------------------------------------------

    def _mine(self, record: SimRecord) -> bool:
        if record.cluster and record.cluster != self.config.cluster:
            if isinstance(record, StartWorkload | StopWorkload):
                self.stats.foreign += 1
            return False
        return True

    def _decode(self, rec: Record, *, quiet: bool = False) -> SimClusterRecord | None:
        try:
            return decode_sim_record(rec.value)
        except (MalformedRecord, UnknownEventType) as e:
            if quiet:
                return None
            # Not a fact the scheduler folds: a consumer other than the scheduler skips with a warning.
            self.stats.skipped += 1
            _log.warning("sim-cluster record skipped", offset=rec.offset, error=str(e))
            return None

    def _anomaly(self, message: str) -> None:
        self.stats.anomalies.append(message)
        _log.warning("simcluster anomaly", message=message)
