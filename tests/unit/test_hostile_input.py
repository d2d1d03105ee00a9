"""Issue #24, case by case: every door refuses what Kubernetes and Kueue refuse, cleanly.

``simulate`` exits 2 naming file, document, object and field (never a traceback); the scheduler
dead-letters an invalid or undecodable record with the reason and folds the rest; the simulated
cluster falls back to its default duration. The limits themselves are in ``events.validation``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from events import objects as o
from events import validation as v
from events.cluster import SIM_DURATION_ANNOTATION
from events.codec import DecisionPeek, MalformedRecord, decode_decision, decode_envelope, encode, peek_decision
from events.envelope import Envelope, Topics
from events.manifests import load
from events.messages import AdmitWorkload, ClockTicked, ObjectApplied
from services.app.cli import main
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.durations import DurationError, duration_of, parse_duration
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_job, a_local_queue, a_workload

T = Topics()
JOB_MIN = "kueue.x-k8s.io/job-min-parallelism"


def _quota(cpu: int = 27) -> list[Builder]:
    return [a_flavor("default"), a_cluster_queue("cq").selector({}).flavor("default", cpu=cpu),
            a_local_queue("team", "lq", "cq")]


def _wl(name: str = "w", count: Any = 1, cpu: Any = 1) -> Any:
    return a_workload("team", name).queue("lq").pod_set("main", count, cpu=cpu)


def _admitted(*assignments: dict[str, Any], count: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = _wl("held", count).admitted("cq", {"cpu": "default"}).obj()
    body["status"]["admission"]["podSetAssignments"] = [{"flavors": {"cpu": "default"}, **a} for a in assignments]
    return body


def _job(**edits: Any) -> dict[str, Any]:
    body = a_job("team", "j", "lq").obj()
    for key, value in edits.items():
        if key == "template" and value is None:
            del body["spec"]["template"]
        elif key == "containers":
            body["spec"]["template"]["spec"]["containers"] = value
        else:
            body["spec"][key] = value
    return body


def _dump(*objects: Builder | dict[str, Any]) -> str:
    bodies = [b.obj() if isinstance(b, Builder) else b for b in objects]
    return yaml.safe_dump_all(bodies, sort_keys=False)


def _cohort_chain(n: int) -> list[Builder]:
    return [a_cohort(f"c{i}").parent(f"c{i + 1}") for i in range(n)]


# --- simulate: exit 2, file, document, object and field ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(_dump(*_quota(), _wl(count=-100)), "document 4 (Workload team/w): spec.podSets[0].count: "
                     "must be greater than or equal to 0, got -100", id="a negative podSet count"),
        pytest.param(_dump(*_quota(), _admitted({"name": "main", "count": -100})),
                     "(Workload team/held): status.admission.podSetAssignments[0].count: must be greater than or "
                     "equal to 0, got -100", id="a negative pre-admitted assignment count"),
        pytest.param(_dump(*_quota(), _wl(count=2**31)), "spec.podSets[0].count: must be at most 2147483647",
                     id="a podSet count above int32"),
        pytest.param(_dump(*_quota(), _admitted({"name": "main", "count": 1}, {"name": "main", "count": 1})),
                     "status.admission.podSetAssignments[1].name: duplicate value 'main'",
                     id="the same podSet assigned twice"),
        pytest.param(_dump(*_quota(), _admitted({"name": "main", "count": 5})),
                     "status.admission.podSetAssignments[0].count: must be at most the podSet's count (1), got 5",
                     id="an assignment counting more pods than its podSet has"),
        pytest.param(_dump(*_quota(), _wl(cpu="1" + "0" * 5000)),
                     "spec.podSets[0].template.spec.containers[0].resources.requests.cpu: '1000",
                     id="a quantity of 5001 digits"),
        pytest.param(_dump(*_quota(), _wl(cpu="9" * 30)),
                     "requests.cpu: must be at most 9223372036854775807 (Kueue's int64 amount)",
                     id="a quantity whose amount overflows Kueue's int64"),
        pytest.param(_dump(*_quota()) + "---\n" + _dump(_wl()).replace("count: 1", "count: " + "1" * 5000),
                     "document 4: invalid YAML (line ", id="a count of 5000 digits"),
        pytest.param(_dump(*_quota(), a_job("team", "j", "lq").parallelism(3).annotate(JOB_MIN, "1" * 5000)),
                     f"(Job team/j): metadata.annotations.{JOB_MIN}: must be between", id="a min-parallelism of "
                     "5000 digits"),
        pytest.param(_dump(*_quota()) + "---\n" + _dump(a_flavor("x")) + "ignored: " + "[" * 500 + "]" * 500,
                     "document 4: invalid YAML (line 35): nested deeper than 64 levels",
                     id="YAML nested 500 deep inside an ignored field"),
        pytest.param(_dump(*_quota()) + "---\n" + _dump(a_flavor("x")) + "".join(
            "  " * i + f"k{i}:\n" for i in range(500)), "document 4: invalid YAML (line 98): nested deeper than 64",
            id="block YAML nested 500 deep"),
        pytest.param(_dump(*_quota(), *_cohort_chain(2000)),
                     "document 103 (Cohort c99): spec.parentName: the Cohort tree would be more than 100 Cohorts deep",
                     id="a Cohort parentName chain of 2000"),
        pytest.param("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
                     f"waitForPodsReady: {{enable: true, timeout: '{'9' * 30}h'}}\n",
                     "waitForPodsReady.timeout: invalid duration '999999999999999999999999999999h': longer than "
                     "Go's maximum duration", id="a waitForPodsReady timeout past Go's maximum duration"),
        pytest.param("apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
                     f"waitForPodsReady: {{enable: true, timeout: '{'9' * 400}h'}}\n",
                     "waitForPodsReady.timeout: invalid duration '99999999999999999999...(401 characters)'",
                     id="a waitForPodsReady timeout of 400 digits"),
        pytest.param(_dump(*_quota(), _job(containers=[])),
                     "(Job team/j): spec.template.spec.containers: must have at least 1 item", id="a Job without "
                     "containers"),
        pytest.param(_dump(*_quota(), _job(template=None)),
                     "(Job team/j): spec.template.spec.containers: must have at least 1 item",
                     id="a Job without a template"),
        pytest.param(_dump(*_quota(), a_job("team", "j", "lq").label("bad key!", "x")),
                     "metadata.labels.bad key!: invalid label key 'bad key!'", id="a label key with a blank"),
        pytest.param(_dump(*_quota(), a_job("team", "j", "lq").label("app", "-x-")),
                     "metadata.labels.app: invalid label value '-x-'", id="a label value starting with a dash"),
        pytest.param(_dump(*_quota(), a_job("team", "j", "lq").label("Example.com/app", "x")),
                     "a prefix must be a lowercase RFC 1123 subdomain", id="a label key with an upper-case prefix"),
        pytest.param(_dump(*_quota(), a_job("team", "j", "lq").label("app", "x" * 64)),
                     "metadata.labels.app: invalid label value", id="a label value of 64 characters"),
        pytest.param(_dump(*_quota(), _wl(cpu=" 4 ")),
                     "requests.cpu: ' 4 ': a quantity must not have leading or trailing blanks",
                     id="a quantity with blanks around it"),
    ],
)
def test_simulate_refuses_with_exit_2_and_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          text: str, want: str) -> None:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    assert main(["simulate", str(path), "-o", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {path}: document ")
    assert want in err
    assert "Traceback" not in err


def test_simulate_refuses_an_endless_file_by_its_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "/dev/zero"]) == 2
    assert capsys.readouterr().err == f"error: /dev/zero: document 0: larger than {v.MAX_MANIFEST_BYTES} bytes\n"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
            f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(10)),
            "aliases expand the document to more than", id="a billion laughs"),
        pytest.param("a: &a " + "[" * 40 + "x" + "]" * 40 + "\nb: " + "[" * 40 + "*a" + "]" * 40 + "\n",
                     "an alias nests the document deeper than 64 levels", id="an alias that nests past the bound"),
        pytest.param("a: &a [1, *a]\n", "an alias refers to a node that contains it", id="a recursive alias"),
    ],
)
def test_yaml_aliases_are_bounded(text: str, want: str) -> None:
    with pytest.raises(ValueError, match="invalid YAML") as exc:
        load({"f.yaml": text})
    assert want in str(exc.value)


def test_valid_input_at_the_limits_is_accepted() -> None:
    objs = [obj for _, obj in load({"f.yaml": _dump(
        *_quota(), _wl(count=2**31 - 1, cpu="1m"), *_cohort_chain(v.MAX_COHORT_DEPTH - 1),
        a_job("team", "j", "lq").label("example.com/" + "a" * 63, "b" * 63).annotate(JOB_MIN, "1").parallelism(2),
    )})]
    wl = next(obj for obj in objs if isinstance(obj, o.Workload))
    assert wl.pod_sets[0].count == 2**31 - 1
    assert sum(isinstance(obj, o.Cohort) for obj in objs) == v.MAX_COHORT_DEPTH - 1


# --- the scheduler: dead letters, never a crash -------------------------------------------------------


def _record(event_object: Any) -> bytes:
    return encode(Envelope(id="x", source="test", event=ObjectApplied(object=event_object)))


def _fold_all(log: SqliteLog, values: list[bytes]) -> tuple[Scheduler, list[dict[str, Any]]]:
    log.append(T.cluster_events, [("k", value) for value in values])
    s = Scheduler(log)
    while s.step():
        pass
    return s, [json.loads(r.value) for r in log.read(T.dead_letters, 0)]


def _valid_objects() -> list[o.AnyObject]:
    return [obj for _, obj in load({"q.yaml": _dump(*_quota())})]


def _wire_workload(count: int = 1, **changes: Any) -> o.Workload:
    wl = next(obj for _, obj in load({"w.yaml": _dump(*_quota(), _wl())}) if isinstance(obj, o.Workload))
    ps = wl.pod_sets[0]
    return msgspec.structs.replace(wl, pod_sets=(msgspec.structs.replace(ps, count=count),), **changes)


def _assignment(count: int, name: str = "main") -> o.PodSetAssignment:
    return o.PodSetAssignment(name=name, flavors=(("cpu", "default"),), resource_usage=(("cpu", 1000 * count),),
                              count=count)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param(_record(_wire_workload(-100)), "invalid Workload team/w: spec.podSets[0].count: must be "
                     "greater than or equal to 0, got -100", id="object.applied with count -100"),
        pytest.param(_record(_wire_workload(2**31)), "spec.podSets[0].count: must be at most 2147483647",
                     id="object.applied with a count above int32"),
        pytest.param(_record(_wire_workload(1, admission=o.Admission(cluster_queue="cq", pod_set_assignments=(
            _assignment(-100),)))), "status.admission.podSetAssignments[0].count: must be greater than or equal to 0",
            id="a pre-admitted assignment count of -100"),
        pytest.param(_record(_wire_workload(1, admission=o.Admission(cluster_queue="cq", pod_set_assignments=(
            _assignment(1), _assignment(1))))), "podSetAssignments[1].name: duplicate value 'main'",
            id="duplicate podSetAssignments"),
        pytest.param(_record(_wire_workload(1, admission=o.Admission(cluster_queue="cq", pod_set_assignments=(
            _assignment(5),)))), "podSetAssignments[0].count: must be at most the podSet's count (1), got 5",
            id="an assignment count above its podSet's"),
        pytest.param(_record(_wire_workload(1, admission=o.Admission(cluster_queue="cq", pod_set_assignments=(
            _assignment(1, "other"),)))), "podSetAssignments[0].name: no podSet named 'other'",
            id="an assignment naming no podSet"),
        pytest.param(_record(_wire_workload(1, labels=(("bad key", "x"),))), "metadata.labels.bad key: invalid label",
                     id="an invalid label key"),
        pytest.param(_record(o.ClusterQueue(name="neg", resource_groups=(o.ResourceGroup(
            covered_resources=("cpu",), flavors=(o.FlavorQuotas(name="default", resources=(
                ("cpu", o.Quota(nominal=-5)),)),)),))),
            "invalid ClusterQueue neg: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: must be greater "
            "than or equal to 0", id="a negative nominal quota"),
        pytest.param(encode(Envelope(id="t", source="s", event=ClockTicked(time=10**30))),
                     "invalid ClockTicked event: time: must be between", id="a time no one can print"),
        pytest.param(_record(_wire_workload(1, creation_time=-(10**20))), "metadata.creationTimestamp: must be "
                     "between", id="a creation time before year 1"),
        pytest.param(b'{"id":"x","source":"s","event":{"type":"clock.ticked","junk":' + b"[" * 1000 + b"]" * 1000
                     + b"}}", "nested deeper than 64 levels", id="a record nested 1000 deep inside an unknown field"),
        pytest.param(b'{"id":"x","source":"s","event":{"type":"clock.ticked","junk":"' + b"x" * v.MAX_RECORD_BYTES
                     + b'"}}', "bytes is larger than 1048576 bytes", id="a record over 1 MiB"),
    ],
)
def test_the_scheduler_dead_letters_invalid_records_and_folds_the_rest(tmp_path: Path, record: bytes,
                                                                      reason: str) -> None:
    log = SqliteLog(tmp_path)
    try:
        valid = [_record(obj) for obj in _valid_objects()]
        workloads = [_record(_wire_workload(1, name=f"w{i}")) for i in range(30)]
        s, dead = _fold_all(log, [*valid, record, *workloads])
        assert [d["offset"] for d in dead] == [len(valid)]
        assert reason in dead[0]["reason"]
        admitted = [d for d in (decode_decision(r.value) for r in log.read(T.decisions, 0, 10_000))
                    if isinstance(d, AdmitWorkload)]
        assert len(admitted) == 27  # 27 one-cpu workloads on 27 cpu, whatever the bad record said
        assert s.state.cq_node("cq").usage == {("default", "cpu"): 27_000}
    finally:
        log.close()


def test_a_cohort_chain_through_the_log_stops_at_the_bound(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path)
    try:
        chain = [_record(o.Cohort(name=f"c{i}", parent=f"c{i + 1}")) for i in range(150)]
        s, dead = _fold_all(log, chain)
        # c0 .. c98 under an undeclared c99 make 100 levels; c99 would make 101. c100 starts afresh.
        assert [d["offset"] for d in dead] == [99]
        assert dead[0]["reason"] == ("invalid Cohort c99: spec.parentName: the Cohort tree would be more than 100 "
                                     "Cohorts deep with parent 'c100'")
        assert len(s.state.cohorts) == 149
        s.state.ensure_indexed()  # the quota tree is built without a RecursionError
    finally:
        log.close()


def test_decoding_a_deep_record_is_malformed_not_a_recursion_error() -> None:
    with pytest.raises(MalformedRecord, match="nested deeper than 64 levels"):
        decode_envelope(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(MalformedRecord, match="nested too deeply"):
        decode_decision(b'{"type":"admit","x":' + b'{"a":' * 100_000 + b"0" + b"}" * 100_000 + b"}")
    assert peek_decision(b"[" * 100_000 + b"]" * 100_000) == DecisionPeek()


@pytest.mark.parametrize(
    ("data", "want"),
    [
        pytest.param(b"[" * 64 + b"]" * 64, None, id="64 levels"),
        pytest.param(b"[" * 65 + b"]" * 65, "nested deeper than 64 levels", id="65 levels"),
        pytest.param(b'["' + b"[" * 100 + b'"]', None, id="brackets inside a string"),
        pytest.param(b'["\\\\"' + b",[" * 65 + b"]" * 65 + b"]", "nested deeper", id="a quote after an escaped "
                     "backslash ends the string"),
        pytest.param(b'["\\"' + b"[" * 65 + b'"]', None, id="an escaped quote does not end the string"),
        pytest.param(b'"' + b'\\"' * 300_000 + b"[" * 65, None, id="an unterminated string of escaped quotes"),
        pytest.param(b"[" * 65 + b'"' + b"]" * 65, "nested deeper", id="a bracket run before any string"),
        pytest.param(b"[" * 100 + b"]" * 100 + b" " * v.MAX_RECORD_BYTES, "bytes is larger than 1048576 bytes",
                     id="over 1 MiB"),
    ],
)
def test_json_nesting_is_measured_outside_strings(data: bytes, want: str | None) -> None:
    problem = v.json_nesting_problem(data)
    assert problem == want if want is None else want in (problem or "")


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    record = encode(Envelope(id="[" * 100, source="{" * 100, event=ObjectApplied(
        object=o.Namespace(name="n", labels=(("k", "v"),)))))
    assert decode_envelope(record).id == "[" * 100


# --- the simulated cluster: its default, never a crash ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1" * 5000, id="5000 digits of milliseconds"),
        pytest.param("9" * 30 + "h", id="past Go's maximum duration"),
        pytest.param("1" * 5000 + "s", id="5000 digits of seconds"),
    ],
)
def test_sim_duration_out_of_bounds_falls_back_to_the_default(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
        parse_duration(text)
    got = duration_of(((SIM_DURATION_ANNOTATION, text),), default_ms=60_000)
    assert got.ms == 60_000
    assert got.source.startswith("default (invalid annotation: invalid duration")


@pytest.mark.parametrize(
    ("text", "want_ms"),
    [
        pytest.param("2562047h47m16.854775807s", v.MAX_DURATION_MS, id="Go's maximum duration"),
        pytest.param(str(v.MAX_DURATION_MS), v.MAX_DURATION_MS, id="the most milliseconds"),
        pytest.param("1.1h", 3_960_000, id="exact fractions"),
    ],
)
def test_sim_duration_up_to_the_bound_is_read(text: str, want_ms: int) -> None:
    assert parse_duration(text) == want_ms


def test_an_unpaired_surrogate_escape_is_not_text() -> None:
    # Found by the fuzz suite: msgspec (and every encoder) fails on it far from the file.
    with pytest.raises(ValueError, match=r"document 1: invalid YAML \(line 1\): a string with an unpaired surrogate"):
        load({"f.yaml": 'kind: "\\ud800"\n'})
