"""The typed assembly of ``kueuelog run``: settings from flags and environment (a flag, else its
``KUEUELOG_*`` variable, else the default; a bad value named in the message), and the one
leadership mechanism as the embedded log provides it (a file lock that refuses a second holder)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.app.assembly import (
    ActuatorSettings,
    AllSettings,
    HttpSettings,
    KubeSettings,
    LogSettings,
    RunSettings,
    SchedulerSettings,
    SettingsError,
    SimclusterSettings,
    WatcherSettings,
    run_settings,
)
from services.app.cli import build_parser
from services.runtime import kafka
from services.runtime.log import LeadershipLost, LogError, WriterLockHeld
from services.runtime.sqlite import SqliteLog
from services.runtime.supervise import lead, release, still_leading


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith("KUEUELOG_") or key in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            monkeypatch.delenv(key)
    return monkeypatch


def settings(*argv: str) -> RunSettings:
    return run_settings(build_parser().parse_args(["run", *argv]))


# --- one settings type per service ------------------------------------------------------------------


def test_each_service_gets_its_own_settings(env: pytest.MonkeyPatch) -> None:
    log = LogSettings(path="x", create=True)
    assert settings("scheduler", "--log", "x") == SchedulerSettings(log=log, http=HttpSettings(), cluster="sim")
    assert settings("scheduler", "--log", "x", "--seed", "c.yaml") == SchedulerSettings(log=log, seed=("c.yaml",))
    assert settings("watcher", "--log", "x") == WatcherSettings(log=log, cluster="default", kube=KubeSettings())
    assert settings("actuator", "--log", "x") == ActuatorSettings(log=log, kube=None)
    assert settings("actuator", "--log", "x", "--kube", "--context", "c") == ActuatorSettings(
        log=log, cluster="default", kube=KubeSettings(context="c"))
    assert settings("simcluster", "--log", "x", "--seed", "a.yaml", "--compress", "3") == SimclusterSettings(
        log=log, seed=("a.yaml",), compress=3)
    assert settings("all", "--log", "x", "--clock", "simulated", "--no-until-done") == AllSettings(
        log=log, clock="simulated", until_done=False)


def test_the_roles_each_service_writes_and_leads_as() -> None:
    roles = {s.name: (s.writer, s.leads) for s in (SchedulerSettings, WatcherSettings, ActuatorSettings,
                                                   SimclusterSettings, AllSettings)}
    assert roles == {"scheduler": ("scheduler", "scheduler"), "watcher": (None, None),
                     "actuator": ("actuator", "actuator"), "simcluster": ("simcluster", "simcluster"),
                     "all": ("all", "scheduler")}


# --- a flag, else its variable, else the default ------------------------------------------------------


@pytest.mark.parametrize(("variables", "argv", "want"), [
    pytest.param({}, [], ActuatorSettings(log=LogSettings(path="x", create=True)), id="defaults"),
    pytest.param({"KUEUELOG_CLUSTER": "east", "KUEUELOG_JOB_POLICY": "reject", "KUEUELOG_HTTP_PORT": "9100",
                  "KUEUELOG_HTTP_HOST": "127.0.0.1", "KUEUELOG_KUBE_QPS": "5", "KUEUELOG_KUBE_BURST": "7",
                  "KUEUELOG_TOPIC_PREFIX": "p", "KUEUELOG_SHARD": "2"}, [],
                 ActuatorSettings(log=LogSettings(path="x", create=True, topic_prefix="p", shard=2),
                                  http=HttpSettings(host="127.0.0.1", port=9100, explicit=True), cluster="east",
                                  policy="reject", qps=5, burst=7), id="the environment"),
    pytest.param({"KUEUELOG_CLUSTER": "east", "KUEUELOG_JOB_POLICY": "reject", "KUEUELOG_HTTP_PORT": "9100",
                  "KUEUELOG_KUBE_QPS": "5", "KUEUELOG_TOPIC_PREFIX": "p", "KUEUELOG_KUBE": "true",
                  "KUEUELOG_KUBECONFIG": "/k/env"},
                 ["--cluster", "west", "--job-policy", "suspend", "--http-port", "0", "--qps", "9",
                  "--topic-prefix", "q", "--no-kube", "--kubeconfig", "/k/flag"],
                 ActuatorSettings(log=LogSettings(path="x", create=True, topic_prefix="q"),
                                  http=HttpSettings(port=0, explicit=True), cluster="west", qps=9),
                 id="flags win over the environment"),
    pytest.param({"KUEUELOG_KUBE": "yes", "KUBECONFIG": "/k/kube", "KUEUELOG_KUBECONFIG": "/k/ours"}, [],
                 ActuatorSettings(log=LogSettings(path="x", create=True), cluster="default",
                                  kube=KubeSettings(kubeconfig="/k/ours")),
                 id="KUEUELOG_KUBECONFIG before KUBECONFIG"),
])
def test_precedence(env: pytest.MonkeyPatch, variables: dict[str, str], argv: list[str],
                    want: ActuatorSettings) -> None:
    for k, v in variables.items():
        env.setenv(k, v)
    assert settings("actuator", "--log", "x", *argv) == want


def test_kafka_from_the_environment_only_without_an_embedded_log(env: pytest.MonkeyPatch) -> None:
    env.setenv("KUEUELOG_KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    assert settings("scheduler").log == LogSettings(bootstrap_servers="broker:9092", create=True)
    assert settings("scheduler", "--log", "x").log == LogSettings(path="x", create=True)
    assert settings("scheduler", "--bootstrap-servers", "b:1").log.bootstrap_servers == "b:1"


@pytest.mark.parametrize(("variables", "argv", "error"), [
    pytest.param({}, ["scheduler", "--log", "x", "--kube"],
                 "--kube: 'run scheduler' does not talk to Kubernetes (only watcher and actuator do)", id="--kube"),
    pytest.param({"KUEUELOG_KUBE": "maybe"}, ["actuator", "--log", "x"],
                 "KUEUELOG_KUBE: expected true or false, got 'maybe'", id="KUEUELOG_KUBE"),
    pytest.param({"KUEUELOG_JOB_POLICY": "ignore"}, ["watcher", "--log", "x"],
                 "KUEUELOG_JOB_POLICY: expected suspend or reject, got 'ignore'", id="KUEUELOG_JOB_POLICY"),
    pytest.param({"KUEUELOG_HTTP_PORT": "http"}, ["scheduler", "--log", "x"],
                 "KUEUELOG_HTTP_PORT: expected a port number, got 'http'", id="KUEUELOG_HTTP_PORT"),
    pytest.param({"KUEUELOG_HTTP_PORT": "1"}, ["scheduler", "--log", "x", "--http-port", "-1"],
                 "--http-port: -1 is not a port number (0 turns the HTTP endpoints off)", id="--http-port"),
    pytest.param({}, ["actuator", "--log", "x", "--seed", "a.yaml"],
                 "--seed: 'run actuator' submits no manifests (only all, simcluster and scheduler do)", id="--seed"),
    pytest.param({}, ["scheduler"], "no log given: use --log PATH (the embedded log) or --bootstrap-servers",
                 id="no log"),
    pytest.param({}, ["scheduler", "--log", "x", "--bootstrap-servers", "b:1"],
                 "give either an embedded log (--log/LOG) or --bootstrap-servers, not both", id="two logs"),
])
def test_bad_settings_say_which(env: pytest.MonkeyPatch, variables: dict[str, str], argv: list[str],
                                error: str) -> None:
    for k, v in variables.items():
        env.setenv(k, v)
    with pytest.raises(SettingsError) as e:
        settings(*argv)
    assert str(e.value) == error


# --- the embedded log's leadership -----------------------------------------------------------------


@pytest.fixture
def two_views(tmp_path: Path) -> Iterator[tuple[SqliteLog, SqliteLog]]:
    first, second = SqliteLog(tmp_path), SqliteLog(tmp_path)  # as two processes would open it
    yield first, second
    first.close()
    second.close()


async def test_the_embedded_log_refuses_a_second_holder(two_views: tuple[SqliteLog, SqliteLog],
                                                        tmp_path: Path) -> None:
    first, second = two_views
    stop = asyncio.Event()
    assert await lead(first, "actuator", stop)
    assert await lead(first, "actuator", stop), "taking a role this process holds again is a no-op"
    with pytest.raises(WriterLockHeld) as e:
        await lead(second, "actuator", stop)
    assert str(e.value) == (f"another process holds the actuator lock ({tmp_path / 'actuator.lock'}); "
                            "only one actuator may write")
    assert await lead(second, "scheduler", stop), "roles are independent"
    release(first, "actuator")
    assert await second.leadership.acquire("actuator")


def test_an_embedded_writer_never_loses_its_lock(two_views: tuple[SqliteLog, SqliteLog]) -> None:
    first, _ = two_views
    first.exclusive("scheduler")
    still_leading(first, "scheduler")  # no LeadershipLost: the lock is the operating system's to keep
    assert first.leadership.holds("scheduler")
    assert first.waiter is None, "the embedded log has no notifications: its readers poll"


def test_one_leadership_lost_a_final_log_error() -> None:
    assert kafka.LeadershipLost is LeadershipLost
    assert issubclass(LeadershipLost, LogError) and not LeadershipLost("x").retriable


def test_run_scheduler_seed_appends_the_configuration_once(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from events.codec import decode_envelope
    from events.messages import ObjectApplied
    from events.objects import Configuration
    from services.app.assembly import seed_scheduler

    config = tmp_path / "kueue-config.yaml"
    config.write_text("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
                      "waitForPodsReady:\n  timeout: 2m\n", encoding="utf-8")
    s = settings("scheduler", "--log", str(tmp_path / "log"), "--seed", str(config))
    assert isinstance(s, SchedulerSettings)
    log = SqliteLog(tmp_path / "log")
    try:
        assert seed_scheduler(s, log, 1_000) == 1
        assert seed_scheduler(s, log, 2_000) == 0, "a restart appends nothing new"
        [rec] = log.read(s.log.topics.cluster_events, 0, 10)
        ev = decode_envelope(rec.value).event
        assert isinstance(ev, ObjectApplied) and isinstance(ev.object, Configuration)
        assert ev.object.wait_for_pods_ready and ev.object.wait_for_pods_ready_timeout_ms == 120_000
    finally:
        log.close()


# --- the workload kinds the watcher watches ---------------------------------------------------------


def test_watcher_job_kinds_from_flag_or_environment(env: pytest.MonkeyPatch) -> None:
    assert settings("watcher", "--log", "x", "--job-kinds", "pytorchjob, JobSet").job_kinds == (  # type: ignore[union-attr]
        "JobSet", "PyTorchJob")
    env.setenv("KUEUELOG_JOB_KINDS", "RayJob")
    assert settings("watcher", "--log", "x").job_kinds == ("RayJob",)  # type: ignore[union-attr]
    assert settings("watcher", "--log", "x", "--job-kinds", "").job_kinds == ()  # type: ignore[union-attr]


def test_watcher_unknown_job_kind_is_a_usage_error(env: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match=r"^--job-kinds: unknown workload kind 'Deployment': choose from JobSet, "):
        settings("watcher", "--log", "x", "--job-kinds", "JobSet,Deployment")
