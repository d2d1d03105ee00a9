"""One record per Workload, and what marks a field as canonical or derived.

A ``WorkloadRecord`` holds what the log has said about one Workload and what the
scheduler decided for it: its resolved priority, admission, conditions, whether
it is parked as inadmissible, where its flavor search resumes. Those fields are
*canonical*: a snapshot holds them, and two states are equal exactly when they
agree on them.

A few fields are *derived* and marked so (``metadata=DERIVED``): they are
functions of the canonical fields (the usage of an admission, the
``namespace/name`` key) or of the derived indices (the ClusterQueue whose queue
holds the workload). Snapshots leave them out; they come back on construction
(``__post_init__``) or with ``index.rebuild``. :func:`canonical_fields` is the
one place that tells them apart, so a snapshot cannot forget a new field.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from types import MappingProxyType
from typing import Final

from events import objects as o
from events.messages import Condition
from services.core.quota import FR
from services.core.slices import scaled_usage

QueueKey = tuple[int, int, int, int, str]
"""Queue order: (not a sticky preemptor, -priority, queue timestamp, input order, namespace/name)."""

DERIVED: Final = MappingProxyType({"canonical": False})
"""Field metadata for a field that is not canonical: left out of snapshots, rebuilt from the rest."""


def is_canonical(f: Field[object]) -> bool:
    return bool(f.metadata.get("canonical", True))


def canonical_fields(cls: type) -> tuple[str, ...]:
    """The names of ``cls``'s canonical fields, in declaration order."""
    return tuple(f.name for f in fields(cls) if is_canonical(f))


@dataclass(slots=True)
class WorkloadRecord:
    obj: o.Workload
    seq: int
    queue_time: int
    priority: int = 0
    priority_error: str = ""
    admission: o.Admission | None = None
    reserved_at: int | None = None
    evicting: bool = False
    finished: bool = False
    inadmissible: bool = False
    conditions: dict[str, Condition] = field(default_factory=dict)  # in the order they were first set
    pending_reason: str = ""
    # Kueue's LastAssignment: where the flavor search resumes, valid while the ClusterQueue's
    # generation is unchanged (or, with FlavorFungibilityPreserveScanProgress, in the cycle
    # right after the one that recorded it).
    last_tried: dict[tuple[int, int], int] | None = None
    last_generation: tuple[int, int] = (0, 0)
    last_cycle: int = 0
    # Issued preemptions and waits for its victims: heads its BestEffortFIFO queue until admitted,
    # so that a workload unparked meanwhile cannot take its place every time (as in Kueue's main).
    sticky: bool = False
    # The scheduler deactivated it (Kueue's DeactivationTarget, then spec.active=false): why, and
    # the message. Inactive while set or while its spec says ``active: false`` (``deactivation``).
    deactivated: bool = False
    deactivation_cause: str = ""
    deactivation_message: str = ""
    # Kueue's status.requeueState: PodsReady timeouts counted toward the back-off limit, and when
    # (ms) the workload may be queued again (None: at once). See services.core.podsready.
    requeue_count: int = 0
    requeue_at: int | None = None
    # Kueue's status.accumulatedPastExecutionTimeSeconds, in ms: time admitted before its last eviction.
    past_execution_ms: int = 0
    # Two-phase admission (services.core.checks): the admission checks' states by name. A Retry's
    # back-off end is requeue_at (above); a Rejected check deactivates it.
    checks: dict[str, o.AdmissionCheckState] = field(default_factory=dict)
    # --- derived ---
    usage: dict[FR, int] = field(default_factory=dict, metadata=DERIVED)  # what its admission uses
    queued_in: str = field(default="", metadata=DERIVED)  # the ClusterQueue whose queue holds it while pending
    key: str = field(default="", metadata=DERIVED)  # namespace/name, fixed for the record's life

    def __post_init__(self) -> None:
        self.key = f"{self.obj.namespace}/{self.obj.name}"
        if self.admission is not None and not self.usage:
            self.usage = admission_usage(self.admission, self.obj.pod_sets)

    def queue_key(self) -> QueueKey:
        return (0 if self.sticky else 1, -self.priority, self.queue_time, self.seq, self.key)

    @property
    def pending(self) -> bool:
        return self.admission is None and not self.finished

    @property
    def active(self) -> bool:
        """Kueue's ``IsActive``: neither its spec nor the scheduler deactivated it (``services.core.deactivation``)."""
        return self.obj.active and not self.deactivated

    def set_condition(self, c: Condition) -> None:
        old = self.conditions.get(c.type)
        if old is not None and old.status == c.status:
            # Kueue keeps lastTransitionTime when the status does not change.
            c = Condition(type=c.type, status=c.status, reason=c.reason, message=c.message,
                          last_transition_time=old.last_transition_time)
        self.conditions[c.type] = c


def admission_usage(adm: o.Admission, pod_sets: tuple[o.PodSet, ...] = ()) -> dict[FR, int]:
    """What an admission uses, by flavor and resource; a podSet whose count in ``pod_sets`` has
    shrunk below its admitted count (an elastic Job scaled down) uses its admitted usage scaled to
    the new count (services/core/slices.py)."""
    counts = {ps.name: ps.count for ps in pod_sets}
    usage: dict[FR, int] = {}
    for psa in adm.pod_set_assignments:
        flavors = dict(psa.flavors)
        for res, amount in scaled_usage(psa, counts.get(psa.name, psa.count)):
            flavor = flavors.get(res)
            if flavor is None:
                continue
            fr = (flavor, res)
            usage[fr] = usage.get(fr, 0) + amount
    return usage
