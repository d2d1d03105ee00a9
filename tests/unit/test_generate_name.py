"""Jobs and Workloads written with ``metadata.generateName`` (events/generatename.py, issue #22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from events import objects as o
from events.generatename import ALPHABET, MAX_PREFIX, content_digest, generated_name
from events.jobs import workload_name_for_job
from events.manifests import ManifestError, load
from services.app.cli import main
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload

# Kueue's canonical site/static/examples/jobs/sample-job.yaml, as its users write it.
SAMPLE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  generateName: sample-job-
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        command: [ "/bin/sh" ]
        args: [ "-c", "sleep 60" ]
        resources:
          requests:
            cpu: "1"
            memory: "200Mi"
      restartPolicy: Never
"""


def _workloads(files: dict[str, str]) -> list[o.Workload]:
    return [obj for _, obj in load(files) if isinstance(obj, o.Workload)]


def _job_names(files: dict[str, str]) -> list[str]:
    return [wl.owner.name for wl in _workloads(files) if wl.owner is not None]


def test_the_sample_job_gets_the_prefix_and_five_characters_of_kubernetes_alphabet():
    (wl,) = _workloads({"sample-job.yaml": SAMPLE_JOB})
    assert wl.owner is not None
    job = wl.owner.name
    assert job.startswith("sample-job-")
    assert len(job) == len("sample-job-") + 5
    assert set(job.removeprefix("sample-job-")) <= set(ALPHABET)
    # The Workload is named from the Job the way Kueue's job integration names it.
    assert wl.name == workload_name_for_job(job, wl.owner.uid)
    assert (wl.namespace, wl.queue_name, wl.pod_sets[0].count) == ("default", "user-queue", 3)


def test_the_same_input_is_named_the_same_whatever_the_file_is_called():
    assert _job_names({"a.yaml": SAMPLE_JOB}) == _job_names({"elsewhere/b.yaml": SAMPLE_JOB})
    assert _job_names({"a.yaml": SAMPLE_JOB}) == _job_names({"a.yaml": SAMPLE_JOB})


def test_the_name_is_the_documented_rule():
    body = yaml.safe_load(SAMPLE_JOB)
    assert _job_names({"a.yaml": SAMPLE_JOB}) == [generated_name("sample-job-", content_digest(body), 0)]


def test_identical_jobs_get_distinct_names_by_their_position():
    names = _job_names({"a.yaml": "---\n".join([SAMPLE_JOB] * 3)})
    assert len(set(names)) == 3
    body = yaml.safe_load(SAMPLE_JOB)
    assert names == [generated_name("sample-job-", content_digest(body), i) for i in range(3)]


def test_an_unrelated_object_before_it_does_not_change_its_name():
    other = SAMPLE_JOB.replace("generateName: sample-job-", "generateName: other-")
    named = SAMPLE_JOB.replace("generateName: sample-job-", "name: fixed")
    alone = _job_names({"a.yaml": SAMPLE_JOB})
    assert _job_names({"a.yaml": f"{other}---\n{named}---\n{SAMPLE_JOB}"})[2] == alone[0]


def test_a_generated_name_taken_by_an_earlier_job_is_generated_again():
    (first,) = _job_names({"a.yaml": SAMPLE_JOB})
    explicit = SAMPLE_JOB.replace("generateName: sample-job-", f"name: {first}")
    names = _job_names({"a.yaml": f"{explicit}---\n{SAMPLE_JOB}"})
    body = yaml.safe_load(SAMPLE_JOB)
    assert names == [first, generated_name("sample-job-", content_digest(body), 0, attempt=1)]


def test_a_workload_with_generate_name_is_named_too():
    body = a_workload("team-a", "unused").queue("lq").request(cpu=1).obj()
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "wl-"
    (wl,) = _workloads({"w.yaml": yaml.safe_dump(body)})
    assert wl.name == generated_name("wl-", content_digest(body), 0)


def test_a_long_prefix_is_cut_as_the_api_server_cuts_it():
    text = SAMPLE_JOB.replace("generateName: sample-job-", f"generateName: {'j' * 100}-")
    (job,) = _job_names({"a.yaml": text})
    assert job.startswith("j" * MAX_PREFIX)
    assert len(job) == 63


@pytest.mark.parametrize(
    ("text", "obj", "field", "message"),
    [
        pytest.param(SAMPLE_JOB.replace("generateName: sample-job-", "generateName: Sample_Job-"),
                     "Job default/Sample_Job-", "metadata.generateName",
                     "invalid value 'Sample_Job-': must be the prefix",
                     id="a prefix no name can start with"),
        pytest.param("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {generateName: cq-}\n"
                     "spec: {}\n", "ClusterQueue", "metadata.name", "required field is missing",
                     id="a ClusterQueue needs a name: generateName is for Jobs and Workloads"),
        pytest.param(SAMPLE_JOB.replace("generateName: sample-job-", "generateName: ''"),
                     "Job", "metadata.name", "required field is missing", id="an empty generateName names nothing"),
        pytest.param(SAMPLE_JOB.replace("generateName: sample-job-", "generateName: 17"),
                     "Job", "metadata.generateName", "Expected `str | null`, got `int`",
                     id="a generateName that is not a string"),
        pytest.param(SAMPLE_JOB.replace("generateName: sample-job-", f"generateName: {'x' * 100_000}-"),
                     "Job", "metadata.generateName", "at most 253 characters",
                     id="a prefix of 100,001 characters is refused, as the API server refuses it"),
        pytest.param(SAMPLE_JOB.replace("generateName: sample-job-", f"generateName: {'x' * 60}!"),
                     "Job", "metadata.generateName", "must be the prefix of a lowercase RFC 1123 subdomain",
                     id="a bad character past the 58 kept is still refused"),
    ],
)
def test_refused(text, obj, field, message):
    with pytest.raises(ManifestError) as err:
        load({"a.yaml": text})
    assert (err.value.obj, err.value.field) == (obj, field)
    assert message in err.value.message


def test_simulate_admits_the_sample_job_and_shows_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    queues = [a_flavor("default-flavor"),
              a_cluster_queue("cluster-queue").flavor("default-flavor", cpu=9, memory="36Gi"),
              a_local_queue("default", "user-queue", "cluster-queue")]
    (tmp_path / "queues.yaml").write_text(yaml.safe_dump_all([b.obj() for b in queues]))
    (tmp_path / "sample-job.yaml").write_text(SAMPLE_JOB)
    args = ["simulate", str(tmp_path / "queues.yaml"), str(tmp_path / "sample-job.yaml"), "-o", "json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    (item,) = first["items"]
    (job,) = _job_names({"sample-job.yaml": SAMPLE_JOB})
    assert item["metadata"]["ownerReferences"][0]["name"] == job
    assert item["metadata"]["name"].startswith(f"job-{job}-")
    assert item["status"]["admission"]["clusterQueue"] == "cluster-queue"
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == first
