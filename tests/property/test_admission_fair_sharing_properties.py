"""Properties of admission fair sharing (services/core/admissionfair.py) over random histories.

- With equal demand and no time passing, every admission charges its LocalQueue the same entry
  penalty, so while both LocalQueues have work waiting their admission counts never differ by
  more than one (by more than the weights allow, with unequal weights).
- Whatever happens (submissions, cycles, finishes, time passing past sampling points): applying
  each recorded cycle reproduces the live state byte for byte, ledger included, and a snapshot
  restores it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import objects as o
from events.messages import ClockTicked, CycleCompleted, ObjectApplied, WorkloadFinished
from services.core.apply import apply_cycle
from services.core.cycle import run_cycle
from services.core.snapshot import decode_state, encode_state
from services.core.state import State, finish_eviction, fold

LQS = ("lq-a", "lq-b")


def _world(capacity: int, weights: tuple[int, int], half_life_ms: int) -> list[o.AnyObject]:
    return [
        o.Configuration(admission_fair_sharing=True, afs_usage_half_life_ms=half_life_ms,
                        afs_usage_sampling_interval_ms=60_000),
        o.ResourceFlavor(name="f"),
        o.ClusterQueue(name="cq", namespace_selector=o.LabelSelector(), admission_fair_sharing=True,
                       resource_groups=(o.ResourceGroup(covered_resources=("cpu",), flavors=(
                           o.FlavorQuotas(name="f", resources=(("cpu", o.Quota(nominal=capacity * 1000)),)),)),)),
        *(o.LocalQueue(namespace="ns", name=lq, cluster_queue="cq", fair_sharing_weight=w)
          for lq, w in zip(LQS, weights, strict=True)),
    ]


def _workload(name: str, lq: str, at: int) -> o.Workload:
    return o.Workload(namespace="ns", name=name, uid=f"uid-{name}", queue_name=lq, creation_time=at,
                      pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", 1000),)),))


def _state(objects: list[o.AnyObject]) -> State:
    s = State()
    for obj in objects:
        fold(s, ObjectApplied(time=0, object=obj))
    return s


def _pending(s: State, lq: str) -> int:
    return sum(1 for r in s.workloads.values() if r.obj.queue_name == lq and r.pending)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    counts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
    capacity=st.integers(1, 4),
    weights=st.sampled_from([(1000, 1000), (2000, 1000)]),
    order=st.randoms(use_true_random=False),
    steps=st.lists(st.sampled_from(["cycle", "cycle", "finish"]), min_size=5, max_size=40),
)
def test_equal_demand_takes_turns_by_weight(counts, capacity, weights, order, steps):
    s = _state(_world(capacity, weights, half_life_ms=3_600_000))
    names = [(f"{lq}-{i}", lq) for lq, n in zip(LQS, counts, strict=True) for i in range(n)]
    order.shuffle(names)
    for name, lq in names:  # every event at one instant: no decay, only entry penalties
        fold(s, ObjectApplied(time=0, object=_workload(name, lq, 0)))
    admitted = dict.fromkeys(LQS, 0)
    for step in steps:
        if step == "finish":
            running = sorted(k for k, r in s.workloads.items() if r.admission is not None)
            if running:
                fold(s, WorkloadFinished(time=0, namespace="ns", name=running[0].split("/")[1]))
            continue
        both_waiting = all(_pending(s, lq) for lq in LQS)
        for d in run_cycle(s).admitted_heads:
            admitted[s.workloads[d].obj.queue_name] += 1
            if both_waiting:
                # usage = admissions x penalty / weight: the LocalQueue admitted had the lower one
                share_a = admitted["lq-a"] * 1000 / weights[0]
                share_b = admitted["lq-b"] * 1000 / weights[1]
                assert abs(share_a - share_b) <= 1, (admitted, weights)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=st.lists(st.tuples(st.sampled_from(["submit", "cycle", "finish", "tick"]), st.integers(0, 7),
                               st.integers(0, 400_000)), min_size=5, max_size=40),
    half_life_ms=st.sampled_from([0, 60_000, 600_000]),
)
def test_recorded_cycles_and_snapshots_reproduce_the_ledger(actions, half_life_ms):
    objects = _world(3, (1000, 1500), half_life_ms)
    live, shadow = _state(objects), _state(objects)
    now, n = 0, 0
    for kind, pick, dt in actions:
        events = []
        if kind == "submit":
            n += 1
            events.append(ObjectApplied(time=now, object=_workload(f"w{n}", LQS[pick % 2], now)))
        elif kind == "tick":
            now += dt
            events.append(ClockTicked(time=now))
        elif kind == "finish":
            running = sorted(k for k, r in live.workloads.items() if r.admission is not None and not r.evicting)
            if running:
                events.append(WorkloadFinished(time=now, namespace="ns", name=running[pick % len(running)][3:]))
        for ev in events:
            fold(live, ev)
            fold(shadow, ev)
        if kind != "cycle":
            continue
        for key in sorted(k for k, r in live.workloads.items() if r.evicting):
            finish_eviction(live, live.workloads[key])
            finish_eviction(shadow, shadow.workloads[key])
        result = run_cycle(live)
        record = CycleCompleted(cycle=live.cycles, input_offset=0, time=live.now, decisions=len(result.decisions),
                                admitted_heads=tuple(result.admitted_heads), heads=tuple(result.heads))
        apply_cycle(shadow, result.decisions, record)
        encoded = encode_state(live)
        assert encode_state(shadow) == encoded
        assert encode_state(decode_state(encoded)) == encoded
    assert sorted(live.afs) == ["ns/lq-a", "ns/lq-b"]
