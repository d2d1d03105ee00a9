"""A sharded run and an unsharded run of the same input on the embedded log, side by side: what
the shard property test, the two-shard Kafka test and the shard bench share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import yaml

from events import objects as o
from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import Document, load
from events.messages import CycleCompleted
from events.shardmap import ShardMap
from services.app.driver import drive_until_idle
from services.runtime.log import Log
from services.runtime.shards import RoutingLog
from services.simcluster.arrivals import seed_all
from tests.builders import Builder

T = Topics()


def objects(builders: Sequence[Builder]) -> list[tuple[Document, o.AnyObject]]:
    return load({"input.yaml": yaml.safe_dump_all([b.obj() for b in builders], sort_keys=False)})


@dataclass
class ShardOutcome:
    decisions: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)  # workload -> its decisions
    per_shard: list[int] = field(default_factory=list)  # decisions written by each shard
    cycles: list[int] = field(default_factory=list)


def decisions_of(log: Log, out: ShardOutcome, topics: Topics = T) -> int:
    """Add ``log``'s decisions to ``out`` (per workload: type, ClusterQueue and body, without the
    cycle-numbered id and the time: a decision's time is its shard's clock, the newest event
    folded on that shard, which is earlier on a shard that was not sent another tree's later
    events); returns how many there were."""
    count = 0
    for rec in log.read(topics.decisions, 0, 10_000_000):
        d = decode_decision(rec.value)
        if isinstance(d, CycleCompleted):
            continue
        body = msgspec.to_builtins(d)
        for k in ("id", "cycle", "time"):
            body.pop(k, None)
        out.decisions.setdefault(f"{d.namespace}/{d.name}", []).append(
            (type(d).__name__, d.cluster_queue, msgspec.json.encode(body)))
        count += 1
    return count


def run_sharded(shards: Sequence[Log], shard_map: ShardMap, objs: list[tuple[Document, o.AnyObject]], *,
                publishers: Sequence[Log] | None = None, topics: Topics = T,
                then: Sequence[list[tuple[Document, o.AnyObject]]] = ()) -> ShardOutcome:
    """Seed ``objs`` through the router (over ``publishers``, by default the shards' logs
    themselves), then drive every shard's loop until it is idle; then the same for each of
    ``then`` in turn (later objects, after the shards decided on the earlier ones)."""
    router = RoutingLog(publishers or shards, shard_map, topics=topics)
    out = ShardOutcome()
    for phase in [objs, *then]:
        seed_all(router, phase, topics=topics)
        out.cycles = [drive_until_idle(log, topics=topics).scheduler.state.cycles for log in shards]
    for log in shards:
        out.per_shard.append(decisions_of(log, out, topics))
    return out
