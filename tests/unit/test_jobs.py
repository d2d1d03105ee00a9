"""batch/v1 Job -> Workload, the way Kueue's job integration (``pkg/controller/jobs/job``) builds one.

One podSet ``main``; count = min(parallelism, completions), parallelism defaulting to 1;
per-pod requests as Kubernetes' ``PodRequests`` computes them (containers summed, init
containers as a maximum, sidecars added, overhead on top, limits standing in for missing
requests); partial admission from ``kueue.x-k8s.io/job-min-parallelism``; priority from the
``kueue.x-k8s.io/priority-class`` label or the template's ``priorityClassName``; an ownerReference
to the Job; and Kueue's deterministic name ``job-<name>-<5 hex of sha1>``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from events import objects as o
from events.cluster import POD_PRIORITY_CLASS_SOURCE, WORKLOAD_PRIORITY_CLASS_SOURCE
from events.jobs import workload_name_for_job
from events.manifests import Document, ManifestError, normalize
from tests.builders import a_job

FILE = "jobs.yaml"
DOC = 2
Gi, Mi = 1 << 30, 1 << 20
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
POD = "spec.template.spec"


def job(name: str = "train", namespace: str = "team-a", queue: str | None = "lq") -> Any:
    return a_job(namespace, name, queue)


def with_pod(b: Any, **pod_spec: Any) -> dict[str, Any]:
    """The Job with its pod template spec replaced (containers, initContainers, overhead, ...)."""
    body = b.obj()
    body["spec"]["template"]["spec"] = pod_spec
    return body


def with_spec(b: Any, **spec: Any) -> dict[str, Any]:
    body = b.obj()
    for k, v in spec.items():
        if v is None:
            body["spec"].pop(k, None)
        else:
            body["spec"][k] = v
    return body


def c(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
      sidecar: bool = False) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "busybox", "resources": res}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def edit_meta(b: Any, **meta: Any) -> Any:
    b.body["metadata"].update(meta)
    return b


def workload(b: Any) -> o.Workload:
    body = b if isinstance(b, dict) else b.obj()
    got = normalize(Document(FILE, DOC, body))
    assert isinstance(got, o.Workload)
    return got


def refuse(b: Any) -> ManifestError:
    body = b if isinstance(b, dict) else b.obj()
    with pytest.raises(ManifestError) as exc:
        normalize(Document(FILE, DOC, body))
    return exc.value


def kueue_name(job_name: str, uid: str) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK, written out independently of events.jobs."""
    digest = hashlib.sha1(b"Job\nbatch\n" + job_name.encode() + b"\n" + uid.encode()).hexdigest()
    return ("job-" + job_name)[:247] + "-" + digest[:5]


# --- count -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "want_count"),
    [
        pytest.param(None, None, 1, id="neither set: parallelism defaults to 1"),
        pytest.param(4, None, 4, id="parallelism 4, no completions: 4 pods"),
        pytest.param(4, 4, 4, id="parallelism equal to completions"),
        pytest.param(4, 2, 2, id="completions below parallelism cap the count"),
        pytest.param(2, 10, 2, id="completions above parallelism do not raise it"),
        pytest.param(None, 3, 1, id="only completions: parallelism still defaults to 1"),
        pytest.param(0, None, 0, id="parallelism 0: no pods"),
        pytest.param(5, 0, 0, id="completions 0: no pods"),
    ],
)
def test_count_is_min_of_parallelism_and_completions(parallelism, completions, want_count):
    wl = workload(with_spec(job().request(cpu=1), parallelism=parallelism, completions=completions))
    assert [(ps.name, ps.count) for ps in wl.pod_sets] == [("main", want_count)]


# --- per-pod requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [
        pytest.param({"containers": [c("a", {"cpu": "1", "memory": "1Gi"}),
                                     c("b", {"cpu": "500m", "memory": "512Mi"})]},
                     {"cpu": 1500, "memory": Gi + 512 * Mi}, id="requests summed over containers"),
        pytest.param({"containers": [c("a", {"cpu": 1}), c("b", {"nvidia.com/gpu": 2})]},
                     {"cpu": 1000, "nvidia.com/gpu": 2}, id="different resources in different containers"),
        pytest.param({"containers": [c("a", {"cpu": 1})], "initContainers": [c("init", {"cpu": 3, "memory": "1Gi"})]},
                     {"cpu": 3000, "memory": Gi}, id="an init container larger than the containers is the maximum"),
        pytest.param({"containers": [c("a", {"cpu": 2}), c("b", {"cpu": 2})],
                      "initContainers": [c("init", {"cpu": 3})]},
                     {"cpu": 4000}, id="an init container smaller than the sum does not add"),
        pytest.param({"containers": [c("a", {"cpu": 1})],
                      "initContainers": [c("i1", {"cpu": 2}), c("i2", {"cpu": "2500m"})]},
                     {"cpu": 2500}, id="init containers run one at a time: the largest counts, not the sum"),
        pytest.param({"containers": [c("a", {"cpu": 1})],
                      "initContainers": [c("proxy", {"cpu": "250m"}, sidecar=True)]},
                     {"cpu": 1250}, id="a sidecar (restartPolicy Always) adds to the containers"),
        pytest.param({"containers": [c("a", {"cpu": 1})],
                      "initContainers": [c("proxy", {"cpu": "500m"}, sidecar=True), c("init", {"cpu": 2})]},
                     {"cpu": 2500}, id="an init container after a sidecar runs alongside it"),
        pytest.param({"containers": [c("a", {"cpu": 1})],
                      "initContainers": [c("init", {"cpu": 2}), c("proxy", {"cpu": "500m"}, sidecar=True)]},
                     {"cpu": 2000}, id="an init container before a sidecar runs alone"),
        pytest.param({"containers": [c("a", {"cpu": 1})], "overhead": {"cpu": "100m", "memory": "64Mi"}},
                     {"cpu": 1100, "memory": 64 * Mi}, id="pod overhead is added"),
        pytest.param({"containers": [c("a", {"cpu": 1})], "initContainers": [c("init", {"cpu": 3})],
                      "overhead": {"cpu": "100m"}},
                     {"cpu": 3100}, id="overhead is added after the init-container maximum"),
        pytest.param({"containers": [c("a", limits={"cpu": 2, "memory": "1Gi"})]},
                     {"cpu": 2000, "memory": Gi}, id="limits stand in for missing requests"),
        pytest.param({"containers": [c("a", {"cpu": 1}, limits={"cpu": 2, "memory": "1Gi"})]},
                     {"cpu": 1000, "memory": Gi}, id="a request wins over its limit; a lone limit still counts"),
        pytest.param({"containers": [c("a", {"cpu": 1})], "initContainers": [c("init", limits={"cpu": 4})]},
                     {"cpu": 4000}, id="limits stand in for requests in init containers too"),
        pytest.param({"containers": [c("a")]}, {}, id="no resources at all"),
        pytest.param({"containers": [{"name": "a", "image": "busybox"}]}, {}, id="no resources key"),
        pytest.param({"containers": [c("a", {"cpu": 0.5, "memory": "1e9"})]}, {"cpu": 500, "memory": 10**9},
                     id="YAML float and exponent quantities"),
    ],
)
def test_per_pod_requests(pod_spec, want):
    wl = workload(with_pod(job(), **pod_spec))
    assert dict(wl.pod_sets[0].requests) == want
    assert list(wl.pod_sets[0].requests) == sorted(want.items())


def test_requests_are_per_pod_not_multiplied_by_count():
    wl = workload(job().parallelism(4).request(cpu=2))
    assert (wl.pod_sets[0].count, wl.pod_sets[0].requests) == (4, (("cpu", 2000),))


def test_pod_template_node_selection_is_kept():
    wl = workload(with_pod(job(), containers=[c("a", {"cpu": 1})], nodeSelector={"gpu-type": "a100"},
                           tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]))
    ps = wl.pod_sets[0]
    assert ps.node_selector == (("gpu-type", "a100"),)
    assert ps.tolerations == (o.Toleration(key="spot", operator="Exists", effect="NoSchedule"),)


# --- partial admission -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "annotation", "want_min_count"),
    [
        pytest.param(4, None, "2", 2, id="min-parallelism 2 of 4"),
        pytest.param(4, None, "1", 1, id="min-parallelism 1"),
        pytest.param(4, None, "3", 3, id="min-parallelism one below parallelism"),
        pytest.param(4, 3, "2", 2, id="below the pod count min(parallelism, completions)"),
        pytest.param(4, None, "+2", 2, id="a sign is allowed, as Go's Atoi allows it"),
        pytest.param(4, None, None, None, id="no annotation: no partial admission"),
    ],
)
def test_min_parallelism_annotation(parallelism, completions, annotation, want_min_count):
    b = job().parallelism(parallelism, completions).request(cpu=1)
    if annotation is not None:
        b = b.annotate(MIN_PARALLELISM, annotation)
    assert workload(b).pod_sets[0].min_count == want_min_count


@pytest.mark.parametrize(
    ("parallelism", "completions", "annotation", "message"),
    [
        pytest.param(4, None, "two", "must be an integer, got 'two'", id="not a number"),
        pytest.param(4, None, "", "must be an integer, got ''", id="empty"),
        pytest.param(4, None, "1.5", "must be an integer, got '1.5'", id="fraction"),
        pytest.param(4, None, " 2", "must be an integer, got ' 2'", id="leading space"),
        pytest.param(4, None, "\u00b2", "must be an integer, got '\u00b2'", id="superscript two is not a digit for us"),
        pytest.param(4, None, "0", "must be greater than 0 and less than the Job's pod count "
                     "min(parallelism, completions) (4), got 0", id="zero"),
        pytest.param(4, None, "-1", "got -1", id="negative"),
        pytest.param(4, None, "4", "(4), got 4", id="equal to parallelism"),
        pytest.param(4, None, "5", "(4), got 5", id="above parallelism"),
        pytest.param(4, 2, "3", "(2), got 3", id="above completions, which cap the pod count"),
        pytest.param(1, None, "1", "(1), got 1", id="a single pod cannot be admitted partially"),
    ],
)
def test_invalid_min_parallelism_annotation(parallelism, completions, annotation, message):
    err = refuse(job().parallelism(parallelism, completions).request(cpu=1).annotate(MIN_PARALLELISM, annotation))
    assert (err.file, err.document, err.obj) == (FILE, DOC, "Job team-a/train")
    assert err.field == f"metadata.annotations.{MIN_PARALLELISM}"
    assert message in err.message
    assert str(err).startswith(f"{FILE}: document {DOC} (Job team-a/train): metadata.annotations.{MIN_PARALLELISM}: ")


# --- priority --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "template_class", "want"),
    [
        pytest.param("high", None, o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="priority-class label: a WorkloadPriorityClass"),
        pytest.param(None, "batch-low", o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="batch-low"),
                     id="template priorityClassName: a PriorityClass"),
        pytest.param("high", "batch-low", o.PriorityRef(source=WORKLOAD_PRIORITY_CLASS_SOURCE, name="high"),
                     id="the label wins over the template"),
        pytest.param("", "batch-low", o.PriorityRef(source=POD_PRIORITY_CLASS_SOURCE, name="batch-low"),
                     id="an empty label falls through to the template"),
        pytest.param(None, None, None, id="neither: no priority reference"),
    ],
)
def test_priority_reference(label, template_class, want):
    b = job().request(cpu=1)
    if label is not None:
        b = b.label("kueue.x-k8s.io/priority-class", label)
    body = b.obj()
    if template_class is not None:
        body["spec"]["template"]["spec"]["priorityClassName"] = template_class
    wl = workload(body)
    assert wl.priority_ref == want
    assert wl.priority is None


# --- identity --------------------------------------------------------------------------------


def test_owner_reference_points_at_the_job():
    wl = workload(edit_meta(job(), uid="6f1c2d3e-0000-4000-8000-000000000001").request(cpu=1))
    assert wl.owner == o.OwnerReference(api_version="batch/v1", kind="Job", name="train",
                                        uid="6f1c2d3e-0000-4000-8000-000000000001")


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        pytest.param("train", "6f1c2d3e-0000-4000-8000-000000000001", id="short name with a uid"),
        pytest.param("x" * 63, "uid-1", id="63-character job name"),
        pytest.param("n" * 250, "uid-2", id="long job name: prefix truncated to 247 characters"),
    ],
)
def test_workload_name_is_kueues(name, uid):
    wl = workload(edit_meta(job(name), uid=uid).request(cpu=1))
    assert wl.name == kueue_name(name, uid)
    assert wl.name == workload_name_for_job(name, uid)
    assert re.fullmatch(r"job-[a-z0-9-]+-[0-9a-f]{5}", wl.name)
    assert len(wl.name) <= 253


def test_workload_name_without_a_uid_is_stable_and_job_shaped():
    first = workload(job().request(cpu=1))
    again = workload(job().request(cpu=1))
    assert first.name == again.name
    assert re.fullmatch(r"job-train-[0-9a-f]{5}", first.name)
    assert first.owner is not None
    assert first.name == kueue_name("train", first.owner.uid)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(("train", "team-a", "uid-1"), ("train", "team-a", "uid-2"), id="same name, another uid"),
        pytest.param(("train", "team-a", None), ("train", "team-b", None), id="same name, another namespace"),
    ],
)
def test_different_jobs_get_different_workload_names(a, b):
    def named(name: str, ns: str, uid: str | None) -> o.Workload:
        bld = job(name, ns).request(cpu=1)
        if uid is not None:
            edit_meta(bld, uid=uid)
        return workload(bld)

    assert named(*a).name != named(*b).name


def test_the_workload_carries_the_jobs_queue_namespace_time_and_metadata():
    wl = workload(job().label("team", "a").annotate("note", "x").created(61).request(cpu=1))
    assert (wl.namespace, wl.queue_name, wl.creation_time, wl.active) == ("team-a", "lq", 1_735_689_661_000, True)
    assert wl.labels == ((QUEUE_LABEL, "lq"), ("team", "a"))
    assert wl.annotations == (("note", "x"),)
    assert wl.key == f"team-a/{wl.name}"


def test_a_job_without_a_namespace_is_in_default():
    body = job().request(cpu=1).obj()
    del body["metadata"]["namespace"]
    assert workload(body).namespace == "default"


# --- which Jobs are Kueue's ------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(None, id="no labels at all"),
        pytest.param({}, id="empty labels"),
        pytest.param({"app": "train"}, id="other labels only"),
        pytest.param({"kueue.x-k8s.io/priority-class": "high"}, id="a priority class but no queue"),
    ],
)
def test_a_job_without_the_queue_label_is_ignored(labels):
    body = job(queue=None).request(cpu=1).obj()
    if labels is None:
        del body["metadata"]["labels"]
    else:
        body["metadata"]["labels"] = labels
    assert normalize(Document(FILE, DOC, body)) is None


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(job(queue=""), f"metadata.labels.{QUEUE_LABEL}", "must not be empty", id="empty queue label"),
        pytest.param(job(queue="Team_Queue"), f"metadata.labels.{QUEUE_LABEL}",
                     "invalid value 'Team_Queue': must be a lowercase RFC 1123 subdomain (a LocalQueue name)",
                     id="queue label that cannot name a LocalQueue"),
        pytest.param(with_spec(job(), parallelism=-1), "spec.parallelism",
                     "must be greater than or equal to 0, got -1", id="negative parallelism"),
        pytest.param(with_spec(job(), completions=-1), "spec.completions",
                     "must be greater than or equal to 0, got -1", id="negative completions"),
        pytest.param(with_spec(job(), parallelism="3"), "spec.parallelism", "Expected `int | null`, got `str`",
                     id="parallelism is a string"),
        pytest.param(with_pod(job(), containers=[c("a", {"cpu": "1", "pods": "1"})]),
                     f"{POD}.containers[0].resources.requests.pods", "'pods' is a reserved resource name",
                     id="pods requested explicitly"),
        pytest.param(with_pod(job(), containers=[c("a"), c("b", {"cpu": "1.2.3"})]),
                     f"{POD}.containers[1].resources.requests.cpu", "'1.2.3' is not a quantity",
                     id="a request that is not a quantity, in the second container"),
        pytest.param(with_pod(job(), containers=[c("a", limits={"memory": "-1Gi"})]),
                     f"{POD}.containers[0].resources.limits.memory", "must be greater than or equal to 0",
                     id="a negative limit standing in for a request"),
        pytest.param(with_pod(job(), containers=[c("a")], initContainers=[c("i", {"cpu": "x"})]),
                     f"{POD}.initContainers[0].resources.requests.cpu", "'x' is not a quantity",
                     id="bad init container request"),
        pytest.param(with_pod(job(), containers=[c("a")], overhead={"cpu": "lots"}), f"{POD}.overhead.cpu",
                     "'lots' is not a quantity", id="bad overhead"),
        pytest.param(with_spec(job(), template="pod"), "spec.template", "Expected `object`, got `str`",
                     id="template is a string"),
        pytest.param(edit_meta(job(), creationTimestamp="soon").obj(), "metadata.creationTimestamp",
                     "invalid RFC 3339 time 'soon'", id="bad creationTimestamp"),
    ],
)
def test_invalid_jobs_are_refused_with_the_field(manifest, field, message):
    err = refuse(manifest)
    assert (err.file, err.document, err.obj, err.field) == (FILE, DOC, "Job team-a/train", field)
    assert message in err.message
    assert str(err).startswith(f"{FILE}: document {DOC} (Job team-a/train): {field}: ")


def test_invalid_job_name_is_refused():
    err = refuse(job("Train_1").request(cpu=1))
    assert (err.obj, err.field) == ("Job Train_1", "metadata.name")
    assert "invalid value 'Train_1'" in err.message


def test_unknown_fields_of_the_pod_template_are_accepted():
    """Pod specs have hundreds of fields Kueue ignores; refusing them would refuse real Jobs."""
    wl = workload(with_pod(job(), containers=[c("a", {"cpu": 1}) | {"command": ["sleep", "1"], "env": []}],
                           restartPolicy="Never", securityContext={"runAsUser": 1000}))
    assert wl.pod_sets[0].requests == (("cpu", 1000),)


def test_the_whole_workload_of_a_simple_job():
    b = edit_meta(job("sample-job", "team-b", "user-queue").parallelism(3).request(cpu="1", memory="200Mi"),
                  uid="a-uid")
    got = workload(b)
    assert re.fullmatch(r"[0-9a-f]{32}", got.uid)
    assert got == o.Workload(
        namespace="team-b",
        name=kueue_name("sample-job", "a-uid"),
        uid=got.uid,
        queue_name="user-queue",
        pod_sets=(o.PodSet(name="main", count=3, requests=(("cpu", 1000), ("memory", 200 * Mi))),),
        owner=o.OwnerReference(api_version="batch/v1", kind="Job", name="sample-job", uid="a-uid"),
        labels=((QUEUE_LABEL, "user-queue"),),
    )
