"""The sharded real-time bench's wiring (bench/shards.py --realtime over bench/kafka.py): which
processes run for N shards, and how a shard's admissions are compared with the 1-shard run's;
and ``kueuelog run simcluster --shard N``, which each shard's simulated cluster is."""

from __future__ import annotations

import pytest

from bench.kafka import ShardFigures, _service_processes, scheduler_name
from bench.shards import _compared
from services.app.assembly import BadSetting, SimclusterSettings, open_log, run_settings
from services.app.cli import build_parser


def test_one_shard_runs_the_services_as_the_kafka_bench_always_has() -> None:
    assert _service_processes(1) == [("scheduler", "scheduler", ()), ("actuator", "actuator", ()),
                                     ("simcluster", "simcluster", ("--clock", "real"))]
    assert scheduler_name(1, 0) == "scheduler"


def test_each_shard_gets_its_own_scheduler_actuator_and_simulated_cluster() -> None:
    procs = _service_processes(2)
    assert [name for name, _, _ in procs] == ["scheduler-0", "actuator-0", "simcluster-0",
                                              "scheduler-1", "actuator-1", "simcluster-1"]
    assert ("simcluster-1", "simcluster", ("--clock", "real", "--shard", "1")) in procs
    assert ("actuator-0", "actuator", ("--shard", "0")) in procs
    assert scheduler_name(2, 1) == "scheduler-1"


def test_a_simulated_cluster_runs_the_shard_it_is_given() -> None:
    args = build_parser().parse_args(["run", "simcluster", "--bootstrap-servers", "localhost:1", "--shard", "1"])
    settings = run_settings(args, environ={})
    assert isinstance(settings, SimclusterSettings) and settings.log.shard == 1
    with pytest.raises(BadSetting, match=r"shard 1 is outside 0\.\.0: set KUEUELOG_KAFKA_SHARDS"):
        open_log(settings.log, role="simcluster", environ={})


def test_a_shard_is_compared_workload_by_workload_with_the_one_shard_run() -> None:
    one = {"ns/a": 1, "ns/b": 2, "ns/c": 1}
    same = ShardFigures(shard=0, admitted={"ns/a": 1, "ns/b": 2})
    assert _compared(same, one) == ("the same workloads as the 1-shard run; admissions per workload differ for 0 "
                                    "of 2 (0 readmissions more, 0 fewer)")
    other = ShardFigures(shard=1, admitted={"ns/b": 1, "ns/c": 3, "ns/d": 1})
    assert _compared(other, one) == ("1 workloads NOT admitted by the 1-shard run; admissions per workload differ "
                                     "for 3 of 3 (3 readmissions more, 1 fewer)")
