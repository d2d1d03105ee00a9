"""A worker cluster's heartbeat: proof, in the log, that its watcher reaches its API server.

MultiKueue (``services.core.placement``) takes a worker as lost when nothing came from it for
``workerLostTimeout`` of log time. A worker whose objects do not change would look lost while it
is healthy, so its watcher appends a ``ClockTicked`` under its cluster name every interval, but
only after the API server answered (``GET /version``): a worker cut off from its watcher, or whose
API server is down, falls silent, and its workloads are placed elsewhere once the timeout passes.
Off unless asked for (``kueuelog run watcher --heartbeat SECONDS``); ids are the ticker's
(``tick:<cluster>:<ms>``), so two replicas' ticks in one millisecond are one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events.envelope import Topics
from services.runtime.clock import wall_clock_ms
from services.runtime.log import Log, LogError
from services.runtime.supervise import report_unavailable
from services.watcher.ticker import Ticker


async def run_heartbeat(log: Log, api: client.ApiClient, stop: asyncio.Event, *, cluster: str, interval_s: float,
                        topics: Topics | None = None, wall_clock: Callable[[], int] = wall_clock_ms) -> Ticker:
    ticker = Ticker(log, wall_clock, interval_ms=max(1, int(interval_s * 1000)), topics=topics, cluster=cluster)
    version = client.VersionApi(api)
    while not stop.is_set():
        try:
            # A slow answer is still an answer (a loaded API server, one busy with new CRDs): only
            # no answer at all, for workerLostTimeout, makes the worker lost.
            await version.get_code(_request_timeout=max(10.0, 2 * interval_s))
            ticker.tick()
        except (ApiException, aiohttp.ClientError, OSError, TimeoutError):
            pass  # not reachable: no heartbeat (that silence is the signal)
        except LogError as e:
            if not e.retriable:
                raise
            report_unavailable("heartbeat", e, interval_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    return ticker
