"""The command line over the embedded log, as a user runs it: demo, replay --verify, explain, tail,
run, schema."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KUEUELOG = [sys.executable, "-m", "services.app.cli"]


def _run(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KUEUELOG, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("demo")
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    done = subprocess.run([*KUEUELOG, "demo", *examples], cwd=where, capture_output=True, text=True, timeout=600,
                          check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "324 workloads, 324 finished" in done.stdout  # with examples/30-workload-kinds.yaml
    logs = list(where.glob("kueuelog-demo-*"))
    assert len(logs) == 1, "the demo leaves its log in a new directory under the current one"
    assert str(logs[0]) in done.stdout, "and prints where"
    return logs[0]


def test_replay_verify_passes_on_the_demo_log(demo_log: Path) -> None:
    out = _run("replay", str(demo_log), "--verify")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reproduce their recorded decisions byte for byte" in out.stdout


def test_replay_until_an_offset_stops_there(demo_log: Path) -> None:
    out = _run("replay", str(demo_log), "--until", "100")
    assert out.returncode == 0
    assert "up to input offset 100" in out.stdout


def test_explain_tells_where_a_job_was_admitted_and_that_it_finished(demo_log: Path) -> None:
    out = _run("explain", "team-a/release-000", "--log", str(demo_log))
    assert out.returncode == 0, out.stderr
    assert "submitted as Workload team-a/job-release-000-" in out.stdout
    assert "admitted to ClusterQueue team-a-cq" in out.stdout
    assert "is finished" in out.stdout


def test_explain_lists_the_cycles_that_considered_a_waiting_workload(demo_log: Path) -> None:
    out = _run("explain", "team-b/train-001", "--log", str(demo_log), "--full")
    assert out.returncode == 0, out.stderr
    assert "considered as its queue's head, not admitted" in out.stdout
    assert "pending (PreemptionNotAllowed)" in out.stdout


def test_explain_answers_first_and_folds_the_waiting_into_runs(demo_log: Path) -> None:
    folded = _run("explain", "team-b/train-001", "--log", str(demo_log), "--at", "100")
    full = _run("explain", "team-b/train-001", "--log", str(demo_log), "--at", "100", "--full")
    assert folded.returncode == 0 and full.returncode == 0, folded.stderr + full.stderr
    first = folded.stdout.splitlines()[0]
    assert first.startswith("team-b/job-train-001-") and "is pending in ClusterQueue team-b-cq at position" in first
    assert "To be admitted it needs either" in first and "team-a-cq is borrowing" in first
    assert "It was last evicted at" in first and "(InCohortReclamation) by team-a/" in first
    assert "(29 times)" in folded.stdout or "times)" in folded.stdout
    assert len(folded.stdout.splitlines()) < len(full.stdout.splitlines())
    assert "DecisionApplied" in full.stdout and "DecisionApplied" not in folded.stdout


def test_explain_as_json_has_the_answer_and_the_timeline(demo_log: Path) -> None:
    out = _run("explain", "team-b/train-001", "--log", str(demo_log), "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["answer"]["status"] == "finished" and doc["answer"]["lastEviction"]["reason"] == "Preempted"
    kinds = [e["kind"] for e in doc["timeline"]]
    assert kinds[0] == "submitted" and "admitted" in kinds and "evicted" in kinds
    evicted = next(e for e in doc["timeline"] if e["kind"] == "evicted")
    assert evicted["related"] == doc["answer"]["lastEviction"]["preemptor"]
    missing = _run("explain", "team-b/nobody", "--log", str(demo_log), "-o", "json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["answer"] is None


def test_explain_piped_into_head_exits_quietly(demo_log: Path) -> None:
    done = subprocess.run(f"{sys.executable} -m services.app.cli explain team-b/train-001 --log {demo_log} | head -1",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0
    assert "Traceback" not in done.stderr
    assert done.stdout.count("\n") == 1


def test_explain_tells_who_preempted_a_workload(demo_log: Path) -> None:
    from events.codec import decode_decision
    from events.envelope import Topics
    from events.messages import EvictWorkload
    from services.runtime.sqlite import SqliteLog

    log = SqliteLog(demo_log, create=False)
    victims = [d for r in log.read(Topics().decisions, 0, 1_000_000)
               if isinstance(d := decode_decision(r.value), EvictWorkload)]
    log.close()
    assert victims, "the demo preempts"
    v = victims[0]
    out = _run("explain", f"{v.namespace}/{v.name}", "--log", str(demo_log))
    assert f"evicted: Preempted ({v.preemption_reason}) by {v.preemptor}" in out.stdout


def test_get_pending_lists_each_queue_in_order_with_positions_and_reasons(demo_log: Path) -> None:
    table = _run("get", "pending", "--log", str(demo_log), "--at", "300")
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:]]
    assert rows, "at input 300 the demo has pending workloads"
    for cq in {r[0] for r in rows}:
        assert [int(r[1]) for r in rows if r[0] == cq] == list(range(sum(1 for r in rows if r[0] == cq)))
    out = _run("get", "pending", "--log", str(demo_log), "--at", "300", "--queue", "default", "-n", "team-b",
               "-o", "json")
    doc = json.loads(out.stdout)
    assert doc["kind"] == "PendingWorkloadsSummary" and doc["items"]
    assert [i["positionInLocalQueue"] for i in doc["items"]] == list(range(len(doc["items"])))
    assert all(i["metadata"]["annotations"]["kueuelog.io/pending-reason"] for i in doc["items"])
    missing = _run("get", "pending", "--log", str(demo_log), "--queue", "no-such-cq")
    assert missing.returncode == 2 and '"no-such-cq" not found' in missing.stderr


def test_simulate_from_the_demo_log_compares_with_what_happened(demo_log: Path, tmp_path: Path) -> None:
    from tests.unit.test_whatif import MORE_FOR_TEAM_B

    change = tmp_path / "more-b.yaml"
    change.write_text(MORE_FOR_TEAM_B)
    out = _run("simulate", "--from-log", str(demo_log), "--at", "2025-01-01T10:00:00Z", str(change), "--for", "1h",
               "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    b = next(q for q in doc["queues"] if q["clusterQueue"] == "team-b-cq")
    assert b["admittedWhatIf"] > b["admittedReal"]
    table = _run("simulate", "--from-log", str(demo_log), "--at", "0")
    assert table.returncode == 0 and "0 workload(s) admitted at another time" in table.stdout, table.stdout
    assert _run("simulate", "--at", "0", "x.yaml").returncode == 2
    assert _run("simulate").returncode == 2
    bad = _run("simulate", "--from-log", str(demo_log), "--for", "soon")
    assert bad.returncode == 2 and "--for" in bad.stderr


def test_serve_on_a_taken_port_is_a_configuration_error_in_one_line(demo_log: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = _run("serve", "--log", str(demo_log), "--port", str(port), timeout=60)
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().count("\n") == 0 and f"cannot listen on 127.0.0.1:{port}" in out.stderr


def test_tail_prints_decisions_as_they_come(demo_log: Path) -> None:
    proc = subprocess.Popen([*KUEUELOG, "tail", "--log", str(demo_log), "--from-start", "--type", "Evict"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    proc.wait(10)
    assert "EvictWorkload" in line and "Preempted" in line


def test_explain_and_tail_refuse_bad_arguments(demo_log: Path, tmp_path: Path) -> None:
    assert _run("explain", "no-namespace", "--log", str(demo_log)).returncode == 2
    bad = _run("tail", "--log", str(demo_log), "--type", "Admit,Teleport")
    assert bad.returncode == 2 and "Teleport" in bad.stderr
    missing = _run("replay", str(tmp_path / "nothing"))
    assert missing.returncode == 4 and "no embedded log" in missing.stderr  # the log is unavailable


def test_run_all_in_simulated_time_finishes_a_seeded_cluster(tmp_path: Path) -> None:
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    out = _run("run", "all", "--log", str(tmp_path / "log"), "--clock", "simulated", "--seed", *examples, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "stopped:" in out.stdout
    verify = _run("replay", str(tmp_path / "log"), "--verify")
    assert verify.returncode == 0, verify.stdout


def test_a_second_scheduler_on_the_same_log_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "log"
    first = subprocess.Popen([*KUEUELOG, "run", "scheduler", "--log", str(log)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (log / "scheduler.lock").exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.05)
        second = _run("run", "scheduler", "--log", str(log), timeout=60)
        assert second.returncode == 5  # not the leader: another instance holds the role
        assert "only one scheduler may write" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    assert first.returncode == 0


def test_schema_writes_json_schemas_and_asyncapi(tmp_path: Path) -> None:
    out = _run("schema", "--out", str(tmp_path))
    assert out.returncode == 0
    decision = json.loads((tmp_path / "decision.schema.json").read_text())
    api = json.loads((tmp_path / "asyncapi.json").read_text())
    assert api["asyncapi"].startswith("3.")
    assert "AdmitWorkload" in decision["$defs"]
    assert api["channels"]["decisions"]["address"] == "kueuelog.decisions"


def test_the_demo_runs_from_any_directory_with_the_checkouts_examples(tmp_path: Path) -> None:
    """A newcomer runs .venv/bin/kueuelog demo from somewhere else: the examples beside the
    installation are found, not refused for missing from the current directory."""
    kueuelog = ROOT / ".venv" / "bin" / "kueuelog"
    done = subprocess.run([str(kueuelog), "demo", "--dir", str(tmp_path / "log")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "log" / "log.db").exists()
