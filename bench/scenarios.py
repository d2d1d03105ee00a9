"""Kueue's scheduler-performance "baseline" shape, as objects for the engine benchmarks.

5 cohorts x 6 ClusterQueues (cpu nominal 20, borrowingLimit 100); per
ClusterQueue 350 small (1 cpu, 200 ms), 100 medium (5 cpu, 500 ms) and 50 large
(20 cpu, 1000 ms) workloads, priorities 50 / 100 / 200 — 15,000 in all.
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
