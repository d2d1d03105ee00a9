"""bench.memtrace: runs a module as ``python -m`` would, beside a sampler of its resident set."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from bench.memtrace import rss_mib, where

REPO = Path(__file__).resolve().parents[2]


def test_the_module_runs_with_its_arguments_and_the_trace_file_is_made(tmp_path: Path) -> None:
    data = tmp_path / "in.json"
    data.write_text('{"b": 1, "a": [1, 2]}')
    out = tmp_path / "trace" / "x.rss.txt"
    done = subprocess.run([sys.executable, "-m", "bench.memtrace", str(out), "-m", "json.tool", "--sort-keys",
                           str(data)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].strip() == '"a": ['  # json.tool got its arguments
    assert out.exists()


def test_a_missing_module_is_a_usage_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.memtrace", str(tmp_path / "x.txt"), "-m"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "usage: python -m bench.memtrace OUT [-m] MODULE" in done.stderr


def test_where_names_the_frames_of_a_thread_and_rss_is_read() -> None:
    assert "test_bench_memtrace.py:test_where_names_the_frames_of_a_thread_and_rss_is_read" in where(
        threading.get_ident())
    assert rss_mib() > 0
