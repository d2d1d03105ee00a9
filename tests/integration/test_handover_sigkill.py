"""Six cohort trees handed over between three shards (each to the next shard) while the watcher
publishes more of their events and the old shards' own services report about their workloads;
the watcher and every shard's scheduler are SIGKILLed at random points and restarted. Nothing is
lost or doubled: every record once per shard, one marker and one adoption per tree, every workload
admitted at most once across the shards, no shard deciding for a tree it does not hold (the old
one after the marker, the new one before the adoption), the same admissions as one unsharded
scheduler given the same input, and every shard's log replays exactly."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from events.codec import decode_decision, decode_envelope, encode
from events.envelope import Topics, event_key
from events.messages import AdmitWorkload, CycleCompleted, TreeAdopted, TreeHandOver
from services.app.logview import replay
from services.runtime.log import Log
from services.runtime.shards import RoutingLog, embedded_shards, held_topic
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import seed_all
from tests.handoverrun import AFTER, BEFORE, SHARDS, TREES, first_phase, second_phase
from tests.shardrun import objects

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

T = Topics()
KILLS = 14


def settle(log: Log) -> Scheduler:
    sched = Scheduler(log, T)
    sched.recover()
    while sched.step():
        pass
    return sched


def cycles(log: Log) -> list[tuple[CycleCompleted, list[str]]]:
    """Each cycle's record and the workloads its decisions are about."""
    out: list[tuple[CycleCompleted, list[str]]] = []
    about: list[str] = []
    for rec in log.read(T.decisions, 0, 1_000_000):
        d = decode_decision(rec.value)
        if isinstance(d, CycleCompleted):
            out.append((d, about))
            about = []
        else:
            about.append(d.name)
    return out


def admitted(log: Log) -> list[str]:
    return [d.name for d in (decode_decision(r.value) for r in log.read(T.decisions, 0, 1_000_000))
            if isinstance(d, AdmitWorkload)]


class Participants:
    """The watcher and one scheduler per shard, as processes, restarted after each kill."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.kills: Counter[str] = Counter()

    def start(self, who: str) -> None:
        args = ["publish", self.directory] if who == "watcher" else ["schedule", self.directory, who[-1]]
        self.procs[who] = subprocess.Popen([sys.executable, "-m", "tests.handoverrun", *args],
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def kill(self, who: str) -> None:
        proc = self.procs[who]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            self.kills[who] += 1
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()

    def wait_for(self, who: str, word: str, times: int) -> None:
        stdout = self.procs[who].stdout
        assert stdout is not None
        while times and (line := stdout.readline()):
            times -= line.startswith(word)
        assert times == 0, f"{who} ended before saying {word!r}"

    def watcher_done(self) -> bool:
        proc = self.procs["watcher"]
        if proc.poll() is None:
            return False
        out = proc.stdout.read() if proc.stdout is not None else ""
        assert proc.returncode == 0, out
        return True

    def stop(self) -> None:
        for who in list(self.procs):
            self.kill(who)


def test_hand_overs_under_sigkill_lose_and_double_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    log = SqliteLog(directory)
    shards = embedded_shards(log, SHARDS)
    seed_all(RoutingLog(shards, BEFORE), objects(first_phase()))
    for shard in shards:
        settle(shard)
    log.close()

    rng = random.Random(23)
    who_all = ["watcher", *[f"scheduler-{s}" for s in range(SHARDS)]]
    run = Participants(directory)
    run.start("watcher")
    run.wait_for("watcher", "appended", 4)  # tree t0's events: held, since no scheduler runs yet
    for _ in range(2):
        # Killed mid-publication while no scheduler runs (so its hand-overs cannot be done; once the
        # schedulers run they finish in well under a second, before random picks may reach it).
        run.kill("watcher")
        run.start("watcher")
        run.wait_for("watcher", "appended", 2)  # the restarted watcher goes on where it stopped
    for who in who_all[1:]:
        run.start(who)
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.05, 0.6))
            who = rng.choice(who_all)
            if who == "watcher" and run.procs["watcher"].poll() is not None:
                continue
            run.kill(who)
            run.start(who)
        deadline = time.monotonic() + 300
        while not run.watcher_done():
            assert time.monotonic() < deadline, "the watcher did not finish the hand-overs"
            time.sleep(0.1)
    finally:
        run.stop()
    assert run.kills["watcher"] >= 2 and sum(n for w, n in run.kills.items() if w != "watcher") >= 4, run.kills

    log = SqliteLog(directory, create=False)
    shards = embedded_shards(log, SHARDS)
    RoutingLog(shards, AFTER).pump()  # nothing left to do: a finished watcher left nothing behind
    for shard in shards:
        settle(shard)
    markers: dict[str, tuple[int, int]] = {}  # tree -> (shard, offset) of its marker
    adoptions: dict[str, tuple[int, int]] = {}
    for s, shard in enumerate(shards):
        envs = [(r.offset, decode_envelope(r.value)) for r in shard.read(T.cluster_events, 0, 1_000_000)]
        ids = [e.id for _, e in envs]
        assert len(ids) == len(set(ids)), f"shard {s}: a record written twice"
        for offset, env in envs:
            if isinstance(env.event, TreeHandOver):
                assert env.event.root not in markers, f"two markers for {env.event.root}"
                markers[env.event.root] = (s, offset)
            elif isinstance(env.event, TreeAdopted):
                assert env.event.root not in adoptions, f"two adoptions of {env.event.root}"
                adoptions[env.event.root] = (s, offset)
        assert replay(shard, T, verify=True).mismatches == []
    for t in range(TREES):
        root = f"t{t}"
        assert markers[root][0] == BEFORE.shard_of(root) and adoptions[root][0] == AFTER.shard_of(root)
        old, new = shards[markers[root][0]], shards[adoptions[root][0]]
        mine = {f"w{t}-{i}" for i in range(6)} | {f"n{t}"}
        for record, about in cycles(old):
            if record.input_offset > markers[root][1]:
                assert not mine & set(about), f"shard {markers[root][0]} decided for {root} after its marker"
        for record, about in cycles(new):
            if record.input_offset <= adoptions[root][1]:
                assert not mine & set(about), f"shard {adoptions[root][0]} decided for {root} before adopting it"
    held = sum(shard.end_offset(held_topic(T)) for shard in shards)
    forwarded = [e for shard in shards for e in (decode_envelope(r.value) for r in shard.read(T.cluster_events, 0))
                 if e.id.endswith(f":to-shard-{shards.index(shard)}")]
    assert held >= 4 and len(forwarded) == TREES, (held, forwarded)
    print(f"kills {dict(run.kills)}, held {held}, forwarded {len(forwarded)}")
    sharded = Counter(name for shard in shards for name in admitted(shard))
    assert max(sharded.values()) == 1, "a workload admitted twice"
    log.close()

    one = SqliteLog(tmp_path / "one", durable=False)
    seed_all(one, objects(first_phase()))
    settle(one)
    for _, env in second_phase():
        one.append(T.cluster_events, [(event_key(env), encode(env))])
    settle(one)
    assert sharded == Counter(admitted(one))
    assert len(sharded) == TREES * 7  # per tree: 4, then the 2 that waited and the new one
    one.close()
