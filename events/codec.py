"""JSON on the wire: one encoder and decoder per process, built once.

Decoding a cluster event distinguishes the three things that can be wrong with
a record, because the scheduler must treat them differently:

- :class:`MalformedRecord` — not JSON, or not a valid event (a dead letter;
  the scheduler carries on);
- :class:`UnknownEventType` — a well-formed record whose event type this
  version does not know (a newer producer); the scheduler must stop rather than
  skip a fact;
- old schema versions are upcast before they are converted.

Decoding is bounded: a cluster event larger than ``MAX_RECORD_BYTES`` (a tree's
state handed over between shards: ``MAX_HAND_OVER_BYTES``) or nested
deeper than ``MAX_NESTING`` is malformed before msgspec sees it, so that no
record can exhaust the stack (msgspec recurses) or the memory, and a poison
record is a dead letter rather than a crash on every restart. Decision records
are the scheduler's own and may be large (a cycle's head outcomes; the log's
topics take up to 100 MiB), so they are not measured first; one too deep for
msgspec is malformed all the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

import msgspec

from events.envelope import SCHEMA_VERSION, Envelope
from events.messages import ClusterEvent, DecisionRecord
from events.validation import MAX_HAND_OVER_BYTES, MAX_RECORD_BYTES, json_nesting_problem


class MalformedRecord(ValueError):
    """The bytes are not a valid record of this kind."""


class UnknownEventType(ValueError):
    """A well-formed record with an event type this version does not know."""

    def __init__(self, event_type: str) -> None:
        super().__init__(f"unknown event type {event_type!r}: a newer producer wrote it; upgrade this consumer")
        self.event_type = event_type


def _tags(union: Any) -> frozenset[str]:
    out = set()
    for cls in union.__args__:
        tag = msgspec.inspect.type_info(cls).tag  # type: ignore[attr-defined]
        out.add(str(tag))
    return frozenset(out)


EVENT_TYPES: Final = _tags(ClusterEvent)
DECISION_TYPES: Final = _tags(DecisionRecord)

Upcast = Callable[[dict[str, Any]], dict[str, Any]]
UPCASTS: dict[int, Upcast] = {}
"""schema version -> function turning a raw envelope of that version into the next one."""

_encoder: Final = msgspec.json.Encoder()
_event_decoder: Final = msgspec.json.Decoder(Envelope)
_decision_decoder: Final = msgspec.json.Decoder(DecisionRecord)


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


_ADOPTED: Final = b'"event":{"type":"shard.adopted"'


def _bounded(data: bytes) -> None:
    # A tree's state handed over between shards may be larger than any other event; its tag
    # comes within the envelope's first fields.
    limit = MAX_HAND_OVER_BYTES if _ADOPTED in data[:1024] else MAX_RECORD_BYTES
    problem = json_nesting_problem(data, limit)
    if problem is not None:
        raise MalformedRecord(problem)


def decode_envelope(data: bytes) -> Envelope:
    _bounded(data)
    try:
        env = _event_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return _decode_slow(data)
    if env.schema != SCHEMA_VERSION:
        return _decode_slow(data)
    return env


def _decode_slow(data: bytes) -> Envelope:
    try:
        raw = msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise MalformedRecord(f"not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise MalformedRecord("not a JSON object")
    event = raw.get("event")
    if isinstance(event, dict) and isinstance(event.get("type"), str) and event["type"] not in EVENT_TYPES:
        raise UnknownEventType(event["type"])
    version = raw.get("schema", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        if isinstance(version, int):
            raise UnknownEventType(f"schema {version}")
        raise MalformedRecord(f"schema must be an integer, got {version!r}")
    while version < SCHEMA_VERSION:
        upcast = UPCASTS.get(version)
        if upcast is None:
            raise MalformedRecord(f"no upcast from schema {version}")
        raw = upcast(raw)
        version += 1
        raw["schema"] = version
    try:
        return msgspec.convert(raw, Envelope)
    except msgspec.ValidationError as e:
        raise MalformedRecord(str(e)) from None


def decode_error(data: bytes, known_types: frozenset[str], error: Exception) -> ValueError:
    """What a failed decode of a tagged record means: a type this version does not know
    (:class:`UnknownEventType`) or a malformed record."""
    raw: Any = None
    with contextlib.suppress(msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raw = msgspec.json.decode(data)
    if isinstance(raw, dict) and isinstance(raw.get("type"), str) and raw["type"] not in known_types:
        return UnknownEventType(raw["type"])
    return MalformedRecord(str(error))


class DecisionPeek(msgspec.Struct, frozen=True):
    """A decision record's type tag, cycle and workload, read without decoding the rest (a cycle
    record carries every head's outcome; a consumer that only needs to skip it should not build them)."""

    type: str = ""
    cycle: int = -1
    namespace: str = ""
    name: str = ""


_peek_decoder: Final = msgspec.json.Decoder(DecisionPeek)


def peek_decision(data: bytes) -> DecisionPeek:
    """Type and cycle of a decision record; an empty type when it is not even a JSON object
    (a full :func:`decode_decision` then says what is wrong)."""
    try:
        return _peek_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return DecisionPeek()


def decode_decision(data: bytes) -> Any:
    try:
        return _decision_decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise decode_error(data, DECISION_TYPES, e) from None
    except RecursionError:
        raise MalformedRecord("nested too deeply to decode") from None
