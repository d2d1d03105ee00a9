"""How long a simulated workload runs: the ``kueuelog.io/sim-duration`` annotation.

A real cluster decides how long a Job runs by running it; the simulated cluster
decides it from the Workload's annotation (a Job's annotations are copied to
its Workload), a Go-style duration (``90s``, ``5m``, ``1h30m``, ``1.5h``,
``250ms``) or a bare integer of milliseconds, with a configured default for
workloads without one.

The simulated cluster — not the actuator — owns this lookup, because run
length is a property of the cluster the job runs on: a Kubernetes actuator has
no such notion, and keeping it out of the actuation port keeps that port the
same for both clusters. The index folds ``ObjectApplied(Workload)`` events
from cluster-events in log order, so a lookup made after catching up to a
given offset is a function of the log. The simulated cluster catches it up
when a start names a workload it does not know yet (a Workload is applied
before it is admitted, so it is there by then); a known workload's duration is
the one from the newest catch-up, so an annotation changed after that counts
from the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.cluster import SIM_DURATION_ANNOTATION, SIM_READY_AFTER_ANNOTATION
from events.codec import MalformedRecord, UnknownEventType, decode_envelope
from events.envelope import Topics
from events.messages import ObjectApplied, ObjectDeleted, TreeAdopted
from events.objects import Workload
from events.shardmap import handed_workloads
from events.validation import Invalid, duration_ns
from services.runtime.log import Log


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> int:
    """A duration in whole milliseconds (rounded down): Go syntax, or an integer of ms.

    Exact arithmetic, so ``1.1h`` is 3 960 000 ms, not a float's guess; bounded like Go's
    ``time.Duration`` (and by length), so no annotation can make the parse itself fail.
    """
    text = text.strip()
    if not text:
        raise DurationError("empty duration")
    try:
        return duration_ns(text, bare_ms=True) // 1_000_000
    except Invalid as e:
        raise DurationError(f"{e.message} (expected e.g. 90s, 5m, 1h30m or milliseconds)") from None


NEVER = "never"
FOREVER = -1
"""``Duration.ms`` of ``kueuelog.io/sim-duration: never`` (Deployments', StatefulSets' and
LeaderWorkerSets' Workloads in ``simulate``): the run never ends by itself."""


@dataclass(frozen=True, slots=True)
class Duration:
    ms: int
    source: str  # "annotation" | "default" | "default (invalid annotation: ...)"


def duration_of(annotations: tuple[tuple[str, str], ...] | None, default_ms: int) -> Duration:
    """The run length for a workload with these annotations (``None``: workload unknown)."""
    raw = dict(annotations or ()).get(SIM_DURATION_ANNOTATION)
    if raw is None:
        return Duration(default_ms, "default")
    if raw.strip() == NEVER:
        return Duration(FOREVER, "annotation")  # a serving workload: runs until it is evicted
    try:
        return Duration(parse_duration(raw), "annotation")
    except DurationError as e:
        # Bad input never stops the line: the workload still runs, for the default time.
        return Duration(default_ms, f"default (invalid annotation: {e})")


def ready_after_of(annotations: tuple[tuple[str, str], ...] | None, default_ms: int) -> int | None:
    """How long after a start the workload's pods are all ready: ``kueuelog.io/sim-ready-after``
    (a duration, or ``never``: a gang whose pods never all start; None), else ``default_ms``. A
    bad value counts as the default, as a bad ``sim-duration`` does."""
    raw = dict(annotations or ()).get(SIM_READY_AFTER_ANNOTATION)
    if raw is None:
        return default_ms
    if raw.strip() == NEVER:
        return None
    try:
        return parse_duration(raw)
    except DurationError:
        return default_ms


@dataclass
class AnnotationIndex:
    """Workload annotations by ``namespace/name``, folded from cluster-events.

    In memory only: after a restart it is rebuilt by reading cluster-events from
    0, which is cheap next to everything else a restart re-reads, and avoids a
    second committed position whose only job would be to speed that up.
    """

    log: Log
    topics: Topics = field(default_factory=Topics)
    next_offset: int = 0
    annotations: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    skipped: int = 0  # records that are not (decodable) events: not ours to judge

    def catch_up(self, batch_size: int = 1000) -> None:
        """Fold every cluster event appended so far."""
        while True:
            batch = self.log.read(self.topics.cluster_events, self.next_offset, batch_size)
            if not batch:
                return
            for rec in batch:
                try:
                    event = decode_envelope(rec.value).event
                except (MalformedRecord, UnknownEventType):
                    self.skipped += 1
                    continue
                if isinstance(event, ObjectApplied) and isinstance(event.object, Workload):
                    self.annotations[event.object.key] = event.object.annotations
                elif isinstance(event, ObjectDeleted) and event.kind == "Workload":
                    self.annotations.pop(f"{event.namespace}/{event.name}", None)
                elif isinstance(event, TreeAdopted):  # a tree handed over from another shard
                    for wl in handed_workloads(event.state):
                        self.annotations[wl.key] = wl.annotations
            self.next_offset = batch[-1].offset + 1

    def lookup(self, key: str) -> tuple[tuple[str, str], ...] | None:
        return self.annotations.get(key)
