"""Kueue's scheduler-performance baseline through a real kube-apiserver (issue 23, item 3).

Kueue's harness (``test/performance/scheduler`` in Kueue's repository) runs its manager against an
envtest kube-apiserver + etcd: a generator creates the objects of ``configs/baseline/generator.yaml``
(5 cohorts x 6 ClusterQueues, nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority; per ClusterQueue 350 small / 100 medium / 50 large, one every
100 / 500 / 1,200 ms, each set's n-th created after n + 1 intervals), and a controller in the runner
plays the workloads: once it sees one admitted it marks it finished after its runtime, and it
completes evictions. This bench does the same through the same kind of API server:

- the control plane is ``tests.infra.kube.LocalControlPlane`` (kube-apiserver + etcd, the envtest
  approach), started with Kueue's harness's request limits (``--max-requests-inflight=5000``,
  ``--max-mutating-requests-inflight=2500``), and the log is a local Kafka broker;
- kueuelog runs as deployed: ``kueuelog run watcher``, ``run scheduler`` and ``run actuator --kube``
  (the actuator process holds the job reconciler), each its own process, over Kafka;
- the bench creates **Workloads** as Kueue's generator does (``--objects workloads``, the default):
  the LocalQueue, ``spec.priority`` = the class's priority, one pod set of one pod requesting the
  class's cpu, the runtime and class as labels. It plays them as Kueue's runner does: it watches the
  Workloads; one seen ``Admitted`` is marked ``Finished=True`` its runtime later (one status write);
  one seen ``Evicted`` while it still holds its reservation gets the reservation cleared
  (``QuotaReserved=False``, reason Pending, ``Admitted=False``, no ``status.admission``: one status
  write), which is how kueuelog's watcher, like Kueue's cache, learns the eviction completed; then
  it waits for its next admission. Each status write carries the copy's resourceVersion and is
  read and written again after a 409 (Kueue's runner updates from its cache and requeues);
- ``--objects jobs`` creates suspended **Jobs** instead (labelled with the LocalQueue and a
  WorkloadPriorityClass of the class's priority), each with the Workload kueuelog's job reconciler
  creates for it: more objects and writes than Kueue's run. A Job seen unsuspended is marked
  complete its runtime later (one status write: startTime, completionTime, succeeded,
  SuccessCriteriaMet and Complete); one suspended again meanwhile (evicted) waits for its next
  admission, and its eviction needs no act of the bench (no pods: the watcher reports it complete);
- client rate limits are Kueue's harness's: the bench's client (Kueue's runner) 1,000 qps, burst
  2,000; the actuator (Kueue's manager, minimalkueue) 50 qps, burst 100.

Reported beside Kueue's figures: wall (first object created -> last finished), usage of nominal quota
(cpu reserved from when a workload is seen admitted (a Job unsuspended) until it is finished or
seen evicted (suspended), over all ClusterQueues' nominal quota and the wall), average time to
admission per class (creation request -> seen admitted), the CPU of every process and the API
calls per workload of the actuator and of the bench. ``python -m bench kube [--quick | --tiny |
--seconds S] [--objects workloads|jobs]``
(``make bench-kube``; not part of ``make bench``: the full size takes many minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from bench.kafka import local_broker, make_topics, proc_cpu_seconds, read_all, start_service_process, stop_process
from bench.scenarios import CLASSES, INTERVAL_MS
from events import objects as o
from events.cluster import KUEUE_GROUP, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from events.codec import decode_decision, decode_envelope
from events.envelope import Topics
from events.messages import AdmitWorkload, EvictWorkload, ObjectApplied, WorkloadFinished
from services.actuator.kubeapi import TokenBucket
from services.runtime.kafka import KafkaLog, KafkaSettings
from services.scheduler.service import GROUP as SCHEDULER_GROUP
from tests.infra.kube import LocalControlPlane, free_port

# Kueue's harness (hack/make/test.mk, test/performance/scheduler/{runner,minimalkueue}/main.go).
RUNNER_QPS, RUNNER_BURST = 1000.0, 2000
MANAGER_QPS, MANAGER_BURST = 50.0, 100
APISERVER_ARGS = ("--max-requests-inflight=5000", "--max-mutating-requests-inflight=2500")
# Kueue's baseline through its harness on this machine (issue 23): seconds, %, CPU seconds.
KUEUE = {"wall": 380.0, "usage": 52.8, "large": 29.9, "medium": 85.1, "small": 217.8,
         "apiserver_cpu": 463.0, "kueue_cpu": 105.0}
V = "v1beta2"
BENCH_LABEL = "kueuelog.io/bench"
MERGE = "application/merge-patch+json"
STALL_S = 240.0  # no workload admitted or finished for this long: the run is stuck
SERVICES = ("watcher", "scheduler", "actuator")
OBJECTS = ("workloads", "jobs")  # what the bench creates: Kueue's generator creates Workloads
RUNTIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"  # Kueue's generator's labels
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"


class BenchError(RuntimeError):
    """The bench could not go on (a service died, the API refused a call, nothing moved)."""


@dataclass(frozen=True)
class KubeSizes:
    name: str
    cohorts: int
    queues: int  # ClusterQueues per cohort
    until_ms: int | None  # only the arrivals before this (None: the whole 500 per ClusterQueue)


FULL = KubeSizes("full", 5, 6, None)  # 15,000 workloads
QUICK = KubeSizes("quick", 1, 3, 10_000)  # 378 workloads: the first 10 s of 3 ClusterQueues
TINY = KubeSizes("tiny", 1, 2, 3_000)  # 72 workloads: the integration test's size
SIZES = {s.name: s for s in (FULL, QUICK, TINY)}


@dataclass(frozen=True)
class Arrival:
    at_ms: int  # after the start
    namespace: str
    name: str
    klass: str
    cpu_milli: int
    runtime_ms: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Plan:
    """Every object of one run; names carry the run id so runs on a shared API server stay apart."""

    rid: str
    sizes: KubeSizes
    arrivals: tuple[Arrival, ...]

    @property
    def flavor(self) -> str:
        return f"{self.rid}-default"

    def queues(self) -> Iterator[tuple[str, str, str]]:
        """(cohort, ClusterQueue, namespace) of each ClusterQueue; the namespace is named after it, as Kueue's."""
        for c in range(self.sizes.cohorts):
            for q in range(self.sizes.queues):
                cq = f"{self.rid}-cq-{c}-{q}"
                yield f"{self.rid}-cohort-{c}", cq, cq

    def priority_class(self, klass: str) -> str:
        return f"{self.rid}-{klass}"


def plan(sizes: KubeSizes, rid: str | None = None) -> Plan:
    rid = rid or f"kb{uuid.uuid4().hex[:6]}"
    arrivals: list[Arrival] = []
    for _, _, ns in Plan(rid, sizes, ()).queues():
        for klass, count, cpu, runtime_ms, _ in CLASSES:
            for i in range(count):
                at = (i + 1) * INTERVAL_MS[klass]
                if sizes.until_ms is not None and at >= sizes.until_ms:
                    break
                arrivals.append(Arrival(at, ns, f"{klass}-{i}", klass, cpu, runtime_ms))
    arrivals.sort(key=lambda a: (a.at_ms, a.namespace, a.name))
    return Plan(rid, sizes, tuple(arrivals))


# --- the objects ---------------------------------------------------------------------------------


def _labels(p: Plan) -> dict[str, str]:
    return {BENCH_LABEL: p.rid}


def config_objects(p: Plan) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, body) of the configuration, in creation order."""
    kueue = f"/apis/{KUEUE_GROUP}/{V}"
    out: list[tuple[str, dict[str, Any]]] = [
        (f"{kueue}/resourceflavors", {"apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "ResourceFlavor",
                                      "metadata": {"name": p.flavor, "labels": _labels(p)}, "spec": {}})]
    for klass, _, _, _, priority in CLASSES:
        out.append((f"{kueue}/workloadpriorityclasses", {
            "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": p.priority_class(klass), "labels": _labels(p)}, "value": priority}))
    for cohort, cq, ns in p.queues():
        out.append(("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": _labels(p)}}))
        out.append((f"{kueue}/clusterqueues", {
            "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "ClusterQueue",
            "metadata": {"name": cq, "labels": _labels(p)},
            "spec": {"cohortName": cohort, "namespaceSelector": {},
                     "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                     "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": p.flavor, "resources": [
                         {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}]}]}]}}))
        out.append((f"{kueue}/namespaces/{ns}/localqueues", {
            "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": ns, "labels": _labels(p)}, "spec": {"clusterQueue": cq}}))
    return out


def job_body(p: Plan, a: Arrival) -> dict[str, Any]:
    """A queued Job as a Kueue user creates it (suspended: Kueue's webhook would suspend it)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": a.name, "namespace": a.namespace, "labels": {
            QUEUE_NAME_LABEL: "lq", PRIORITY_CLASS_LABEL: p.priority_class(a.klass), BENCH_LABEL: p.rid}},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox:1.36", "command": ["sleep", str(a.runtime_ms / 1000)],
                "resources": {"requests": {"cpu": f"{a.cpu_milli}m"}}}]}}},
    }


def workload_body(p: Plan, a: Arrival) -> dict[str, Any]:
    """A Workload as Kueue's generator creates it: its LocalQueue, ``spec.priority`` (the class's), one
    pod set of one pod requesting the class's cpu, and the runtime as a label (Kueue's runner reads it)."""
    priority = next(prio for klass, *_, prio in CLASSES if klass == a.klass)
    return {
        "apiVersion": f"{KUEUE_GROUP}/{V}", "kind": "Workload",
        "metadata": {"name": a.name, "namespace": a.namespace, "labels": {
            BENCH_LABEL: p.rid, RUNTIME_LABEL: str(a.runtime_ms), CLASS_LABEL: a.klass}},
        "spec": {"queueName": "lq", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": f"{a.cpu_milli}m"}}}]}}}]},
    }


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def complete_status(started: float, now: float) -> dict[str, Any]:
    """The job controller's last write for a Job whose one pod succeeded."""
    stamp = _rfc3339(now)
    done = {"status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
            "lastTransitionTime": stamp}
    return {"status": {"startTime": _rfc3339(started), "completionTime": stamp, "active": 0, "ready": 0,
                       "succeeded": 1, "conditions": [{"type": "SuccessCriteriaMet", **done},
                                                      {"type": "Complete", **done}]}}


# --- the bench's API client (Kueue's runner's) ----------------------------------------------------


class Api:
    """aiohttp to the API server as the admin, rate limited like client-go (qps, burst)."""

    def __init__(self, plane: LocalControlPlane, qps: float, burst: int) -> None:
        ctx = ssl.create_default_context(cafile=str(plane.ca_path))
        self.session = aiohttp.ClientSession(
            base_url=plane.server, headers={"Authorization": f"Bearer {plane.token}"},
            connector=aiohttp.TCPConnector(ssl=ctx, limit=256))
        self.bucket = TokenBucket(qps, burst, time.monotonic())
        self.calls = 0
        self.retries = 0

    async def close(self) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                   content_type: str = "application/json", missing_ok: bool = False,
                   exists_ok: bool = False) -> dict[str, Any]:
        delay = self.bucket.reserve(time.monotonic())
        if delay > 0:
            await asyncio.sleep(delay)
        data = json.dumps(body) if body is not None else None
        for attempt in range(12):
            self.calls += 1
            try:
                async with self.session.request(method, path, data=data, headers={"Content-Type": content_type},
                                                timeout=aiohttp.ClientTimeout(total=60)) as resp:
                    text = await resp.text()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError) as e:
                text, status = f"{type(e).__name__}: {e}", 0
            if status in (0, 429, 500, 502, 503, 504):
                self.retries += 1
                await asyncio.sleep(min(0.1 * 2 ** attempt, 5.0))
                continue
            if (status == 404 and missing_ok) or (status == 409 and exists_ok):
                return {}
            if status >= 400:
                raise BenchError(f"{method} {path}: HTTP {status}: {text[:300]}")
            out: dict[str, Any] = json.loads(text) if text else {}
            return out
        raise BenchError(f"{method} {path}: still failing after 12 attempts: {text[:300]}")


# --- the pods' part (Kueue's runner controller) ---------------------------------------------------


@dataclass
class Runner:
    """Kueue's runner: creates the objects on time and plays them. A Workload (Kueue's generator's
    objects) seen ``Admitted`` is marked ``Finished`` ``runtime`` later; one seen ``Evicted`` while
    it still holds its reservation gets the reservation cleared (one status write each, as Kueue's
    runner). A Job seen unsuspended is completed ``runtime`` later (the job controller's write)."""

    api: Api
    plan: Plan
    objects: str = "workloads"
    by_key: dict[str, Arrival] = field(init=False)
    created: dict[str, float] = field(default_factory=dict)  # key -> wall time the create was sent
    late_ms: list[float] = field(default_factory=list)  # how late each create went out
    admitted: dict[str, float] = field(default_factory=dict)  # key -> first seen admitted
    running: dict[str, float] = field(default_factory=dict)  # key -> the admission it runs under
    finished: dict[str, float] = field(default_factory=dict)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> the Workload as last seen
    clearing: set[str] = field(default_factory=set)  # Workloads whose reservation is being cleared
    evictions: int = 0
    cleared: int = 0  # reservations the bench cleared (Workloads)
    conflicts: int = 0  # status writes refused with 409 (read again, written again)
    used: float = 0.0  # milli-cpu x seconds reserved, as seen through the API
    progress: float = field(default_factory=time.time)  # the last admission or finish
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_key = {a.key: a for a in self.plan.arrivals}

    @property
    def collection(self) -> str:
        """The cluster-wide path of the objects the bench creates and watches."""
        return f"/apis/{KUEUE_GROUP}/{V}/workloads" if self.objects == "workloads" else "/apis/batch/v1/jobs"

    def _path(self, a: Arrival, status: bool = False) -> str:
        base = (f"/apis/{KUEUE_GROUP}/{V}/namespaces/{a.namespace}/workloads" if self.objects == "workloads"
                else f"/apis/batch/v1/namespaces/{a.namespace}/jobs")
        return base if not status else f"{base}/{a.name}/status"

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def on_object(self, obj: dict[str, Any]) -> None:
        if self.objects == "workloads":
            self.on_workload(obj)
        else:
            self.on_job(obj)

    def _seen_admitted(self, a: Arrival, now: float) -> None:
        self.running[a.key] = now
        self.admitted.setdefault(a.key, now)
        self.progress = now
        self._spawn(self._finish_later(a, now))

    def _seen_evicted(self, a: Arrival, now: float) -> None:
        self.used += (now - self.running.pop(a.key)) * a.cpu_milli
        self.evictions += 1

    def on_job(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        a = self.by_key.get(key)
        if a is None or key in self.finished:
            return
        now = time.time()
        suspended = (obj.get("spec") or {}).get("suspend") is True
        if not suspended and key not in self.running:
            self._seen_admitted(a, now)
        elif suspended and key in self.running:
            self._seen_evicted(a, now)

    def on_workload(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        a = self.by_key.get(key)
        if a is None or key in self.finished:
            return
        self.latest[key] = obj
        conds = _condition_status(obj)
        if conds.get("Finished") == "True":
            return
        now = time.time()
        if conds.get("Evicted") == "True" and conds.get("QuotaReserved") == "True":
            if key in self.running:
                self._seen_evicted(a, now)
            if key not in self.clearing:
                self.clearing.add(key)
                self._spawn(self._clear_reservation(a))
        elif conds.get("Admitted") == "True" and conds.get("Evicted") != "True" and key not in self.running:
            self._seen_admitted(a, now)

    async def _status_write(self, a: Arrival, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> bool:
        """One merge patch of the Workload's status from its last copy (``change`` gives the status to
        write, None when there is nothing to do any more); on a conflict it is read and tried again."""
        obj = self.latest[a.key]
        for _ in range(10):
            status = change(obj)
            if status is None:
                return False
            body = {"metadata": {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")},
                    "status": status}
            # exists_ok: a 409 (the copy is stale) comes back as {}
            out = await self.api.call("PATCH", self._path(a, status=True), body, content_type=MERGE, exists_ok=True)
            if out:
                self.latest[a.key] = out
                return True
            self.conflicts += 1
            obj = self.latest[a.key] = await self.api.call("GET", f"{self._path(a)}/{a.name}")
        raise BenchError(f"Workload {a.key}: still conflicting after 10 reads")

    async def _clear_reservation(self, a: Arrival) -> None:
        """Kueue's runner completes an eviction: QuotaReserved=False (Pending), no admission."""
        def change(obj: dict[str, Any]) -> dict[str, Any] | None:
            conds = _condition_status(obj)
            if conds.get("Evicted") != "True" or conds.get("QuotaReserved") != "True":
                return None
            stamp = _rfc3339(time.time())
            kept = [c for c in (obj.get("status") or {}).get("conditions") or []
                    if c.get("type") not in ("QuotaReserved", "Admitted")]
            return {"admission": None, "conditions": [*kept, {
                "type": "QuotaReserved", "status": "False", "reason": "Pending",
                "message": "Evicted by the test runner", "lastTransitionTime": stamp}, {
                "type": "Admitted", "status": "False", "reason": "NoReservation",
                "message": "The workload has no reservation", "lastTransitionTime": stamp}]}

        try:
            if await self._status_write(a, change):
                self.cleared += 1
        except BenchError as e:
            self.errors.append(str(e))
        finally:
            self.clearing.discard(a.key)

    async def _finish_later(self, a: Arrival, started: float) -> None:
        await asyncio.sleep(a.runtime_ms / 1000)
        if self.running.get(a.key) != started:
            return  # evicted meanwhile: its next admission runs it again
        try:
            if self.objects == "workloads":
                def change(obj: dict[str, Any]) -> dict[str, Any] | None:
                    conds = _condition_status(obj)
                    if conds.get("Admitted") != "True" or conds.get("Evicted") == "True":
                        return None  # evicted since: not finished
                    done = {"type": "Finished", "status": "True", "reason": "ByTest", "message": "By test runner",
                            "lastTransitionTime": _rfc3339(time.time())}
                    return {"conditions": [*((obj.get("status") or {}).get("conditions") or []), done]}

                if not await self._status_write(a, change):
                    return
            else:
                await self.api.call("PATCH", self._path(a, status=True), complete_status(started, time.time()),
                                    content_type=MERGE)
        except BenchError as e:
            self.errors.append(str(e))
            return
        now = time.time()
        if self.running.pop(a.key, None) is not None:
            self.used += (now - started) * a.cpu_milli
        self.finished[a.key] = now
        self.progress = now

    async def generate(self, start: float) -> None:
        """Each (ClusterQueue, class) set in order, each object at its time after ``start`` (wall clock)."""
        streams: dict[tuple[str, str], list[Arrival]] = defaultdict(list)
        for a in self.plan.arrivals:
            streams[(a.namespace, a.klass)].append(a)
        body = workload_body if self.objects == "workloads" else job_body

        async def stream(items: list[Arrival]) -> None:
            for a in items:
                delay = start + a.at_ms / 1000 - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                self.created[a.key] = now = time.time()
                self.late_ms.append(max(0.0, (now - start) * 1000 - a.at_ms))
                await self.api.call("POST", self._path(a), body(self.plan, a))

        async with asyncio.TaskGroup() as group:
            for items in streams.values():
                group.create_task(stream(items))

    async def watch(self) -> None:
        """LIST then WATCH the run's objects (all namespaces), relisting after a 410 or a cut stream."""
        selector = f"{BENCH_LABEL}={self.plan.rid}"
        rv = ""
        while True:
            if not rv:
                listed = await self.api.call("GET", f"{self.collection}?labelSelector={selector}")
                for item in listed.get("items") or []:
                    self.on_object(item)
                rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
            rv = await self._watch_from(selector, rv)

    async def _watch_from(self, selector: str, rv: str) -> str:
        """One watch stream; the resourceVersion to go on from ("" to relist)."""
        params = {"watch": "1", "labelSelector": selector, "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "600"}
        try:
            async with self.api.session.get(self.collection, params=params,
                                            timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as resp:
                if resp.status == 410:
                    return ""
                if resp.status != 200:
                    await asyncio.sleep(0.5)
                    return rv
                async for line in resp.content:
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        return "" if obj.get("code") == 410 else rv
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.on_object(obj)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            await asyncio.sleep(0.5)
        return rv


def _condition_status(obj: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict)}


# --- the run ----------------------------------------------------------------------------------------


@dataclass
class KubeResult:
    sizes: KubeSizes
    workloads: int
    queues: int
    objects: str = "workloads"  # what the bench created: Workloads (Kueue's generator) or Jobs
    rid: str = ""  # the run id every object's name carries
    cleanup_error: str = ""  # deleting the run's objects failed (the first error)
    settle_s: float = 0.0  # after the last finish, until the log showed every finish (not in the wall)
    scheduler_lag: int = 0  # cluster events the scheduler had not folded then
    wall: float = 0.0
    usage: float = 0.0
    wait_by_class: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU seconds during the run
    admitted: int = 0  # objects the bench saw admitted
    finished: int = 0  # objects the bench finished
    evictions_seen: int = 0
    reservations_cleared: int = 0  # evictions the bench completed (Workloads)
    conflicts: int = 0  # the bench's status writes refused with 409
    log_admitted: int = 0  # workloads with an AdmitWorkload in the decisions topic
    log_admissions: int = 0
    log_evictions: int = 0
    log_evicted: int = 0  # workloads evicted at least once
    eviction_reasons: Counter[str] = field(default_factory=Counter)
    actuator_metrics: dict[str, float] = field(default_factory=dict)
    log_finished: int = 0  # workloads with a successful WorkloadFinished in cluster-events
    late_p99_ms: float = 0.0
    api_calls: int = 0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    versions: str = ""
    setup_s: float = 0.0

    def lines(self) -> list[str]:
        full = self.sizes.name == "full"
        k = KUEUE

        def kueue(text: str) -> str:
            return f"  [Kueue: {text}]" if full else ""

        w = self.wait_by_class
        c = self.cpu
        ours = sum(c.get(n, 0.0) for n in SERVICES)
        return [
            f"Kueue's baseline through a real kube-apiserver ({self.sizes.name}): {self.workloads:,} {self.noun}, "
            f"{self.queues} ClusterQueues in {self.sizes.cohorts} cohort(s); {self.versions}; {os.cpu_count()} CPUs, "
            f"load average {'/'.join(f'{x:.1f}' for x in self.load_before)} before, "
            f"{'/'.join(f'{x:.1f}' for x in self.load_after)} after" + ("" if full else
                                                                        "; Kueue's figures are for the full size"),
            f"  wall, first {self.noun[:-1]} created -> last finished: {self.wall:.1f} s" + kueue(f"{k['wall']:.0f} s")
            + f" (setup before it {self.setup_s:.0f} s)",
            f"  usage of nominal quota: {self.usage:.1f}%" + kueue(f"{k['usage']}%"),
            f"  average time to admission large / medium / small: {w.get('large', float('nan')):.1f} / "
            f"{w.get('medium', float('nan')):.1f} / {w.get('small', float('nan')):.1f} s"
            + kueue(f"{k['large']} / {k['medium']} / {k['small']} s"),
            f"  CPU s: watcher {c.get('watcher', 0):.1f}, scheduler {c.get('scheduler', 0):.1f}, actuator + job "
            f"reconciler {c.get('actuator', 0):.1f} (kueuelog {ours:.1f}); kube-apiserver {c.get('apiserver', 0):.1f}, "
            f"etcd {c.get('etcd', 0):.1f}; Kafka broker {c.get('broker', 0):.1f}; the bench (generator + pods) "
            f"{c.get('bench', 0):.1f}"
            + kueue(f"kube-apiserver {k['apiserver_cpu']:.0f} s, Kueue {k['kueue_cpu']:.0f} s"),
            f"  {self.noun} admitted {self.admitted:,}, finished {self.finished:,}, "
            f"evictions seen {self.evictions_seen:,}{self._cleared()}; "
            f"log: {self.log_admitted:,} workloads admitted ({self.log_admissions:,} admissions, "
            f"{self.log_evictions:,} evictions of {self.log_evicted:,} workloads), {self.log_finished:,} finished "
            f"{self.settle_s:.0f} s after the last finish (the scheduler then {self.scheduler_lag:,} events behind); "
            f"bench API calls {self.api_calls:,}, creates late p99 {self.late_p99_ms:.0f} ms",
            f"  evictions by reason: {', '.join(f'{k} {n}' for k, n in sorted(self.eviction_reasons.items()))}",
            *self._actuator_lines(),
            self._per_workload(),
            *([f"  cleanup failed: {self.cleanup_error}"] if self.cleanup_error else []),
        ]

    @property
    def noun(self) -> str:
        return "Workloads" if self.objects == "workloads" else "Jobs"

    def _cleared(self) -> str:
        if self.objects != "workloads":
            return ""
        return f", reservations cleared {self.reservations_cleared:,} (status conflicts {self.conflicts:,})"

    def _per_workload(self) -> str:
        """API calls per workload by process (each workload once, however often it was evicted)."""
        n = max(self.workloads, 1)
        calls = sum(v for k, v in self.actuator_metrics.items() if k.startswith("kueuelog_actuator_api_calls_total{"))
        reconciler = " (the job reconciler's calls are not in these counters)" if self.objects == "jobs" else ""
        return (f"  API calls per workload: actuator {calls / n:.1f}{reconciler}, the bench {self.api_calls / n:.1f} "
                "(its watch streams not counted)")

    def _actuator_lines(self) -> list[str]:
        m = self.actuator_metrics
        calls = {k.split('call="', 1)[1].split('"', 1)[0]: v for k, v in m.items()
                 if k.startswith("kueuelog_actuator_api_calls_total{")}
        if not calls:
            return ["  actuator: no /metrics read"]
        top = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]))
        throttled = m.get("kueuelog_actuator_api_throttled_seconds_total", 0.0)
        api_s = m.get("kueuelog_actuator_api_seconds_total", 0.0)
        return [f"  actuator API calls {sum(calls.values()):,.0f} ({top}); {api_s:.0f} s in calls, "
                f"{throttled:.0f} s waiting for its rate limit",
                "  actuator counters: " + ", ".join(
                    f"{k.removeprefix('kueuelog_actuator_').removesuffix('_total')} {v:,.0f}"
                    for k, v in sorted(m.items()) if "{" not in k and "api_" not in k and v)]


@dataclass
class _Procs:
    procs: dict[str, subprocess.Popen[bytes]]
    logs: dict[str, Path]
    ports: dict[str, int]

    def metrics(self, name: str) -> dict[str, float]:
        """The service's counters from its /metrics (name with labels -> value)."""
        url = f"http://127.0.0.1:{self.ports[name]}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("kueuelog_") and " " in line:
                metric, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[metric] = float(value)
        return out

    def check(self) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise BenchError(f"{', '.join(dead)} exited (exit {self.procs[dead[0]].poll()}); see {self.logs[dead[0]]}")

    def leading(self, name: str) -> bool:
        path = self.logs[name]
        return path.exists() and b"leading" in path.read_bytes()


def _start_services(plane: LocalControlPlane, bootstrap: str, prefix: str, run_dir: Path,
                    manager_qps: float, manager_burst: int) -> _Procs:
    kubeconfig = ("--kubeconfig", str(plane.kubeconfig_path), "--cluster", "bench")
    extra = {"watcher": kubeconfig, "scheduler": (),
             "actuator": ("--kube", *kubeconfig, "--qps", str(manager_qps), "--burst", str(manager_burst))}
    logs = {n: run_dir / f"{n}-{prefix}.log" for n in SERVICES}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports = {n: free_port() for n in SERVICES}
    for name in SERVICES:
        http = ("--http-port", str(ports[name]), "--http-host", "127.0.0.1")
        procs[name] = start_service_process(name, bootstrap, prefix, logs[name], None, *extra[name], *http)
    return _Procs(procs, logs, ports)


async def _eventually(check: Callable[[], Awaitable[bool]], procs: _Procs, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        procs.check()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.25)


def _lag(bootstrap: str, topics: Topics) -> int:
    """Cluster events the scheduler has not folded yet (-1 before any was published)."""
    with KafkaLog(KafkaSettings(bootstrap_servers=bootstrap), prefix=topics.prefix) as log:
        end = log.end_offset(topics.cluster_events)
        return end - log.position(SCHEDULER_GROUP, topics.cluster_events) if end > 0 else -1


def _caught_up(bootstrap: str, topics: Topics) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await asyncio.to_thread(_lag, bootstrap, topics) == 0

    return check


async def _configured(bootstrap: str, topics: Topics, p: Plan) -> bool:
    """Every ClusterQueue and LocalQueue of the run published by the watcher."""
    want = {cq for _, cq, _ in p.queues()} | {f"{ns}/lq" for _, _, ns in p.queues()}
    seen: set[str] = set()
    for _, value in await read_all(bootstrap, topics.cluster_events):
        ev = decode_envelope(value).event
        if isinstance(ev, ObjectApplied) and isinstance(ev.object, o.ClusterQueue):
            seen.add(ev.object.name)
        elif isinstance(ev, ObjectApplied) and isinstance(ev.object, o.LocalQueue):
            seen.add(f"{ev.object.namespace}/{ev.object.name}")
    return want <= seen


def _cpu(procs: _Procs, plane: LocalControlPlane, broker_pid: int | None) -> dict[str, float]:
    out = {n: proc_cpu_seconds(p.pid) for n, p in procs.procs.items()}
    out.update(apiserver=proc_cpu_seconds(plane.apiserver_pid), etcd=proc_cpu_seconds(plane.etcd_pid),
               broker=proc_cpu_seconds(broker_pid), bench=time.process_time())
    return out


async def _until_done(runner: Runner, procs: _Procs, generating: asyncio.Task[None]) -> None:
    n = len(runner.plan.arrivals)
    while len(runner.finished) < n:
        procs.check()
        if runner.errors:
            raise BenchError(f"{len(runner.errors)} Job(s) could not be finished, first: {runner.errors[0]}")
        if generating.done() and generating.exception() is not None:
            raise BenchError(f"creating the objects failed: {generating.exception()}")
        if time.time() - runner.progress > STALL_S:
            raise BenchError(f"no workload admitted or finished for {STALL_S:.0f} s: {len(runner.created):,} created, "
                             f"{len(runner.admitted):,} admitted, {len(runner.finished):,} of {n:,} finished")
        await asyncio.sleep(0.2)


async def _settle(bootstrap: str, topics: Topics, p: Plan, result: KubeResult, timeout: float = 180) -> None:
    """Read the log until the watcher has published every finish (or ``timeout``): not timed."""
    t = time.monotonic()
    while True:
        await _read_log(bootstrap, topics, p, result)
        if result.log_finished >= result.workloads or time.monotonic() - t > timeout:
            break
        await asyncio.sleep(2)
    result.settle_s = time.monotonic() - t
    result.scheduler_lag = await asyncio.to_thread(_lag, bootstrap, topics)


async def _read_log(bootstrap: str, topics: Topics, p: Plan, result: KubeResult) -> None:
    result.log_admissions = result.log_evictions = 0
    result.eviction_reasons.clear()
    ours = f"{p.rid}-"
    admitted: set[str] = set()
    evicted: set[str] = set()
    for _, value in await read_all(bootstrap, topics.decisions):
        d = decode_decision(value)
        if isinstance(d, AdmitWorkload) and d.namespace.startswith(ours):
            admitted.add(f"{d.namespace}/{d.name}")
            result.log_admissions += 1
        elif isinstance(d, EvictWorkload) and d.namespace.startswith(ours):
            result.log_evictions += 1
            result.eviction_reasons[f"{d.reason}/{d.preemption_reason or '-'}"] += 1
            evicted.add(f"{d.namespace}/{d.name}")
    finished: set[str] = set()
    for _, value in await read_all(bootstrap, topics.cluster_events):
        ev = decode_envelope(value).event
        if isinstance(ev, WorkloadFinished) and ev.succeeded and ev.namespace.startswith(ours):
            finished.add(f"{ev.namespace}/{ev.name}")
    result.log_admitted, result.log_finished, result.log_evicted = len(admitted), len(finished), len(evicted)


def _figures(runner: Runner, result: KubeResult, start: float) -> None:
    result.reservations_cleared, result.conflicts = runner.cleared, runner.conflicts
    result.admitted, result.finished, result.evictions_seen = len(runner.admitted), len(runner.finished), \
        runner.evictions
    last = max(runner.finished.values(), default=start)
    first = min(runner.created.values(), default=start)
    result.wall = last - first
    nominal_milli = result.queues * 20_000
    result.usage = runner.used / (nominal_milli * result.wall) * 100 if result.wall > 0 else 0.0
    waits: dict[str, list[float]] = defaultdict(list)
    for key, at in runner.admitted.items():
        waits[runner.by_key[key].klass].append(at - runner.created[key])
    result.wait_by_class = {k: sum(v) / len(v) for k, v in waits.items()}
    late = sorted(runner.late_ms)
    result.late_p99_ms = late[int(len(late) * 0.99) - 1] if late else 0.0
    result.api_calls = runner.api.calls


async def run(plane: LocalControlPlane, bootstrap: str, sizes: KubeSizes, run_dir: Path, *,
              broker_pid: int | None = None, runner_qps: float = RUNNER_QPS, runner_burst: int = RUNNER_BURST,
              manager_qps: float = MANAGER_QPS, manager_burst: int = MANAGER_BURST,
              objects: str = "workloads") -> KubeResult:
    """One run on a started control plane and broker (shared ones too: every name carries a run id,
    and everything created is deleted at the end)."""
    p = plan(sizes)
    topics = Topics(prefix=p.rid)
    await asyncio.to_thread(make_topics, bootstrap, topics)
    result = KubeResult(sizes=sizes, workloads=len(p.arrivals), queues=sizes.cohorts * sizes.queues,
                        load_before=os.getloadavg(), rid=p.rid, objects=objects)
    t_setup = time.time()
    await _apply_crds(plane)
    api = Api(plane, runner_qps, runner_burst)
    procs = _start_services(plane, bootstrap, topics.prefix, run_dir, manager_qps, manager_burst)
    try:
        for path, body in config_objects(p):
            await api.call("POST", path, body, exists_ok=True)
        await _eventually(lambda: _leading(procs), procs, "the scheduler and the actuator to lead")
        await _eventually(lambda: _configured(bootstrap, topics, p), procs, "the watcher to publish the queues")
        await _eventually(_caught_up(bootstrap, topics), procs, "the scheduler to fold the configuration")
        runner = Runner(api, p, objects)
        watching = asyncio.create_task(runner.watch())
        cpu0 = _cpu(procs, plane, broker_pid)
        start = time.time() + 0.5
        result.setup_s = start - t_setup
        generating = asyncio.create_task(runner.generate(start))
        try:
            await _until_done(runner, procs, generating)
        finally:
            watching.cancel()
            generating.cancel()
            with contextlib.suppress(asyncio.CancelledError, BenchError):
                await watching
                await generating
        cpu1 = _cpu(procs, plane, broker_pid)
        result.cpu = {n: cpu1[n] - cpu0[n] for n in cpu1}
        result.load_after = os.getloadavg()
        _figures(runner, result, start)
        result.actuator_metrics = await asyncio.to_thread(procs.metrics, "actuator")
        await _settle(bootstrap, topics, p, result)
    finally:
        for proc in procs.procs.values():
            stop_process(proc)
        try:
            await cleanup(api, p)
        except BenchError as e:
            result.cleanup_error = str(e)
        await api.close()
    return result


async def _leading(procs: _Procs) -> bool:
    return procs.leading("scheduler") and procs.leading("actuator")


async def _apply_crds(plane: LocalControlPlane) -> None:
    from kubernetes_asyncio import client, config

    from tests.integration.kube_deploy import apply_crds

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(plane.kubeconfig_path), client_configuration=cfg)
    async with client.ApiClient(configuration=cfg) as admin:
        await apply_crds(admin)


async def cleanup(api: Api, p: Plan) -> None:
    """Delete everything the run created (no garbage collector or namespace controller here)."""
    kueue = f"/apis/{KUEUE_GROUP}/{V}"
    for _, cq, ns in p.queues():
        for path in (f"/apis/batch/v1/namespaces/{ns}/jobs", f"{kueue}/namespaces/{ns}/workloads",
                     f"{kueue}/namespaces/{ns}/localqueues"):
            # Background: a Job's default (orphan) waits for the garbage collector, which is not running.
            await api.call("DELETE", f"{path}?propagationPolicy=Background", missing_ok=True)
        await api.call("DELETE", f"{kueue}/clusterqueues/{cq}", missing_ok=True)
        await api.call("DELETE", f"/api/v1/namespaces/{ns}", missing_ok=True)
    for klass, *_ in CLASSES:
        await api.call("DELETE", f"{kueue}/workloadpriorityclasses/{p.priority_class(klass)}", missing_ok=True)
    await api.call("DELETE", f"{kueue}/resourceflavors/{p.flavor}", missing_ok=True)


# --- entry points -----------------------------------------------------------------------------------


@contextlib.contextmanager
def control_plane() -> Iterator[LocalControlPlane]:
    plane = LocalControlPlane(apiserver_args=APISERVER_ARGS)
    plane.ensure_built()
    with tempfile.TemporaryDirectory(prefix="kueuelog-bench-kube-") as tmp:
        plane.start(Path(tmp))
        try:
            yield plane
        finally:
            plane.stop()


def main(sizes: KubeSizes = FULL, *, runner_qps: float = RUNNER_QPS, runner_burst: int = RUNNER_BURST,
         manager_qps: float = MANAGER_QPS, manager_burst: int = MANAGER_BURST,
         objects: str = "workloads") -> Iterator[str]:
    """Start a broker and a control plane of their own, run once, yield the report lines."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with (local_broker() as broker, control_plane() as plane,
          tempfile.TemporaryDirectory(prefix="kueuelog-bench-kube-logs-") as tmp):
        versions = f"kube-apiserver {plane.kubernetes_version} + etcd {plane.etcd_version}, Kafka {broker.version}"
        result = asyncio.run(run(plane, broker.bootstrap_servers, sizes, Path(tmp), broker_pid=broker.pid,
                                 runner_qps=runner_qps, runner_burst=runner_burst, manager_qps=manager_qps,
                                 manager_burst=manager_burst, objects=objects))
        result.versions = versions
        yield from result.lines()


def cli(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench kube", description=__doc__.split("\n\n")[0] if __doc__ else "")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help=f"{len(plan(QUICK).arrivals)} workloads (a couple of minutes)")
    size.add_argument("--tiny", action="store_true",
                      help=f"{len(plan(TINY).arrivals)} workloads (the integration test's)")
    size.add_argument("--seconds", type=float, metavar="S",
                      help="the full topology (30 ClusterQueues) with only the arrivals of the first S seconds")
    ap.add_argument("--runner-qps", type=float, default=RUNNER_QPS,
                    help="the bench's client (default: Kueue's runner's)")
    ap.add_argument("--runner-burst", type=int, default=RUNNER_BURST)
    ap.add_argument("--manager-qps", type=float, default=MANAGER_QPS,
                    help="the actuator's --qps (default: Kueue's manager's, minimalkueue)")
    ap.add_argument("--manager-burst", type=int, default=MANAGER_BURST)
    ap.add_argument("--objects", choices=OBJECTS, default="workloads",
                    help="what the bench creates: Workloads, as Kueue's generator (default), or suspended Jobs "
                         "(through the job reconciler)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else TINY if args.tiny else FULL
    if args.seconds is not None:
        sizes = KubeSizes(f"full topology, first {args.seconds:g} s of arrivals", FULL.cohorts, FULL.queues,
                          int(args.seconds * 1000))
    t = time.perf_counter()
    try:
        for line in main(sizes, runner_qps=args.runner_qps, runner_burst=args.runner_burst,
                         manager_qps=args.manager_qps, manager_burst=args.manager_burst, objects=args.objects):
            print(line, flush=True)
    except BenchError as e:
        print(f"bench kube: {e}", file=sys.stderr)
        return 1
    print(f"bench kube done in {time.perf_counter() - t:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(cli())

