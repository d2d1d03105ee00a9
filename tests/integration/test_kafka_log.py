"""The Kafka backend of the log port, on the real local broker.

The port's contract (the same suite as the embedded log's), what only Kafka adds (headers,
topic settings, transactions invisible until committed), single-writer fencing and the
standby election, and the services on Kafka: the same decisions as on the embedded log,
dead letters, and a broker restart in the middle of a run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics, event_key
from events.manifests import load
from events.messages import AdmitWorkload, ClockTicked, CycleCompleted, WorkloadFinished
from services.app.driver import drive_until_idle, run_all
from services.app.logview import replay
from services.runtime.kafka import Fenced, KafkaLog, KafkaSettings, LeadershipLost
from services.runtime.log import Log, LogError, values_of
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream, arrival_schedule, seed_all
from services.simcluster.cluster import SimConfig
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue
from tests.infra.kafka import SASL_USERS, LocalKafka
from tests.log_contract import LogContract

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def settings(kafka_broker: LocalKafka) -> KafkaSettings:
    # Short sessions: a standby notices a dead leader within about two seconds.
    return KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers, session_timeout_ms=2000,
                         heartbeat_interval_ms=300)


@pytest.fixture
def prefix(kafka_topic_prefix: str) -> str:
    return kafka_topic_prefix.rstrip("-")


@pytest.fixture
def log(settings: KafkaSettings, prefix: str) -> Iterator[KafkaLog]:
    lg = KafkaLog(settings, prefix=prefix, role="test")
    yield lg
    lg.close()


@pytest.fixture
def topic(prefix: str) -> Callable[[str], str]:
    return lambda name: f"{prefix}.{name}"


class TestKafkaLogContract(LogContract):
    pass


def _wait(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")


# --- what Kafka adds ------------------------------------------------------------------------


async def test_records_carry_key_and_schema_version_and_topics_have_their_settings(
        log: KafkaLog, prefix: str, settings: KafkaSettings) -> None:
    topics = Topics(prefix=prefix)
    env = Envelope(id="t1", source="test", cluster="c", event=ClockTicked(time=5))
    await asyncio.to_thread(log.append, topics.cluster_events, [(event_key(env), encode(env))])
    await asyncio.to_thread(log.append, topics.snapshots, [("scheduler", b"{}")])
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, isolation_level="read_committed",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        tp = TopicPartition(topics.cluster_events, 0)
        consumer.assign([tp])
        got = await consumer.getmany(tp, timeout_ms=5000)
        (msg,) = got[tp]
        assert msg.key == b"c"
        assert dict(msg.headers) == {"schema": b"1", "content-type": b"application/json"}
        assert decode_envelope(msg.value) == env
        configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topics.snapshots),
                                                ConfigResource(ConfigResourceType.TOPIC, topics.cluster_events)])
        by_topic = {res[3]: {c[0]: c[1] for c in res[4]} for resp in configs for res in resp.resources}
        assert by_topic[topics.snapshots]["cleanup.policy"] == "compact"
        assert by_topic[topics.cluster_events]["cleanup.policy"] == "delete"
        assert by_topic[topics.cluster_events]["retention.ms"] == "-1"  # the log is the truth: nothing expires
    finally:
        await consumer.stop()
        await admin.close()


def test_readers_never_see_an_aborted_transaction(log: KafkaLog, topic: Callable[[str], str]) -> None:
    t = topic("t")
    log.append(t, [("k", b"committed")])
    with pytest.raises(Exception, match="boom"):
        async def fail() -> None:
            producer = await log._producer_ready()
            async with producer.transaction():
                await producer.send(t, b"aborted", key=b"k", partition=0)
                raise RuntimeError("boom")
        log._io.run(fail(), timeout=30)
    log.append(t, [("k", b"after")])
    assert [r.value for r in log.read(t, 0)] == [b"committed", b"after"]


def test_a_transaction_the_caller_gave_up_on_never_commits_later(settings: KafkaSettings, prefix: str,
                                                                  topic: Callable[[str], str]) -> None:
    """A service whose commit timed out rebuilds from the log and writes that step again; had the
    old transaction committed behind its back, the step would be in the log twice."""
    quick = dataclasses.replace(settings, request_timeout_ms=1000)
    t = topic("slow")
    with KafkaLog(quick, prefix=prefix, role="slow") as lg:
        lg.append(t, [("k", b"before")])
        send_all = lg._send_all

        async def slow_send_all(producer, appends):  # type: ignore[no-untyped-def]
            await asyncio.sleep(6)  # longer than the caller waits (3 x request timeout)
            return await send_all(producer, appends)

        lg._send_all = slow_send_all  # type: ignore[method-assign]
        with pytest.raises(LogError):
            lg.transact({t: [("k", b"given up")]}, {("g", t): 1})
        lg._send_all = send_all  # type: ignore[method-assign]
        time.sleep(5)  # past the moment the slow transaction would have committed
        lg.append(t, [("k", b"after")])
        assert [r.value for r in lg.read(t, 0)] == [b"before", b"after"]
        assert lg.position("g", t) == 0


def test_settings_come_from_the_environment_and_hide_the_password() -> None:
    s = KafkaSettings.from_env({"KUEUELOG_KAFKA_BOOTSTRAP_SERVERS": "b:9092",
                                "KUEUELOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                                "KUEUELOG_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                                "KUEUELOG_KAFKA_SASL_USERNAME": "kueuelog",
                                "KUEUELOG_KAFKA_SASL_PASSWORD": "s3cret",
                                "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS": "4000"})
    assert (s.bootstrap_servers, s.sasl_mechanism, s.session_timeout_ms) == ("b:9092", "SCRAM-SHA-512", 4000)
    assert "s3cret" not in repr(s)
    kw = s.client_kwargs()
    assert kw["sasl_plain_password"] == "s3cret" and kw["security_protocol"] == "SASL_PLAINTEXT"
    with pytest.raises(ValueError, match="sasl_mechanism 'GSSAPI' is not one of"):
        KafkaSettings(bootstrap_servers="b:9092", security_protocol="SASL_SSL", sasl_mechanism="GSSAPI",
                      sasl_username="u", sasl_password="p")
    with pytest.raises(ValueError, match="SESSION_TIMEOUT_MS='soon' is not an integer"):
        KafkaSettings.from_env({"KUEUELOG_KAFKA_BOOTSTRAP_SERVERS": "b:9092",
                                "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS": "soon"})
    with pytest.raises(ValueError, match="no bootstrap servers"):
        KafkaSettings.from_env({})
    # A standby notices a dead leader within seconds by default; the heartbeat must fit in the session.
    assert (KafkaSettings(bootstrap_servers="b:9092").session_timeout_ms,
            KafkaSettings(bootstrap_servers="b:9092").heartbeat_interval_ms) == (2000, 400)
    with pytest.raises(ValueError, match=r"heartbeat_interval_ms \(3000\) must be above 0 and below"):
        KafkaSettings.from_env({"KUEUELOG_KAFKA_BOOTSTRAP_SERVERS": "b:9092",
                                "KUEUELOG_KAFKA_HEARTBEAT_INTERVAL_MS": "3000"})


# --- single writer ---------------------------------------------------------------------------


def test_a_zombie_writer_is_fenced_by_its_successor(settings: KafkaSettings, prefix: str,
                                                     topic: Callable[[str], str]) -> None:
    t, inp = topic("out"), topic("in")
    old = KafkaLog(settings, prefix=prefix, role="scheduler")
    new = KafkaLog(settings, prefix=prefix, role="scheduler")
    try:
        old.transact({t: [("k", b"old-1")]}, {("scheduler", inp): 1})
        new.transact({t: [("k", b"new-1")]}, {("scheduler", inp): 2})  # starting the producer fences `old`
        with pytest.raises(Fenced) as err:
            old.transact({t: [("k", b"zombie")]}, {("scheduler", inp): 99})
        assert err.value.retriable is False
        new.transact({t: [("k", b"new-2")]}, {("scheduler", inp): 3})
        assert [r.value for r in new.read(t, 0)] == [b"old-1", b"new-1", b"new-2"]
        assert new.position("scheduler", inp) == 3
    finally:
        old.close()
        new.close()


async def test_a_standby_waits_for_the_leader_and_takes_over(settings: KafkaSettings, prefix: str,
                                                            topic: Callable[[str], str]) -> None:
    a = KafkaLog(settings, prefix=prefix, role="scheduler")
    b = KafkaLog(settings, prefix=prefix, role="scheduler")
    stop = asyncio.Event()
    try:
        assert await asyncio.wait_for(a.acquire("scheduler", stop), 30)
        standby = asyncio.ensure_future(b.acquire("scheduler", stop))
        await asyncio.sleep(3)  # longer than a session: b stays a standby while a lives
        assert not standby.done() and not b.holds("scheduler") and a.holds("scheduler")
        with pytest.raises(LeadershipLost):
            await asyncio.to_thread(b.append, topic("t"), [("k", b"standby")])  # a standby never writes
        await asyncio.to_thread(a.append, topic("t"), [("k", b"leader")])
        a.release("scheduler")  # the leader leaves (a crash is the slower case: see test_kafka_crash)
        assert await asyncio.wait_for(standby, 30)
        await asyncio.to_thread(b.append, topic("t"), [("k", b"successor")])
        assert [r.value for r in b.read(topic("t"), 0)] == [b"leader", b"successor"]
    finally:
        stop.set()
        a.close()
        b.close()


async def test_a_session_timeout_the_broker_refuses_is_a_final_error_naming_both_settings(
        kafka_broker: LocalKafka, prefix: str) -> None:
    # The test broker allows sessions from 500 ms (group.min.session.timeout.ms); ask for less.
    short = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers, session_timeout_ms=400,
                          heartbeat_interval_ms=100)
    log = KafkaLog(short, prefix=prefix, role="scheduler")
    try:
        with pytest.raises(LogError) as err:
            await asyncio.wait_for(log.acquire("scheduler", asyncio.Event()), 60)
        assert err.value.retriable is False
        assert "group.min.session.timeout.ms" in str(err.value)
        assert "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS" in str(err.value)
    finally:
        log.close()


# --- the services on Kafka --------------------------------------------------------------------


def _manifests(jobs: int = 24) -> str:
    objs = [a_flavor("default").obj(),
            a_cluster_queue("cq-a").cohort("c").flavor("default", cpu=(4, 4)).preemption(
                within="LowerPriority", reclaim="Any").obj(),
            a_cluster_queue("cq-b").cohort("c").flavor("default", cpu=4).preemption(reclaim="Any").obj(),
            a_local_queue("a", "lq", "cq-a").obj(), a_local_queue("b", "lq", "cq-b").obj(),
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
             "metadata": {"name": "high"}, "value": 100}]
    for i in range(jobs):
        job = a_job("a" if i % 3 else "b", f"j{i:02d}", "lq").parallelism(1 + i % 2).request(cpu=1 + i % 2)
        job = job.created(i * 5).annotate("kueuelog.io/sim-duration", f"{20 + (i * 37) % 180}s")
        if i % 7 == 0:
            job = job.label("kueue.x-k8s.io/priority-class", "high")
        objs.append(job.obj())
    return yaml.safe_dump_all(objs)


def _values(log: Log, topic: str) -> list[bytes]:
    return list(values_of(log, topic))


def _cli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``kueuelog ARGS``; a command that follows forever (tail) is stopped with SIGINT at ``timeout``."""
    proc = subprocess.Popen([sys.executable, "-m", "services.app.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _offset_free(values: list[bytes]) -> list[bytes]:
    out = []
    for v in values:
        d = decode_decision(v)
        out.append(encode(msgspec.structs.replace(d, input_offset=0)) if isinstance(d, CycleCompleted) else v)
    return out


def test_the_loop_on_kafka_decides_exactly_as_on_the_embedded_log(settings: KafkaSettings, prefix: str,
                                                                   tmp_path: Path) -> None:
    objects = load({"jobs.yaml": _manifests()})
    topics = Topics(prefix=prefix)
    kafka = KafkaLog(settings, prefix=prefix, role="all")
    embedded = SqliteLog(tmp_path / "log", durable=False)
    try:
        for lg in (kafka, embedded):
            arrivals = ArrivalStream(lg, arrival_schedule(objects), topics=topics)
            drive_until_idle(lg, topics=topics, arrivals=arrivals)
        decisions = _values(kafka, topics.decisions)
        # Byte for byte, except where a cycle record names its input offset: Kafka's offsets have
        # gaps (a control record after every transaction), so the same event sits at another offset.
        assert _offset_free(decisions) == _offset_free(_values(embedded, topics.decisions))
        assert len(decisions) == len(_values(embedded, topics.decisions))
        assert sum(isinstance(decode_decision(v), AdmitWorkload) for v in decisions) >= 24
        finished = {decode_envelope(v).event.name for v in _values(kafka, topics.cluster_events)  # type: ignore[union-attr]
                    if isinstance(decode_envelope(v).event, WorkloadFinished)}
        assert len(finished) == 24
        report = replay(kafka, topics, verify=True)
        assert report.mismatches == [] and report.cycles == sum(
            isinstance(decode_decision(v), CycleCompleted) for v in decisions)

        # The same through the command line, against the topics.
        where = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix", prefix]
        out = _cli("replay", "--verify", *where)
        assert f"verify: all {report.cycles} cycles reproduce" in out.stdout, out.stdout + out.stderr
        first = next(d for d in map(decode_decision, decisions) if isinstance(d, AdmitWorkload))
        out = _cli("explain", f"{first.namespace}/{first.name}", *where)
        assert out.returncode == 0 and f"cycle {first.cycle}" in out.stdout, out.stdout + out.stderr
        out = _cli("tail", "--from-start", "--type", "Admit", *where, timeout=8)
        assert f"{first.namespace}/{first.name}: admitted" in out.stdout, out.stdout + out.stderr
        bad = _cli("replay", *where, env={"KUEUELOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
        assert bad.returncode == 3  # configuration
        assert "sasl_mechanism '' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in bad.stderr
    finally:
        kafka.close()
        embedded.close()


def test_a_malformed_event_goes_to_dead_letters_and_the_scheduler_carries_on(settings: KafkaSettings,
                                                                             prefix: str) -> None:
    topics = Topics(prefix=prefix)
    log = KafkaLog(settings, prefix=prefix, role="scheduler")
    try:
        objects = load({"jobs.yaml": _manifests(jobs=3)})
        seed_all(log, objects[:3], topics=topics)
        log.append(topics.cluster_events, [("junk", b'{"id": "x", "source": "test", "event": {"type": 42}}'),
                                           ("junk", b"not json at all")])
        seed_all(log, objects[3:], topics=topics)
        scheduler = Scheduler(log, topics=topics)
        scheduler.recover()
        while scheduler.step():
            pass
        dead = [yaml.safe_load(v) for v in _values(log, topics.dead_letters)]
        assert [d["topic"] for d in dead] == [topics.cluster_events] * 2
        assert "not json at all" in dead[1]["value"] and dead[0]["reason"]
        admitted = [d for d in map(decode_decision, _values(log, topics.decisions)) if isinstance(d, AdmitWorkload)]
        assert len(admitted) == 3  # every workload after the junk was still seen and admitted
    finally:
        log.close()


def test_the_services_ride_out_a_broker_restart(kafka_broker: LocalKafka, settings: KafkaSettings,
                                                prefix: str) -> None:
    """Scheduler, actuator and simulated cluster run while the broker is restarted under them: they
    reconnect, rebuild from the log, and every workload still finishes exactly once."""
    topics = Topics(prefix=prefix)
    objects = load({"jobs.yaml": _manifests(jobs=30)})
    log = KafkaLog(settings, prefix=prefix, role="all")
    reader = KafkaLog(settings, prefix=prefix)
    outcome: list[object] = []

    def services() -> None:
        # In a thread of its own: the broker is restarted from the main thread, because the local
        # broker dies with the thread that started it (PR_SET_PDEATHSIG).
        try:
            arrivals = ArrivalStream(log, arrival_schedule(objects), topics=topics)
            outcome.append(asyncio.run(run_all(log, topics=topics, arrivals=arrivals, config=SimConfig(),
                                               poll_seconds=0.02)))
        except BaseException as e:  # reported by the test below
            outcome.append(e)

    thread = threading.Thread(target=services, daemon=True)
    thread.start()
    try:
        _wait(lambda: len([v for v in _values(reader, topics.decisions) if b'"admit"' in v]) >= 10 or not
              thread.is_alive(), 120, "the loop to get under way")
        assert thread.is_alive(), f"the run ended before the restart: {outcome}"
        kafka_broker.restart()
        thread.join(240)
        assert not thread.is_alive(), "the services did not finish after the broker restart"
        (result,) = outcome
        assert not isinstance(result, BaseException), result
        decisions = [decode_decision(v) for v in _values(log, topics.decisions)]
        ids = [d.id for d in decisions if not isinstance(d, CycleCompleted)]
        assert len(ids) == len(set(ids)), "a decision was written twice"
        holding: dict[str, bool] = {}
        for d in decisions:
            if isinstance(d, AdmitWorkload):
                assert not holding.get(d.name), f"{d.name} admitted twice"
                holding[d.name] = True
            elif not isinstance(d, CycleCompleted) and type(d).__name__ == "EvictWorkload":
                holding[d.name] = False
        finished = [e.event.name for e in map(decode_envelope, _values(log, topics.cluster_events))
                    if isinstance(e.event, WorkloadFinished)]
        assert len(finished) == 30 and len(set(finished)) == 30
        assert replay(log, topics, verify=True).mismatches == []
    finally:
        log.close()
        reader.close()


def test_a_log_without_a_role_appends_idempotently_and_commits_nothing(settings: KafkaSettings, prefix: str,
                                                                       topic: Callable[[str], str]) -> None:
    """Watchers: any number of replicas, each with an idempotent (not transactional) producer."""
    a = KafkaLog(settings, prefix=prefix)
    b = KafkaLog(settings, prefix=prefix)
    try:
        assert a.transactional_id is None
        a.append(topic("t"), [("k", b"a1")])
        b.append(topic("t"), [("k", b"b1")])  # no fencing between replicas
        a.append(topic("t"), [("k", b"a2")])
        assert sorted(r.value for r in a.read(topic("t"), 0)) == [b"a1", b"a2", b"b1"]
        with pytest.raises(LogError, match="needs a log opened with a role"):
            a.transact({}, {("g", topic("t")): 1})
    finally:
        a.close()
        b.close()


# --- security ---------------------------------------------------------------------------------


def test_sasl_plain_login_works_and_a_wrong_password_is_a_clear_final_error(
        kafka_broker: LocalKafka, prefix: str, topic: Callable[[str], str]) -> None:
    user, password = next(iter(SASL_USERS.items()))
    good = KafkaSettings(bootstrap_servers=kafka_broker.sasl_bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism="PLAIN", sasl_username=user, sasl_password=password)
    log = KafkaLog(good, prefix=prefix, role="sasl")
    try:
        log.transact({topic("t"): [("k", b"over sasl")]}, {("g", topic("in")): 7})
        assert [r.value for r in log.read(topic("t"), 0)] == [b"over sasl"]
        assert log.position("g", topic("in")) == 7
    finally:
        log.close()
    bad = KafkaSettings(bootstrap_servers=kafka_broker.sasl_bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism="PLAIN", sasl_username=user, sasl_password="not-the-password",
                        request_timeout_ms=5000)
    with pytest.raises(LogError) as err:
        KafkaLog(bad, prefix=prefix).close()
    assert err.value.retriable is False, err.value
    assert "not-the-password" not in str(err.value)


def test_the_cli_never_prints_the_sasl_password(kafka_broker: LocalKafka, prefix: str) -> None:
    user, password = next(iter(SASL_USERS.items()))
    env = {"KUEUELOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KUEUELOG_KAFKA_SASL_MECHANISM": "PLAIN",
           "KUEUELOG_KAFKA_SASL_USERNAME": user, "KUEUELOG_KAFKA_REQUEST_TIMEOUT_MS": "5000"}
    where = ["--bootstrap-servers", kafka_broker.sasl_bootstrap_servers, "--topic-prefix", prefix]
    ok = _cli("replay", *where, env={**env, "KUEUELOG_KAFKA_SASL_PASSWORD": password})
    assert ok.returncode == 0 and "replayed 0 events" in ok.stdout, ok.stdout + ok.stderr
    wrong = _cli("replay", *where, env={**env, "KUEUELOG_KAFKA_SASL_PASSWORD": "hunter2-wrong"})
    assert wrong.returncode != 0
    for out in (ok, wrong):
        assert password not in out.stdout + out.stderr and "hunter2-wrong" not in out.stdout + out.stderr


async def test_an_idle_reader_waits_in_a_fetch_and_sees_a_record_once_it_is_committed(
        log: KafkaLog, settings: KafkaSettings, prefix: str, topic: Callable[[str], str]) -> None:
    t = topic("t")
    await asyncio.to_thread(log.append, t, [("k", b"first")])
    (first,) = await asyncio.to_thread(log.read, t, 0)
    start = first.offset + 1
    assert not await log.wait_for_records(t, start, 0.3)  # nothing new: False after the timeout
    writer = KafkaLog(settings, prefix=prefix, role="other-writer")
    try:
        waiting = asyncio.ensure_future(log.wait_for_records(t, start, 20))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await asyncio.to_thread(writer.transact, {t: [("k", b"second"), ("k", b"third")]}, {})
        assert await asyncio.wait_for(waiting, 20)
        got = await asyncio.to_thread(log.read, t, start)  # served from what the wait fetched
        assert [r.value for r in got] == [b"second", b"third"]
        assert await asyncio.to_thread(log.read, t, got[-1].offset + 1) == []
        assert [r.value for r in await asyncio.to_thread(log.read, t, 0)] == [b"first", b"second", b"third"]
    finally:
        writer.close()
