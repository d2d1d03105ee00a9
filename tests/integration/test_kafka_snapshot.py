"""A deflated snapshot (format 9) through the real broker: written by a live scheduler's step,
read back by a successor's recovery, which then equals the live state."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from events.codec import encode
from events.envelope import Envelope, Topics
from services.core.snapshot import FORMAT, encode_state
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.scheduler.service import Scheduler, Snapshot
from tests.infra.kafka import LocalKafka
from tests.unit.test_snapshot import history

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def log(kafka_broker: LocalKafka, kafka_topic_prefix: str) -> Iterator[KafkaLog]:
    settings = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers)
    lg = KafkaLog(settings, prefix=kafka_topic_prefix.rstrip("-"), role="scheduler")
    yield lg
    lg.close()


def test_a_deflated_snapshot_written_by_a_step_is_what_a_successor_recovers(log: KafkaLog) -> None:
    topics = Topics(prefix=log.prefix)
    events = [e for e in history() if not isinstance(e, str)]
    log.append(topics.cluster_events, [("seed", encode(Envelope(id=f"seed:{i}", source="test", event=ev)))
                                       for i, ev in enumerate(events)])
    live = Scheduler(log, topics=topics, batch_size=4, snapshot_every=8)
    live.recover()
    while live.step():
        pass
    written = [msgspec.json.decode(r.value, type=Snapshot) for r in log.read(topics.snapshots, 0, 100)]
    assert written, "the steps wrote snapshots"
    assert {s.format for s in written} == {FORMAT}
    assert Scheduler(log, topics=topics).load_newest_snapshot() > 0  # loaded, not passed over
    successor = Scheduler(log, topics=topics)
    successor.recover()
    assert successor.stats.unreadable_snapshots == 0
    assert successor.next_input == live.next_input
    assert encode_state(successor.state) == encode_state(live.state)
