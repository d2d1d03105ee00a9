"""Snapshot records of format 9: the state's encoding deflated, written a piece at a time.

The pieces joined are the plain encoding byte for byte, the packed form comes back as the same
state, a snapshot the previous version wrote (format 8, plain JSON) is still loaded, and a packed
one that does not inflate is passed over like any damaged snapshot.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from services.core import snapshot
from services.core.cycle import run_cycle
from services.core.snapshot import (
    FORMAT,
    PLAIN_FORMAT,
    encode_state,
    encoded_pieces,
    pack_state,
    unpack_state,
)
from services.core.state import State
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler, Snapshot
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_namespace, a_workload, build_state
from tests.unit.test_snapshot import T, _drain, _seed, history, play


def _many_workloads(n: int) -> State:
    """A ClusterQueue, most of ``n`` workloads pending in it, a few admitted (records of both kinds)."""
    state = build_state(a_flavor("f"), a_namespace("ns"), a_cluster_queue("cq").flavor("f", cpu="4"),
                        a_local_queue("ns", "lq", "cq"),
                        *(a_workload("ns", f"w-{i:04}").queue("lq").request(cpu="1") for i in range(n)))
    run_cycle(state)
    assert any(rec.admission is not None for rec in state.workloads.values())
    return state


def test_the_pieces_joined_are_the_plain_encoding() -> None:
    state = play(history())
    assert b"".join(encoded_pieces(state)) == encode_state(state)


def test_pieces_of_a_large_state_are_cut_between_records(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _many_workloads(300)
    monkeypatch.setattr(snapshot, "_PIECE", 2048)
    pieces = list(encoded_pieces(state))
    assert len(pieces) > 10
    assert b"".join(pieces) == encode_state(state)


def test_an_empty_state_in_pieces() -> None:
    assert b"".join(encoded_pieces(State())) == encode_state(State())


def test_a_packed_state_comes_back_and_is_smaller() -> None:
    state = _many_workloads(300)
    packed = pack_state(state)
    assert encode_state(unpack_state(packed, FORMAT)) == encode_state(state)
    assert len(packed) * 4 < len(encode_state(state))


def test_a_plain_state_of_format_8_is_unpacked() -> None:
    state = play(history())
    assert encode_state(unpack_state(encode_state(state), PLAIN_FORMAT)) == encode_state(state)


@pytest.mark.parametrize("value", [b'"bm90IGRlZmxhdGVk"', b'"not base64!"', b"17"],
                         ids=["not deflated", "not base64", "not a string"])
def test_a_damaged_packed_state_raises_value_error(value: bytes) -> None:
    with pytest.raises(ValueError):
        unpack_state(value, FORMAT)


def test_a_snapshot_of_the_previous_plain_format_is_still_loaded(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    _seed(log)
    live = Scheduler(log, batch_size=4)
    _drain(live)
    decisions_end = log.end_offset(T.decisions)
    plain = Snapshot(input_offset=live.next_input, decisions_offset=decisions_end, cycles=live.state.cycles,
                     state=msgspec.Raw(encode_state(live.state)), format=PLAIN_FORMAT)
    log.append(T.snapshots, [("scheduler", msgspec.json.encode(plain))])
    restarted = Scheduler(log)
    assert restarted.load_newest_snapshot() == decisions_end
    assert restarted.stats.unreadable_snapshots == 0
    assert encode_state(restarted.state) == encode_state(live.state)
    log.close()


def test_a_packed_snapshot_that_does_not_inflate_is_passed_over(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    _seed(log)
    live = Scheduler(log, batch_size=4)
    _drain(live)
    damaged = Snapshot(input_offset=live.next_input, decisions_offset=log.end_offset(T.decisions),
                       cycles=live.state.cycles, state=msgspec.Raw(b'"bm90IGRlZmxhdGVk"'), format=FORMAT)
    log.append(T.snapshots, [("scheduler", msgspec.json.encode(damaged))])
    restarted = Scheduler(log)
    restarted.recover()
    assert restarted.stats.unreadable_snapshots == 1
    assert encode_state(restarted.state) == encode_state(live.state)
    assert restarted.next_input == live.next_input
    log.close()
