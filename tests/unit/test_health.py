"""The health server, for real: an aiohttp server on a free port, probed over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from services.runtime.health import Check, HealthServer
from services.scheduler.metrics import SchedulerMetrics
from tests.builders import a_cluster_queue, a_flavor, build_state


class Flags:
    """What a service would flip as it recovers and connects."""

    def __init__(self) -> None:
        self.ready = Check.failing("recovering: folding the log from offset 0")
        self.alive = Check.passing()

    def readiness(self) -> Check:
        return self.ready

    def liveness(self) -> Check:
        return self.alive


@pytest_asyncio.fixture(loop_scope="function")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def get(http: aiohttp.ClientSession, server: HealthServer, path: str) -> tuple[int, str, str]:
    async with http.get(f"http://127.0.0.1:{server.port}{path}") as response:
        return response.status, await response.text(), response.headers.get("Content-Type", "")


async def test_readyz_follows_the_services_callback(http: aiohttp.ClientSession) -> None:
    flags = Flags()
    async with HealthServer(CollectorRegistry(), flags.readiness, alive=flags.liveness, host="127.0.0.1",
                            port=0) as server:
        assert server.port > 0
        assert await get(http, server, "/readyz") == (
            503, "recovering: folding the log from offset 0\n", "text/plain; charset=utf-8")
        # Not ready is not dead: the liveness probe must not restart a recovering service.
        assert (await get(http, server, "/healthz"))[:2] == (200, "ok\n")

        flags.ready = Check.passing("recovered and connected")
        assert (await get(http, server, "/readyz"))[:2] == (200, "recovered and connected\n")

        flags.ready = Check.failing("standby: waiting for leadership")
        assert (await get(http, server, "/readyz"))[:2] == (503, "standby: waiting for leadership\n")


async def test_healthz_fails_when_the_service_says_it_is_wedged(http: aiohttp.ClientSession) -> None:
    flags = Flags()
    async with HealthServer(CollectorRegistry(), flags.readiness, alive=flags.liveness, host="127.0.0.1",
                            port=0) as server:
        flags.alive = Check.failing("the consume task died: KafkaConnectionError")
        assert (await get(http, server, "/healthz"))[:2] == (503, "the consume task died: KafkaConnectionError\n")


async def test_a_check_that_raises_is_a_failing_check(http: aiohttp.ClientSession) -> None:
    def broken() -> Check:
        raise KeyError("position")

    async with HealthServer(CollectorRegistry(), broken, host="127.0.0.1", port=0) as server:
        status, body, _ = await get(http, server, "/readyz")
        assert status == 503
        assert body == "check raised KeyError: 'position'\n"
        assert (await get(http, server, "/healthz"))[0] == 200


async def test_metrics_exposes_the_registry_in_prometheus_text_format(http: aiohttp.ClientSession) -> None:
    metrics = SchedulerMetrics()
    state = build_state(a_flavor("default"), a_cluster_queue("cq").flavor("default", cpu="3"))
    metrics.observe([], [], state, events_folded=2)
    async with HealthServer(metrics.registry, Check.passing, host="127.0.0.1", port=0) as server:
        status, body, content_type = await get(http, server, "/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    lines = body.splitlines()
    assert 'kueue_pending_workloads{cluster_queue="cq",status="active"} 0.0' in lines
    assert ('kueue_cluster_queue_nominal_quota{cluster_queue="cq",cohort="",flavor="default",resource="cpu"} 3.0'
            in lines)
    assert "kueuelog_events_folded_total 2.0" in lines
    assert "# TYPE kueue_admission_wait_time_seconds histogram" in lines
    assert "# TYPE kueue_admitted_workloads_total counter" in lines


async def test_metrics_speaks_openmetrics_to_a_scraper_that_asks(http: aiohttp.ClientSession) -> None:
    metrics = SchedulerMetrics()
    async with HealthServer(metrics.registry, Check.passing, host="127.0.0.1", port=0) as server:
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with http.get(f"http://127.0.0.1:{server.port}/metrics", headers=headers) as response:
            body = await response.text()
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    assert "# TYPE kueue_admitted_workloads counter" in body.splitlines()


async def test_unknown_paths_are_404_and_the_port_is_released_on_stop(http: aiohttp.ClientSession) -> None:
    server = HealthServer(CollectorRegistry(), Check.passing, host="127.0.0.1", port=0)
    await server.start()
    port = server.port
    assert (await get(http, server, "/"))[0] == 404
    await server.stop()
    # The same port can be bound again at once: nothing of the server is left behind.
    again = HealthServer(CollectorRegistry(), Check.passing, host="127.0.0.1", port=port)
    async with again:
        assert again.port == port
        assert (await get(http, again, "/healthz"))[0] == 200


async def test_starting_twice_is_an_error() -> None:
    async with HealthServer(CollectorRegistry(), Check.passing, host="127.0.0.1", port=0) as server:
        with pytest.raises(RuntimeError, match="already started"):
            await server.start()
