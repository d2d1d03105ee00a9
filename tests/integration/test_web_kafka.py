"""The read-only readers on Kafka: ``kueuelog serve`` (web view and visibility API), ``get
pending`` and ``explain -o json`` follow a log whose scheduler ran on a real broker, and see the
state replay reaches there."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from events.envelope import Topics
from events.manifests import load
from services.app.driver import drive_until_idle
from services.app.follow import Follower
from services.app.logview import replay
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.simcluster.arrivals import ArrivalStream, arrival_schedule
from tests.infra.kafka import LocalKafka
from tests.integration.test_kafka_log import _cli, _manifests

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as res:
        return json.loads(res.read())


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "readyz", timeout=30) as res:
            return bool(res.status == 200)
    except urllib.error.HTTPError as e:
        assert e.code == 503
        return False


def test_serve_get_pending_and_explain_follow_a_kafka_log(kafka_broker: LocalKafka, kafka_topic_prefix: str) -> None:
    prefix = kafka_topic_prefix.rstrip("-")
    settings = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers, session_timeout_ms=2000,
                             heartbeat_interval_ms=300)
    topics = Topics(prefix=prefix)
    kafka = KafkaLog(settings, prefix=prefix, role="all")
    try:
        objects = load({"jobs.yaml": _manifests()})
        drive_until_idle(kafka, topics=topics, arrivals=ArrivalStream(kafka, arrival_schedule(objects),
                                                                      topics=topics))
        report = replay(kafka, topics, verify=False)
        follower = Follower(kafka, topics)
        follower.catch_up()
        assert follower.state.cycles == report.cycles
    finally:
        kafka.close()
    where = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix", prefix]
    out = _cli("get", "pending", "--queue", "cq-a", "-o", "json", *where)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kind"] == "PendingWorkloadsSummary"
    out = _cli("explain", "a/j01", "-o", "json", *where)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["answer"]["status"] == "finished"
    proc = subprocess.Popen([sys.executable, "-m", "services.app.cli", "serve", "--port", "0", *where],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = m.group(1)
        deadline = time.monotonic() + 60
        while (overview := _get(url + "api/overview"))["cycles"] < report.cycles and time.monotonic() < deadline:
            time.sleep(0.2)
        assert overview["cycles"] == report.cycles
        while not _ready(url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ready(url), "ready once caught up with the log"
        assert {cq["name"] for cq in overview["clusterQueues"]} == {"cq-a", "cq-b"}
        assert overview["workloads"]["finished"] == 24
        doc = _get(url + "apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/cq-b/pendingworkloads")
        assert doc["kind"] == "PendingWorkloadsSummary" and doc["items"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
