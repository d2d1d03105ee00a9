"""Whatever ends a command is one line and an exit code that says what kind of trouble it was."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from events.codec import encode
from events.envelope import Envelope, Topics
from events.manifests import ManifestError
from events.messages import ClockTicked
from services.app.cli import main
from services.app.exits import ConfigurationError, ExitCode, UsageError, classify
from services.runtime.log import LeadershipLost, LogError, WriterLockHeld
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import SchedulerStopped

T = Topics()
CLI = [sys.executable, "-m", "services.app.cli"]


@pytest.mark.parametrize(("error", "code"), [
    pytest.param(ManifestError("a.yaml", 1, "ClusterQueue cq", "spec.x", "bad"), ExitCode.BAD_INPUT, id="bad manifest"),
    pytest.param(UsageError("--seed: no"), ExitCode.BAD_INPUT, id="flags that do not go together"),
    pytest.param(ConfigurationError("KUEUELOG_KUBE: no"), ExitCode.CONFIGURATION, id="bad setting"),
    pytest.param(LogError("not a log", retriable=False), ExitCode.LOG_UNAVAILABLE, id="log unavailable"),
    pytest.param(WriterLockHeld("scheduler", Path("/x/scheduler.lock")), ExitCode.NOT_LEADER, id="lock held"),
    pytest.param(LeadershipLost("lost it"), ExitCode.NOT_LEADER, id="leadership lost"),
    pytest.param(SchedulerStopped("unknown event type"), ExitCode.NEWER_LOG, id="a newer producer's event"),
])
def test_each_kind_of_trouble_has_its_code_and_one_line(error: Exception, code: ExitCode) -> None:
    got, line = classify(error)
    assert got == code
    assert "\n" not in line and line.startswith("error: ") and str(error) in line


def test_a_bug_is_one_line_with_the_traceback_in_a_file() -> None:
    try:
        raise KeyError("boom")
    except KeyError as e:
        code, line = classify(e)
    assert code == ExitCode.INTERNAL
    assert line.startswith("internal error: KeyError: 'boom' (a bug in kueuelog; the traceback is in ")
    path = Path(line.rsplit("the traceback is in ", 1)[1].rstrip(")"))
    assert "raise KeyError" in path.read_text()
    path.unlink()


def test_a_directory_that_holds_no_log_exits_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "log.db").write_bytes(b"not a database at all" * 100)
    assert main(["replay", str(tmp_path)]) == ExitCode.LOG_UNAVAILABLE
    assert capsys.readouterr().err.count("\n") == 1


def test_a_second_scheduler_on_one_embedded_log_exits_5(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = SqliteLog(tmp_path)
    holder.exclusive("scheduler")
    try:
        code = main(["run", "scheduler", "--log", str(tmp_path), "--http-port", "0"])
    finally:
        holder.close()
    assert code == ExitCode.NOT_LEADER
    err = capsys.readouterr().err
    assert "another process holds the scheduler lock" in err and err.count("\n") == 1


def _unknown_event_log(directory: Path) -> None:
    log = SqliteLog(directory)
    log.append(T.cluster_events, [("", encode(Envelope(id="t", source="ticker", event=ClockTicked(time=1))))])
    log.append(T.cluster_events, [("z", b'{"id":"new:1","source":"v9","event":{"type":"workload.teleported"}}')])
    log.close()


@pytest.mark.parametrize("clock", ["simulated", "real"])
def test_run_all_stops_promptly_on_an_event_type_it_does_not_know(tmp_path: Path, clock: str) -> None:
    """The scheduler must not skip a fact; every part of run all stops with it, and says why."""
    _unknown_event_log(tmp_path)
    started = time.monotonic()
    done = subprocess.run([*CLI, "run", "all", "--log", str(tmp_path), "--clock", clock, "--http-port", "0"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == ExitCode.NEWER_LOG, done.stderr
    assert "workload.teleported" in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


def test_a_second_run_all_on_one_log_exits_5_and_leaves_nothing_running(tmp_path: Path) -> None:
    first = subprocess.Popen([*CLI, "run", "all", "--log", str(tmp_path), "--clock", "real", "--http-port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "scheduler.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run([*CLI, "run", "all", "--log", str(tmp_path), "--clock", "real", "--http-port", "0"],
                                capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode == ExitCode.NOT_LEADER, second.stderr
        assert "lock" in second.stderr and "Traceback" not in second.stderr
        assert first.poll() is None, "the first one goes on"
    finally:
        first.terminate()
        first.wait(timeout=60)


def test_a_broker_not_up_yet_is_waited_for_not_a_bad_input(tmp_path: Path) -> None:
    """At start as at run time: back off, say why, and stop cleanly on SIGTERM."""
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    proc = subprocess.Popen([*CLI, "run", "scheduler", "--bootstrap-servers", f"127.0.0.1:{port}", "--http-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={"KUEUELOG_KAFKA_REQUEST_TIMEOUT_MS": "1000", "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("will recover" in line for line in seen):
            seen.append(proc.stdout.readline())
            assert proc.poll() is None, "".join(seen)
        assert any("will recover" in line for line in seen), "".join(seen)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "Traceback" not in "".join(seen) + out
