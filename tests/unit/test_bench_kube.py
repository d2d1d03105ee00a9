"""bench/kube.py's pure parts: the generator's plan as Kueue's baseline config has it, the objects
it creates, and the pods' part (a Job seen admitted runs; seen suspended again, it was evicted; a
Workload seen Admitted is marked Finished, one seen Evicted while reserved has its reservation cleared)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from bench import kube


def test_the_full_plan_is_kueues_baseline() -> None:
    p = kube.plan(kube.FULL, rid="r")
    assert len(p.arrivals) == 15_000
    assert len(list(p.queues())) == 30
    per_queue = Counter((a.namespace, a.klass) for a in p.arrivals)
    assert set(per_queue.values()) == {350, 100, 50}
    assert {k: n for (ns, k), n in per_queue.items() if ns == "r-cq-0-0"} == {"small": 350, "medium": 100,
                                                                               "large": 50}
    first = {a.klass: a.at_ms for a in reversed(p.arrivals)}  # each class's earliest
    last = {a.klass: a.at_ms for a in p.arrivals}
    assert first == {"small": 100, "medium": 500, "large": 1200}  # created after one interval, as Kueue's
    assert last == {"small": 35_000, "medium": 50_000, "large": 60_000}
    assert [a.at_ms for a in p.arrivals] == sorted(a.at_ms for a in p.arrivals)


def test_a_shorter_run_keeps_the_arrivals_before_its_end() -> None:
    p = kube.plan(kube.TINY, rid="r")
    assert all(a.at_ms < 3000 for a in p.arrivals)
    assert Counter(a.klass for a in p.arrivals) == {"small": 58, "medium": 10, "large": 4}


def test_the_objects_carry_the_run_id_and_kueues_queue_settings() -> None:
    p = kube.plan(kube.TINY, rid="r")
    objs = kube.config_objects(p)
    kinds = Counter(body["kind"] for _, body in objs)
    assert kinds == {"ResourceFlavor": 1, "WorkloadPriorityClass": 3, "Namespace": 2, "ClusterQueue": 2,
                     "LocalQueue": 2}
    assert all(body["metadata"]["labels"] == {kube.BENCH_LABEL: "r"} for _, body in objs)
    cq = next(body for _, body in objs if body["kind"] == "ClusterQueue")
    assert cq["spec"]["cohortName"] == "r-cohort-0"
    assert cq["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}]
    job = kube.job_body(p, p.arrivals[0])
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "r-small"
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1000m"}}


def test_the_completed_status_is_what_the_job_controller_writes() -> None:
    status = kube.complete_status(0.0, 1.0)["status"]
    assert status["startTime"] == "1970-01-01T00:00:00Z" and status["completionTime"] == "1970-01-01T00:00:01Z"
    assert [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert status["succeeded"] == 1 and status["active"] == 0


class _Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        return {}


def _job(a: kube.Arrival, *, suspended: bool) -> dict[str, Any]:
    return {"metadata": {"namespace": a.namespace, "name": a.name}, "spec": {"suspend": suspended}}


def test_the_pods_part_finishes_admitted_jobs_and_not_evicted_ones() -> None:
    p = kube.plan(kube.TINY, rid="r")
    small = next(a for a in p.arrivals if a.klass == "small")
    other = next(a for a in p.arrivals if a.klass == "small" and a.key != small.key)

    async def scenario() -> tuple[kube.Runner, _Api]:
        api = _Api()
        runner = kube.Runner(api, p, "jobs")  # type: ignore[arg-type]  # a stand-in for kube.Api
        runner.on_job(_job(small, suspended=True))  # created, queued: nothing runs
        assert runner.running == {}
        runner.on_job(_job(small, suspended=False))  # admitted
        runner.on_job(_job(other, suspended=False))
        runner.on_job(_job(other, suspended=True))  # evicted before its runtime is up
        runner.on_job({"metadata": {"namespace": "elsewhere", "name": "x"}, "spec": {}})  # not the run's
        await asyncio.sleep(small.runtime_ms / 1000 + 0.1)
        return runner, api

    runner, api = asyncio.run(scenario())
    assert set(runner.finished) == {small.key}
    assert set(runner.admitted) == {small.key, other.key}
    assert runner.evictions == 1
    assert api.calls == [("PATCH", f"/apis/batch/v1/namespaces/{small.namespace}/jobs/{small.name}/status")]
    assert runner.used > 0


class _StatusApi(_Api):
    """Answers a status write with the object as written (no conflict)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        self.bodies.append(body or {})
        return {"metadata": {"resourceVersion": "2"}, **(body or {})}


def _workload(a: kube.Arrival, **conditions: str) -> dict[str, Any]:
    return {"metadata": {"namespace": a.namespace, "name": a.name, "resourceVersion": "1"},
            "status": {"admission": {"clusterQueue": "cq"},
                       "conditions": [{"type": t, "status": v} for t, v in conditions.items()]}}


def test_the_runner_finishes_admitted_workloads_and_clears_evicted_ones() -> None:
    p = kube.plan(kube.TINY, rid="r")
    small = next(a for a in p.arrivals if a.klass == "small")
    other = next(a for a in p.arrivals if a.klass == "small" and a.key != small.key)
    body = kube.workload_body(p, small)
    assert body["spec"]["priority"] == 50 and body["spec"]["queueName"] == "lq"
    assert body["spec"]["podSets"][0]["count"] == 1

    async def scenario() -> tuple[kube.Runner, _StatusApi]:
        api = _StatusApi()
        runner = kube.Runner(api, p)  # type: ignore[arg-type]  # a stand-in for kube.Api
        runner.on_workload(_workload(small, QuotaReserved="False"))  # pending: nothing runs
        runner.on_workload(_workload(small, QuotaReserved="True", Admitted="True"))
        runner.on_workload(_workload(other, QuotaReserved="True", Admitted="True"))
        runner.on_workload(_workload(other, QuotaReserved="True", Admitted="True", Evicted="True"))
        await asyncio.sleep(small.runtime_ms / 1000 + 0.1)
        return runner, api

    runner, api = asyncio.run(scenario())
    assert set(runner.finished) == {small.key} and runner.evictions == runner.cleared == 1
    def status(a: kube.Arrival) -> str:
        return f"/apis/kueue.x-k8s.io/{kube.V}/namespaces/{a.namespace}/workloads/{a.name}/status"

    assert sorted(api.calls) == sorted([("PATCH", status(other)), ("PATCH", status(small))])
    by_path = dict(zip((path for _, path in api.calls), api.bodies, strict=True))
    cleared = by_path[status(other)]["status"]
    assert cleared["admission"] is None
    assert {c["type"]: (c["status"], c.get("reason")) for c in cleared["conditions"]}["QuotaReserved"] == \
        ("False", "Pending")
    finished = by_path[status(small)]["status"]["conditions"]
    assert finished[-1]["type"] == "Finished" and finished[-1]["status"] == "True"
