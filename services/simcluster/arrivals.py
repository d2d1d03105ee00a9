"""The watcher over a simulated cluster: manifests become ``ObjectApplied`` events.

For the demo and simulate-through-services there is no API server to watch;
the objects a batch admin and the batch users would have created are manifest
files. This module turns them (``events.manifests.load``, which validates
everything first) into envelopes on cluster-events, either

- all at once (:func:`seed_all`), in file order, in one atomic append; or
- as an arrival stream (:class:`ArrivalStream`) ordered by the objects'
  ``creationTimestamp``, non-Workload objects first at time 0, released by a
  clock: simulated (an object arrives at its creation time, when the system
  is idle and nothing else is due earlier) or real (the gaps between creation
  times replayed on the wall clock from the stream's start, optionally
  compressed).

Each envelope's id is ``seed:<file>:<document>`` — deterministic, so seeding
is idempotent: ids already on cluster-events are not appended again, and a
restarted stream resumes after what it had released.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from events import objects as o
from events.codec import MalformedRecord, UnknownEventType, decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.manifests import Document, load
from events.messages import ObjectApplied
from services.runtime.log import Log
from services.runtime.manifestfiles import read_manifests

SOURCE: Final = "watcher"
ID_PREFIX: Final = "seed:"


def read_files(paths: Iterable[str | Path]) -> dict[str, str]:
    """File name -> text, in the order given (the order objects are applied in)."""
    return read_manifests(paths)


def seed_id(obj: o.AnyObject) -> str:
    """The id of a seeded object's envelope: the object and a digest of its content, so seeding the
    same manifests again (through whatever path spelling) appends nothing, while a changed object
    is applied as an update."""
    digest = hashlib.sha256(encode(obj)).hexdigest()[:16]
    return f"{ID_PREFIX}{type(obj).__name__}:{getattr(obj, 'namespace', '')}/{getattr(obj, 'name', '')}:{digest}"


def envelope(doc: Document, obj: o.AnyObject, *, time: int, cluster: str) -> Envelope:
    del doc  # where the object was written does not make it another object
    return Envelope(id=seed_id(obj), source=SOURCE, cluster=cluster, event=ObjectApplied(time=time, object=obj))


def seeded_ids(log: Log, topics: Topics) -> set[str]:
    """Ids of the seed envelopes already on cluster-events."""
    out: set[str] = set()
    offset = 0
    while batch := log.read(topics.cluster_events, offset, 5000):
        for rec in batch:
            if b'"seed:' not in rec.value:
                continue  # cheap pre-filter: most records are not ours
            try:
                env = decode_envelope(rec.value)
            except (MalformedRecord, UnknownEventType):
                continue
            if env.id.startswith(ID_PREFIX):
                out.add(env.id)
        offset = batch[-1].offset + 1
    return out


def _append(log: Log, topics: Topics, envelopes: Sequence[Envelope]) -> int:
    if envelopes:
        log.append(topics.cluster_events, [(event_key(e), encode(e)) for e in envelopes])
    return len(envelopes)


def seed_all(log: Log, objects: Sequence[tuple[Document, o.AnyObject]], *, topics: Topics | None = None,
             cluster: str = "sim", now: int = 0) -> int:
    """Append every object in input order, atomically; returns how many were new.

    A Workload's event time is its creationTimestamp when it has one (that is when it was
    created; its queue order is that anyway), every other object's is ``now``.
    """
    topics = topics or Topics()
    done = seeded_ids(log, topics)
    envelopes = [
        envelope(doc, obj, cluster=cluster,
                 time=obj.creation_time if isinstance(obj, o.Workload) and obj.creation_time is not None else now)
        for doc, obj in objects
        if seed_id(obj) not in done
    ]
    return _append(log, topics, envelopes)


@dataclass(frozen=True, slots=True)
class Arrival:
    due: int  # when it arrives (ms): also its event time
    envelope: Envelope


def arrival_schedule(objects: Sequence[tuple[Document, o.AnyObject]], *, start: int | None = None,
                     compress: int = 1, cluster: str = "sim") -> list[Arrival]:
    """Objects in arrival order: non-Workloads first, then Workloads by creationTimestamp
    (input order breaks ties; a Workload without one arrives first among them).

    ``start`` None is simulated time: an object arrives at its creation time, the others at 0.
    With ``start`` (a wall-clock ms), the first arrival is at ``start`` and the gaps between
    creation times are kept, divided by ``compress``.
    """
    if compress < 1:
        raise ValueError(f"compress must be a positive integer, got {compress}")
    created = [obj.creation_time for _, obj in objects
               if isinstance(obj, o.Workload) and obj.creation_time is not None]
    first = min(created, default=0)
    origin = 0 if start is None else start

    def due(obj: o.AnyObject) -> int:
        if not isinstance(obj, o.Workload) or obj.creation_time is None:
            return origin
        if start is None:
            return obj.creation_time
        return start + (obj.creation_time - first) // compress

    keyed = [((due(obj), isinstance(obj, o.Workload), i), doc, obj) for i, (doc, obj) in enumerate(objects)]
    keyed.sort(key=lambda t: t[0])
    return [Arrival(k[0], envelope(doc, obj, time=k[0], cluster=cluster)) for k, doc, obj in keyed]


class ArrivalStream:
    """Releases a schedule of arrivals onto cluster-events as a clock reaches them.

    The clock is the caller's: ``release_until(t)`` with simulated time (when the system is
    idle and ``next_due()`` is the earliest thing to happen) or with the wall clock.
    """

    def __init__(self, log: Log, schedule: Sequence[Arrival], *, topics: Topics | None = None) -> None:
        self.log = log
        self.topics = topics or Topics()
        done = seeded_ids(log, self.topics)
        self.pending = [a for a in schedule if a.envelope.id not in done]  # resume after a restart
        self.released = 0

    @classmethod
    def from_files(cls, log: Log, files: Mapping[str, str], *, start: int | None = None, compress: int = 1,
                   cluster: str = "sim", topics: Topics | None = None,
                   expand: Callable[[list[Document]], list[Document]] | None = None) -> ArrivalStream:
        """``expand``: front-end kinds to Kueue's (``services.app.convert.expand``), as ``load`` takes it."""
        return cls(log, arrival_schedule(load(files, expand=expand), start=start, compress=compress, cluster=cluster),
                   topics=topics)

    @property
    def exhausted(self) -> bool:
        return not self.pending

    def next_due(self) -> int | None:
        return self.pending[0].due if self.pending else None

    def release_until(self, t: int) -> int:
        """Append (atomically) every arrival due at or before ``t``; returns how many."""
        n = 0
        while n < len(self.pending) and self.pending[n].due <= t:
            n += 1
        _append(self.log, self.topics, [a.envelope for a in self.pending[:n]])
        del self.pending[:n]
        self.released += n
        return n
