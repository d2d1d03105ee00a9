"""The log port's contract, written once and run against every backend.

A backend's test module subclasses :class:`LogContract` and provides two fixtures:
``log`` (a fresh log that may write and commit positions) and ``topic`` (a function making
a topic name unique to the test, for backends whose topics outlive a test). Offsets are
only required to increase: a Kafka topic written in transactions has gaps.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.runtime.log import Log, LogError, caught_up, read_backwards, values_of

Topic = Callable[[str], str]


class LogContract:
    def test_appended_records_come_back_in_order_with_increasing_offsets(self, log: Log, topic: Topic) -> None:
        a, b = topic("a"), topic("b")
        first = log.append(a, [("k1", b"1"), ("k2", b"2")])
        assert log.append(b, [("k", b"x")]) == [0]
        third = log.append(a, [("k3", b"3")])
        offsets = first + third
        assert offsets[0] == 0 and offsets == sorted(set(offsets))
        assert [(r.offset, r.key, r.value) for r in log.read(a, 0)] == [
            (offsets[0], "k1", b"1"), (offsets[1], "k2", b"2"), (offsets[2], "k3", b"3")]
        assert log.end_offset(a) > offsets[-1]
        assert log.read(a, log.end_offset(a)) == []
        assert log.end_offset(topic("never-written")) == 0
        assert log.read(topic("never-written"), 0) == []

    def test_read_from_an_offset_with_a_limit(self, log: Log, topic: Topic) -> None:
        t = topic("t")
        offsets = log.append(t, [(str(i), str(i).encode()) for i in range(10)])
        assert [r.value for r in log.read(t, offsets[4], 3)] == [b"4", b"5", b"6"]
        assert [v for _, v in log.read_values(t, offsets[8])] == [b"8", b"9"]

    def test_a_transaction_appends_and_commits_positions_together(self, log: Log, topic: Topic) -> None:
        inp, out, dead = topic("in"), topic("out"), topic("dead")
        log.append(inp, [("k", b"a"), ("k", b"b")])
        result = log.transact({out: [("k", b"A")], dead: [("k", b"?")]}, {("g", inp): 2})
        assert set(result) == {out, dead}
        assert [r.value for r in log.read(out, 0)] == [b"A"] and [r.value for r in log.read(dead, 0)] == [b"?"]
        assert log.position("g", inp) == 2
        assert log.position("other", inp) == 0
        log.transact({}, {("g", inp): 1})  # positions may also move back (a reset)
        assert log.position("g", inp) == 1

    def test_a_failed_transaction_leaves_nothing_behind(self, log: Log, topic: Topic) -> None:
        out, inp = topic("out"), topic("in")
        log.append(out, [("k", b"before")])
        with pytest.raises(LogError) as err:
            log.transact({out: [("k", b"ok"), (None, b"a record without a key")]},  # type: ignore[list-item]
                         {("g", inp): 5})
        assert err.value.retriable is False
        assert [r.value for r in log.read(out, 0)] == [b"before"]
        assert log.position("g", inp) == 0
        log.append(out, [("k", b"after")])  # and the log is still writable
        assert [r.value for r in log.read(out, 0)] == [b"before", b"after"]

    def test_reading_backwards_sees_every_record_newest_first(self, log: Log, topic: Topic) -> None:
        t = topic("t")
        for i in range(0, 30, 3):  # several transactions: gaps between them on a transactional backend
            log.transact({t: [(str(j), str(j).encode()) for j in range(i, i + 3)]}, {})
        end = log.end_offset(t)
        assert [r.value for r in read_backwards(log, t, end, chunk=4)] == [str(j).encode() for j in range(29, -1, -1)]
        middle = log.read(t, 0, 15)[-1].offset + 1
        assert [r.value for r in read_backwards(log, t, middle)] == [str(j).encode() for j in range(14, -1, -1)]

    def test_reading_forwards_sees_every_value_oldest_first(self, log: Log, topic: Topic) -> None:
        t = topic("t")
        for i in range(0, 30, 3):  # several transactions: gaps between them on a transactional backend
            log.transact({t: [(str(j), str(j).encode()) for j in range(i, i + 3)]}, {})
        assert list(values_of(log, t, chunk=4)) == [str(j).encode() for j in range(30)]
        middle = log.read(t, 0, 15)[-1].offset + 1
        assert list(values_of(log, t, middle)) == [str(j).encode() for j in range(15, 30)]

    def test_caught_up_means_no_record_after_the_committed_position(self, log: Log, topic: Topic) -> None:
        t = topic("t")
        assert caught_up(log, "g", t)
        log.transact({t: [("k", b"1"), ("k", b"2")]}, {})
        assert not caught_up(log, "g", t)
        last = log.read(t, 0)[-1].offset
        log.transact({}, {("g", t): last})
        assert not caught_up(log, "g", t)
        log.transact({}, {("g", t): last + 1})
        assert caught_up(log, "g", t)
