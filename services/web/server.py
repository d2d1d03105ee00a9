"""The web view's HTTP service: Starlette on uvicorn, over a read-only follower of the log.

Why this stack: Starlette is a small, typed, well-kept ASGI toolkit (routing, responses,
streaming) with no required dependencies beyond anyio; uvicorn with only h11 is a pure-Python
server that runs inside an existing asyncio loop (``Server.serve``) and stops on a flag. The
front end is three static files (HTML, one script, one style sheet) shipped in the package and
served as they are: no build step and nothing fetched at run time. Live updates are Server-Sent
Events (one long GET, reconnected by the browser itself), because the traffic is one-way.

The :class:`Hub` owns the follower and is the only thing that advances it, from the event loop
(requests never see a half-applied cycle); a refresh applies at most a few thousand decision
records, so a long log is caught up in slices while the server keeps answering.

Routes: ``/`` (the page), ``/static/*``, ``/api/overview``, ``/api/workloads`` (filters
``status``, ``clusterQueue``, ``localQueue`` as ``ns/name``, ``q``), ``/api/workloads/NS/NAME``
(explain as JSON), ``/api/usage``, ``/api/decisions``, ``/api/stream`` (SSE), ``/healthz``,
``/readyz`` (200 once caught up with the log), and
Kueue's visibility API under ``/apis/visibility.kueue.x-k8s.io/{v1beta2,v1beta1}/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any, Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from events.manifests import format_time
from events.messages import AnyDecision, EvictWorkload
from services.core.answer import decision_text
from services.core.state import State
from services.web import model, visibility

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
REFRESH_SECONDS = 0.25
RECORDS_PER_REFRESH = 5000
KEEP_DECISIONS = 200


class ListenError(OSError):
    """The address cannot be served (taken, not ours): a configuration problem, said in one line."""


class Feed(Protocol):
    """The follower of the log the hub advances (``services.app.follow.Follower``)."""

    @property
    def state(self) -> State: ...

    @property
    def input_offset(self) -> int: ...

    def advance(self, on_cycle: Callable[[State], None] | None = None,
                max_records: int = 50_000) -> list[AnyDecision]: ...


Explain = Callable[[str], dict[str, Any]]
"""``ns/name`` -> the explain document (``kueuelog explain -o json``)."""


def decision_json(seq: int, d: AnyDecision) -> dict[str, Any]:
    return {"seq": seq, "type": type(d).__name__, "key": f"{d.namespace}/{d.name}", "cycle": d.cycle,
            "time": format_time(d.time), "clusterQueue": d.cluster_queue, "text": decision_text(d),
            "preemptor": d.preemptor if isinstance(d, EvictWorkload) else ""}


class Hub:
    def __init__(self, feed: Feed, explain: Explain) -> None:
        self.feed = feed
        self.explain = explain
        self.history = model.UsageHistory()
        self.decisions: deque[dict[str, Any]] = deque(maxlen=KEEP_DECISIONS)
        self.seq = 0
        self.version = 0
        self.changed = asyncio.Event()
        self._overview: tuple[int, dict[str, Any]] | None = None
        self.caught_up = False  # the last refresh found nothing new: the view shows the log's end

    def refresh(self) -> bool:
        """Apply what the log gained since the last refresh; True when something changed."""
        before = self.feed.state.cycles
        new = self.feed.advance(self.history.record, max_records=RECORDS_PER_REFRESH)
        for d in new:
            self.seq += 1
            self.decisions.append(decision_json(self.seq, d))
        if self.feed.state.cycles == before and not new and self.version:
            return False
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()
        return True

    def overview(self) -> dict[str, Any]:
        if self._overview is None or self._overview[0] != self.version:
            self._overview = (self.version, model.overview(self.feed.state, self.feed.input_offset))
        return self._overview[1]

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            caught_up = self.caught_up = not self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH_SECONDS if caught_up else 0)


def _json(doc: Any, status: int = 200) -> Response:
    return JSONResponse(doc, status_code=status)


def _status(code: int, reason: str, message: str) -> Response:
    """A Kubernetes ``Status``, as the API server answers a failed GET."""
    return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                  "reason": reason, "code": code}, code)


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name}: {raw!r} is not an integer") from None


def create_app(hub: Hub, stop: asyncio.Event) -> Starlette:
    async def page(request: Request) -> Response:
        return _static_file("index.html")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _status(404, "NotFound", f"no static file {name}")
        return _static_file(name)

    async def overview(request: Request) -> Response:
        return _json(hub.overview())

    async def workloads(request: Request) -> Response:
        q = request.query_params
        return _json(model.workloads(hub.feed.state, status=q.get("status", ""),
                                     cluster_queue=q.get("clusterQueue", ""), local_queue=q.get("localQueue", ""),
                                     text=q.get("q", "")))

    async def workload(request: Request) -> Response:
        key = f"{request.path_params['namespace']}/{request.path_params['name']}"
        doc = hub.explain(key)
        return _json(doc, 200 if doc.get("names") else 404)

    async def usage(request: Request) -> Response:
        return _json(hub.history.series())

    async def decisions(request: Request) -> Response:
        return _json({"items": list(hub.decisions)})

    async def healthz(request: Request) -> Response:
        return _json({"ok": True, "inputOffset": hub.feed.input_offset, "cycles": hub.feed.state.cycles})

    async def readyz(request: Request) -> Response:
        """Ready once caught up with the log (a new replica replays it first)."""
        return _json({"ready": hub.caught_up, "cycles": hub.feed.state.cycles}, 200 if hub.caught_up else 503)

    async def stream(request: Request) -> Response:
        return StreamingResponse(_events(hub, request, stop), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def cq_pending(request: Request) -> Response:
        return _visibility(request, lambda v, lim, off: visibility.cluster_queue_pending(
            hub.feed.state, request.path_params["name"], limit=lim, offset=off, version=v))

    async def lq_pending(request: Request) -> Response:
        return _visibility(request, lambda v, lim, off: visibility.local_queue_pending(
            hub.feed.state, request.path_params["namespace"], request.path_params["name"], limit=lim, offset=off,
            version=v))

    base = f"/apis/{visibility.GROUP}/{{version}}"
    return Starlette(routes=[
        Route("/", page), Route("/static/{name}", static), Route("/healthz", healthz), Route("/readyz", readyz),
        Route("/api/overview", overview), Route("/api/workloads", workloads),
        Route("/api/workloads/{namespace}/{name}", workload), Route("/api/usage", usage),
        Route("/api/decisions", decisions), Route("/api/stream", stream),
        Route(f"{base}/clusterqueues/{{name}}/pendingworkloads", cq_pending),
        Route(f"{base}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads", lq_pending),
    ])


def _visibility(request: Request, answer: Callable[[str, int | None, int | None], dict[str, Any]]) -> Response:
    version = request.path_params["version"]
    if version not in visibility.VERSIONS:
        return _status(404, "NotFound", f"the server could not find the requested resource ({visibility.GROUP}/"
                                        f"{version} is not served; use {' or '.join(visibility.VERSIONS)})")
    try:
        return _json(answer(version, _int_param(request, "limit"), _int_param(request, "offset")))
    except ValueError as e:
        return _status(400, "BadRequest", str(e))
    except visibility.NotFound as e:
        return _status(404, "NotFound", str(e))


def _static_file(name: str) -> Response:
    body = resources.files("services.web").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "no-cache"})


async def _events(hub: Hub, request: Request, stop: asyncio.Event) -> AsyncIterator[str]:
    """One ``update`` event per change of the state: the overview and the decisions since the
    last event (the client passes ``after=SEQ`` to resume after a reconnect)."""
    last = int(request.query_params.get("after") or 0)
    seen = -1
    while not stop.is_set():
        if hub.version != seen:
            seen = hub.version
            new = [d for d in hub.decisions if d["seq"] > last]
            last = hub.seq
            yield f"event: update\ndata: {json.dumps({'overview': hub.overview(), 'decisions': new})}\n\n"
        if await request.is_disconnected():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hub.changed.wait(), 1.0)


async def serve(hub: Hub, host: str, port: int, stop: asyncio.Event,
                on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until ``stop`` is set; ``on_ready`` gets the URL once the socket listens."""
    hub.refresh()
    config = uvicorn.Config(create_app(hub, stop), host=host, port=port, log_level="warning", lifespan="off",
                            timeout_graceful_shutdown=1, access_log=False)
    server = uvicorn.Server(config)
    try:
        sock = socket.create_server((host, port), reuse_port=False)
    except OSError as e:
        raise ListenError(f"the web view cannot listen on {host}:{port}: {e.strerror or e}") from e
    sock.setblocking(False)
    follow = asyncio.create_task(hub.run(stop))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started and not serving.done():
            await asyncio.sleep(0.02)
        bound = sock.getsockname()[1]
        if on_ready is not None and server.started:
            on_ready(f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{bound}/")
        await asyncio.wait([asyncio.create_task(stop.wait()), serving], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        server.should_exit = True
        await serving
        await follow
        sock.close()
