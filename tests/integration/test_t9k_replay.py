"""T9k Queues through the log: ``run all`` over the embedded log in simulated time, then
``replay --verify`` reproduces every decision (queue priority included) byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "conformance" / "cases" / "002-priority-higher-queue-served-first.yaml"
KUEUELOG = [sys.executable, "-m", "services.app.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KUEUELOG, *args], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)


def test_run_all_with_t9k_queues_replays_byte_for_byte(tmp_path: Path) -> None:
    # The case's manifests (the header document off), and the flavor t9k a live cluster declares.
    manifests = CASE.read_text(encoding="utf-8").split("\n---\n", 1)[1]
    seed = tmp_path / "seed.yaml"
    seed.write_text(manifests + "\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\n"
                    "metadata: {name: t9k}\nspec: {}\n", encoding="utf-8")
    log = tmp_path / "log"
    ran = _run("run", "all", "--seed", str(seed), "--log", str(log), "--clock", "simulated", "--http-port", "0")
    assert ran.returncode == 0, ran.stderr[-2000:]
    explained = _run("explain", "team-a/urgent", "--log", str(log))
    assert explained.returncode == 0, explained.stderr[-2000:]
    assert "admitted to ClusterQueue high" in explained.stdout
    verified = _run("replay", str(log), "--verify")
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    assert "reproduce their recorded decisions byte for byte" in verified.stdout
    # Arrivals come at their creationTimestamps: batch (queue "low") a minute before urgent (queue
    # "high"), so it is admitted alone; "low" is not preemptible (spec.preemptible unset), so urgent
    # waits until batch has finished rather than preempting it.
    def admitted_at(workload: str) -> int:
        out = _run("explain", workload, "--log", str(log)).stdout
        line = next(x for x in out.splitlines() if x.startswith("cycle ") and "admitted to ClusterQueue" in x)
        return int(line.split()[1])

    assert admitted_at("team-a/batch") < admitted_at("team-a/urgent")
