"""T9k Queue (seed 002): parsing, validation, the mapping to the engine and creation refusals."""

from __future__ import annotations

import pytest

from events import objects as o
from events import t9k
from events.manifests import ManifestError, load
from services.core.t9k import Requester, creation_refusal


def _load(text: str) -> list[o.AnyObject]:
    return [obj for _, obj in load({"q.yaml": text})]


def _queue(spec: str, name: str = "demo", extra: str = "") -> str:
    return (f"apiVersion: scheduler.tensorstack.dev/v1beta1\nkind: Queue\nmetadata:\n  name: {name}\n"
            f"spec:\n{spec}{extra}")


def _cq(spec: str) -> o.ClusterQueue:
    (cq,) = _load(_queue(spec))
    assert isinstance(cq, o.ClusterQueue)
    return cq


@pytest.mark.parametrize(
    ("text", "want_ms"),
    [
        pytest.param("3w", 3 * 7 * 86_400_000, id="the seed's 3w: three weeks of 7 days"),
        pytest.param("2h45m", (2 * 60 + 45) * 60_000, id="the seed's 2h45m"),
        pytest.param("0", 0, id="0 is a duration of its own"),
        pytest.param("1y", 365 * 86_400_000, id="a year is 365 days"),
        pytest.param("1d2h3m4s5ms", 93_784_005, id="every unit in order"),
        pytest.param("5ms", 5, id="ms is not m followed by s"),
        pytest.param("", None, id="empty matches the regex and means no limit"),
    ],
)
def test_max_duration_accepts_the_seed_grammar(text: str, want_ms: int | None) -> None:
    assert t9k.max_duration_ms(text) == want_ms


@pytest.mark.parametrize("text", [
    pytest.param("2h45", id="2h45: a number without unit"),
    pytest.param("1.5h", id="1.5h: no fractions"),
    pytest.param("h", id="h: a unit without number"),
    pytest.param("45m2h", id="units out of order"),
    pytest.param("00", id="only a single 0 stands alone"),
    pytest.param("-1h", id="no sign"),
])
def test_max_duration_refuses_what_the_regex_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="must match"):
        t9k.max_duration_ms(text)
    with pytest.raises(ManifestError, match=r"\(Queue t9k-system/demo\): spec.maxDuration: invalid value"):
        _load(_queue(f"  maxDuration: '{text}'\n"))


def test_the_seed_queue_maps_to_a_capped_cluster_queue_in_the_t9k_cohort() -> None:
    cq = _cq("  priority: 80\n  preemptible: true\n  quota:\n    requests:\n      cpu: 40\n")
    assert cq.name == "demo" and cq.cohort == t9k.COHORT
    (group,) = cq.resource_groups
    assert group.covered_resources == ("cpu",)
    assert group.flavors[0].name == t9k.FLAVOR
    assert dict(group.flavors[0].resources)["cpu"] == o.Quota(nominal=0, borrowing_limit=40_000)
    assert cq.t9k is not None and cq.t9k.priority == 80 and cq.t9k.preemptible
    assert cq.preemption.reclaim_within_cohort == o.ReclaimWithinCohort.LOWER_PRIORITY


def test_defaults_follow_go_zero_values() -> None:
    q = _cq("  quota:\n    requests:\n      cpu: 1\n").t9k
    assert q == o.T9kQueue(quota=(("cpu", 1000),))
    assert not q.preemptible and not q.closed and q.priority == 0 and q.max_duration_ms is None


def test_the_seed_node_selector_is_kept_with_its_expressions() -> None:
    q = _cq("  nodeSelector:\n    matchExpressions:\n    - key: topology.kubernetes.io/zone\n      operator: In\n"
            "      values: [peking, tianjin]\n").t9k
    assert q is not None and q.node_selector == o.LabelSelector(match_expressions=(
        o.Requirement(key="topology.kubernetes.io/zone", operator="In", values=("peking", "tianjin")),))


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param("  priority: 101\n", "spec.priority", "between 0 and 100, got 101", id="priority above 100"),
        pytest.param("  priority: -1\n", "spec.priority", "between 0 and 100, got -1", id="priority below 0"),
        pytest.param("  closed: 'yes'\n", "spec.closed", "Expected `bool | null`, got `str`", id="closed not a bool"),
        pytest.param("  quota:\n    requests:\n      cpu: -1\n", "spec.quota.requests.cpu",
                     "greater than or equal to 0", id="negative quota"),
        pytest.param("  weight: 3\n", "spec.weight", "unknown field", id="an unknown field"),
        pytest.param("  nodeSelector:\n    matchExpressions:\n    - key: zone\n      operator: Near\n",
                     "spec.nodeSelector.matchExpressions[0].operator", "", id="bad selector operator"),
    ],
)
def test_invalid_queues_are_refused_naming_the_field(spec: str, field: str, message: str) -> None:
    with pytest.raises(ManifestError) as e:
        _load(_queue(spec))
    assert e.value.field == field
    assert message in e.value.message


def test_a_queue_outside_t9k_system_is_refused() -> None:
    with pytest.raises(ManifestError, match=r"metadata\.namespace: a Queue lives in namespace t9k-system"):
        _load(_queue("  priority: 1\n").replace("name: demo\n", "name: demo\n  namespace: default\n"))


_JOB = """apiVersion: batch/v1
kind: Job
metadata: {{name: nb, namespace: team-a}}
spec:
  template:
    metadata: {{labels: {{scheduler.tensorstack.dev/queue: demo}}}}
    spec:
      schedulerName: {scheduler}
      containers: [{{name: c, image: i, resources: {{requests: {{cpu: '{cpu}'}}}}}}]
"""


def _job(cpu: str = "4", scheduler: str = "t9k-scheduler") -> o.Workload:
    objs = _load(_JOB.format(cpu=cpu, scheduler=scheduler))
    assert len(objs) == 1 and isinstance(objs[0], o.Workload)
    return objs[0]


def test_a_job_on_a_queue_becomes_a_workload_with_the_queues_priority() -> None:
    wl = _job()
    assert wl.queue_name == "demo" and t9k.is_t9k_workload(wl)
    assert wl.priority_ref == o.PriorityRef(source=t9k.PRIORITY_SOURCE, name="demo")
    assert wl.pod_sets[0].requests == (("cpu", 4000),)


def test_a_job_with_another_scheduler_is_not_t9ks() -> None:
    assert _load(_JOB.format(cpu="1", scheduler="default-scheduler")) == []


def test_the_seeds_quota_example_refuses_4_when_38_of_40_are_allocated() -> None:
    cq = _cq("  quota:\n    requests:\n      cpu: 40\n")
    why = creation_refusal(cq, "demo", _job("4"), ns_labels={}, allocated={"cpu": 38_000})
    assert why == "Queue demo: cpu quota 40, allocated 38, request 4: 42 would exceed the quota"
    assert creation_refusal(cq, "demo", _job("2"), ns_labels={}, allocated={"cpu": 38_000}) is None


@pytest.mark.parametrize(
    ("spec", "who", "ns_labels", "refused"),
    [
        pytest.param("  users: [alice]\n", Requester("alice"), {}, False, id="a user with permission"),
        pytest.param("  groups: [ml]\n", Requester("bob", ("dev", "ml")), {}, False, id="one of the user's groups"),
        pytest.param("  users: [alice]\n", Requester("bob", ("dev",)), {}, True, id="neither user nor group"),
        pytest.param("  namespaceSelector:\n    matchLabels: {team: a}\n", Requester("bob"), {"team": "a"}, False,
                     id="the namespace matches the selector"),
        pytest.param("  namespaceSelector:\n    matchLabels: {team: a}\n", Requester("bob"), {"team": "b"}, True,
                     id="the namespace does not match"),
        pytest.param("  quota: {}\n", Requester("bob"), {}, True, id="a queue naming no one is nobody's"),
    ],
)
def test_permission_by_user_group_or_namespace(spec: str, who: Requester, ns_labels: dict[str, str],
                                               refused: bool) -> None:
    why = creation_refusal(_cq(spec), "demo", _job("1"), ns_labels=ns_labels, allocated={}, who=who)
    assert (why is not None) == refused
    if refused:
        assert why is not None and f"user {who.user!r} may not use Queue demo in namespace team-a" in why


def test_a_closed_queue_refuses_and_a_missing_one_is_named() -> None:
    why = creation_refusal(_cq("  closed: true\n"), "demo", _job("1"), ns_labels={}, allocated={})
    assert why == "Queue demo is closed (spec.closed: true): new workloads are refused"
    assert creation_refusal(None, "gone", _job("1"), ns_labels={}, allocated={}) == (
        "Queue gone does not exist in namespace t9k-system")


def test_resource_shapes_config_map_format_and_refusal() -> None:
    objs = _load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: resource-shapes, namespace: t9k-system}\n"
                 "data:\n  standard: |\n    - name: small\n      requests: {cpu: '2'}\n")
    (shapes,) = objs
    small = o.ResourceShape(name="small", requests=(("cpu", 2000),))
    assert shapes == o.ResourceShapes(profiles=(("standard", (small,)),))
    cq = _cq("  resourceShapeProfile: standard\n")
    assert creation_refusal(cq, "demo", _job("2"), ns_labels={}, allocated={}, shapes=shapes) is None
    why = creation_refusal(cq, "demo", _job("3"), ns_labels={}, allocated={}, shapes=shapes)
    assert why == ("Queue demo: a pod of podSet main requests cpu 3, larger than every shape of profile "
                   "'standard' (small)")
    missing = creation_refusal(_cq("  resourceShapeProfile: gpu\n"), "demo", _job("1"), ns_labels={}, allocated={},
                               shapes=shapes)
    assert missing == "Queue demo: resource shape profile 'gpu' is not in ConfigMap t9k-system/resource-shapes"


def test_other_config_maps_are_ignored_and_bad_shapes_refused() -> None:
    other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: t9k-system}\ndata: {a: b}\n"
    assert _load(other) == []
    with pytest.raises(ManifestError, match=r"data.standard\[0\].name: required field is missing"):
        _load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: resource-shapes, namespace: t9k-system}\n"
              "data:\n  standard: |\n    - requests: {cpu: '2'}\n")


# --- the watcher -------------------------------------------------------------------------------


def test_the_watcher_translates_a_queue_to_its_cluster_queue_without_status() -> None:
    from events.messages import ObjectApplied, ObjectDeleted
    from services.watcher.translate import translate

    queue = {"apiVersion": t9k.API_VERSION, "kind": "Queue",
             "metadata": {"name": "demo", "namespace": "t9k-system", "resourceVersion": "7"},
             "spec": {"priority": 60, "quota": {"requests": {"cpu": 40}}}, "status": {"allocated": {"cpu": "38"}}}
    tr = translate("Queue", "ADDED", queue, cluster="c", time_ms=5)
    assert tr.errors == []
    (env,) = tr.envelopes
    assert isinstance(env.event, ObjectApplied) and isinstance(env.event.object, o.ClusterQueue)
    cq = env.event.object
    assert cq.name == "demo" and cq.t9k is not None and cq.t9k.priority == 60
    assert cq.t9k.allocated == ()  # the scheduler keeps its own usage
    gone = translate("Queue", "DELETED", queue, cluster="c", time_ms=6)
    (env,) = gone.envelopes
    assert env.event == ObjectDeleted(time=6, kind="ClusterQueue", name="demo")
    bad = translate("Queue", "ADDED", {**queue, "spec": {"maxDuration": "1.5h"}}, cluster="c", time_ms=5)
    assert bad.envelopes == [] and "spec.maxDuration: invalid value '1.5h'" in bad.errors[0]


# --- maxDuration: pods older than it are deleted, time from the log ---------------------------------


def test_max_duration_evicts_a_workload_whose_pods_outlived_it_and_requeues_it() -> None:
    from events.cluster import ConditionType, EvictionReason
    from events.manifests import parse_time
    from events.messages import ClockTicked, EvictWorkload
    from services.app.simulate import fold_files_screened
    from services.core.cycle import run_cycle
    from services.core.state import finish_eviction, fold

    job = _JOB.format(cpu="1", scheduler="t9k-scheduler").replace(
        "metadata: {name: nb, namespace: team-a}",
        "metadata: {name: nb, namespace: team-a, creationTimestamp: '2025-01-01T00:00:00Z'}")
    state, refused = fold_files_screened({"q.yaml": _queue("  maxDuration: 2h45m\n  quota: {requests: {cpu: 4}}\n")
                                          + "\n---\n" + job})
    assert refused == []
    start = parse_time("2025-01-01T00:00:00Z")
    admitted = run_cycle(state)
    (key,) = [k for k in state.workloads if k.startswith("team-a/")]
    assert state.workloads[key].admission is not None and admitted.admitted == 1
    limit = (2 * 60 + 45) * 60_000

    fold(state, ClockTicked(time=start + limit))  # exactly 2h45m old: not older than it
    assert [d for d in run_cycle(state).decisions if isinstance(d, EvictWorkload)] == []

    fold(state, ClockTicked(time=start + limit + 1))
    (evicted,) = [d for d in run_cycle(state).decisions if isinstance(d, EvictWorkload)]
    assert evicted.reason == EvictionReason.MAX_DURATION_EXCEEDED and f"{evicted.namespace}/{evicted.name}" == key
    assert f"maxDuration of Queue demo ({limit} ms): admitted {limit + 1} ms ago" in evicted.message

    rec = state.workloads[key]
    finish_eviction(state, rec)
    assert rec.conditions[ConditionType.REQUEUED].status == "True"
    run_cycle(state)
    assert rec.admission is not None and rec.reserved_at == start + limit + 1  # a fresh age


# --- convert -----------------------------------------------------------------------------------


def test_convert_prints_the_closest_kueue_equivalent_and_what_has_none() -> None:
    from services.app.convert import convert_files
    from services.app.simulate import fold_files, run

    text = (_queue("  priority: 80\n  closed: true\n  maxDuration: 3w\n  quota:\n    requests:\n      cpu: 40\n")
            + "\n---\n" + _JOB.format(cpu="4", scheduler="t9k-scheduler"))
    manifests, notes = convert_files({"q.yaml": text})
    kinds = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert kinds == [("ResourceFlavor", "t9k"), ("Cohort", "t9k"), ("WorkloadPriorityClass", "t9k-queue-demo"),
                     ("ClusterQueue", "demo"), ("LocalQueue", "demo"), ("Job", "nb")]
    cq = manifests[3]["spec"]
    assert cq["cohort"] == "t9k" and cq["stopPolicy"] == "Hold"
    assert cq["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "cpu", "nominalQuota": "0", "borrowingLimit": "40"}]
    assert manifests[2]["value"] == 80
    assert manifests[5]["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "demo",
                                                  "kueue.x-k8s.io/priority-class": "t9k-queue-demo"}
    for field in ("spec.users", "spec.preemptible", "spec.maxDuration", "spec.nodeSelector",
                  "spec.resourceShapeProfile", "status.allocated"):
        assert any(field in n for n in notes), field
    # What convert prints is Kueue alone, and simulate takes it (held: the queue is closed).
    import yaml

    state = run(fold_files({"out.yaml": yaml.safe_dump_all(manifests)}), None).state
    (rec,) = state.workloads.values()
    assert rec.admission is None and rec.obj.queue_name == "demo" and not t9k.is_t9k_workload(rec.obj)
    assert rec.priority == 80


def test_the_job_reconciler_plans_a_workload_for_a_job_on_a_queue() -> None:
    from services.actuator.job_reconciler import PriorityQuery, plan_job

    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "nb", "namespace": "team-a", "uid": "u1", "resourceVersion": "1"},
           "spec": {"suspend": True, "template": {
               "metadata": {"labels": {t9k.QUEUE_LABEL: "demo"}},
               "spec": {"schedulerName": t9k.SCHEDULER_NAME,
                        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}},
           "status": {}}
    plan = plan_job(job)
    assert plan.workload is not None and plan.workload.priority == PriorityQuery("Queue", "demo")
    assert plan.workload.body["spec"]["queueName"] == "demo"
    running = {**job, "spec": {**job["spec"], "suspend": False}}
    assert plan_job(running).suspend  # created running on a queue: held until admitted
    other = {**job, "spec": {**job["spec"], "template": {**job["spec"]["template"], "spec": {
        **job["spec"]["template"]["spec"], "schedulerName": "default-scheduler"}}}}
    assert plan_job(other).nothing_to_do


def test_the_actuator_keeps_a_queues_status_allocated_from_admitted_usage() -> None:
    from events.messages import AdmitWorkload, EvictWorkload
    from services.actuator.kubeplan import QueueCounts

    def admit(name: str, cpu: int, gpu: int = 0) -> AdmitWorkload:
        usage = (("cpu", cpu), ("nvidia.com/gpu", gpu)) if gpu else (("cpu", cpu),)
        return AdmitWorkload(id=f"d-{name}", cycle=1, time=0, namespace="team-a", name=name, cluster_queue="demo",
                             admission=o.Admission(cluster_queue="demo", pod_set_assignments=(o.PodSetAssignment(
                                 name="main", flavors=tuple((r, t9k.FLAVOR) for r, _ in usage),
                                 resource_usage=usage, count=1),)))

    counts = QueueCounts()
    counts.fold(admit("a", 38_000))
    counts.fold(admit("b", 1_500, gpu=2))
    assert counts.t9k_queue_status("demo") == {"allocated": {"cpu": "39500m", "nvidia.com/gpu": "2"}}
    counts.fold(EvictWorkload(id="e", cycle=2, time=0, namespace="team-a", name="a", cluster_queue="demo",
                              reason="Preempted", message=""))
    assert counts.t9k_queue_status("demo") == {"allocated": {"cpu": "1500m", "nvidia.com/gpu": "2"}}


def test_a_queue_whose_priority_changes_takes_its_waiting_workloads_along() -> None:
    from events.messages import ObjectApplied
    from services.app.simulate import fold_files_screened
    from services.core.state import fold

    job = _JOB.format(cpu="1", scheduler="t9k-scheduler")
    state, refused = fold_files_screened({"q.yaml": _queue("  priority: 10\n") + "\n---\n" + job})
    (rec,) = state.workloads.values()
    assert rec.priority == 10 and refused == []
    (cq,) = _load(_queue("  priority: 90\n"))
    fold(state, ObjectApplied(time=1, object=cq))
    assert rec.priority == 90
    # A Job whose Queue does not exist (yet) is refused at creation, as the webhook would.
    _, refused = fold_files_screened({"q.yaml": job})
    assert [why for _, why in refused] == ["Queue demo does not exist in namespace t9k-system"]


def test_a_queue_and_a_cluster_queue_of_the_same_name_are_refused() -> None:
    from services.app.exits import UsageError
    from services.app.simulate import fold_files_screened

    cq = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: demo}\nspec: {}\n"
    with pytest.raises(UsageError, match="ClusterQueue demo and Queue t9k-system/demo share a name"):
        fold_files_screened({"q.yaml": cq + "---\n" + _queue("  priority: 1\n")})
