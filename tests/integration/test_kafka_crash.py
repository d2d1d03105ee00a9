"""SIGKILL the active scheduler again and again on Kafka; a standby takes over, nothing is lost or doubled.

Actuator and simulated cluster run as their own ``kueuelog run`` processes on the real
broker; two scheduler processes run at all times, one leading and one waiting as a
standby. The test kills the leader at random points (after a random number of committed
decision records), a standby takes over, and a fresh standby is started. Once it also
freezes a leader (SIGSTOP) until the standby has taken over, then thaws it: the zombie
must find itself fenced and exit without writing. At the end every workload finished
exactly once, no workload was admitted twice, cycle numbers are contiguous (one writer at
a time), the decisions replay exactly and a recovered scheduler equals a fold from zero.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient

from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.manifests import load
from events.messages import AdmitWorkload, CycleCompleted, EvictWorkload, WorkloadFinished
from services.core.snapshot import encode_state
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.runtime.log import caught_up, values_of
from services.scheduler.service import GROUP, Scheduler
from services.simcluster.arrivals import seed_all
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue
from tests.infra.kafka import LocalKafka
from tests.integration.test_scheduler_sigkill import _manifests, _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
KUEUELOG = [sys.executable, "-m", "services.app.cli"]


class Services:
    def __init__(self, bootstrap: str, prefix: str, out_dir: Path) -> None:
        self.bootstrap, self.prefix, self.out_dir = bootstrap, prefix, out_dir
        self.env = {**os.environ, "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS": "2000",
                    "KUEUELOG_KAFKA_HEARTBEAT_INTERVAL_MS": "300"}
        self.count = 0
        self.outputs: dict[int, Path] = {}

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        self.count += 1
        path = self.out_dir / f"{args[0]}-{self.count}.out"
        out = open(path, "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen([*KUEUELOG, "run", *args, "--bootstrap-servers", self.bootstrap,
                                    "--topic-prefix", self.prefix], stdout=out, stderr=subprocess.STDOUT,
                                   env=self.env, cwd=Path.cwd(), start_new_session=True)
        self.outputs[process.pid] = path
        return process

    def said(self, process: subprocess.Popen[bytes], text: str) -> bool:
        return text in self.outputs[process.pid].read_text(errors="replace")

    def tail(self, process: subprocess.Popen[bytes]) -> str:
        return self.outputs[process.pid].read_text(errors="replace")[-4000:]


def _records(log: KafkaLog, topic: str) -> Iterator[bytes]:
    return values_of(log, topic)


def _finished(log: KafkaLog, topics: Topics) -> set[str]:
    done = set()
    for value in _records(log, topics.cluster_events):
        ev = decode_envelope(value).event
        if isinstance(ev, WorkloadFinished):
            done.add(f"{ev.namespace}/{ev.name}")
    return done


def test_the_active_scheduler_killed_at_random_points_a_standby_takes_over(
        kafka_broker: LocalKafka, kafka_topic_prefix: str, tmp_path: Path) -> None:
    prefix = kafka_topic_prefix.rstrip("-")
    topics = Topics(prefix=prefix)
    settings = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers)
    log = KafkaLog(settings, prefix=prefix, role="watcher")
    objects = load({"jobs.yaml": _manifests()})
    seed_all(log, objects, topics=topics)
    workloads = {f"{o.namespace}/{o.name}" for _, o in objects if type(o).__name__ == "Workload"}
    svc = Services(kafka_broker.bootstrap_servers, prefix, tmp_path)
    helpers = [svc.start("actuator"), svc.start("simcluster", "--clock", "simulated")]
    rng = random.Random(int(os.environ.get("KUEUELOG_CRASH_SEED", "20261122")))
    schedulers = [svc.start("scheduler")]  # oldest first: the oldest living member leads
    decisions = lambda: log.end_offset(topics.decisions)  # noqa: E731
    kills, zombie_checked = 0, False
    zombies: list[subprocess.Popen[bytes]] = []
    stepped_down: list[subprocess.Popen[bytes]] = []

    def wait(predicate: Callable[[], bool], seconds: float, what: str) -> None:
        """Until ``predicate``; actuator and simulated cluster must live throughout. A scheduler may
        step down on its own when the loaded machine starves its heartbeats past the session (exit
        5, saying so): that is the protocol working, so it is replaced by a fresh standby."""
        def settled() -> bool:
            for p in list(schedulers):
                if p.poll() is not None:
                    assert p.returncode == 5 and (svc.said(p, "lost the scheduler leadership")
                                                  or svc.said(p, "fenced")), (p.returncode, svc.tail(p))
                    schedulers.remove(p)
                    stepped_down.append(p)
                    schedulers.append(svc.start("scheduler"))
            return predicate()
        _wait(settled, seconds, what, helpers)

    try:
        wait(lambda: decisions() > 0, 60, "the first scheduler to lead")
        schedulers.append(svc.start("scheduler"))
        wait(lambda: _members(kafka_broker.bootstrap_servers, f"{prefix}.scheduler.0") == 2, 60,
             "the standby to join the election")
        for round_ in range(6):
            if _finished(log, topics) >= workloads:
                break
            before = decisions()
            grow = rng.randint(1, 60)
            wait(lambda b=before, g=grow: decisions() >= b + g or _finished(log, topics) >= workloads,  # type: ignore[misc]
                 120, "the leader to commit decisions")
            if round_ == 2 and not zombie_checked:
                # Freeze a settled leader: one that said it leads and wrote since (a standby caught
                # mid take-over may already hold its new writer, and would win the lease back).
                wait(lambda: svc.said(schedulers[0], "leading"), 60, "the standby to lead")
                settled = decisions()
                wait(lambda s=settled: decisions() > s, 120, "the leader to write")
            leader = schedulers.pop(0)
            if round_ == 2 and not zombie_checked:
                # A zombie: frozen past its session, so the standby takes over; thawed, it must not write.
                zombies.append(leader)  # stopped at the end whatever happens
                leader.send_signal(signal.SIGSTOP)
                frozen_at = decisions()
                # Taken over means the standby says it leads (the decisions' end offset alone may
                # move by the commit marker of the frozen leader's last transaction), then writes.
                standby = schedulers[0]
                wait(lambda s=standby: svc.said(s, "leading"), 60, "the standby to take over from a frozen leader")
                wait(lambda f=frozen_at: decisions() > f, 60, "the new leader to write")
                leader.send_signal(signal.SIGCONT)
                try:
                    code = leader.wait(60)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"the thawed zombie did not stop within 60 s; its output:\n{svc.tail(leader)}")
                assert code == 5, f"a fenced scheduler must stop with exit 5 (not the leader):\n{svc.tail(leader)}"
                zombie_checked = True
            else:
                leader.send_signal(signal.SIGKILL)
                leader.wait()
                kills += 1
            schedulers.append(svc.start("scheduler"))  # the next standby
        wait(lambda: _finished(log, topics) >= workloads, 400, "every workload to finish")
        wait(lambda: caught_up(log, GROUP, topics.cluster_events), 60, "the scheduler to catch up")
    finally:
        for p in [*schedulers, *helpers, *zombies]:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in [*schedulers, *helpers, *zombies]:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert kills >= 3 and zombie_checked
    outputs = {f.name: f.read_text(errors="replace") for f in tmp_path.glob("scheduler-*.out")}
    # The thawed zombie stopped either at its next commit (fenced) or when the group told it it lost.
    assert any("fenced" in text or "lost the scheduler leadership" in text for text in outputs.values()), outputs
    # ... and said so in one line, without the fenced producer's tracebacks around it.
    for name, text in outputs.items():
        assert "Traceback" not in text and "never retrieved" not in text, (name, text[-3000:])

    # No decision written twice, no workload admitted twice, one writer at a time.
    holding: dict[str, bool] = {}
    ids: set[str] = set()
    cycles: list[int] = []
    for value in _records(log, topics.decisions):
        d = decode_decision(value)
        if isinstance(d, CycleCompleted):
            cycles.append(d.cycle)
            continue
        assert d.id not in ids, f"decision {d.id} written twice"
        ids.add(d.id)
        key = f"{d.namespace}/{d.name}"
        if isinstance(d, AdmitWorkload):
            assert not holding.get(key), f"{key} admitted twice"
            holding[key] = True
        elif isinstance(d, EvictWorkload):
            holding[key] = False
    assert cycles == list(range(1, len(cycles) + 1)), "cycle numbers must be contiguous across take-overs"
    assert _finished(log, topics) == workloads

    # The log replays exactly, and recovery (newest snapshot + tail) equals a fold from zero.
    reader = KafkaLog(settings, prefix=prefix)
    try:
        from_zero = Scheduler(reader, topics=topics)
        assert list(from_zero.replay(0, verify=True)) == []
        from_zero.fold_until(reader.position(GROUP, topics.cluster_events))
        recovered = Scheduler(reader, topics=topics)
        recovered.recover()
        assert encode_state(recovered.state) == encode_state(from_zero.state)
    finally:
        reader.close()
        log.close()


def _batch(first: int, count: int) -> str:
    """``count`` one-cpu Jobs from number ``first`` on, in queues with room for all of them."""
    objs: list[dict[str, object]] = []
    if first == 0:
        objs += [a_flavor("default").obj(), a_cluster_queue("cq").flavor("default", cpu=1000).obj(),
                 a_local_queue("team", "lq", "cq").obj()]
    objs += [a_job("team", f"j{i:03d}", "lq").request(cpu=1).created(i).obj() for i in range(first, first + count)]
    return yaml.safe_dump_all(objs)


def _admissions(log: KafkaLog, topics: Topics) -> list[str]:
    return [d.name for d in map(decode_decision, _records(log, topics.decisions)) if isinstance(d, AdmitWorkload)]


def test_a_standby_takes_over_at_the_default_session_after_sigkill_and_at_once_after_sigterm(
        kafka_broker: LocalKafka, kafka_topic_prefix: str, tmp_path: Path) -> None:
    """The defaults (no session settings in the environment): a SIGKILLed leader is replaced once
    its session expires. A leader stopped with SIGTERM leaves the election: its successor takes over
    although the stopped leader's own session (60 s) is longer than the wait here."""
    prefix = kafka_topic_prefix.rstrip("-")
    topics = Topics(prefix=prefix)
    settings = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers)
    log = KafkaLog(settings, prefix=prefix, role="watcher")
    svc = Services(kafka_broker.bootstrap_servers, prefix, tmp_path)
    svc.env = {k: v for k, v in os.environ.items() if not k.startswith("KUEUELOG_KAFKA_")}
    group = f"{prefix}.scheduler.0"

    def members() -> int:
        return _members(kafka_broker.bootstrap_servers, group)

    def seed(first: int, count: int) -> set[str]:
        objects = load({f"jobs-{first}.yaml": _batch(first, count)})
        seed_all(log, objects, topics=topics)
        return {obj.name for _, obj in objects if type(obj).__name__ == "Workload"}

    def admitted(expected: set[str]) -> Callable[[], bool]:
        return lambda: expected <= set(_admissions(log, topics))

    first = svc.start("scheduler")
    procs = [first]
    try:
        expected = seed(0, 10)
        _wait(admitted(expected), 60, "the first leader's admissions", procs)
        long_session = {**svc.env, "KUEUELOG_KAFKA_SESSION_TIMEOUT_MS": "60000",
                        "KUEUELOG_KAFKA_HEARTBEAT_INTERVAL_MS": "500"}
        default_env, svc.env = svc.env, long_session
        second = svc.start("scheduler")
        svc.env = default_env
        procs.append(second)
        _wait(lambda: members() == 2, 60, "the standby to join the election", procs)

        first.send_signal(signal.SIGKILL)
        first.wait()
        procs.remove(first)
        expected |= seed(10, 10)
        _wait(admitted(expected), 60, "the standby to take over from the killed leader", procs)

        third = svc.start("scheduler")
        procs.append(third)
        _wait(lambda: members() == 2, 60, "the next standby to join the election", procs)
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, "a leader stopped with SIGTERM exits 0"
        procs.remove(second)
        expected |= seed(20, 10)
        # Well within the stopped leader's 60 s session: only its leaving the group lets the standby in.
        _wait(admitted(expected), 40, "the standby to take over from the stopped leader", procs)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    outputs = {f.name: f.read_text(errors="replace") for f in tmp_path.glob("scheduler-*.out")}
    assert [name for name, text in sorted(outputs.items()) if "leading" in text] == \
        ["scheduler-1.out", "scheduler-2.out", "scheduler-3.out"], outputs
    for name, text in outputs.items():
        assert "Traceback" not in text, (name, text[-3000:])
    names = _admissions(log, topics)
    assert sorted(names) == sorted(expected), "every workload admitted exactly once"
    cycles = [d.cycle for d in map(decode_decision, _records(log, topics.decisions)) if isinstance(d, CycleCompleted)]
    assert cycles == list(range(1, len(cycles) + 1)), "one writer at a time"
    reader = KafkaLog(settings, prefix=prefix)
    try:
        assert list(Scheduler(reader, topics=topics).replay(0, verify=True)) == []
    finally:
        reader.close()
        log.close()


def _members(bootstrap: str, group: str) -> int:
    """Members of ``group`` once it is stable (0 while it rebalances)."""

    async def describe() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            resp = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        for desc in resp[0].groups:
            if desc[1] == group:
                return len(desc[5]) if desc[2] == "Stable" else 0
        return 0

    return asyncio.run(describe())
