"""Proves the local broker (tests/infra/kafka.py) does what kueuelog's services rely on.

Owns the end-to-end checks of the Kafka features we use through aiokafka against a real
broker: topic creation via the admin client, transactions (commit, abort, and the
last-stable-offset a ``read_committed`` consumer stops at), and consume→produce with
``send_offsets_to_transaction``. aiokafka's own CI stops at old brokers, so this is where a
Kafka-4 incompatibility would show up first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.structs import ConsumerRecord, TopicPartition

from tests.infra.kafka import LocalKafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T = TypeVar("T")
WAIT_S = 30.0


async def eventually(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = WAIT_S
) -> T:
    """Re-run ``probe`` until ``done(value)`` or the deadline; return the last value.

    The caller still asserts on the returned value, so a timeout fails with what was seen.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if done(value) or loop.time() >= deadline:
            return value
        await asyncio.sleep(0.1)  # poll interval inside the deadline loop


async def create_topics(bootstrap: str, *names: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
        assert sorted((t[0], t[1]) for t in resp.topic_errors) == sorted((n, 0) for n in names)
    finally:
        await admin.close()


async def end_offsets(bootstrap: str, tp: TopicPartition, isolation_level: str) -> int:
    """High watermark for read_uncommitted, last stable offset for read_committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation_level)
    await consumer.start()
    try:
        offsets: dict[TopicPartition, int] = await consumer.end_offsets([tp])
        return offsets[tp]
    finally:
        await consumer.stop()


async def wait_stable(bootstrap: str, tp: TopicPartition) -> int:
    """Wait until no transaction is open on ``tp`` (LSO == high watermark).

    commit/abort_transaction return once the coordinator has decided; the markers reach
    the partition a moment later, so reads right after a commit could otherwise race.
    """

    async def both() -> tuple[int, int]:
        return (
            await end_offsets(bootstrap, tp, "read_committed"),
            await end_offsets(bootstrap, tp, "read_uncommitted"),
        )

    lso, hw = await eventually(both, lambda v: v[0] == v[1])
    assert lso == hw, f"{tp} still has an open transaction: LSO {lso} < high watermark {hw}"
    return hw


async def read_all(bootstrap: str, tp: TopicPartition, isolation_level: str) -> list[bytes]:
    """Every value on ``tp`` that ``isolation_level`` may see, up to its current end offset."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        values: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while await consumer.position(tp) < end:
            assert loop.time() < deadline, f"stuck at {await consumer.position(tp)} < {end} on {tp}"
            batch = await consumer.getmany(tp, timeout_ms=500)
            values += [r.value for r in batch.get(tp, [])]
        return values
    finally:
        await consumer.stop()


async def take(consumer: AIOKafkaConsumer, tp: TopicPartition, n: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly the next ``n`` records of ``tp`` from a subscribed consumer."""
    got: list[ConsumerRecord[bytes, bytes]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while len(got) < n:
        assert loop.time() < deadline, f"only {len(got)} of {n} records arrived on {tp}"
        batch = await consumer.getmany(tp, timeout_ms=500, max_records=n - len(got))
        got += batch.get(tp, [])
    return got


async def test_admin_creates_topic(kafka_broker: LocalKafka, kafka_topic_prefix: str) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic_prefix + "created"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, 3, 1)])
        assert [(t[0], t[1]) for t in resp.topic_errors] == [(topic, 0)]

        async def describe() -> list[dict[str, Any]]:
            return await admin.describe_topics([topic])  # type: ignore[no-any-return]

        described = await eventually(
            describe, lambda ts: len(ts) == 1 and ts[0]["error_code"] == 0 and len(ts[0]["partitions"]) == 3
        )
        assert described[0]["topic"] == topic
        assert described[0]["error_code"] == 0
        partitions = described[0]["partitions"]
        assert isinstance(partitions, list)
        assert sorted(p["partition"] for p in partitions) == [0, 1, 2]
        assert {p["leader"] for p in partitions} == {1}  # our single node leads everything
        assert topic in await admin.list_topics()

        # A second create must be refused, not silently accepted.
        again = await admin.create_topics([NewTopic(topic, 3, 1)])
        assert [(t[0], t[1]) for t in again.topic_errors] == [(topic, TopicAlreadyExistsError.errno)]
    finally:
        await admin.close()


async def test_read_committed_sees_only_committed_transactions(
    kafka_broker: LocalKafka, kafka_topic_prefix: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_topic_prefix + "txn"
    tp = TopicPartition(topic, 0)
    await create_topics(bootstrap, topic)

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=kafka_topic_prefix + "producer",
        enable_idempotence=True,
    )
    await producer.start()
    try:
        async with producer.transaction():
            for v in (b"c1", b"c2"):
                await producer.send_and_wait(topic, v, partition=0)

        await producer.begin_transaction()
        for v in (b"a1", b"a2"):
            await producer.send_and_wait(topic, v, partition=0)
        await producer.abort_transaction()

        # A transaction left open: read_committed must stop at its first record (the LSO)
        # while read_uncommitted already sees it.
        await producer.begin_transaction()
        pending = await producer.send_and_wait(topic, b"p1", partition=0)
        lso = await eventually(
            lambda: end_offsets(bootstrap, tp, "read_committed"), lambda o: o == pending.offset
        )
        assert lso == pending.offset
        assert await end_offsets(bootstrap, tp, "read_uncommitted") == pending.offset + 1
        assert await read_all(bootstrap, tp, "read_committed") == [b"c1", b"c2"]
        assert await read_all(bootstrap, tp, "read_uncommitted") == [b"c1", b"c2", b"a1", b"a2", b"p1"]
        await producer.commit_transaction()
    finally:
        await producer.stop()

    await wait_stable(bootstrap, tp)
    assert await read_all(bootstrap, tp, "read_committed") == [b"c1", b"c2", b"p1"]
    # The aborted records really are in the log: isolation, not loss, hides them.
    assert await read_all(bootstrap, tp, "read_uncommitted") == [b"c1", b"c2", b"a1", b"a2", b"p1"]


async def test_send_offsets_to_transaction_consume_produce(
    kafka_broker: LocalKafka, kafka_topic_prefix: str
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    src, dst, group = (kafka_topic_prefix + s for s in ("in", "out", "group"))
    src_tp, dst_tp = TopicPartition(src, 0), TopicPartition(dst, 0)
    await create_topics(bootstrap, src, dst)

    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await plain.start()
    try:
        for i in range(1, 5):
            await plain.send_and_wait(src, f"in{i}".encode(), partition=0)
    finally:
        await plain.stop()

    def group_consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            src,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,  # offsets move only with our transactions
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=kafka_topic_prefix + "xform",
        enable_idempotence=True,
    )
    consumer = group_consumer()
    await admin.start()
    await producer.start()
    await consumer.start()
    try:

        async def group_offset() -> int | None:
            offsets = await admin.list_consumer_group_offsets(group, partitions=[src_tp])
            meta = offsets.get(src_tp)
            return None if meta is None or meta.offset < 0 else int(meta.offset)

        # Committed: two outputs and the group's position move together.
        first = await take(consumer, src_tp, 2)
        assert [r.value for r in first] == [b"in1", b"in2"]
        async with producer.transaction():
            for r in first:
                await producer.send_and_wait(dst, r.value.upper(), partition=0)
            await producer.send_offsets_to_transaction({src_tp: first[-1].offset + 1}, group)
        assert await eventually(group_offset, lambda o: o == 2) == 2

        # Aborted: outputs vanish and the group's offset must not move.
        second = await take(consumer, src_tp, 2)
        assert [r.value for r in second] == [b"in3", b"in4"]
        await producer.begin_transaction()
        for r in second:
            await producer.send_and_wait(dst, r.value.upper(), partition=0)
        await producer.send_offsets_to_transaction({src_tp: second[-1].offset + 1}, group)
        await producer.abort_transaction()
        await wait_stable(bootstrap, dst_tp)
        assert await group_offset() == 2
    finally:
        await consumer.stop()

    try:
        # A restarted member resumes from the transactionally committed offset, i.e. it
        # redoes the aborted work, which is exactly the exactly-once recovery we rely on.
        consumer = group_consumer()
        await consumer.start()
        try:
            redo = await take(consumer, src_tp, 2)
            assert [r.value for r in redo] == [b"in3", b"in4"]
            async with producer.transaction():
                for r in redo:
                    await producer.send_and_wait(dst, r.value.upper(), partition=0)
                await producer.send_offsets_to_transaction({src_tp: redo[-1].offset + 1}, group)
        finally:
            await consumer.stop()
        assert await eventually(group_offset, lambda o: o == 4) == 4
    finally:
        await producer.stop()
        await admin.close()

    await wait_stable(bootstrap, dst_tp)
    assert await read_all(bootstrap, dst_tp, "read_committed") == [b"IN1", b"IN2", b"IN3", b"IN4"]
    assert await read_all(bootstrap, dst_tp, "read_uncommitted") == [
        b"IN1",
        b"IN2",
        b"IN3",
        b"IN4",
        b"IN3",
        b"IN4",
    ]
