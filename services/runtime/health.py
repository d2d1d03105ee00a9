"""The HTTP endpoints every service serves for Kubernetes and Prometheus.

- ``/healthz`` (liveness): the process is alive and its event loop answers. A loop
  blocked by sync work cannot answer within the probe's timeout, which is what
  makes the kubelet restart a wedged process; a service may add its own ``alive``
  check (e.g. "the consume task has not died").
- ``/readyz`` (readiness): the service's own callback says whether it can do its
  job now ("recovered and connected"); 503 with the reason when not, so a standby
  scheduler stays out of rotation while it waits for leadership.
- ``/metrics``: the Prometheus exposition (text, or OpenMetrics when the scraper asks)
  of the registry the service passes in (one per service instance: nothing is registered in a global default).

The server is an aiohttp application on the service's own loop; it owns no state
of the service, only reads it through the callbacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

DEFAULT_PORT = 8080


@dataclass(frozen=True, slots=True)
class Check:
    """The answer of a health or readiness callback: ``ok`` and why (shown in the body)."""

    ok: bool
    reason: str = ""

    @classmethod
    def passing(cls, reason: str = "ok") -> Check:
        return cls(True, reason)

    @classmethod
    def failing(cls, reason: str) -> Check:
        return cls(False, reason)


CheckFn = Callable[[], Check]


def _always_alive() -> Check:
    return Check.passing("ok")


class HealthServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` (port 0: any free port).

    ``ready`` is called on every ``/readyz``; ``alive`` on every ``/healthz``. Both must be
    cheap and must not block; an exception in one is a failing check with its message.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        ready: CheckFn,
        *,
        alive: CheckFn = _always_alive,
        host: str = "0.0.0.0",  # probes and scrapes come from outside the pod
        port: int = DEFAULT_PORT,
    ) -> None:
        self.registry = registry
        self._ready = ready
        self._alive = alive
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._bound_port: int | None = None

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("health server already started")
        runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        # The first bound address: with port 0 the kernel picked it.
        self._bound_port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> HealthServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._bound_port is None:
            raise RuntimeError("health server not started")
        return self._bound_port

    # --- handlers --------------------------------------------------------------------------

    @staticmethod
    def _run(check: CheckFn) -> Check:
        try:
            result = check()
        except Exception as e:  # a broken check is a failing check, never a crashed probe
            return Check.failing(f"check raised {type(e).__name__}: {e}")
        return result

    @staticmethod
    def _answer(result: Check) -> web.Response:
        reason = result.reason or ("ok" if result.ok else "not ok")
        return web.Response(status=200 if result.ok else 503, text=reason + "\n")

    async def _healthz(self, request: web.Request) -> web.Response:
        return self._answer(self._run(self._alive))

    async def _readyz(self, request: web.Request) -> web.Response:
        return self._answer(self._run(self._ready))

    async def _metrics(self, request: web.Request) -> web.Response:
        # The exposition format the scraper asks for (OpenMetrics, or the classic text format).
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(self.registry), headers={"Content-Type": content_type})
