"""Canonical encoding of the scheduler state, generic over its canonical fields.

What is encoded is decided in one place: the canonical fields of ``State`` and
of ``WorkloadRecord`` (``records.canonical_fields``: every dataclass field not
marked derived). The wire types are built from those fields and their
annotations when this module is imported, so a new canonical field is encoded
and restored without touching this module (``tests/unit/test_snapshot.py``
sets every canonical field through a real history and checks each comes back,
so a field of a type JSON cannot hold shows there). The derived parts
(``index``, ``cache``, a record's usage, key and queue) are left out and
rebuilt.

Mappings are encoded in sorted key order, so that two states are equal exactly
when their encodings are byte-identical. Two field types need a form JSON can
hold, chosen by type, not by field name: a condition map (whose order is the
order conditions were first set) is a list, and a map keyed by (podSet, group)
pairs is a sorted list of triples.

:data:`FORMAT` names how a snapshot record holds the state: since 9, this
encoding deflated (zlib) and carried as a base64 JSON string (:func:`pack_state`),
written piece by piece, so that writing a snapshot never holds the whole JSON
state, nor a tree of plain data for it, in memory: a large state's JSON is tens of
MB, and every copy of it (ours, then the Kafka client's) was resident at once.
Format 8 (the encoding as it is) is still read. Snapshots written with another
format (older ones carry none) are not decoded: the scheduler replays the log instead.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar, get_type_hints

import msgspec

from events.messages import Condition
from services.core import records, state
from services.core.records import WorkloadRecord, canonical_fields
from services.core.state import State

FORMAT: Final = 9
"""The snapshot format: 1 was the hand-listed encoding (snapshots without a format field), 2 this one
before ``WorkloadRecord.last_cycle``, 3 before deactivation (``State.deactivating``,
``WorkloadRecord.deactivated``, ...), 4 before admission checks (``WorkloadRecord.checks``, ...) —
deactivation alone wrote 4 —, 5 before admission fair sharing (``State.afs``), 6 before MultiKueue
(``State.multikueue``), 7 before elastic scale-up (``State.slices``), 8 this one as plain JSON,
9 this one deflated (:func:`pack_state`)."""
PLAIN_FORMAT: Final = 8
READABLE_FORMATS: Final = (PLAIN_FORMAT, FORMAT)


_encoder = msgspec.json.Encoder(order="sorted")
T = TypeVar("T")


# --- field types JSON cannot hold as they are -------------------------------------------------

_Triples = list[tuple[int, int, int]]


def _conditions_out(value: dict[str, Condition]) -> list[Condition]:
    return list(value.values())


def _conditions_in(value: list[Condition]) -> dict[str, Condition]:
    return {c.type: c for c in value}


def _pairs_out(value: dict[tuple[int, int], int] | None) -> _Triples | None:
    return None if value is None else sorted((a, b, v) for (a, b), v in value.items())


def _pairs_in(value: _Triples | None) -> dict[tuple[int, int], int] | None:
    return None if value is None else {(a, b): v for a, b, v in value}


_ADAPTERS: dict[object, tuple[object, Callable[..., object], Callable[..., object]]] = {
    dict[str, Condition]: (list[Condition], _conditions_out, _conditions_in),
    dict[tuple[int, int], int] | None: (_Triples | None, _pairs_out, _pairs_in),
}
"""In-memory type -> (wire type, to the wire, from the wire)."""


class _Codec(Generic[T]):
    """Encodes and decodes the canonical fields of one dataclass."""

    def __init__(self, cls: type[T], namespace: dict[str, object], overrides: dict[str, object]) -> None:
        hints = get_type_hints(cls, globalns=namespace)
        self.make: Callable[..., T] = cls
        self.names = canonical_fields(cls)
        self.out: dict[str, Callable[..., object]] = {}
        self.into: dict[str, Callable[..., object]] = {}
        wire_fields: list[tuple[str, object]] = []
        for name in self.names:
            wire_type = overrides.get(name, hints[name])
            adapter = _ADAPTERS.get(hints[name]) if name not in overrides else None
            if adapter is not None:
                wire_type, self.out[name], self.into[name] = adapter
            wire_fields.append((name, wire_type))
        self.wire: type[msgspec.Struct] = msgspec.defstruct(
            f"{cls.__name__}Wire", wire_fields, kw_only=True, forbid_unknown_fields=True,
        )

    def to_wire(self, obj: T) -> dict[str, object]:
        out = self.out
        return {name: (out[name](getattr(obj, name)) if name in out else getattr(obj, name)) for name in self.names}

    def build(self, wire: msgspec.Struct, **given: object) -> T:
        """An instance from its wire form; ``given`` fields are taken as they are."""
        into = self.into
        values = {name: (into[name](getattr(wire, name)) if name in into else getattr(wire, name))
                  for name in self.names if name not in given}
        return self.make(**values, **given)


_RECORD = _Codec(WorkloadRecord, vars(records), {})
_STATE = _Codec(State, vars(state), {"workloads": dict[str, _RECORD.wire]})  # type: ignore[name-defined]
# Decoded in two passes, the records one at a time (see encode_state: one long call holds the GIL).
_STATE_RAW = msgspec.defstruct("StateRawWire", [(f.name, dict[str, msgspec.Raw] if f.name == "workloads" else f.type)
                                               for f in msgspec.structs.fields(_STATE.wire)],
                               kw_only=True, forbid_unknown_fields=True)
_decoder = msgspec.json.Decoder(_STATE_RAW)
_record_decoder = msgspec.json.Decoder(_RECORD.wire)


def canonical(s: State) -> dict[str, object]:
    """The canonical part of ``s`` as plain data (what a snapshot holds)."""
    data = _STATE.to_wire(s)
    data["workloads"] = {k: _RECORD.to_wire(r) for k, r in s.workloads.items()}
    return data


def encode_state(s: State) -> bytes:
    """The bytes of ``_encoder.encode(canonical(s))``, put together a workload at a time
    (:func:`encoded_pieces`): one call over 50,000 workloads built a dict of every record (hundreds
    of MiB) and then held the GIL for the whole encoding, long enough at that size for the log's
    I/O thread to miss its heartbeats (a Kafka scheduler lost its leadership to its own snapshot)."""
    return b"".join(encoded_pieces(s))


def decode_state(data: bytes) -> State:
    """The inverse of :func:`encode_state`; the derived parts are rebuilt (the indices on first use)."""
    wire = _decoder.decode(data)
    wire_records: dict[str, msgspec.Raw] = getattr(wire, "workloads")  # noqa: B009 - a built type
    return _STATE.build(wire, workloads={key: _RECORD.build(_record_decoder.decode(raw))
                                         for key, raw in wire_records.items()})


# --- the snapshot record's form: deflated, written piece by piece --------------------------------

_HOLE: Final = b"\x00workloads\x00"  # JSON never holds a raw NUL byte: this cannot occur in an encoding
_PIECE: Final = 1 << 20  # bytes of encoded records handed to the compressor at a time
_LEVEL: Final = 1  # the state's JSON is repetitive: the fastest level already shrinks it about tenfold


def encoded_pieces(s: State) -> Iterator[bytes]:
    """:func:`encode_state` of ``s`` in consecutive pieces (joined, byte for byte the same), built
    one workload record at a time: neither the whole encoding nor its plain data is held at once."""
    data = _STATE.to_wire(s)
    data["workloads"] = msgspec.Raw(_HOLE)
    head, tail = _encoder.encode(data).split(_HOLE)
    buf = bytearray(head)
    buf += b"{"
    for i, key in enumerate(sorted(s.workloads)):
        if i:
            buf += b","
        _encoder.encode_into(key, buf, -1)
        buf += b":"
        _encoder.encode_into(_RECORD.to_wire(s.workloads[key]), buf, -1)
        if len(buf) >= _PIECE:
            yield bytes(buf)
            buf.clear()
    buf += b"}"
    buf += tail
    yield bytes(buf)


def pack_state(s: State) -> bytes:
    """The JSON value a snapshot record of :data:`FORMAT` holds for ``s``: a base64 string of the
    deflated :func:`encode_state`."""
    deflate = zlib.compressobj(_LEVEL)
    parts = [deflate.compress(piece) for piece in encoded_pieces(s)]
    parts.append(deflate.flush())
    return _encoder.encode(b"".join(parts))


def unpack_state(value: bytes, fmt: int) -> State:
    """The state a snapshot record of format ``fmt`` (one of :data:`READABLE_FORMATS`) holds as
    ``value``. A damaged one raises ``ValueError`` (or ``msgspec.DecodeError``, one of them)."""
    if fmt == PLAIN_FORMAT:
        return decode_state(value)
    if fmt != FORMAT:
        raise ValueError(f"snapshot format {fmt} is not one of {READABLE_FORMATS}")
    deflated = msgspec.json.decode(value, type=bytes)
    try:
        data = zlib.decompress(deflated)
    except zlib.error as e:
        raise ValueError(f"snapshot state does not inflate: {e}") from e
    del deflated
    return decode_state(data)
