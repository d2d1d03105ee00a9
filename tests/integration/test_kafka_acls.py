"""Least privilege on a real broker: each role runs with its own credential and the ACLs of
services.runtime.kafka_acls, and can do its job and nothing more.

The local broker authorizes with ACLs (StandardAuthorizer); the topics are created first by a
super user, as Strimzi's topic operator would, because no role may create topics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import AdmitWorkload, WorkloadFinished
from events.simcluster import sim_cluster_topic
from services.runtime.kafka import LEASES_SUFFIX, KafkaLog, KafkaSettings
from services.runtime.kafka_acls import ROLES, role_acls
from services.runtime.log import LogError
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue
from tests.infra.kafka import SASL_USERS, LocalKafka
from tests.infra.kafka_acl import grant

pytestmark = pytest.mark.integration

JOBS = 3
MANIFESTS = yaml.safe_dump_all([b.obj() for b in (
    a_flavor("default"), a_cluster_queue("cq").flavor("default", cpu="2"), a_local_queue("team", "lq", "cq"),
    *(a_job("team", f"job-{i}", "lq").parallelism(1).request(cpu="1").annotate(SIM_DURATION_ANNOTATION, "2s")
      .created(i) for i in range(JOBS)),
)], sort_keys=False)


def _settings(broker: LocalKafka, role: str) -> KafkaSettings:
    user = f"kueuelog-{role}"
    return KafkaSettings(bootstrap_servers=broker.sasl_bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_username=user, sasl_password=SASL_USERS[user],
                         request_timeout_ms=10_000)


def _env(role: str) -> dict[str, str]:
    user = f"kueuelog-{role}"
    return {**os.environ, "KUEUELOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KUEUELOG_KAFKA_SASL_MECHANISM": "PLAIN", "KUEUELOG_KAFKA_SASL_USERNAME": user,
            "KUEUELOG_KAFKA_SASL_PASSWORD": SASL_USERS[user]}


@pytest.fixture
def granted(kafka_broker: LocalKafka, kafka_topic_prefix: str) -> Iterator[Topics]:
    import asyncio

    topics = Topics(prefix=kafka_topic_prefix.rstrip("-"))
    platform = KafkaLog(KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers), prefix=topics.prefix)
    try:
        platform.ensure_topics([topics.cluster_events, topics.decisions, topics.snapshots, topics.dead_letters,
                                sim_cluster_topic(topics)])
        platform._run(platform._ensure(f"{topics.prefix}.{LEASES_SUFFIX}", partitions=1), "create leases")
    finally:
        platform.close()
    for role, acls in role_acls(topics).items():
        asyncio.run(grant(kafka_broker.bootstrap_servers, f"User:kueuelog-{role}", acls))
    yield topics


def _refused(settings: KafkaSettings, topics: Topics, write: str, role: str | None = None) -> LogError:
    log = KafkaLog(settings, prefix=topics.prefix, role=role)
    try:
        with pytest.raises(LogError) as info:
            log.append(write, [("k", b"{}")])
        return info.value
    finally:
        log.close()


def test_no_role_writes_what_it_does_not_own(kafka_broker: LocalKafka, granted: Topics) -> None:
    t = granted
    # Topics a role may see but not write: the broker refuses the write, for good.
    for role, topic in [("reader", t.cluster_events), ("reader", t.decisions), ("actuator", t.decisions),
                        ("simcluster", t.decisions)]:
        error = _refused(_settings(kafka_broker, role), t, topic)
        assert not error.retriable, (role, topic, error)
        assert "refused by the broker" in str(error) and "AuthorizationFailed" in str(error), (role, topic, error)
    # Topics a role may not even see: it cannot tell them from missing ones, and says so.
    for role, topic in [("watcher", t.decisions), ("actuator", t.snapshots), ("simcluster", t.snapshots)]:
        error = _refused(_settings(kafka_broker, role), t, topic)
        assert "is not visible to this credential" in str(error), (role, topic, error)
    # A role may not take another role's transactional id (a watcher posing as the scheduler).
    with pytest.raises(LogError, match="refused by the broker"):
        KafkaLog(_settings(kafka_broker, "watcher"), prefix=t.prefix, role="scheduler").transact(
            {t.decisions: [("k", b"{}")]}, {})
    # What the watcher is for, it may do.
    watcher = KafkaLog(_settings(kafka_broker, "watcher"), prefix=t.prefix)
    try:
        watcher.append(t.cluster_events, [("k", b"not an event")])
        assert watcher.end_offset(t.cluster_events) >= 1
    finally:
        watcher.close()


def _start(role: str, prefix: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "services.app.cli", "run", role, "--http-port", "0",
                             "--topic-prefix", prefix, *args], stdout=out, stderr=subprocess.STDOUT, env=_env(role))


def test_the_whole_loop_runs_with_a_credential_per_role(kafka_broker: LocalKafka, granted: Topics,
                                                       tmp_path: Path) -> None:
    manifests = tmp_path / "jobs.yaml"
    manifests.write_text(MANIFESTS)
    where = ["--bootstrap-servers", kafka_broker.sasl_bootstrap_servers]
    procs = {
        "scheduler": _start("scheduler", granted.prefix, *where, log=tmp_path / "scheduler.log"),
        "actuator": _start("actuator", granted.prefix, *where, log=tmp_path / "actuator.log"),
        "simcluster": _start("simcluster", granted.prefix, *where, "--clock", "simulated", "--seed", str(manifests),
                             log=tmp_path / "simcluster.log"),
    }
    reader = KafkaLog(_settings(kafka_broker, "reader"), prefix=granted.prefix)
    try:
        deadline = time.monotonic() + 120
        admitted: set[str] = set()
        finished: set[str] = set()
        while time.monotonic() < deadline and len(finished) < JOBS:
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} exited: {(tmp_path / f'{name}.log').read_text()[-3000:]}"
            admitted = {d.name for r in reader.read(granted.decisions, 0, 10_000)
                        if isinstance(d := decode_decision(r.value), AdmitWorkload)}
            finished = {e.event.name for r in reader.read(granted.cluster_events, 0, 10_000)
                        if isinstance((e := decode_envelope(r.value)).event, WorkloadFinished)}
            time.sleep(0.2)
        logs = {n: (tmp_path / f"{n}.log").read_text()[-2000:] for n in procs}
        assert len(admitted) == JOBS and len(finished) == JOBS, logs
    finally:
        reader.close()
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=60)
    # An SRE replays and verifies with the read-only credential.
    replay = subprocess.run([sys.executable, "-m", "services.app.cli", "replay", *where, "--topic-prefix",
                             granted.prefix, "--verify"], capture_output=True, text=True, env=_env("reader"),
                            timeout=120, check=False)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "reproduce their recorded decisions" in replay.stdout


def test_every_role_has_a_test_user() -> None:
    assert {f"kueuelog-{r}" for r in ROLES} <= set(SASL_USERS)
