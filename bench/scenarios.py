"""Kueue's scheduler-performance shapes, as objects for the benchmarks.

- ``baseline``: 5 cohorts x 6 ClusterQueues (cpu nominal 20, borrowingLimit 100); per
  ClusterQueue 350 small (1 cpu, 200 ms), 100 medium (5 cpu, 500 ms) and 50 large
  (20 cpu, 1000 ms) workloads, priorities 50 / 100 / 200 — 15,000 in all.
- ``large_scale``: Kueue's ``configs/large-scale/generator.yaml``: 10 cohorts x 100
  ClusterQueues; per ClusterQueue 35 small (1 cpu, 150 ms, every 60 ms), 11 medium (5 cpu,
  350 ms, every 300 ms) and 4 large (20 cpu, 700 ms, every 700 ms) — 50,000 in all;
  reclaimWithinCohort Any, withinClusterQueue LowerPriority. As Kueue's generator, each
  class's n-th workload (from 0) is created (n + 1) intervals after the start.
- ``deep_queue``: one ClusterQueue with a deep backlog (Kueue issue #14477: depth 536).
"""

from __future__ import annotations

from dataclasses import dataclass

from events import objects as o

CLASSES = (  # name, count per CQ, cpu (milli), runtime ms, priority
    ("small", 350, 1000, 200, 50),
    ("medium", 100, 5000, 500, 100),
    ("large", 50, 20000, 1000, 200),
)


@dataclass(frozen=True)
class Scenario:
    objects: list[o.AnyObject]
    runtime_ms: dict[str, int]  # workload key -> how long it runs once admitted
    klass: dict[str, str]  # workload key -> small / medium / large
    arrival_ms: dict[str, int]  # workload key -> when it is submitted


INTERVAL_MS = {"small": 100, "medium": 500, "large": 1200}  # the generator's arrival intervals

# Kueue's large-scale generator: name, count per CQ, cpu (milli), runtime ms, priority, interval ms.
LARGE_SCALE_CLASSES = (
    ("small", 35, 1000, 150, 50, 60),
    ("medium", 11, 5000, 350, 100, 300),
    ("large", 4, 20000, 700, 200, 700),
)


def baseline(*, cohorts: int = 5, queues_per_cohort: int = 6, preemption: bool = False,
             timed: bool = False) -> Scenario:
    """All workloads at t=0, or (``timed``) arriving at the generator's intervals per class."""
    objs: list[o.AnyObject] = [o.ResourceFlavor(name="default")]
    runtime: dict[str, int] = {}
    klass: dict[str, str] = {}
    arrival: dict[str, int] = {}
    policy = o.PreemptionPolicy(
        within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY,
        reclaim_within_cohort=o.ReclaimWithinCohort.ANY,
    ) if preemption else o.PreemptionPolicy()
    workloads: list[o.Workload] = []
    for c in range(cohorts):
        for q in range(queues_per_cohort):
            cq = f"cq-{c}-{q}"
            ns = f"ns-{c}-{q}"
            objs.append(o.ClusterQueue(
                name=cq, cohort=f"cohort-{c}", namespace_selector=o.LabelSelector(), preemption=policy,
                resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                    o.FlavorQuotas(name="default", resources=(
                        ("cpu", o.Quota(nominal=20_000, borrowing_limit=100_000)),)),)),),
            ))
            objs.append(o.LocalQueue(namespace=ns, name="lq", cluster_queue=cq))
            n = 0
            for name, count, cpu, run_ms, prio in CLASSES:
                for i in range(count):
                    at = i * INTERVAL_MS[name] if timed else 0
                    wl = o.Workload(
                        namespace=ns, name=f"{name}-{i}", uid=f"{ns}-{name}-{i}", queue_name="lq",
                        pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", cpu),)),),
                        creation_time=at if timed else n, priority=prio,
                    )
                    n += 1
                    workloads.append(wl)
                    key = f"{ns}/{wl.name}"
                    runtime[key], klass[key], arrival[key] = run_ms, name, at
    workloads.sort(key=lambda w: (arrival[f"{w.namespace}/{w.name}"], w.namespace, w.name))
    return Scenario(objects=objs + workloads, runtime_ms=runtime, klass=klass, arrival_ms=arrival)


def _queue(cq: str, cohort: str, policy: o.PreemptionPolicy, nominal: int = 20_000,
           borrowing_limit: int | None = 100_000) -> o.ClusterQueue:
    return o.ClusterQueue(
        name=cq, cohort=cohort, namespace_selector=o.LabelSelector(), preemption=policy,
        resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
            o.FlavorQuotas(name="default", resources=(
                ("cpu", o.Quota(nominal=nominal, borrowing_limit=borrowing_limit)),)),)),),
    )


def large_scale(*, cohorts: int = 10, queues_per_cohort: int = 100, timed: bool = True) -> Scenario:
    """Kueue's large-scale scenario (see the module's docstring); ``timed`` False: all at t=0."""
    objs: list[o.AnyObject] = [o.ResourceFlavor(name="default")]
    runtime: dict[str, int] = {}
    klass: dict[str, str] = {}
    arrival: dict[str, int] = {}
    policy = o.PreemptionPolicy(within_cluster_queue=o.WithinClusterQueue.LOWER_PRIORITY,
                                reclaim_within_cohort=o.ReclaimWithinCohort.ANY)
    workloads: list[o.Workload] = []
    for c in range(cohorts):
        for q in range(queues_per_cohort):
            cq, ns = f"cq-{c}-{q}", f"ns-{c}-{q}"
            objs.append(_queue(cq, f"cohort-{c}", policy))
            objs.append(o.LocalQueue(namespace=ns, name="lq", cluster_queue=cq))
            for name, count, cpu, run_ms, prio, interval in LARGE_SCALE_CLASSES:
                for i in range(count):
                    at = (i + 1) * interval if timed else 0
                    wl = o.Workload(
                        namespace=ns, name=f"{name}-{i}", uid=f"{ns}-{name}-{i}", queue_name="lq",
                        pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", cpu),)),),
                        creation_time=at, priority=prio,
                    )
                    workloads.append(wl)
                    key = f"{ns}/{wl.name}"
                    runtime[key], klass[key], arrival[key] = run_ms, name, at
    workloads.sort(key=lambda w: (arrival[f"{w.namespace}/{w.name}"], w.namespace, w.name))
    return Scenario(objects=objs + workloads, runtime_ms=runtime, klass=klass, arrival_ms=arrival)


def deep_queue(*, depth: int = 536, nominal_cpu: int = 64, cpu: int = 1, runtime_ms: int = 60_000,
               interval_ms: int = 0) -> Scenario:
    """One ClusterQueue (no cohort) with ``depth`` workloads of ``cpu`` cpu each queued at once
    (``interval_ms`` 0) or one every ``interval_ms``: the shape of Kueue issue #14477."""
    objs: list[o.AnyObject] = [o.ResourceFlavor(name="default"),
                               _queue("deep", "", o.PreemptionPolicy(), nominal_cpu * 1000, None),
                               o.LocalQueue(namespace="ns-deep", name="lq", cluster_queue="deep")]
    runtime: dict[str, int] = {}
    klass: dict[str, str] = {}
    arrival: dict[str, int] = {}
    for i in range(depth):
        at = i * interval_ms
        wl = o.Workload(namespace="ns-deep", name=f"job-{i}", uid=f"deep-{i}", queue_name="lq",
                        pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", cpu * 1000),)),),
                        creation_time=at if interval_ms else i, priority=0)
        objs.append(wl)
        key = f"ns-deep/{wl.name}"
        runtime[key], klass[key], arrival[key] = runtime_ms, "deep", at
    return Scenario(objects=objs, runtime_ms=runtime, klass=klass, arrival_ms=arrival)
