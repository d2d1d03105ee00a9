"""Sharding changes who decides, not what is decided: cohort trees are independent quota domains,
so the same input run on 1 shard and on N shards (by hash, or by an explicit map) gives every
workload the same decisions with the same bodies (the cycle-numbered ids differ, and the times:
a decision's time is its shard's clock, see ``tests.shardrun``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.cluster import SIM_DURATION_ANNOTATION
from events.shardmap import ShardMap
from services.runtime.shards import embedded_shards
from services.runtime.sqlite import SqliteLog
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_namespace, a_workload
from tests.shardrun import ShardOutcome, objects, run_sharded


@st.composite
def clusters(draw: st.DrawFn) -> list[Builder]:
    """A few cohort trees (some ClusterQueues without a cohort, some cohorts with a parent) and
    workloads that queue, borrow and preempt within them."""
    out: list[Builder] = [a_namespace("ns"), a_flavor("default")]
    trees = draw(st.integers(1, 4))
    cqs: list[str] = []
    for t in range(trees):
        kind = draw(st.sampled_from(["alone", "cohort", "nested"]))
        if kind == "nested":
            out.append(a_cohort(f"root{t}"))
            out.append(a_cohort(f"team{t}").parent(f"root{t}"))
        for c in range(1 if kind == "alone" else draw(st.integers(1, 3))):
            name = f"cq{t}" if kind == "alone" else f"cq{t}-{c}"
            cq = a_cluster_queue(name).flavor("default", cpu=str(draw(st.integers(2, 8))))
            if kind != "alone":
                cq = cq.cohort(f"team{t}" if kind == "nested" else f"root{t}")
            if draw(st.booleans()):
                cq = cq.preemption(within="LowerPriority", reclaim="Any")
            out += [cq, a_local_queue("ns", f"lq-{name}", name)]
            cqs.append(name)
    for i in range(draw(st.integers(1, 14))):
        cq = draw(st.sampled_from(cqs))
        out.append(a_workload("ns", f"wl{i}").queue(f"lq-{cq}").request(cpu=str(draw(st.integers(1, 6))))
                   .priority(draw(st.sampled_from([0, 100]))).created(draw(st.integers(0, 600)))
                   .label("x", "y"))
        out[-1].body["metadata"].setdefault("annotations", {})[SIM_DURATION_ANNOTATION] = \
            f"{draw(st.integers(1, 20))}m"
    if draw(st.booleans()):
        # Workloads (some or all) published before the queues they name: they wait on shard 0 and
        # move to their tree's shard when their LocalQueue comes.
        late = draw(st.integers(1, len(out) - 2))
        out = out[:2] + out[-late:] + out[2:-late]
    return out


@st.composite
def phases(draw: st.DrawFn) -> list[list[Builder]]:
    """The objects in one go, or cut in two with every scheduler deciding in between (so that a
    workload published before its queue may have been marked pending, QueueNotFound, on shard 0)."""
    objs = draw(clusters())
    cut = draw(st.sampled_from([0, *range(3, len(objs))]))
    return [objs] if cut == 0 else [objs[:cut], objs[cut:]]


def run(steps: list[list[Builder]], shard_map: ShardMap) -> ShardOutcome:
    with tempfile.TemporaryDirectory() as d:
        log = SqliteLog(Path(d), durable=False)
        try:
            return run_sharded(embedded_shards(log, shard_map.shards), shard_map, objects(steps[0]),
                               then=[objects(step) for step in steps[1:]])
        finally:
            log.close()


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(phases(), st.integers(2, 4), st.data())
def test_a_sharded_run_decides_what_an_unsharded_run_decides(steps: list[list[Builder]], shards: int,
                                                             data: st.DataObject) -> None:
    explicit = data.draw(st.booleans())
    trees = tuple((f"{root}{t}", data.draw(st.integers(0, shards - 1)))
                  for t in range(4) for root in ("cq", "root")) if explicit else ()
    shard_map = ShardMap(shards=shards, trees=trees)
    one = run(steps, ShardMap(shards=1))
    many = run(steps, shard_map)
    assert many.decisions == one.decisions
    assert sum(many.per_shard) == sum(one.per_shard)
