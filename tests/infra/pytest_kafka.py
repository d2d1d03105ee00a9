"""Pytest plugin that owns the test session's real Kafka broker.

Fixtures:

* ``kafka_broker`` (session): a started :class:`tests.infra.kafka.LocalKafka`; use its
  ``bootstrap_servers``. Started lazily by the first test that asks for it, stopped at the
  end of the session. If it cannot start, every test that needs it *errors* with the
  reason and the broker log summary: a missing broker is a broken environment, never a skip.
* ``kafka_topic_prefix`` (function): a prefix unique to one test, so tests sharing the
  broker never read each other's topics, groups or transactional ids.

When a test that used the broker fails, its report gets a "kafka broker" section with the
log path, its first ERROR and its tail.

Enable with ``pytest_plugins = ["tests.infra.pytest_kafka"]`` or ``-p tests.infra.pytest_kafka``.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Generator, Iterator

import pytest

from tests.infra.kafka import KafkaError, LocalKafka

_BROKER = pytest.StashKey[LocalKafka]()


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalKafka]:
    broker = LocalKafka()
    # Under pytest's basetemp: kept for the last few sessions, so a failed run's log and
    # data can still be inspected afterwards, and old ones are cleaned up automatically.
    run_dir = tmp_path_factory.mktemp("kafka")
    request.config.stash[_BROKER] = broker
    error: str | None = None
    try:
        broker.ensure_installed()
        broker.start(run_dir)
    except (KafkaError, OSError, subprocess.SubprocessError) as exc:
        error = str(exc)
    if error is not None:
        # Failing (outside the except, so the report is not doubled by exception chaining)
        # makes each test needing the broker an error, never a skip; pytest caches the
        # failure for the session, so a broken broker is reported, not retried per test.
        pytest.fail(f"local Kafka broker did not start: {error}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_topic_prefix(request: pytest.FixtureRequest) -> str:
    # Topic names allow [a-zA-Z0-9._-]; the test name makes stray topics traceable and the
    # random part keeps reruns and parametrized cases apart.
    name = re.sub(r"[^a-zA-Z0-9_-]+", "-", request.node.name)[:60].strip("-")
    return f"t-{name}-{uuid.uuid4().hex[:8]}-"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.failed or "kafka_broker" not in getattr(item, "fixturenames", ()):
        return report
    broker = item.config.stash.get(_BROKER, None)
    # A broker that never became ready already put its log summary into the setup error.
    if broker is None or broker.log_path is None or broker.start_seconds is None:
        return report
    report.sections.append(
        (
            "kafka broker",
            f"bootstrap 127.0.0.1:{broker.port}, pid {broker.pid}\n{broker.log_summary(30)}",
        )
    )
    return report
