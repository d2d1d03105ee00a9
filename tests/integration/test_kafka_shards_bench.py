"""bench/shards.py's real-time harness end to end on the session's broker, tiny, with two shards.

The large-scale shape at 2 cohorts x 1 ClusterQueue (100 workloads on the wall clock, about 3 s of
arrivals): topics with two partitions, the objects and arrivals through the shard router, and per
shard ``kueuelog run scheduler|actuator|simcluster --shard N`` as processes. Counts only: every
workload admitted and finished, each on the shard its tree was dealt to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import shards
from bench.scenarios import LARGE_SCALE_CLASSES
from tests.infra.kafka import LocalKafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_two_shards_admit_and_finish_every_workload_each_on_its_shard(kafka_broker: LocalKafka,
                                                                       tmp_path: Path) -> None:
    result = shards.realtime(kafka_broker, 2, 2, 1, tmp_path)
    lines = "\n".join(shards.realtime_lines([result]))
    assert result.workloads == 100, lines
    assert result.done and result.admitted_workloads == 100, lines
    assert [f.shard for f in result.per_shard] == [0, 1]
    for f in result.per_shard:  # balanced(2, 2): cohort-0 on shard 0, cohort-1 on shard 1
        mine = {f"ns-{f.shard}-0/{name}-{i}" for name, count, *_ in LARGE_SCALE_CLASSES for i in range(count)}
        assert set(f.admitted) == mine, lines
        assert f.finished == mine, lines
        assert f.admissions == sum(f.admitted.values()) >= len(mine)
        assert f.cycles > 0 and f.cpu > 0 and f.rss_mib > 0, lines
    assert "shard 1: scheduler CPU" in lines
