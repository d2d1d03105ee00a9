"""``kueuelog log check DIR``: is this embedded log sound, and if not, what is wrong where.

It checks, in order: that the file is a kueuelog log at all (the log refuses to
open otherwise), SQLite's own integrity check, that each topic's offsets are
contiguous, that every record of a topic we know decodes as that topic's type
(cluster events, decisions, the simulated cluster's records), and that no
committed consumer position lies beyond the end of its topic. Each problem is
one line naming the topic and offset; the first few per topic are listed and the
rest counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.simcluster import decode_sim_record, sim_cluster_topic
from services.runtime.sqlite import SqliteLog, table_name

SHOWN_PER_TOPIC = 5
READ_CHUNK = 5000


@dataclass
class LogCheck:
    lines: list[str] = field(default_factory=list)  # what was looked at, one line each
    problems: list[str] = field(default_factory=list)

    @property
    def sound(self) -> bool:
        return not self.problems


def _decoders(topics: Topics) -> dict[str, Callable[[bytes], object]]:
    return {topics.cluster_events: decode_envelope, topics.decisions: decode_decision,
            sim_cluster_topic(topics): decode_sim_record}


def _undecodable(log: SqliteLog, topic: str, decode: Callable[[bytes], object]) -> tuple[int, list[str]]:
    bad, offset = 0, 0
    shown: list[str] = []
    while batch := log.read_values(topic, offset, READ_CHUNK):
        for off, value in batch:
            try:
                decode(bytes(value))
            except (ValueError, RecursionError) as e:  # MalformedRecord, UnknownEventType, bad UTF-8, too deep
                bad += 1
                if len(shown) < SHOWN_PER_TOPIC:
                    shown.append(f"{topic} offset {off}: {type(e).__name__}: {str(e)[:200]}")
        offset = batch[-1][0] + 1
    return bad, shown


def check_log(log: SqliteLog, topics: Topics) -> LogCheck:
    report = LogCheck()
    where = log.directory
    problems = log.integrity()
    report.lines.append(f"{where}: SQLite integrity " + ("ok" if not problems else f"FAILED ({len(problems)})"))
    report.problems += [f"integrity: {p}" for p in problems[:SHOWN_PER_TOPIC]]
    decoders = _decoders(topics)
    known = sorted({*decoders, topics.snapshots, topics.dead_letters})
    tables = set(log.topics())  # table names: a topic's name with its punctuation made safe
    ends: dict[str, int] = {}
    for topic in known:
        if table_name(topic) not in tables:
            continue
        tables.discard(table_name(topic))
        count, low, high = log.span(topic)
        ends[topic] = high + 1
        report.lines.append(f"topic {topic}: {count} records" + (f", offsets {low}-{high}" if count else ""))
        if count and (low != 0 or high - low + 1 != count):
            report.problems.append(f"{topic}: offsets are not contiguous from 0 ({count} records in {low}-{high})")
        if topic in decoders:
            bad, shown = _undecodable(log, topic, decoders[topic])
            report.problems += shown
            if bad > len(shown):
                report.problems.append(f"{topic}: {bad - len(shown)} more records that do not decode")
    for table in sorted(tables):
        report.lines.append(f"table {table}: not a topic of prefix {topics.prefix!r} (not checked)")
    for group, topic, position in log.positions():
        if position > ends.get(topic, 0):
            report.problems.append(f"consumer {group} on {topic}: committed position {position} is beyond the "
                                   f"end of the topic ({ends.get(topic, 0)})")
    return report
