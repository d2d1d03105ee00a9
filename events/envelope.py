"""The envelope every cluster event travels in, and the topic names.

The envelope says who produced the event (``source``, ``cluster``), gives it a
producer-unique ``id`` (so that duplicates from an at-least-once producer are
recognised) and the schema version it was written with; the event itself
carries its time. Decisions travel without an envelope: each carries its own
deterministic id, cycle and time.
"""

from __future__ import annotations

from typing import Final

import msgspec

from events.messages import ClusterEvent

SCHEMA_VERSION: Final = 1


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    source: str
    event: ClusterEvent
    cluster: str = ""
    schema: int = SCHEMA_VERSION
    correlation_id: str = ""


class Topics(msgspec.Struct, frozen=True, kw_only=True):
    """Topic names, with a common prefix so that several installations can share a broker."""

    prefix: str = "kueuelog"

    @property
    def cluster_events(self) -> str:
        return f"{self.prefix}.cluster-events"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}.decisions"

    @property
    def snapshots(self) -> str:
        return f"{self.prefix}.scheduler-snapshots"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}.dead-letters"


def event_key(env: Envelope) -> str:
    """Partitioning key of a cluster event: the object it is about (order per object is kept)."""
    ev = env.event
    namespace = getattr(ev, "namespace", "")
    name = getattr(ev, "name", "")
    obj = getattr(ev, "object", None)
    if obj is not None:
        namespace = getattr(obj, "namespace", "")
        name = getattr(obj, "name", "")
    return f"{env.cluster}/{namespace}/{name}" if name else env.cluster
