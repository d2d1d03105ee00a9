"""Every kueuelog command runs with the collector tuned for a scheduler's heap."""

from __future__ import annotations

import subprocess
import sys

from services.runtime.gctune import THRESHOLDS


def test_a_kueuelog_process_collects_with_the_tuned_thresholds() -> None:
    # `kueuelog schema` through the real entry point; an atexit hook reads the thresholds back.
    code = ("import atexit, gc, sys; atexit.register(lambda: print('THRESHOLDS', gc.get_threshold())); "
            "sys.argv = ['kueuelog', 'schema']; from services.app.cli import entrypoint; entrypoint()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert f"THRESHOLDS {THRESHOLDS}" in out.stdout
    assert THRESHOLDS != (700, 10, 10)  # CPython's defaults: the tuning changes something
