"""Hostile input at every door (hypothesis): a clean refusal or a valid state, never another exception.

Valid manifests are mutated at a random place (negative, huge and out-of-type values, deep
nesting, numbers longer than Python's int() takes, blanks around quantities, duplicated list
items), random text is fed to the YAML reader, random bytes and random or deeply nested JSON to
the codec, and a stream of good and bad records to the scheduler. Whatever comes in:

- the manifest parser returns objects that pass ``validate_object``, or raises ``ManifestError``;
- the codec returns an envelope or raises ``MalformedRecord`` / ``UnknownEventType``;
- the scheduler dead-letters what it cannot fold, and the quota it admits never exceeds the
  ClusterQueue's nominal quota, nor goes negative.

Derandomized and bounded, so the suite runs in seconds and the same way on every run.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import objects as o
from events.codec import MalformedRecord, UnknownEventType, decode_decision, decode_envelope, encode
from events.envelope import Envelope, Topics
from events.manifests import ManifestError, load
from events.messages import ObjectApplied
from events.validation import validate_object
from services.app.simulate import fold_files, run
from services.core.state import admission_usage
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler, SchedulerStopped
from tests.builders import a_cluster_queue, a_cohort, a_flavor, a_job, a_local_queue, a_namespace, a_workload

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NOMINAL_CPU = 27
T = Topics()

RUNTIME = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime", "metadata": {"name": "rt"},
           "spec": {"mlPolicy": {"numNodes": 2, "mpi": {"runLauncherAsNode": True}}, "template": {"spec": {
               "replicatedJobs": [
                   {"name": "init", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": {"spec": {
                       "containers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}]}}}}},
                   {"name": "node", "template": {
                       "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                       "spec": {"template": {"spec": {"containers": [
                           {"name": "node", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}}}
QUOTA = [a_flavor("default").obj(), a_cluster_queue("cq").selector({}).flavor("default", cpu=NOMINAL_CPU).obj(),
         a_local_queue("team", "lq", "cq").obj(), RUNTIME]
TARGETS = [
    a_workload("team", "w").queue("lq").pod_set("main", 2, cpu=1).obj(),
    a_workload("team", "held").queue("lq").pod_set("a", 2, cpu=1).pod_set("b", 1, cpu="500m")
    .admitted("cq", {"cpu": "default"}).obj(),
    a_job("team", "j", "lq").parallelism(3).request(cpu="1").annotate("kueue.x-k8s.io/job-min-parallelism", "2")
    .label("app", "x").obj(),
    a_cluster_queue("other").selector({"matchLabels": {"team": "a"}}).cohort("c")
    .flavor("default", cpu=(4, 2, 1)).obj(),
    a_cohort("c").parent("root").flavor("default", cpu=3).obj(),
    a_namespace("team", team="a").obj(),
    {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration",
     "waitForPodsReady": {"enable": True, "timeout": "5m"}},
    # The workload kinds of events.jobkinds: podSets from replicated jobs, replica maps, Ray groups.
    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
     "metadata": {"name": "js", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
     "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": {
         "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
     "metadata": {"name": "pt", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
     "spec": {"runPolicy": {"schedulingPolicy": {"priorityClass": "p"}}, "pytorchReplicaSpecs": {
         "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {
             "requests": {"cpu": "1"}}}]}}},
         "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {
             "limits": {"cpu": "1"}}}]}}}}}},
    {"apiVersion": "ray.io/v1", "kind": "RayJob",
     "metadata": {"name": "rj", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                  "annotations": {"ray.io/ft-enabled": "true"}},
     "spec": {"shutdownAfterJobFinishes": True, "submissionMode": "K8sJobMode", "rayClusterSpec": {
         "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "i", "resources": {
             "requests": {"cpu": "1"}}}]}}},
         "workerGroupSpecs": [{"groupName": "g", "replicas": 2, "numOfHosts": 2, "template": {"spec": {
             "containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}]}}}]}}},
]
TARGETS += [
    RUNTIME,  # a second one of the same name: the later one wins
    {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
     "metadata": {"name": "tj", "namespace": "team", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
     "spec": {"runtimeRef": {"name": "rt", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
              "suspend": True, "trainer": {"numNodes": 3, "resourcesPerNode": {"requests": {"cpu": "2"}}},
              "runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                  {"name": "node", "template": {"spec": {"template": {"spec": {
                      "nodeSelector": {"zone": "a"}, "containers": [{"name": "node", "env": []}]}}}}}]}}}}]}},
]
_TOKEN = re.compile(r'"@(deep|digits|laughs):(\d+)@"')


def _expand(match: re.Match[str]) -> str:
    """Values JSON cannot carry as such, written into the text: deep nesting, long integers, aliases."""
    kind, n = match.group(1), int(match.group(2))
    if kind == "deep":
        return "[" * n + "]" * n
    if kind == "digits":
        return "1" * n
    return "&a [" + ", ".join(["x"] * 8) + "]" + "".join(f", &a{i} [" + ", ".join(["*a"] * 8) + "]"
                                                           for i in range(n))


NUMBERS = st.sampled_from([-1, -100, 0, 1, 3, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**30])
TEXTS = st.sampled_from([" 4 ", "4 ", "-1", "1e400", "9" * 70, "8Ei", "1.5", "500m", "", " ", "bad key!", "-x-",
                         "x" * 64, "a/b/c", "999999999999999999999h", "1h30m", "true"])
HOSTILE = st.one_of(
    NUMBERS,
    NUMBERS,  # twice as likely: most limits are on numbers
    st.integers(),
    TEXTS,
    st.text(max_size=12),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(-3, 3), max_size=3),
    st.integers(10, 3000).map(lambda n: f"@deep:{n}@"),
    st.integers(4000, 6000).map(lambda n: f"@digits:{n}@"),
    st.sampled_from([1, 2, 8, 12]).map(lambda n: f"@laughs:{n}@"),  # 8**2 nodes, or far past the bound
)


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a manifest body, in document order."""
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_places(v, (*path, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_places(v, (*path, i)))
    return out


def _at(body: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        body = body[key]
    return body


@st.composite
def mutated_manifests(draw: st.DrawFn) -> str:
    body = copy.deepcopy(draw(st.sampled_from(TARGETS)))
    for _ in range(draw(st.integers(1, 3))):
        # Anywhere but the identity of the object (a missing kind or name says little more), and
        # mostly a leaf: a value replaced is more often a limit tested than a shape refused.
        places = [p for p in _places(body)[1:] if p[0] not in ("apiVersion", "kind")
                  and p[:2] not in (("metadata", "name"), ("metadata", "namespace"))]
        leaves = [p for p in places if not isinstance(_at(body, p), dict | list)]
        use_leaf = bool(leaves) and draw(st.integers(0, 3)) > 0
        path = draw(st.sampled_from(leaves if use_leaf else places))
        parent = _at(body, path[:-1])
        last = path[-1]
        if isinstance(parent[last], list) and parent[last] and draw(st.booleans()):
            parent[last].append(copy.deepcopy(parent[last][0]))  # a duplicated item (podSetAssignments, ...)
        elif isinstance(parent, dict) and draw(st.integers(0, 4)) == 0:
            parent[draw(st.text(max_size=8))] = draw(HOSTILE)  # an extra field
        else:
            parent[last] = draw(HOSTILE)
    return _TOKEN.sub(_expand, json.dumps(body, ensure_ascii=False))


def _check_manifests(text: str) -> None:
    """Refused, or valid objects that simulate folds and schedules within the quota: what "cq"
    uses is at most its nominal quota, or what arrived already holding it if that was more."""
    try:
        objects = load({"f.yaml": text})
    except ManifestError:
        return
    for _, obj in objects:
        validate_object(obj)
    state = run(fold_files({"f.yaml": text}), cycles=None, max_cycles=50).state
    held: dict[tuple[str, str], int] = {}
    for _, obj in objects:
        if isinstance(obj, o.Workload) and obj.admission is not None and obj.admission.cluster_queue == "cq":
            for fr, value in admission_usage(obj.admission).items():
                held[fr] = held.get(fr, 0) + value
    if "cq" not in state.cluster_queues:
        return
    state.ensure_indexed()
    for fr, used in state.cq_node("cq").usage.items():
        assert 0 <= used <= max(NOMINAL_CPU * 1000, held.get(fr, 0)), (fr, used)


@SETTINGS
@given(text=mutated_manifests())
def test_a_mutated_manifest_is_refused_or_valid(text: str) -> None:
    _check_manifests("\n---\n".join(json.dumps(b) for b in QUOTA) + "\n---\n" + text)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(text=st.text(alphabet=st.sampled_from(list("[]{}:,-&*!|>'\"#% \n\t?@`aZ09.\\\x00\u00e9")), max_size=300))
def test_random_text_is_refused_or_valid(text: str) -> None:
    _check_manifests(text)


# --- records -----------------------------------------------------------------------------------------------


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


def _deep_record(n: int, opener: bytes) -> bytes:
    closer = b"]" if opener == b"[" else b"}"
    inner = (b'{"a":' if opener == b"{" else b"[") * n + b"0" + (closer * n)
    return b'{"id":"x","source":"s","event":{"type":"clock.ticked","junk":' + inner + b"}}"


RECORDS = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    JSON.map(lambda v: json.dumps({"id": "x", "source": "s", "event": v}).encode()),
    st.tuples(st.integers(1, 5000), st.sampled_from([b"[", b"{"])).map(lambda t: _deep_record(*t)),
    st.integers(0, 5000).map(lambda n: b"[" * n),
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(data=RECORDS)
def test_the_codec_decodes_or_refuses_any_bytes(data: bytes) -> None:
    with contextlib.suppress(MalformedRecord, UnknownEventType):
        decode_envelope(data)
    with contextlib.suppress(MalformedRecord, UnknownEventType):
        decode_decision(data)


def _record(obj: o.AnyObject) -> bytes:
    return encode(Envelope(id="x", source="fuzz", event=ObjectApplied(object=obj)))


def _workload_record(name: str) -> dict[str, Any]:
    wl = next(obj for _, obj in load({"w.yaml": json.dumps(
        a_workload("team", name).queue("lq").pod_set("main", 1, cpu=1).obj())}) if isinstance(obj, o.Workload))
    raw: dict[str, Any] = json.loads(_record(wl))
    return raw


ASSIGNMENT = {"name": "main", "flavors": [["cpu", "default"]], "resource_usage": [["cpu", 1000]], "count": 1}


@st.composite
def hostile_records(draw: st.DrawFn, index: int) -> bytes:
    """A Workload record changed where it decides quota, or any of the hostile byte strings."""
    if draw(st.integers(0, 3)) == 0:
        return draw(RECORDS)
    raw = _workload_record(f"bad{index}")
    wl = raw["event"]["object"]
    ps = wl["pod_sets"][0]
    field = draw(st.sampled_from(["count", "requests", "admission", "min_count", "priority", "labels", "pod_sets"]))
    value = draw(st.sampled_from([-100, -1, 2**31, 2**63, 10**30]))
    if field == "count":
        ps["count"] = value
    elif field == "requests":
        ps["requests"] = [["cpu", value]]
    elif field == "min_count":
        ps["min_count"] = value
    elif field == "priority":
        wl["priority"] = value
    elif field == "labels":
        wl["labels"] = [[draw(st.sampled_from(["bad key", "-x", "a/b/c", "x" * 64])), "v"]]
    elif field == "pod_sets":
        wl["pod_sets"] = draw(st.sampled_from([[], [ps, ps], [ps] * 9]))
    else:
        count = draw(st.sampled_from([-100, 0, 1, 5, 2**31]))
        assignments = [{**ASSIGNMENT, "count": count}] * draw(st.integers(1, 3))
        if draw(st.booleans()):
            assignments = [{**ASSIGNMENT, "name": "nope"}]
        wl["admission"] = {"cluster_queue": "cq", "pod_set_assignments": assignments}
    return json.dumps(raw).encode()


@st.composite
def record_streams(draw: st.DrawFn) -> list[bytes]:
    setup = [_record(obj) for _, obj in load({"q.yaml": "\n---\n".join(json.dumps(b) for b in QUOTA)})]
    stream = [draw(hostile_records(i)) for i in range(draw(st.integers(1, 6)))]
    good = [json.dumps(_workload_record(f"w{i}")).encode() for i in range(NOMINAL_CPU + 3)]
    return setup + draw(st.permutations(stream + good))


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=record_streams())
def test_the_scheduler_dead_letters_what_it_cannot_fold_and_never_overadmits(stream: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        log = SqliteLog(directory)
        try:
            log.append(T.cluster_events, [("k", value) for value in stream])
            s = Scheduler(log)
            try:
                while s.step():
                    pass
            except SchedulerStopped as e:
                assert "unknown event type" in str(e)  # a newer producer's type: a stop by design
                return
            dead = len(log.read(T.dead_letters, 0, 10_000))
        finally:
            log.close()
    assert s.stats.events + dead == len(stream)
    for rec in s.state.workloads.values():
        validate_object(rec.obj)
    node = s.state.cq_node("cq")
    for fr, used in node.usage.items():
        assert 0 <= used <= NOMINAL_CPU * 1000, (fr, used)
