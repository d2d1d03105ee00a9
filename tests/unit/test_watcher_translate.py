"""The watcher's pure core: API objects (as the API server serialises them) to cluster events,
and the memory that keeps relists and re-delivered notifications from repeating themselves.

Every expectation is the exact envelope: id, source, cluster, time and event.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from events import objects as o
from events.cluster import EVICTED_ANNOTATION, PENDING_REASON_ANNOTATION, REJECTED_LABEL
from events.cluster import ORIGINAL_POD_SCHEDULING_ANNOTATION as ORIGINAL_ANNOTATION
from events.envelope import Envelope
from events.messages import (
    ClusterEvent,
    EvictionCompleted,
    ObjectApplied,
    ObjectDeleted,
    PodsNotReady,
    PodsReady,
    WorkloadActivation,
    WorkloadFinished,
)
from services.core.state import State, fold
from services.watcher.translate import (
    EventType,
    Published,
    Ref,
    Translation,
    translate,
)
from tests.builders import a_cluster_queue, a_flavor, a_job, a_local_queue, a_priority_class, a_workload

CLUSTER = "east"
NOW = 1_750_000_000_000
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
WL = "job-train-24232"  # Kueue's name for Job "train" with UID: job-<name>-<sha1(Job, batch, name, uid)[:5]>
V1B1 = "kueue.x-k8s.io/v1beta1"


def run(kind: str, obj: Any, event: EventType = "ADDED", time_ms: int = NOW) -> Translation:
    return translate(kind, event, obj, cluster=CLUSTER, time_ms=time_ms)


def env(source: str, rv: str, what: str, event: ClusterEvent, correlation_id: str = "") -> Envelope:
    return Envelope(id=f"watcher:{CLUSTER}:{source}:{rv}:{what}", source="watcher", cluster=CLUSTER, event=event,
                    correlation_id=correlation_id)


def served(body: dict[str, Any], rv: str = "100", *, list_item: bool = False, **meta: Any) -> dict[str, Any]:
    """The object as the API server returns it: resourceVersion, uid, managedFields; an item of a
    list of a built-in kind comes without kind and apiVersion."""
    out = copy.deepcopy(body)
    out["metadata"].update({"resourceVersion": rv, "managedFields": [{"manager": "kubectl"}], **meta})
    if list_item:
        out.pop("kind")
        out.pop("apiVersion")
    return out


def a_served_job(rv: str = "100", *, parallelism: int = 1, suspend: bool = True,
                 status: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = served(a_job("team-a", "train", "lq").parallelism(parallelism).request(cpu="1").obj(), rv, uid=UID,
                  creationTimestamp="2025-06-01T00:00:00Z")
    body["spec"]["suspend"] = suspend
    body["spec"]["template"]["metadata"] = {"creationTimestamp": None,
                                            "labels": {"batch.kubernetes.io/job-name": "train"}}
    if status is not None:
        body["status"] = status
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def train_workload(count: int = 1) -> o.Workload:
    return o.Workload(
        namespace="team-a", name=WL, uid=_wl_uid(),
        queue_name="lq",
        pod_sets=(o.PodSet(name="main", count=count, requests=(("cpu", 1000),)),),
        creation_time=1_748_736_000_000,
        owner=o.OwnerReference(api_version="batch/v1", kind="Job", name="train", uid=UID),
        labels=(("kueue.x-k8s.io/queue-name", "lq"),),
    )


def _wl_uid() -> str:
    """events.jobs: the Workload's own uid is derived from its namespace and name."""
    return hashlib.sha1(f"workload/team-a/{WL}".encode(), usedforsecurity=False).hexdigest()[:32]


# --- every kind ------------------------------------------------------------------------------


KINDS = [
    pytest.param(
        "ResourceFlavor", served(a_flavor("on-demand").labels(zone="a").obj()), "ResourceFlavor /on-demand",
        o.ResourceFlavor(name="on-demand", node_labels=(("zone", "a"),)),
        id="ResourceFlavor",
    ),
    pytest.param(
        "ClusterQueue",
        served({"apiVersion": V1B1, "kind": "ClusterQueue", "metadata": {"name": "cq"},
                "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "stopPolicy": "None",
                         "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                             {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}),
        "ClusterQueue /cq",
        o.ClusterQueue(name="cq", resource_groups=(o.ResourceGroup(
            covered_resources=("cpu",),
            flavors=(o.FlavorQuotas(name="on-demand", resources=(("cpu", o.Quota(nominal=4000)),)),)),),
            namespace_selector=o.LabelSelector()),
        id="ClusterQueue with server-side defaults",
    ),
    pytest.param(
        "Cohort", served({"apiVersion": V1B1, "kind": "Cohort", "metadata": {"name": "all"}, "spec": {}}),
        "Cohort /all", o.Cohort(name="all"), id="Cohort",
    ),
    pytest.param(
        "LocalQueue", served(a_local_queue("team-a", "lq", "cq").obj()), "LocalQueue team-a/lq",
        o.LocalQueue(namespace="team-a", name="lq", cluster_queue="cq"), id="LocalQueue",
    ),
    pytest.param(
        "WorkloadPriorityClass", served(a_priority_class("high", 100).obj()), "WorkloadPriorityClass /high",
        o.WorkloadPriorityClass(name="high", value=100), id="WorkloadPriorityClass",
    ),
    pytest.param(
        "PriorityClass",
        served({**a_priority_class("system", 2000, workload=False).obj(), "preemptionPolicy": "PreemptLowerPriority"},
               list_item=True),
        "PriorityClass /system", o.PriorityClass(name="system", value=2000),
        id="PriorityClass from a list (no kind, no apiVersion)",
    ),
    pytest.param(
        "Namespace",
        served({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"team": "a"}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}, list_item=True),
        "Namespace /team-a",
        o.Namespace(name="team-a", labels=(("kubernetes.io/metadata.name", "team-a"), ("team", "a"))),
        id="Namespace from a list, with spec and status",
    ),
    pytest.param(
        "AdmissionCheck",
        served({"apiVersion": V1B1, "kind": "AdmissionCheck", "metadata": {"name": "prov"},
                "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                         "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                        "name": "prc"}}}),
        "AdmissionCheck /prov",
        o.AdmissionCheck(name="prov", controller_name="kueue.x-k8s.io/provisioning-request",
                         parameters_kind="ProvisioningRequestConfig", parameters_name="prc",
                         parameters_api_group="kueue.x-k8s.io"),
        id="AdmissionCheck",
    ),
    pytest.param(
        "ProvisioningRequestConfig",
        served({"apiVersion": V1B1, "kind": "ProvisioningRequestConfig", "metadata": {"name": "prc"},
                "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                         "managedResources": ["nvidia.com/gpu"]}}),
        "ProvisioningRequestConfig /prc",
        o.ProvisioningRequestConfig(name="prc", provisioning_class_name="check-capacity.autoscaling.x-k8s.io",
                                    managed_resources=("nvidia.com/gpu",)),
        id="ProvisioningRequestConfig",
    ),
    pytest.param(
        "Workload", served(a_workload("team-a", "w1").queue("lq").request(cpu="2").obj(), uid="u-w1"),
        "Workload team-a/w1",
        o.Workload(namespace="team-a", name="w1", uid="u-w1", queue_name="lq",
                   pod_sets=(o.PodSet(name="main", count=1, requests=(("cpu", 2000),)),)),
        id="Workload without an owner",
    ),
    pytest.param(
        "Job", a_served_job(), "Job team-a/train", train_workload(),
        id="queued Job becomes its Workload, named as Kueue names it",
    ),
]


@pytest.mark.parametrize(("kind", "obj", "source", "want"), KINDS)
def test_added_or_modified_object_is_applied(kind: str, obj: dict[str, Any], source: str, want: o.AnyObject) -> None:
    for event in ("ADDED", "MODIFIED"):
        got = run(kind, obj, event)  # type: ignore[arg-type]
        assert got.errors == []
        assert got.envelopes == [env(f"{kind}:{source.split(' ')[1]}", "100", "applied",
                                     ObjectApplied(time=NOW, object=want))]


def test_job_workload_name_is_kueues() -> None:
    got = run("Job", a_served_job())
    obj = got.envelopes[0].event.object  # type: ignore[union-attr]
    assert (obj.namespace, obj.name) == ("team-a", "job-train-24232")


@pytest.mark.parametrize(("kind", "obj"), [
    pytest.param("Workload", served(a_workload("team-a", WL).request(cpu="1").obj(), ownerReferences=[
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID, "controller": True}]),
        id="a Workload owned by a Job is the Job's: ignored"),
    pytest.param("Job", served(a_job("team-a", "plain", None).obj(), uid=UID),
                 id="a Job without the queue-name label is not Kueue's"),
])
def test_ignored(kind: str, obj: dict[str, Any]) -> None:
    for event in ("ADDED", "MODIFIED", "DELETED"):
        got = run(kind, obj, event)  # type: ignore[arg-type]
        assert (got.envelopes, got.errors) == ([], [])


def test_workload_owned_by_something_else_is_translated() -> None:
    obj = served(a_workload("team-a", "js").queue("lq").request(cpu="1").obj(), uid="u-js", ownerReferences=[
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u1"}])
    got = run("Workload", obj)
    assert [type(e.event) for e in got.envelopes] == [ObjectApplied]
    assert got.envelopes[0].event.object.owner == o.OwnerReference(  # type: ignore[union-attr]
        api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet", name="js", uid="u1")


# --- a Job's status --------------------------------------------------------------------------

J = "Job:team-a/train"


@pytest.mark.parametrize(("job", "want_status"), [
    pytest.param(a_served_job(suspend=False, status={"conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"},
        {"type": "Complete", "status": "True", "message": "Reached expected number of succeeded pods"}],
        "succeeded": 1}),
        [env(J, "100", "finished", WorkloadFinished(time=NOW, namespace="team-a", name=WL, succeeded=True,
                                                    message="Reached expected number of succeeded pods"))],
        id="Complete=True: finished, succeeded (and not also pods ready)"),
    pytest.param(a_served_job(suspend=False, status={"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the "
         "specified backoff limit"}], "failed": 1}),
        [env(J, "100", "finished", WorkloadFinished(time=NOW, namespace="team-a", name=WL, succeeded=False,
                                                    message="Job has reached the specified backoff limit"))],
        id="Failed=True: finished, not succeeded, with the condition's message"),
    pytest.param(a_served_job(suspend=False, status={"conditions": [{"type": "Complete", "status": "False"}]}),
                 [], id="Complete=False is not finished"),
    pytest.param(a_served_job(parallelism=3, suspend=False, status={"active": 3, "ready": 2, "succeeded": 1}),
                 [env(J, "100", "pods-ready", PodsReady(time=NOW, namespace="team-a", name=WL))],
                 id="ready + succeeded reach the pod count: pods ready"),
    pytest.param(a_served_job(parallelism=3, suspend=False, status={"active": 3, "ready": 2}),
                 [env(J, "100", "pods-not-ready", PodsNotReady(time=NOW, namespace="team-a", name=WL))],
                 id="one pod short: not ready (news for the memory only after a readiness)"),
    pytest.param(a_served_job(suspend=True, status={"ready": 1}), [], id="a suspended Job is never ready"),
    pytest.param(a_served_job(suspend=True, annotations={EVICTED_ANNOTATION: "c12-3"}, status={"active": 0}),
                 [env(J, "100", "eviction-completed", EvictionCompleted(time=NOW, namespace="team-a", name=WL),
                      correlation_id="c12-3")],
                 id="evicted, suspended, no active pod: eviction completed, correlated with the decision"),
    pytest.param(a_served_job(suspend=True, annotations={EVICTED_ANNOTATION: "c12-3"}), [
        env(J, "100", "eviction-completed", EvictionCompleted(time=NOW, namespace="team-a", name=WL),
            correlation_id="c12-3")], id="status.active absent counts as 0"),
    pytest.param(a_served_job(suspend=True, annotations={EVICTED_ANNOTATION: "c12-3"}, status={"active": 2}), [],
                 id="pods still active: eviction not completed"),
    pytest.param(a_served_job(suspend=False, annotations={EVICTED_ANNOTATION: "c12-3"}, status={"active": 0}), [],
                 id="re-admitted (not suspended): no eviction completion"),
])
def test_job_status(job: dict[str, Any], want_status: list[Envelope]) -> None:
    got = run("Job", job)
    assert got.errors == []
    count = job["spec"].get("parallelism", 1)
    assert got.envelopes == [env(J, "100", "applied", ObjectApplied(time=NOW, object=train_workload(count))),
                             *want_status]


def test_actuation_annotations_do_not_change_the_workload() -> None:
    plain = run("Job", a_served_job()).envelopes[0]
    marked = run("Job", a_served_job(status={"active": 1}, annotations={
        EVICTED_ANNOTATION: "c1-0", ORIGINAL_ANNOTATION: "{}", "kueuelog.io/decision-id": "c1-0",
        "kueuelog.io/decision-cycle": "1"})).envelopes[0]
    assert marked == plain
    own = run("Job", a_served_job(annotations={"kueuelog.io/sim-duration": "5m"})).envelopes[0]
    assert own.event.object.annotations == (("kueuelog.io/sim-duration", "5m"),)  # type: ignore[union-attr]


@pytest.mark.parametrize(("job", "frozen"), [
    pytest.param(a_served_job(suspend=True), False, id="suspended"),
    pytest.param(a_served_job(suspend=False), True, id="unsuspended"),
    pytest.param(a_served_job(suspend=True, status={"active": 1}), True, id="suspended, pods still active"),
    pytest.param(a_served_job(suspend=True, annotations={ORIGINAL_ANNOTATION: "{}"}), True,
                 id="suspended and drained, but the actuator's scheduling is not restored yet"),
])
def test_frozen_job(job: dict[str, Any], frozen: bool) -> None:
    assert run("Job", job).frozen is frozen


# --- deletes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "obj", "source", "want"), [
    pytest.param("Job", a_served_job("120"), J, ObjectDeleted(time=NOW, kind="Workload", name=WL,
                                                                  namespace="team-a"),
                 id="a Job's delete deletes its Workload"),
    pytest.param("LocalQueue", served(a_local_queue("team-a", "lq", "cq").obj(), "120"), "LocalQueue:team-a/lq",
                 ObjectDeleted(time=NOW, kind="LocalQueue", name="lq", namespace="team-a"), id="LocalQueue"),
    pytest.param("ClusterQueue", served(a_cluster_queue("cq").flavor("f", cpu="1").obj(), "120"),
                 "ClusterQueue:/cq", ObjectDeleted(time=NOW, kind="ClusterQueue", name="cq"), id="ClusterQueue"),
    pytest.param("Namespace", served({"metadata": {"name": "team-a"}}, "120"), "Namespace:/team-a",
                 ObjectDeleted(time=NOW, kind="Namespace", name="team-a"), id="Namespace"),
])
def test_deleted(kind: str, obj: dict[str, Any], source: str, want: ObjectDeleted) -> None:
    got = run(kind, obj, "DELETED")
    assert got.errors == []
    assert got.envelopes == [env(source, "120", "deleted", want)]


# --- bad objects -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "obj", "want_error"), [
    pytest.param("ClusterQueue", served(a_cluster_queue("cq").flavor("f", cpu="-1").obj()),
                 "cluster:east: document 0 (ClusterQueue cq): "
                 "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: must be greater than or equal to 0",
                 id="invalid quota"),
    pytest.param("Job", served(a_job("team-a", "train", "lq").parallelism(-1).obj(), uid=UID),
                 "cluster:east: document 0 (Job team-a/train): spec.parallelism: must be greater than or equal to 0",
                 id="invalid Job"),
    pytest.param("LocalQueue", served({"apiVersion": V1B1, "kind": "LocalQueue",
                                       "metadata": {"name": "lq", "namespace": "team-a"}, "spec": {"clusterQueue": 7}}),
                 "(LocalQueue team-a/lq): spec.clusterQueue: Expected `str | null`, got `int`", id="wrong type"),
    pytest.param("LocalQueue", {"metadata": {"namespace": "team-a"}, "spec": {}},
                 "cluster:east: LocalQueue: metadata.name: required field is missing", id="no name"),
    pytest.param("ResourceFlavor", ["not", "an", "object"],
                 "cluster:east: ResourceFlavor: expected an object, got list", id="not an object"),
    pytest.param("ResourceFlavor", served({**a_flavor("rf").obj(), "kind": "ClusterQueue"}),
                 "cluster:east: ResourceFlavor rf: kind: expected 'ResourceFlavor', got 'ClusterQueue'",
                 id="kind mismatch"),
    pytest.param("Pod", served({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
                 "cluster:east: Pod p: kind: unsupported kind 'Pod'", id="unsupported kind"),
])
def test_bad_object_is_an_error_naming_object_and_field(kind: str, obj: Any, want_error: str) -> None:
    got = run(kind, obj)
    assert got.envelopes == []
    assert len(got.errors) == 1
    assert want_error in got.errors[0]


def test_bad_job_status_keeps_the_workload_and_names_the_field() -> None:
    got = run("Job", a_served_job(suspend=False, status={"ready": "two"}))
    assert [type(e.event) for e in got.envelopes] == [ObjectApplied]
    assert got.errors == ["cluster:east: Job team-a/train: status.ready: expected an integer, got 'two'"]


def test_same_notification_same_envelopes() -> None:
    job = a_served_job(suspend=False, status={"ready": 1})
    assert run("Job", job) == run("Job", copy.deepcopy(job))
    assert run("Job", job, time_ms=NOW + 5).envelopes[0].id == run("Job", job).envelopes[0].id


# --- the memory: relists and re-deliveries publish only news -----------------------------------


def publish(memory: Published, tr: Translation) -> list[ClusterEvent]:
    change = memory.select(tr)
    memory.commit(change)
    return [e.event for e in change.envelopes]


def kinds_of(events: list[ClusterEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_unchanged_object_is_not_published_again() -> None:
    memory = Published()
    lq = served(a_local_queue("team-a", "lq", "cq").obj(), "100")
    assert kinds_of(publish(memory, run("LocalQueue", lq))) == ["ObjectApplied"]
    assert publish(memory, run("LocalQueue", lq)) == []  # re-delivered
    assert publish(memory, run("LocalQueue", served(a_local_queue("team-a", "lq", "cq").obj(), "101"))) == []
    changed = served(a_local_queue("team-a", "lq", "cq").stop("Hold").obj(), "102")
    assert kinds_of(publish(memory, run("LocalQueue", changed))) == ["ObjectApplied"]


def test_job_life_publishes_each_fact_once() -> None:
    memory = Published()
    steps = [
        (a_served_job("1"), ["ObjectApplied"]),
        (a_served_job("1"), []),
        (a_served_job("2", suspend=False, status={"active": 1}), []),  # admitted: started
        # the actuator's node selector on the running Job does not reach the Workload
        (_with_node_selector(a_served_job("3", suspend=False, status={"active": 1})), []),
        (a_served_job("4", suspend=False, status={"active": 1, "ready": 1}), ["PodsReady"]),
        (a_served_job("5", suspend=False, status={"active": 1, "ready": 1}), []),
        # evicted: suspended, pods terminating, then gone; the template is restored after that
        (_with_node_selector(a_served_job("6", annotations={EVICTED_ANNOTATION: "c3-0", ORIGINAL_ANNOTATION: "{}"},
                                          status={"active": 1})), []),
        (_with_node_selector(a_served_job("7", annotations={EVICTED_ANNOTATION: "c3-0", ORIGINAL_ANNOTATION: "{}"})),
         ["EvictionCompleted"]),
        (a_served_job("7", annotations={EVICTED_ANNOTATION: "c3-0"}), []),
        # admitted again, ready again, evicted again by another decision
        (a_served_job("8", suspend=False, annotations={EVICTED_ANNOTATION: "c3-0"}, status={"ready": 1}),
         ["PodsReady"]),
        (a_served_job("9", annotations={EVICTED_ANNOTATION: "c9-1"}), ["EvictionCompleted"]),
        (a_served_job("10", suspend=False, status={"conditions": [{"type": "Complete", "status": "True"}]}),
         ["WorkloadFinished"]),
        (a_served_job("11", suspend=False, status={"conditions": [{"type": "Complete", "status": "True"}]}), []),
    ]
    for i, (job, want) in enumerate(steps):
        assert kinds_of(publish(memory, run("Job", job))) == want, f"step {i}"
    gone = memory.vanished(Ref("Job", "team-a", "train"), cluster=CLUSTER, resource_version="12", time_ms=NOW)
    assert gone.envelopes == [env(J, "12", "deleted", ObjectDeleted(time=NOW, kind="Workload", name=WL,
                                                                      namespace="team-a"))]
    memory.commit(gone)
    assert len(memory) == 0
    assert memory.vanished(Ref("Job", "team-a", "train"), cluster=CLUSTER, resource_version="12",
                           time_ms=NOW).envelopes == []


def test_a_lost_readiness_is_published_once_after_a_readiness() -> None:
    memory = Published()
    steps = [
        (a_served_job("1"), ["ObjectApplied"]),
        (a_served_job("2", suspend=False, status={"active": 1}), []),  # starting: not news
        (a_served_job("3", suspend=False, status={"active": 1, "ready": 1}), ["PodsReady"]),
        (a_served_job("4", suspend=False, status={"active": 1, "ready": 0}), ["PodsNotReady"]),  # a pod failed
        (a_served_job("5", suspend=False, status={"active": 1, "ready": 0}), []),
        (a_served_job("6", suspend=False, status={"active": 1, "ready": 1}), ["PodsReady"]),  # recovered
    ]
    for i, (job, want) in enumerate(steps):
        assert kinds_of(publish(memory, run("Job", job))) == want, f"step {i}"


def _with_node_selector(job: dict[str, Any]) -> dict[str, Any]:
    job["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    return job


def test_suspended_job_spec_change_is_published() -> None:
    memory = Published()
    publish(memory, run("Job", a_served_job("1")))
    assert kinds_of(publish(memory, run("Job", a_served_job("2", parallelism=2)))) == ["ObjectApplied"]


def test_job_recreated_under_the_same_name_replaces_its_workload() -> None:
    memory = Published()
    publish(memory, run("Job", a_served_job("1")))
    again = a_served_job("5")
    again["metadata"]["uid"] = "another-uid"
    events = publish(memory, run("Job", again))
    assert kinds_of(events) == ["ObjectDeleted", "ObjectApplied"]
    assert events[0] == ObjectDeleted(time=NOW, kind="Workload", name=WL, namespace="team-a")
    assert events[1].object.name != WL  # type: ignore[union-attr]


def test_memory_rebuilt_from_the_log_repeats_nothing() -> None:
    first = Published()
    published: list[Envelope] = []
    for job in (a_served_job("1"), a_served_job("2", suspend=False, status={"ready": 1}),
                a_served_job("3", annotations={EVICTED_ANNOTATION: "c3-0"})):
        change = first.select(run("Job", job))
        first.commit(change)
        published.extend(change.envelopes)
    lq = run("LocalQueue", served(a_local_queue("team-a", "lq", "cq").obj()))
    change = first.select(lq)
    first.commit(change)
    published.extend(change.envelopes)

    rebuilt = Published()
    for e in published:
        rebuilt.remember(e)
    assert rebuilt.entries == first.entries
    assert publish(rebuilt, run("Job", a_served_job("4", annotations={EVICTED_ANNOTATION: "c3-0"}))) == []
    assert publish(rebuilt, lq) == []
    deleted = rebuilt.vanished(Ref("LocalQueue", "team-a", "lq"), cluster=CLUSTER, resource_version="9", time_ms=NOW)
    rebuilt.remember(deleted.envelopes[0])
    assert Ref("LocalQueue", "team-a", "lq") not in rebuilt.entries


def test_refusal_reported_once_per_resource_version() -> None:
    memory = Published()
    bad = run("ClusterQueue", served(a_cluster_queue("cq").flavor("f", cpu="-1").obj(), "7"))
    assert memory.refuse(bad)
    assert not memory.refuse(bad)
    assert memory.refuse(run("ClusterQueue", served(a_cluster_queue("cq").flavor("f", cpu="-2").obj(), "8")))


def test_relist_storm_folds_without_anomalies() -> None:
    """Every notification delivered three times, as relists would: the fold sees each fact once."""
    memory = Published()
    state = State()
    cq = served({"apiVersion": V1B1, "kind": "ClusterQueue", "metadata": {"name": "cq"},
                 "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}})
    history = [
        ("ResourceFlavor", served(a_flavor("f").obj())),
        ("ClusterQueue", cq),
        ("LocalQueue", served(a_local_queue("team-a", "lq", "cq").obj())),
        ("Job", a_served_job("1")),
        ("Job", a_served_job("2", suspend=False, status={"active": 1, "ready": 1})),
        ("Job", a_served_job("3", suspend=False, status={"conditions": [{"type": "Complete", "status": "True"}]})),
    ]
    for kind, obj in history:
        for _ in range(3):
            for event in publish(memory, run(kind, obj)):
                fold(state, event)
    assert state.anomalies == []
    assert state.workloads[f"team-a/{WL}"].finished


# --- Jobs the job reconciler rejected --------------------------------------------------------


def _rejected(job: dict[str, Any]) -> dict[str, Any]:
    job["metadata"]["labels"][REJECTED_LABEL] = "true"
    return job


@pytest.mark.parametrize("event", ["ADDED", "MODIFIED"])
def test_rejected_job_is_not_queued_it_is_the_delete_of_its_workload(event: EventType) -> None:
    got = run("Job", _rejected(a_served_job("7", suspend=False, status={"active": 1, "ready": 1})), event)
    assert got.errors == []
    assert got.envelopes == [env(J, "7", "deleted", ObjectDeleted(time=NOW, kind="Workload", name=WL,
                                                                  namespace="team-a"))]
    assert not got.frozen


def test_rejected_job_never_published_publishes_nothing() -> None:
    memory = Published()
    for rv in ("1", "2"):
        assert publish(memory, run("Job", _rejected(a_served_job(rv, suspend=False)))) == []
    assert memory.entries == {}


def test_job_rejected_after_it_was_published_as_queued_takes_its_workload_back() -> None:
    """The watcher may see the queued Job before the reconciler labels it: its Workload is deleted
    once, so the scheduler never admits (nor counts quota for) a Job that runs outside quota."""
    memory = Published()
    assert kinds_of(publish(memory, run("Job", a_served_job("1", suspend=False)))) == ["ObjectApplied"]
    rejected = _rejected(a_served_job("2", suspend=False, status={"active": 1}))
    assert publish(memory, run("Job", rejected)) == [ObjectDeleted(time=NOW, kind="Workload", name=WL,
                                                                   namespace="team-a")]
    assert publish(memory, run("Job", rejected)) == []
    assert publish(memory, run("Job", _rejected(a_served_job("3", suspend=False, status={"active": 1,
                                                                                          "ready": 1})))) == []
    assert memory.entries == {}


def _owned_workload(active: bool | None, rv: str) -> dict[str, Any]:
    body = a_workload("team-a", WL).request(cpu="1").obj()
    if active is not None:
        body["spec"]["active"] = active
    return served(body, rv, ownerReferences=[
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID, "controller": True}])


def test_a_jobs_workload_publishes_only_changes_of_spec_active() -> None:
    """First seen active: nothing (the Job says everything); false (the actuator's write-back of a
    deactivation), then true again (a user re-activating it): each once, and remembered from the log."""
    memory = Published()
    said: list[Envelope] = []

    def send(active: bool | None, rv: str) -> list[ClusterEvent]:
        change = memory.select(run("Workload", _owned_workload(active, rv)))
        memory.commit(change)
        said.extend(change.envelopes)
        return [e.event for e in change.envelopes]

    assert send(True, "1") == [] and send(None, "2") == []
    assert send(False, "3") == [WorkloadActivation(time=NOW, namespace="team-a", name=WL, active=False)]
    assert send(False, "4") == []  # a status write
    assert send(True, "5") == [WorkloadActivation(time=NOW, namespace="team-a", name=WL, active=True)]
    rebuilt = Published()
    for e in said:
        rebuilt.remember(e)
    assert publish(rebuilt, run("Workload", _owned_workload(True, "6"))) == []
    gone = rebuilt.vanished(Ref("Workload", "team-a", WL), cluster=CLUSTER, resource_version="7", time_ms=NOW)
    assert gone.envelopes == [], "the Job's entry, not this one, speaks for the Workload's existence"


# --- elastic Jobs (services/watcher/elastic.py) ----------------------------------------------

ELASTIC = {"kueue.x-k8s.io/elastic-job": "true"}


@pytest.mark.parametrize(("annotations", "parallelism", "want"), [
    pytest.param(ELASTIC, 2, [2], id="an elastic Job scaled down republishes its Workload with the smaller count"),
    pytest.param(ELASTIC, 6, [6], id="an elastic Job scaled up republishes it too (the fold makes a new slice)"),
    pytest.param({}, 2, [], id="a Job that is not elastic stays frozen while it runs"),
    pytest.param({"kueue.x-k8s.io/elastic-job": "false"}, 2, [], id="the annotation must be true"),
])
def test_a_running_elastic_job_scaled_down(annotations: dict[str, str], parallelism: int, want: list[int]) -> None:
    memory = Published()
    running = {"active": 4, "ready": 4}
    assert kinds_of(publish(memory, run("Job", a_served_job("1", parallelism=4, suspend=True,
                                                             annotations=annotations)))) == ["ObjectApplied"]
    injected = a_served_job("2", parallelism=4, suspend=False, status=running,
                            annotations={**annotations, ORIGINAL_ANNOTATION: "{}"})
    injected["spec"]["template"]["spec"]["nodeSelector"] = {"flavor": "on-demand"}  # the actuator's
    assert kinds_of(publish(memory, run("Job", injected))) == ["PodsReady"]
    scaled = copy.deepcopy(injected)
    scaled["metadata"]["resourceVersion"] = "3"
    scaled["spec"]["parallelism"] = parallelism
    got = [e for e in publish(memory, run("Job", scaled)) if isinstance(e, ObjectApplied)]
    assert [ps.count for e in got for ps in e.object.pod_sets] == want  # type: ignore[union-attr]
    for e in got:  # only the count changed: not the actuator's node selector
        assert e.object.pod_sets[0].node_selector == ()  # type: ignore[union-attr]


# --- a Workload nothing owns: its eviction completes when its reservation is cleared ------------------


def _standalone(rv: str, *, evicted_by: str = "", reserved: bool = True, admission: bool = True,
                finished: bool = False, owned: bool = False) -> dict[str, Any]:
    """A Workload as Kueue's performance generator creates it, at some point of its life."""
    body = a_workload("team-a", "w").queue("lq").priority(100).request(cpu="1").admitted("cq", {"cpu": "default"})
    out = served(body.obj(), rv)
    status = out["status"]
    if evicted_by:
        out["metadata"]["annotations"] = {EVICTED_ANNOTATION: evicted_by}
        status["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": "x",
                                     "lastTransitionTime": "2025-01-01T00:00:01Z"})
    if not reserved:
        status["conditions"][0].update(status="False", reason="Pending", message="Evicted by the test runner")
    if not admission:
        del status["admission"]
    if finished:
        status["conditions"].append({"type": "Finished", "status": "True", "reason": "ByTest", "message": "done",
                                     "lastTransitionTime": "2025-01-01T00:00:09Z"})
    if owned:
        out["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "p1"}]
    return out


W = "Workload:team-a/w"
COMPLETED_W = EvictionCompleted(time=NOW, namespace="team-a", name="w")


@pytest.mark.parametrize(("obj", "want"), [
    pytest.param(_standalone("1"), [], id="admitted"),
    pytest.param(_standalone("2", evicted_by="c4-1"), [], id="evicted, still reserved"),
    pytest.param(_standalone("3", evicted_by="c4-1", reserved=False, admission=False),
                 [env(W, "3", "eviction-completed", COMPLETED_W, "c4-1")], id="reservation cleared (Kueue's runner)"),
    pytest.param(_standalone("4", evicted_by="c4-1", reserved=False),
                 [env(W, "4", "eviction-completed", COMPLETED_W, "c4-1")], id="QuotaReserved=False"),
    pytest.param(_standalone("5", evicted_by="c4-1", admission=False),
                 [env(W, "5", "eviction-completed", COMPLETED_W, "c4-1")], id="status.admission removed"),
    pytest.param(_standalone("6", reserved=False, admission=False), [], id="never evicted by kueuelog"),
    pytest.param(_standalone("7", evicted_by="c4-1", reserved=False, admission=False, owned=True), [],
                 id="owned by something (a pod group): its owner says"),
])
def test_a_standalone_workloads_eviction_completes_when_its_reservation_is_cleared(
        obj: dict[str, Any], want: list[Envelope]) -> None:
    tr = run("Workload", obj)
    assert tr.errors == []
    assert [e for e in tr.envelopes if not isinstance(e.event, ObjectApplied)] == want


def test_the_eviction_annotation_is_not_part_of_the_workload() -> None:
    plain, marked = run("Workload", _standalone("1")), run("Workload", _standalone("1", evicted_by="c4-1"))
    applied = [e.event for e in (*plain.envelopes, *marked.envelopes) if isinstance(e.event, ObjectApplied)]
    assert len(applied) == 2
    assert isinstance(applied[1].object, o.Workload) and applied[1].object.annotations == ()


def test_a_pending_mark_on_a_standalone_workload_is_no_news() -> None:
    """The actuator's pending mark (the reason annotation and QuotaReserved=False) on a Workload
    nothing owns: republishing it would make the scheduler fold it, cycle and mark it again."""
    memory = Published()

    def pending(rv: str, reason: str = "") -> dict[str, Any]:
        out = served(a_workload("team-a", "w").queue("lq").priority(100).request(cpu="1").obj(), rv)
        if reason:
            out["metadata"]["annotations"] = {PENDING_REASON_ANNOTATION: reason, "team": "a"}
            out["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                             "message": f"{reason}: 3 more needed",
                                             "lastTransitionTime": "2025-01-01T00:00:01Z"}]}
        else:
            out["metadata"]["annotations"] = {"team": "a"}
        return out

    for i, (obj, want) in enumerate([(pending("1"), ["ObjectApplied"]), (pending("2", "WaitingForQuota"), []),
                                     (pending("3", "PreemptionNotAllowed"), [])]):
        change = memory.select(run("Workload", obj))
        memory.commit(change)
        assert kinds_of([e.event for e in change.envelopes]) == want, f"step {i}"


def test_a_standalone_workloads_life_publishes_each_eviction_once() -> None:
    memory = Published()
    steps = [
        (_standalone("1"), ["ObjectApplied"]),
        (_standalone("2", evicted_by="c4-1"), ["ObjectApplied"]),  # Evicted=True while reserved
        (_standalone("3", evicted_by="c4-1", reserved=False, admission=False), ["ObjectApplied", "EvictionCompleted"]),
        (_standalone("4", evicted_by="c4-1", reserved=False, admission=False), []),  # re-delivered
        # re-admitted: the old decision id is still there, the reservation is back
        (_standalone("5", evicted_by="c4-1"), ["ObjectApplied"]),
        (_standalone("6", evicted_by="c9-2"), []),
        (_standalone("7", evicted_by="c9-2", reserved=False, admission=False), ["ObjectApplied", "EvictionCompleted"]),
        (_standalone("8", evicted_by="c9-2"), ["ObjectApplied"]),
        (_standalone("9", evicted_by="c9-2", finished=True), ["WorkloadFinished"]),
    ]
    said: list[Envelope] = []
    for i, (obj, want) in enumerate(steps):
        change = memory.select(run("Workload", obj))
        memory.commit(change)
        said.extend(change.envelopes)
        assert kinds_of([e.event for e in change.envelopes]) == want, f"step {i}"
    assert [e.correlation_id for e in said if isinstance(e.event, EvictionCompleted)] == ["c4-1", "c9-2"]
    rebuilt = Published()
    for e in said[:4]:  # up to the first completion, as a restarted watcher reads its log
        rebuilt.remember(e)
    assert publish(rebuilt, run("Workload", steps[3][0])) == []  # a restarted watcher repeats nothing
