"""A ClusterQueue's queue: parked workloads come back in queue order, wherever they belong."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from events import objects as o
from services.core.state import ClusterQueueQueue, WorkloadRecord


def _rec(i: int, priority: int, queue_time: int) -> WorkloadRecord:
    wl = o.Workload(namespace="ns", name=f"w{i:03d}", uid=f"u{i}", queue_name="lq", pod_sets=())
    return WorkloadRecord(obj=wl, seq=i, queue_time=queue_time,
                          priority=priority)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.booleans()), min_size=1, max_size=40))
def test_unparking_puts_every_parked_workload_back_in_queue_order(spec: list[tuple[int, int, bool]]) -> None:
    recs = {r.key: r for r in (_rec(i, p, t) for i, (p, t, _) in enumerate(spec))}
    queue = ClusterQueueQueue()
    for rec in recs.values():
        queue.push(rec)
    # Park heads the way cycles do (taken from the front), and a few from further back.
    parked = [key for (_, key), (_, _, park) in zip(list(queue.active), spec, strict=True) if park]
    for key in parked:
        queue.remove(recs[key])
        recs[key].inadmissible = True
        queue.inadmissible[key] = None
    queue.unpark_all(recs)
    assert queue.active == sorted((r.queue_key(), r.key) for r in recs.values())
    assert not queue.inadmissible and not any(r.inadmissible for r in recs.values())


def test_heads_parked_from_the_front_go_back_in_front() -> None:
    recs = {r.key: r for r in (_rec(i, 0, i) for i in range(6))}
    queue = ClusterQueueQueue()
    for rec in recs.values():
        queue.push(rec)
    for _ in range(3):
        _, key = queue.active.pop(0)  # three cycles' heads, none admitted
        queue.inadmissible[key] = None
    queue.unpark_all(recs)
    assert [key for _, key in queue.active] == [f"ns/w{i:03d}" for i in range(6)]
