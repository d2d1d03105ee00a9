"""kueuelog as a user installs it: a wheel (not an editable checkout) in a fresh virtualenv.
`kueuelog demo` then works from any directory (the examples ride in the wheel), the web view's
page is in the package, and the kubectl plugin `kubectl-kueuelog` is on the virtualenv's PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PIP_CACHE_DIR") or Path(os.environ.get("KUEUELOG_CACHE", Path.home() / ".cache" /
                                                                  "kueuelog")) / "pip")


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_CACHE_DIR"] = str(CACHE)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_a_wheel_installs_a_working_demo_web_view_and_kubectl_plugin(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)], tmp_path)
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("kueuelog-*.whl"))
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp_path).returncode == 0
    bin_ = venv / "bin"
    installed = _run([str(bin_ / "pip"), "install", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    demo = _run([str(bin_ / "kueuelog"), "demo", "--no-web"], elsewhere)
    assert demo.returncode == 0, demo.stderr
    assert "324 workloads, 324 finished" in demo.stdout  # with examples/30-workload-kinds.yaml
    page = _run([str(bin_ / "python"), "-c", "from importlib import resources; "
                 "print(all(resources.files('services.web').joinpath('static', f).is_file() "
                 "for f in ('index.html', 'app.js', 'style.css')))"], elsewhere)
    assert page.stdout.strip() == "True", page.stderr
    plugin = _run([str(bin_ / "kubectl-kueuelog"), "--help"], elsewhere)
    assert plugin.returncode == 0 and plugin.stdout.startswith("usage: kubectl kueuelog"), plugin.stderr
    completes = _run([str(bin_ / "kubectl_complete-kueuelog"), "ex"], elsewhere)
    assert completes.stdout.split() == ["explain", ":4"], completes.stderr
    log = next(elsewhere.glob("kueuelog-demo-*"))
    explained = _run([str(bin_ / "kubectl-kueuelog"), "explain", "team-a/release-000", "--log", str(log)], elsewhere)
    assert explained.returncode == 0 and "team-a/job-release-000-" in explained.stdout.splitlines()[0]
