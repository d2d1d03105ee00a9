"""A publisher to be SIGKILLed: ``python -m tests.shardpublish LOG SHARDS MANIFESTS`` publishes the
manifests through the shard router over an embedded log, a few objects per append (so a kill
lands between appends and inside an append that spans shards), skipping what an earlier run
already published (as a restarted watcher's memory does)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from events.codec import encode
from events.envelope import Topics, event_key
from events.manifests import load
from events.shardmap import ShardMap
from services.runtime.shards import RoutingLog, embedded_shards
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import envelope, seeded_ids

T = Topics()
PER_APPEND = 3
PAUSE_S = 0.01  # between appends (a kill soon after one lands in the pause or in the next append)


def main(argv: list[str]) -> int:
    directory, shards, manifests = argv[0], int(argv[1]), argv[2]
    log = SqliteLog(directory, durable=True)
    router = RoutingLog(embedded_shards(log, shards), ShardMap(shards=shards), topics=T)
    done = seeded_ids(router, T)
    objects = load({"m.yaml": Path(manifests).read_text()})
    envs = [envelope(doc, obj, time=0, cluster="sim") for doc, obj in objects]
    todo = [e for e in envs if e.id not in done]
    print(f"ready {-(-len(todo) // PER_APPEND)}", flush=True)  # how many appends are to come
    for i in range(0, len(todo), PER_APPEND):
        router.append(T.cluster_events, [(event_key(e), encode(e)) for e in todo[i:i + PER_APPEND]])
        print("appended", flush=True)
        time.sleep(PAUSE_S)
    print(f"published {len(todo)}", flush=True)
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
