"""Failover of the scheduler on Kafka: how long a standby takes to take over, and that it never
takes over from a live leader under load.

1. take-over: two ``kueuelog run scheduler`` processes, one leading and one waiting, while a
   producer appends submissions at a steady rate into queues with room (every one is admitted).
   The bench kills the leader (SIGKILL, then a few SIGTERMs), starts the next standby, waits
   until it has joined the election, and again. Take-over time is the kill to the first
   decision of the new leader visible to a read_committed reader (a decision record created
   after the kill: the dead leader cannot create one; after a SIGTERM, the first after the longest
   pause in the decisions, as the old leader may finish a step after the signal). At the end every submission must have
   been admitted exactly once.
2. false take-overs: Kueue's baseline in real time with the services as processes (as
   ``bench.kafka``'s baseline, ``procs`` mode) plus a standby scheduler; any leadership change
   (a "leading" line beyond the first leader's) is a false take-over, as nothing was killed.

The session timeout and heartbeat are the services' defaults unless
``KUEUELOG_KAFKA_SESSION_TIMEOUT_MS`` / ``_HEARTBEAT_INTERVAL_MS`` are set for the bench.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from events.codec import decode_decision
from events.envelope import Topics
from events.messages import AdmitWorkload
from services.runtime.kafka import HEADERS, KafkaSettings

RATE = 50  # submissions/s during the take-overs: the new leader has something to decide at once


@dataclass
class FailoverResult:
    session_ms: int
    heartbeat_ms: int
    kill_s: list[float] = field(default_factory=list)  # SIGKILL -> first decision of the new leader
    term_s: list[float] = field(default_factory=list)  # SIGTERM -> the same
    submitted: int = 0
    admitted: int = 0
    doubled: int = 0

    def lines(self) -> list[str]:
        from bench.kafka import percentile

        def line(signal_: str, values: list[float]) -> str:
            worst = max(values, default=float("nan"))
            verdict = "meets" if worst <= 3.0 else "misses"
            return (f"  {signal_} of the leader x{len(values)}: kill -> first decision of the new leader visible "
                    f"p50 {percentile(values, 50):.2f} s, max {worst:.2f} s (target <= 3 s: {verdict})")

        return [
            f"failover of `kueuelog run scheduler` with a standby, session timeout {self.session_ms} ms, heartbeat "
            f"{self.heartbeat_ms} ms, {RATE} submissions/s:",
            line("SIGKILL", self.kill_s),
            line("SIGTERM", self.term_s),
            f"  {self.submitted:,} submitted, {self.admitted:,} admitted, {self.doubled} admitted twice, "
            f"{self.submitted - self.admitted} lost",
        ]


async def _group_members(admin: AIOKafkaAdminClient, group: str) -> int:
    """Members of ``group`` once it is stable (0 while it rebalances)."""
    resp = await admin.describe_consumer_groups([group])
    for desc in resp[0].groups:
        if desc[1] == group:
            return len(desc[5]) if desc[2] == "Stable" else 0
    return 0


async def measure_failover(bootstrap: str, run_dir: Path, kills: int, terms: int, seed: int = 24) -> FailoverResult:
    from bench.kafka import (
        envelope_of,
        make_topics,
        new_producer,
        new_reader,
        preload,
        roomy_config,
        start_service_process,
        stop_process,
        submission,
    )

    settings = KafkaSettings.from_env(bootstrap_servers=bootstrap)
    result = FailoverResult(session_ms=settings.session_timeout_ms, heartbeat_ms=settings.heartbeat_interval_ms)
    topics = Topics(prefix=f"failover-{int(time.time())}")
    make_topics(bootstrap, topics)
    await preload(bootstrap, topics.cluster_events, roomy_config())
    group = f"{topics.prefix}.scheduler.0"
    rng = random.Random(seed)
    count = 0

    def start() -> subprocess.Popen[bytes]:
        nonlocal count
        count += 1
        return start_service_process("scheduler", bootstrap, topics.prefix, run_dir / f"scheduler-{count}.log")

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    producer, reader = new_producer(bootstrap), new_reader(bootstrap)
    await admin.start()
    await producer.start()
    await reader.start()
    tp = TopicPartition(topics.decisions, 0)
    reader.assign([tp])
    stop, stop_submitting = asyncio.Event(), asyncio.Event()
    seen: list[tuple[int, float]] = []  # (record create time ms, visible at perf time)
    admitted: dict[str, int] = {}

    async def read() -> None:
        while not stop.is_set():
            got = await reader.getmany(tp, timeout_ms=100)
            now = time.perf_counter()
            for m in got.get(tp, []):
                seen.append((m.timestamp, now))
                d = decode_decision(m.value or b"")
                if isinstance(d, AdmitWorkload):
                    admitted[d.name] = admitted.get(d.name, 0) + 1

    async def submit() -> None:
        t0 = time.perf_counter()
        while not stop_submitting.is_set():
            n = result.submitted
            delay = t0 + n / RATE - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            key, value = envelope_of(submission(n), 10_000 + n, int(time.time() * 1000))
            await producer.send(topics.cluster_events, value, key=key, partition=0, headers=HEADERS)
            result.submitted += 1

    async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 120) -> None:
        deadline = time.perf_counter() + timeout
        while not await check():
            if time.perf_counter() > deadline:
                raise RuntimeError(f"failover bench: timed out waiting for {what}; see {run_dir}")
            await asyncio.sleep(0.02)

    async def standby_joined() -> bool:
        return await _group_members(admin, group) == 2

    procs = [start()]
    tasks = [asyncio.ensure_future(read()), asyncio.ensure_future(submit())]
    try:
        await until("the first leader", lambda: _true(bool(seen)))
        for sig in [signal.SIGKILL] * kills + [signal.SIGTERM] * terms:
            procs.append(start())
            await until("the standby to join the election", standby_joined)
            await asyncio.sleep(rng.uniform(0.5, 1.5))  # the leader at work, the standby waiting
            leader = procs.pop(0)
            kill_at, before = time.perf_counter(), len(seen)
            leader.send_signal(sig)
            # The new leader's decisions are those created after the old leader was gone: after a SIGKILL,
            # every one created after it; after a SIGTERM the old one finishes its step, leaves and exits,
            # and its successor may write before that exit: its first decision is the first after the
            # longest pause in the decisions since the signal (at 50 submissions/s the leader writes
            # every few tens of ms; the pause is the take-over).
            await asyncio.to_thread(leader.wait)
            gone_ms = int(time.time() * 1000)
            kill_ms = int((time.time() - (time.perf_counter() - kill_at)) * 1000)
            after = gone_ms if sig == signal.SIGTERM else kill_ms
            await until("the standby to take over",
                        lambda b=before, a=after: _true(any(ts > a for ts, _ in seen[b:])))  # type: ignore[misc]
            if sig == signal.SIGKILL:
                first = next(at for ts, at in seen[before:] if ts > kill_ms)
                result.kill_s.append(first - kill_at)
            else:
                recs = seen[before:]
                last = next(i for i, (ts, _) in enumerate(recs) if ts > after)
                window = [(kill_ms, kill_at), *recs[:last + 1]]
                _, first = max((b[0] - a[0], b[1]) for a, b in itertools.pairwise(window))
                result.term_s.append(first - kill_at)
        stop_submitting.set()
        await tasks[1]  # no more submissions: wait for the last to be admitted
        await until("the last admissions", lambda: _true(len(admitted) >= result.submitted), 60)
    finally:
        stop.set()
        stop_submitting.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await task
        for proc in procs:
            stop_process(proc)
        await reader.stop()
        await producer.stop()
        await admin.close()
    result.admitted = len(admitted)
    result.doubled = sum(1 for c in admitted.values() if c > 1)
    return result


async def _true(value: bool) -> bool:
    return value
