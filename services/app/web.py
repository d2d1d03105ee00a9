"""Wiring the web view (:mod:`services.web`) to a log: ``kueuelog serve``, the view ``kueuelog
demo`` opens, and ``kueuelog get pending``.

The web wing knows nothing of the scheduler service: it is handed a :class:`Follower` (which
replays the scheduler's recorded cycles, read-only) and an explain function.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events.envelope import Topics
from services.app.explainer import explain
from services.app.follow import Follower
from services.runtime.log import Log
from services.web.server import Hub, serve


def make_hub(log: Log, topics: Topics) -> Hub:
    follower = Follower(log, topics)

    def explain_json(key: str) -> dict[str, Any]:
        """As of the state the page shows: the follower's, not a replay of its own."""
        return explain(log, topics, key, now=(follower.state, follower.input_offset)).to_json()

    return Hub(follower, explain_json)


async def serve_log(log: Log, topics: Topics, host: str, port: int, stop: asyncio.Event,
                    on_ready: Callable[[str], None] | None = None) -> None:
    await serve(make_hub(log, topics), host, port, stop, on_ready)


class Background:
    """The web view in a thread of its own, over its own connection to an embedded log (the
    demo's): started before the demo steps, stopped when it ends."""

    def __init__(self, directory: Path, host: str, port: int) -> None:
        self.directory, self.host, self.port = directory, host, port
        self.url = ""
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="kueuelog-web", daemon=True)

    def start(self, timeout: float = 30.0) -> str:
        self._thread.start()
        self._ready.wait(timeout)
        if self.error is not None:
            raise self.error
        return self.url

    def _main(self) -> None:
        from services.runtime.sqlite import SqliteLog

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            log = SqliteLog(self.directory, create=False)
            try:
                await serve_log(log, Topics(), self.host, self.port, self._stop, self._on_ready)
            finally:
                log.close()

        try:
            asyncio.run(main())
        except BaseException as e:  # handed to the thread that started it
            self.error = e
        finally:
            self._ready.set()

    def _on_ready(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def pending_documents(log: Log, topics: Topics, queue: str | None, namespace: str | None,
                      at: int | None = None) -> list[dict[str, Any]]:
    """``kueuelog get pending``: Kueue's PendingWorkloadsSummary for a ClusterQueue (``queue``),
    a LocalQueue (``queue`` with ``namespace``), or every ClusterQueue, from the state the log's
    last recorded cycle left."""
    from services.web import visibility

    follower = Follower(log, topics, until_input=at)
    follower.catch_up()
    state = follower.state
    state.ensure_indexed()
    if queue is not None and namespace is not None:
        return [visibility.local_queue_pending(state, namespace, queue)]
    names = [queue] if queue is not None else sorted(state.index.queues)
    return [visibility.cluster_queue_pending(state, name) | {"metadata": {"name": name, "creationTimestamp": None}}
            for name in names]
