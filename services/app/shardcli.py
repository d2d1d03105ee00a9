"""``--shard N|all`` for the commands that read a log (replay, explain, tail).

A service runs one shard; a reader may look at one shard or at all of them. How many there are
is read from the shard map recorded on shard 0 (``services.runtime.shards``); a log that was never
sharded has one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping

from events.envelope import Topics
from services.app.assembly import log_settings, open_log
from services.runtime.log import Log
from services.runtime.shards import embedded_shards, recorded_map

ALL = -1


def parse_shard(raw: str) -> int:
    """An argparse type: a shard number, or ``all`` (:data:`ALL`)."""
    if raw.strip().lower() == "all":
        return ALL
    try:
        shard = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shard is a number from 0, or 'all', not {raw!r}") from None
    if shard < 0:
        raise argparse.ArgumentTypeError(f"a shard is a number from 0, or 'all', not {raw!r}")
    return shard


def default_shard(environ: Mapping[str, str] = os.environ) -> int:
    raw = environ.get("KUEUELOG_SHARD", "0")
    try:
        return parse_shard(raw)
    except argparse.ArgumentTypeError:
        return 0  # argparse reports a bad default only when it is used; the flag is checked


def open_shards(args: argparse.Namespace, *, path: str | None = None) -> list[tuple[int, Log]]:
    """The shard ``--shard`` names, or every shard with ``--shard all``: (shard, its log) pairs."""
    if args.shard != ALL:
        return [(int(args.shard), open_log(log_settings(args, path=path)))]
    one = argparse.Namespace(**{**vars(args), "shard": 0})
    settings = log_settings(one, path=path)
    first = open_log(settings)
    shard_map = recorded_map(first, Topics(prefix=settings.topic_prefix))
    count = shard_map.shards if shard_map is not None else 1
    if not settings.bootstrap_servers:
        return list(enumerate(embedded_shards(first, count)))
    return [(0, first)] + [(shard, open_log(dataclasses.replace(settings, shard=shard), shards=count))
                           for shard in range(1, count)]


def other_shards_hint(log: Log, topics: Topics, shard: int) -> str:
    """A line to add when a workload is not on the shard asked about and the log has others."""
    shard_map = recorded_map(log, topics)
    if shard_map is None or shard_map.shards == 1:
        return ""
    return f"(this is shard {shard} of {shard_map.shards}: try --shard all)\n"
