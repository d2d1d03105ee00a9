"""The Kafka election's lease: a member may start a transactional writer only while its session
is known to be alive on the coordinator.

The case behind it: a leader frozen (SIGSTOP) past its session, thawed after a standby took over.
Until its next heartbeat is answered it still believes it holds the lease; if its old writer broke
meanwhile, starting a new one would fence the real leader. These tests drive the lease through the
calls aiokafka makes (revoked before a join, assigned after it, heartbeats acknowledged), with no
broker: nothing here needs one, and the zombie case on a real broker is tests/integration/test_kafka_crash.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from services.runtime.kafka import KafkaLog, KafkaSettings, _Lease, _LeaseAssignor
from services.runtime.log import LeadershipLost

SESSION_MS = 2_000


def _granted() -> _Lease:
    lease = _Lease()
    asyncio.run(lease.on_partitions_revoked(set()))  # aiokafka calls it before every join
    asyncio.run(lease.on_partitions_assigned({("leases", 0)}))
    return lease


def test_a_lease_just_granted_is_fresh_from_the_start_of_its_join() -> None:
    lease = _granted()
    assert lease.state == "held"
    assert lease.fresh(SESSION_MS)


def test_a_lease_never_granted_is_not_fresh() -> None:
    lease = _Lease()
    assert not lease.fresh(SESSION_MS)


def test_a_lease_whose_last_answered_heartbeat_was_sent_a_session_ago_is_not_fresh() -> None:
    lease = _granted()
    lease.alive_since_ns -= (SESSION_MS + 1) * 1_000_000  # frozen past the session since
    assert lease.state == "held"  # it still believes it holds the lease ...
    assert not lease.fresh(SESSION_MS)  # ... but may not act on it
    lease.beat(time.monotonic_ns())  # its next heartbeat is answered: the session lives
    assert lease.fresh(SESSION_MS)


def test_an_answered_heartbeat_counts_from_when_it_was_sent_not_answered() -> None:
    lease = _granted()
    sent = time.monotonic_ns() - (SESSION_MS + 500) * 1_000_000  # sent long ago, answered only now
    lease.alive_since_ns = 0
    lease.beat(sent)
    assert not lease.fresh(SESSION_MS)


def test_a_join_that_took_longer_than_the_session_waits_for_the_first_heartbeat() -> None:
    lease = _Lease()
    asyncio.run(lease.on_partitions_revoked(set()))
    lease.join_began_ns -= (SESSION_MS + 1) * 1_000_000
    asyncio.run(lease.on_partitions_assigned({("leases", 0)}))
    assert not lease.fresh(SESSION_MS)
    lease.beat(time.monotonic_ns())
    assert lease.fresh(SESSION_MS)


def test_losing_the_assignment_drops_the_term() -> None:
    lease = _granted()
    lease.term = 3
    asyncio.run(lease.on_partitions_revoked({("leases", 0)}))
    assert lease.state == "revoked"
    asyncio.run(lease.on_partitions_assigned(set()))
    assert (lease.state, lease.term) == ("none", 0)


def _leader_without_a_broker(lease: _Lease) -> KafkaLog:
    """A KafkaLog's writer state alone (constructing one connects to the broker): enough for
    the check made before a transactional producer is started."""
    log = KafkaLog.__new__(KafkaLog)
    log.settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", session_timeout_ms=SESSION_MS)
    log.transactional_id = "t.scheduler.0"
    log._producer, log._producer_broken = None, True
    log._lease_name, log._lease = "scheduler", lease
    return log


def test_a_stale_leader_whose_writer_broke_does_not_start_another() -> None:
    lease = _granted()
    lease.alive_since_ns -= (SESSION_MS + 1) * 1_000_000
    log = _leader_without_a_broker(lease)
    with pytest.raises(LeadershipLost, match="session may have expired"):
        asyncio.run(log._producer_ready())


# --- who the election's assignor gives the lease to ---------------------------------------------

def _bound(lease: _Lease) -> type[_LeaseAssignor]:
    return type("Bound", (_LeaseAssignor,), {"lease": lease})


def _member(lease: _Lease) -> Any:
    return _bound(lease).metadata(["leases"])


def _winner(leases: dict[str, _Lease]) -> tuple[str | None, int]:
    """Run the assignor over these members, deliver each its assignment; (who leads, the term)."""
    out = _LeaseAssignor.assign(None, {m: _member(lease) for m, lease in leases.items()})
    winner = None
    for member_id, assignment in out.items():
        _bound(leases[member_id]).on_assignment(assignment)
        if assignment.assignment:
            winner = member_id
    terms = {json.loads(bytes(a.user_data))["term"] for a in out.values()}
    assert len(terms) == 1
    return winner, terms.pop()


def _standby(joined: int) -> _Lease:
    lease = _Lease()
    lease.joined_ns = joined
    return lease


def test_the_longest_waiting_standby_wins_a_vacant_lease() -> None:
    a, b = _standby(2), _standby(1)
    assert _winner({"a": a, "b": b}) == ("b", 1)
    assert (b.term, b.led, a.term, a.seen) == (1, True, 0, 1)


def test_the_holder_keeps_its_lease_when_a_standby_joins() -> None:
    leader = _standby(1)
    assert _winner({"leader": leader}) == ("leader", 1)
    assert _winner({"leader": leader, "new": _standby(2)}) == ("leader", 1)


def test_a_leader_dropped_from_the_group_does_not_win_the_lease_back() -> None:
    """The flaky CI run: a leader starved past its session is dropped; the only standby left knew
    no term and was granted term 1; the old leader rejoins claiming term 3. It has forfeited it
    (its generation was reset), so the standby keeps the lease."""
    old = _standby(1)
    old.term = old.seen = 3
    old.led = True
    successor = _standby(5)
    assert _winner({"successor": successor}) == ("successor", 1)  # knew no earlier term
    old.forfeit()  # aiokafka resets its generation when the coordinator does not know it
    assert _winner({"old": old, "successor": successor}) == ("successor", 1)
    assert old.term == 0


def test_a_member_that_led_never_wins_a_new_term_even_alone() -> None:
    zombie = _standby(1)
    assert _winner({"zombie": zombie}) == ("zombie", 1)
    zombie.forfeit()
    assert _winner({"zombie": zombie}) == (None, 2)  # nobody leads until a fresh standby joins
    assert _winner({"zombie": zombie, "fresh": _standby(9)}) == ("fresh", 3)
