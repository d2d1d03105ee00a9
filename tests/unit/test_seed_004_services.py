"""Seed 004 end to end through the services on the simulated cluster: scheduler, actuator and
the simulated cluster with its simulated autoscaler over an embedded log, in simulated time.
Then replay verifies every decision and ``explain`` tells each check's history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events.envelope import Topics
from events.messages import AdmitChecked, AdmitWorkload, EvictWorkload, UpdateWorkloadStatus
from events.simautoscaler import parse_all
from services.app.driver import drive_until_idle
from services.app.logview import explain, replay
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimConfig

T = Topics()
CASES = Path(__file__).parent.parent / "cases" / "checks"
CLASS = "check-capacity.autoscaling.x-k8s.io"
KEY = "default/sample-job"


def _manifests() -> str:
    text = (CASES / "004-fail-twice-then-admit.yaml").read_text(encoding="utf-8")
    body = text.partition("\n---\n")[2]
    # A Job that runs for a minute once admitted, created at a fixed time.
    return body.replace("  name: sample-job\n", "  name: sample-job\n  creationTimestamp: '2026-01-01T00:00:00Z'\n"
                        "  annotations:\n    kueuelog.io/sim-duration: 1m\n", 1).replace(
        "  annotations:\n    provreq.kueue.x-k8s.io/maxRunDurationSeconds: \"600\"\n", "", 1)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    lg = SqliteLog(tmp_path / "log", durable=False)
    yield lg
    lg.close()


def _run(log: SqliteLog, behaviour: str) -> None:
    config = SimConfig(provisioning=tuple(parse_all([f"{CLASS}={behaviour}"]).items()))
    arrivals = ArrivalStream.from_files(log, {"seed-004.yaml": _manifests()}, topics=T)
    drive_until_idle(log, topics=T, config=config, arrivals=arrivals)


def _decisions(log: SqliteLog) -> list[object]:
    from events.codec import decode_decision

    return [decode_decision(r.value) for r in log.read(T.decisions, 0, 100_000)]


def _of(decisions: list[object], kind: type) -> list[object]:
    return [d for d in decisions if isinstance(d, kind)]


def test_reserve_then_provision_then_admit_and_the_job_runs(log: SqliteLog) -> None:
    _run(log, "succeed:20s")
    ds = _decisions(log)
    (reserve,) = _of(ds, AdmitWorkload)
    (admit,) = _of(ds, AdmitChecked)
    assert reserve.admission_checks == ("sample-prov",)  # type: ignore[attr-defined]
    assert admit.time - reserve.time == 20_000  # type: ignore[attr-defined]
    report = replay(log, T, verify=True)
    assert report.mismatches == []
    assert report.cycles > 0
    rec = next(iter(report.scheduler.state.workloads.values()))  # type: ignore[union-attr]
    assert rec.finished  # ran its minute after admission


def test_fail_twice_retries_after_60_and_120_seconds_then_admits(log: SqliteLog) -> None:
    _run(log, "fail:2:5s")
    ds = _decisions(log)
    reserves = _of(ds, AdmitWorkload)
    evicts = _of(ds, EvictWorkload)
    assert [e.reason for e in evicts] == ["AdmissionCheck", "AdmissionCheck"]  # type: ignore[attr-defined]
    assert [[p.attempt for p in r.provisioning_requests or ()] for r in reserves] == [[1], [2], [3]]  # type: ignore[attr-defined]
    # failure 5 s after each reservation; back-off 60 s, then 120 s, from the failure
    assert [r.time - reserves[0].time for r in reserves] == [0, 65_000, 65_000 + 125_000]  # type: ignore[attr-defined]
    assert len(_of(ds, AdmitChecked)) == 1
    # Status news between reservation and admission, re-derived by replay --verify like the rest:
    # the ETA while Pending, each Retry told before its eviction, the back-off's requeueAt set after
    # it and cleared at its end.
    news = _of(ds, UpdateWorkloadStatus)
    states = [(str(c.state), c.message.split(":")[0], c.retry_count, d.requeue_at is not None)  # type: ignore[attr-defined]
              for d in news for c in d.admission_checks]  # type: ignore[attr-defined]
    reset = "Reset to Pending after eviction. Previously"
    assert states == [("Pending", "Provisioning Request ETA", 0, False), ("Retry", "Retrying after failure", 0, False),
                      ("Pending", reset, 1, True), ("Pending", reset, 1, False),
                      ("Pending", "Provisioning Request ETA", 1, False), ("Retry", "Retrying after failure", 1, False),
                      ("Pending", reset, 2, True), ("Pending", reset, 2, False),
                      ("Pending", "Provisioning Request ETA", 2, False)]
    assert replay(log, T, verify=True).mismatches == []
    lines = explain(log, T, KEY)
    text = "\n".join(lines)
    assert "ProvisioningRequest" in text and "attempt 3" in text
    assert "back-off 120 s" in text
    assert "sample-prov: retry 1, back-off 60 s" in text and "sample-prov: retry 2, back-off 120 s" in text
    assert "Failed (Simulated failure of attempt 2)" in text


def test_failing_past_the_limit_is_rejected_and_releases_the_quota(log: SqliteLog) -> None:
    _run(log, "fail:3")
    ds = _decisions(log)
    evicts = _of(ds, EvictWorkload)
    assert [e.reason for e in evicts] == ["AdmissionCheck", "AdmissionCheck", "Deactivated"]  # type: ignore[attr-defined]
    assert not _of(ds, AdmitChecked)
    report = replay(log, T, verify=True)
    assert report.mismatches == []
    rec = next(iter(report.scheduler.state.workloads.values()))  # type: ignore[union-attr]
    assert rec.admission is None and rec.deactivated
    assert all(v == 0 for v in report.scheduler.state.cq_node("cluster-queue").usage.values())  # type: ignore[union-attr]


def test_a_preempted_workload_gets_its_request_again_under_the_same_name(log: SqliteLog) -> None:
    """Preemption is not a Retry: the victim's request (attempt 1) is deleted and, when it is
    reserved again, created again under the same name, and answered again."""
    import yaml

    from events.cluster import SIM_DURATION_ANNOTATION
    from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue, a_priority_class

    check = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": "prov"},
             "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                      "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                     "name": "prc"}}}
    prc = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ProvisioningRequestConfig", "metadata": {"name": "prc"},
           "spec": {"provisioningClassName": CLASS}}
    cq = a_cluster_queue("cq").flavor("default", cpu="2").preemption(within="LowerPriority").admission_checks("prov")
    low = a_job("ns", "low", "lq").request(cpu="2").created(0).annotate(SIM_DURATION_ANNOTATION, "1m")
    high = (a_job("ns", "high", "lq").request(cpu="2").created(10).annotate(SIM_DURATION_ANNOTATION, "1m")
            .label("kueue.x-k8s.io/priority-class", "high"))
    docs = [a_flavor("default").obj(), check, prc, cq.obj(), a_local_queue("ns", "lq", "cq").obj(),
            a_priority_class("high", 1000).obj(), low.obj(), high.obj()]
    config = SimConfig(provisioning=tuple(parse_all([f"{CLASS}=succeed:30s"]).items()))
    arrivals = ArrivalStream.from_files(log, {"m.yaml": yaml.safe_dump_all(docs, sort_keys=False)}, topics=T)
    drive_until_idle(log, topics=T, config=config, arrivals=arrivals)
    ds = _decisions(log)
    evicts = _of(ds, EvictWorkload)
    assert [e.reason for e in evicts] == ["Preempted"]  # type: ignore[attr-defined]
    names = [p.name for d in _of(ds, AdmitWorkload) for p in d.provisioning_requests or ()]  # type: ignore[attr-defined]
    assert len(names) == 3 and names[0] == names[2]  # low, high, low again with the same request name
    assert len(_of(ds, AdmitChecked)) == 2
    report = replay(log, T, verify=True)
    assert report.mismatches == []
    assert all(r.finished for r in report.scheduler.state.workloads.values())  # type: ignore[union-attr]
