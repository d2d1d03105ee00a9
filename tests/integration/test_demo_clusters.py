"""``kueuelog demo --clusters N`` as a user runs it, from a directory with no manifests in it: the
summary's placements per worker, and ``replay --verify`` on the log it leaves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KUEUELOG = [sys.executable, "-m", "services.app.cli"]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KUEUELOG, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
                          env=ENV)


def test_the_multicluster_demo_places_every_job_on_a_worker_and_replays(tmp_path: Path) -> None:
    done = _run("demo", "--clusters", "3", "--jobs", "24", "--no-web", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "24 workloads, 24 finished; 24 admissions, 0 evictions, 24 placements on 3 worker clusters" in out
    lines = re.findall(r"(worker-\d): (\d+) placed, (\d+) finished there", out)
    per_worker = {m[0]: (int(m[1]), int(m[2])) for m in lines}
    assert sorted(per_worker) == ["worker-1", "worker-2", "worker-3"]
    assert sum(p for p, _ in per_worker.values()) == 24
    assert all(p == f for p, f in per_worker.values()), "what is placed on a worker finishes there"
    assert "no workload ran in two clusters at once" in out
    logs = list(tmp_path.glob("kueuelog-demo-*"))
    assert len(logs) == 1 and str(logs[0]) in out
    verify = _run("replay", str(logs[0]), "--verify", cwd=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "reproduce their recorded decisions byte for byte" in verify.stdout
    example = re.search(r"kueuelog explain (\S+) --log", out)
    assert example is not None
    explained = _run("explain", example[1], "--log", str(logs[0]), cwd=tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "placed on worker cluster worker-" in explained.stdout
    assert "removed from worker cluster worker-" in explained.stdout and "(WorkloadFinished)" in explained.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("--clusters", "0"), "--clusters: between 1 and 20"),
    (("--clusters", "21"), "--clusters: between 1 and 20"),
    (("--clusters", "2", "--jobs", "-1"), "--jobs:"),
])
def test_a_bad_cluster_count_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = _run("demo", *args, "--no-web", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr and done.stderr.count("\n") == 1
    assert not list(tmp_path.glob("kueuelog-demo-*")), "nothing is written for refused input"


def test_manifests_given_to_the_multicluster_demo_must_name_their_workers(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\n"
                                       "metadata: {name: f}\n")
    done = _run("demo", "--clusters", "2", "one.yaml", "--no-web", cwd=tmp_path)
    assert done.returncode == 2
    assert "no MultiKueueCluster in the manifests" in done.stderr and done.stderr.count("\n") == 1


def test_the_multicluster_demo_runs_given_manifests_whose_workers_objects_are_annotated(tmp_path: Path) -> None:
    import yaml

    from services.simcluster.multicluster import demo_manifests

    (tmp_path / "world.yaml").write_text(yaml.safe_dump_all(demo_manifests(2, queues=2, jobs=6), sort_keys=False))
    done = _run("demo", "--clusters", "2", "world.yaml", "--no-web", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 workloads, 6 finished; 6 admissions, 0 evictions, 6 placements on 2 worker clusters" in done.stdout
    wrong = _run("demo", "--clusters", "3", "world.yaml", "--no-web", cwd=tmp_path)
    assert wrong.returncode == 2
    assert wrong.stderr == "error: --clusters 3, but the manifests name 2 MultiKueueClusters (worker-1, worker-2)\n"
