"""``kueuelog run``'s plumbing without a server: readiness, scheduler metrics fed from committed
steps, the services' counters as Prometheus metrics, and the settings and errors of ``run``."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import load
from events.messages import AdmitWorkload, CycleCompleted
from services.actuator.job_reconciler import ReconcilerStats
from services.actuator.kube_port import KubeStats
from services.actuator.loop import Stats as LoopStats
from services.app.assembly import run_options
from services.app.cli import build_parser, main
from services.runtime.metrics import StatsCollector
from services.runtime.sqlite import SqliteLog
from services.runtime.supervise import ServiceStatus
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.runner import observe_scheduler, run_scheduler
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import seed_all
from services.watcher.kube import WatcherStats

T = Topics()
MANIFESTS = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: team}
spec: {clusterQueue: cq}
"""


def workload_manifest(name: str, created: str, count: int = 1) -> str:
    """A Workload of ``count`` pods of 1 cpu in LocalQueue team/lq, created at ``created``."""
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: {name}, namespace: team, creationTimestamp: "{created}"}}
spec:
  queueName: lq
  podSets:
  - name: main
    count: {count}
    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}
"""


MANIFESTS += "".join(workload_manifest(f"w{i}", f"2025-01-01T00:00:0{i}Z") for i in range(3))


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    lg = SqliteLog(tmp_path / "log")
    yield lg
    lg.close()


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# --- readiness -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("leading", "recovered", "problem", "ready", "reason"), [
    pytest.param(False, False, "", False, "scheduler: standby, waiting for the leadership", id="standby"),
    pytest.param(True, False, "", False, "scheduler: recovering", id="leading, recovering"),
    pytest.param(True, True, "", True, "scheduler: ready", id="leading and recovered"),
    pytest.param(True, True, "log unavailable: broker down", False, "scheduler: log unavailable: broker down",
                 id="the log went away"),
])
def test_readiness(leading: bool, recovered: bool, problem: str, ready: bool, reason: str) -> None:
    status = ServiceStatus("scheduler", leading=leading, recovered=recovered, problems={"": problem} if problem else {})
    assert (status.ready, status.reason) == (ready, reason)


def test_one_part_down_keeps_the_process_unready_while_the_others_make_progress() -> None:
    """run all: the scheduler stepping must not hide an actuator whose log writes fail."""
    status = ServiceStatus("all", leading=True)
    status.up("scheduler")
    status.down("log unavailable: disk full", "actuator")
    status.up("scheduler")
    assert not status.ready
    assert status.reason == "all: actuator: log unavailable: disk full"
    status.up("actuator")
    assert status.ready


def test_a_part_that_stops_making_progress_turns_readiness_off() -> None:
    now = [100.0]
    status = ServiceStatus("all", leading=True, stuck_after=60, clock=lambda: now[0])
    status.up("scheduler")
    status.up("simcluster")
    now[0] = 150.0
    status.up("scheduler")
    assert status.ready
    now[0] = 161.0
    assert not status.ready
    assert status.reason == "all: simcluster: no progress for 61 s"
    status.up("simcluster")
    assert status.ready


def test_up_clears_the_problem() -> None:
    status = ServiceStatus("actuator", leading=True)
    status.down("log unavailable: x")
    status.up()
    assert status.ready


# --- the scheduler's metrics ------------------------------------------------------------------------


def test_the_metrics_hook_walks_the_workloads_and_asks_the_lag_only_after_recovery(log: SqliteLog) -> None:
    seed_all(log, load({"m.yaml": MANIFESTS}))
    metrics = SchedulerMetrics(gauge_interval_s=None)  # as the service runs it: gauges refreshed on scrape
    walks: list[int] = []
    refresh = metrics._refresh_gauges
    metrics._refresh_gauges = lambda state: (walks.append(1), refresh(state))[1]  # type: ignore[method-assign]
    asked: list[str] = []

    class CountingEnds:
        def __getattr__(self, name: str) -> object:
            return getattr(log, name)

        def end_offset(self, topic: str) -> int:
            asked.append(topic)
            return log.end_offset(topic)

    scheduler = Scheduler(CountingEnds())  # type: ignore[arg-type]
    scheduler.step()
    hook = observe_scheduler(metrics)
    hook(scheduler, None)
    assert (len(walks), len(asked)) == (1, 1)
    hook(scheduler, 0)  # a step that went on with cut-short cycles: no new events, nothing to walk
    hook(scheduler, 3)
    assert (len(walks), len(asked)) == (1, 1)


async def test_the_live_scheduler_folds_the_whole_backlog_before_its_first_cycle(log: SqliteLog) -> None:
    """More than a read's worth waiting: the first live step folds all of it, so its cycles decide
    on the newest state (the last workload, created first, is admitted first), and replays exactly."""
    many = "".join(workload_manifest(f"x{i}", f"2025-01-01T00:{10 + i // 60:02d}:{i % 60:02d}Z")
                   for i in range(1_200))
    early = workload_manifest("early", "2024-12-31T00:00:00Z", count=2)
    seeded = seed_all(log, load({"m.yaml": MANIFESTS + many + early}))
    assert seeded > Scheduler(log).batch_size
    steps: list[int | None] = []
    stop = asyncio.Event()
    task = asyncio.create_task(run_scheduler(log, stop, on_step=lambda _, events: steps.append(events),
                                             poll_seconds=0.01))
    deadline = asyncio.get_running_loop().time() + 30
    while not [e for e in steps if e]:
        assert asyncio.get_running_loop().time() < deadline, "no step"
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert next(e for e in steps if e) == seeded
    written = [decode_decision(r.value) for r in log.read(T.decisions, 0, 10_000)]
    admits = [d.name for d in written if isinstance(d, AdmitWorkload)]
    assert admits[0] == "early"  # it came last, but was folded before the first cycle
    assert list(Scheduler(log).replay(0, verify=True)) == []


async def test_scheduler_reports_ready_and_feeds_metrics_only_from_committed_live_steps(log: SqliteLog) -> None:
    seed_all(log, load({"m.yaml": MANIFESTS}))
    metrics = SchedulerMetrics()
    calls: list[tuple[int, int, int]] = []
    observe = observe_scheduler(metrics)

    def on_step(s: Scheduler, events: int | None) -> None:
        calls.append((-1 if events is None else events, len(s.last_decisions), len(s.last_cycles)))
        observe(s, events)

    status = ServiceStatus("scheduler")
    stop = asyncio.Event()
    task = asyncio.create_task(run_scheduler(log, stop, status=status, on_step=on_step, poll_seconds=0.01))
    deadline = asyncio.get_running_loop().time() + 10
    while not any(events for events, _, _ in calls):
        assert asyncio.get_running_loop().time() < deadline, "no step"
        await asyncio.sleep(0.01)
    assert status.ready
    stop.set()
    scheduler = await task
    written = [decode_decision(r.value) for r in log.read(T.decisions, 0, 1000)]
    admits = [d for d in written if isinstance(d, AdmitWorkload)]
    cycles = [d for d in written if isinstance(d, CycleCompleted)]
    assert [a.name for a in admits] == ["w0", "w1"]
    assert calls[0] == (-1, 0, 0), "once after recovery: gauges only"
    assert all(e >= 0 for e, _, _ in calls[1:]), "steps say how many events they folded, 0 included"
    seeded = log.end_offset(T.cluster_events)
    assert sum(e for e, _, _ in calls[1:]) == scheduler.stats.events == seeded
    assert sum(d for _, d, _ in calls) == len(written) - len(cycles)
    assert sum(c for _, _, c in calls) == len(cycles)
    r = metrics.registry
    assert metric(r, "kueuelog_events_folded_total") == seeded
    assert metric(r, "kueuelog_cycles_total") == len(cycles)
    assert metric(r, "kueue_admitted_workloads_total", cluster_queue="cq") == 2
    assert metric(r, "kueue_reserving_active_workloads", cluster_queue="cq") == 2
    assert metric(r, "kueuelog_log_lag") == 0


async def test_a_recovered_scheduler_does_not_count_history_again(log: SqliteLog) -> None:
    seed_all(log, load({"m.yaml": MANIFESTS}))
    first = Scheduler(log)
    first.recover()
    while first.step():
        pass
    metrics = SchedulerMetrics()
    stop = asyncio.Event()
    stop.set()  # recover, then stop at once
    status = ServiceStatus("scheduler")
    task = asyncio.create_task(run_scheduler(log, stop, status=status, on_step=observe_scheduler(metrics)))
    await task
    r = metrics.registry
    assert metric(r, "kueue_admitted_workloads_total", cluster_queue="cq") is None
    assert metric(r, "kueuelog_events_folded_total") == 0


# --- the Kubernetes services' counters ---------------------------------------------------------------


def test_stats_become_counters_read_at_scrape_time() -> None:
    watcher, loop, kube, reconciler = WatcherStats(), LoopStats(), KubeStats(), ReconcilerStats()
    registry = CollectorRegistry()
    registry.register(StatsCollector("watcher", {"": lambda: watcher}))
    registry.register(StatsCollector("actuator", {"": lambda: (loop, kube), "job_reconciler_": lambda: reconciler}))
    watcher.published, loop.started, reconciler.suspended = 7, 3, 2
    kube.api.calls["get Job"] = 4
    kube.api.errors["409"] = 1
    assert metric(registry, "kueuelog_watcher_published_total") == 7
    assert metric(registry, "kueuelog_actuator_started_total") == 3
    assert metric(registry, "kueuelog_actuator_job_reconciler_suspended_total") == 2
    assert metric(registry, "kueuelog_actuator_api_calls_total", call="get Job") == 4
    assert metric(registry, "kueuelog_actuator_api_errors_total", status="409") == 1
    watcher.published = 9
    assert metric(registry, "kueuelog_watcher_published_total") == 9


# --- run's settings and errors -------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for key in list(os.environ):
        if key.startswith("KUEUELOG_") or key in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            monkeypatch.delenv(key)
    return monkeypatch


def settings(*argv: str) -> tuple[bool, str | None, str, str, tuple[int, bool]]:
    o = run_options(build_parser().parse_args(["run", *argv]))
    return o.kube, o.kubeconfig, o.cluster, o.policy, (o.http.port, o.http.explicit)


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    assert settings("actuator", "--log", "x") == (False, None, "sim", "suspend", (8080, False))
    assert settings("watcher", "--log", "x") == (True, None, "default", "suspend", (8080, False))
    assert settings("actuator", "--kube", "--log", "x")[:3] == (True, None, "default")


def test_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("KUEUELOG_KUBE", "true")
    clean_env.setenv("KUBECONFIG", "/k/config")
    clean_env.setenv("KUEUELOG_CLUSTER", "east")
    clean_env.setenv("KUEUELOG_JOB_POLICY", "reject")
    clean_env.setenv("KUEUELOG_HTTP_PORT", "0")
    assert settings("actuator", "--log", "x") == (True, "/k/config", "east", "reject", (0, True))
    clean_env.setenv("KUEUELOG_KUBECONFIG", "/k/ours")
    assert settings("actuator", "--log", "x", "--no-kube", "--kubeconfig", "/k/flag", "--cluster", "west",
                    "--job-policy", "suspend", "--http-port", "9000") == (False, "/k/flag", "west", "suspend",
                                                                          (9000, True))
    assert settings("watcher", "--log", "x")[1] == "/k/ours"


@pytest.mark.parametrize(("env", "argv", "error", "code"), [
    pytest.param({}, ["scheduler", "--kube"], "--kube: 'run scheduler' does not talk to Kubernetes", 2,
                 id="--kube where there is no Kubernetes"),
    pytest.param({"KUEUELOG_JOB_POLICY": "ignore"}, ["actuator"], "KUEUELOG_JOB_POLICY: expected suspend or reject", 3,
                 id="bad job policy"),
    pytest.param({"KUEUELOG_KUBE": "maybe"}, ["actuator"], "KUEUELOG_KUBE: expected true or false", 3,
                 id="bad KUEUELOG_KUBE"),
    pytest.param({"KUEUELOG_HTTP_PORT": "http"}, ["scheduler"], "KUEUELOG_HTTP_PORT: expected a port number", 3,
                 id="bad KUEUELOG_HTTP_PORT"),
    pytest.param({}, ["scheduler", "--http-port", "70000"], "--http-port: 70000 is not a port number", 2,
                 id="port out of range"),
    pytest.param({}, ["watcher", "--seed", "a.yaml"], "--seed: 'run watcher' submits no manifests", 2,
                 id="--seed where nothing is submitted"),
    pytest.param({}, ["scheduler", "--seed", "no-such-kueue-config.yaml"],
                 "cannot read no-such-kueue-config.yaml", 2, id="scheduler --seed of a file that is not there"),
])
def test_bad_settings_exit_naming_them(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path, env: dict[str, str], argv: list[str], error: str,
                                       code: int) -> None:
    """Flags that do not go together exit 2 (usage); a bad value from the environment 3 (configuration)."""
    for k, v in env.items():
        clean_env.setenv(k, v)
    assert main(["run", *argv, "--log", str(tmp_path / "log")]) == code
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1, err


def test_kubernetes_without_a_configuration_exits_3_saying_what_to_give(
        clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "watcher", "--log", str(tmp_path / "log")]) == 3
    assert "no Kubernetes configuration: give --kubeconfig PATH" in capsys.readouterr().err
    assert main(["run", "actuator", "--kube", "--log", str(tmp_path / "log"), "--kubeconfig",
                 str(tmp_path / "missing")]) == 3
    assert f"kubeconfig {tmp_path / 'missing'}:" in capsys.readouterr().err


def test_a_port_asked_for_that_is_taken_exits_3(clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["run", "scheduler", "--log", str(tmp_path / "log"), "--http-host", "127.0.0.1",
                     "--http-port", str(port)])
    assert code == 3
    assert f"--http-port: cannot serve /healthz, /readyz and /metrics on 127.0.0.1:{port}" in capsys.readouterr().err


async def test_the_actuators_watched_copies_count_their_lists_events_and_absences(tmp_path: Path) -> None:
    from kubernetes_asyncio import client

    from services.actuator.service import ActuatorService

    log = SqliteLog(tmp_path / "log")
    try:
        async with client.ApiClient() as api:
            service = ActuatorService(log, api, cluster="c")
            registry = CollectorRegistry()
            registry.register(service.collector())
            service.port.workloads.stats.lists, service.port.workloads.stats.events = 1, 40
            service.port.claimants["JobSet"].stats.absent = 3
            assert metric(registry, "kueuelog_actuator_watched_workloads_lists_total") == 1
            assert metric(registry, "kueuelog_actuator_watched_workloads_events_total") == 40
            assert metric(registry, "kueuelog_actuator_watched_claimant_jobsets_absent_total") == 3
            # The queued Jobs are watched once, by the job reconciler (its relists are its own counter).
            assert metric(registry, "kueuelog_actuator_watched_jobs_restarts_total") is None
            assert metric(registry, "kueuelog_actuator_job_reconciler_relists_total") == 0
            assert metric(registry, "kueuelog_actuator_watched_clusterqueues_lists_total") == 0
    finally:
        log.close()
