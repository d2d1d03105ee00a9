"""A real headless Chromium for the web view's browser tests, from Debian's packages.

``ensure_chromium()`` returns the path of the system browser, installing Debian's ``chromium``
package with apt-get (unattended) when it is missing. It never downloads a browser build of its
own: Playwright drives the system browser through ``executable_path``, so ``playwright install``
is never run. When the browser cannot be installed the caller fails loudly: a browser test is
never skipped.

``python -m tests.infra.browser install`` runs the installation (``make browser``; ``make test``
depends on it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path(os.environ.get("KUEUELOG_CHROMIUM", "/usr/bin/chromium"))
PACKAGES = ("chromium",)
# Flags for a browser that starts fast on a small machine and talks to no one but our server.
LAUNCH_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage")


class BrowserUnavailable(RuntimeError):
    pass


def ensure_chromium() -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        raise BrowserUnavailable(f"{CHROMIUM} is missing and there is no apt-get to install Debian's chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    for cmd in ([*sudo, apt, "update", "-q"],
                [*sudo, apt, "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BrowserUnavailable(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    if not CHROMIUM.exists():
        raise BrowserUnavailable(f"apt-get installed {' '.join(PACKAGES)} but {CHROMIUM} is still missing")
    return CHROMIUM


@contextlib.contextmanager
def demo_serving(args: list[str], cwd: Path) -> Iterator[str]:
    """``kueuelog demo ARGS --web-port 0 --keep-serving`` running, its web view's URL (as it prints
    it) for the block; stopped with SIGINT after it (killed if it does not stop)."""
    proc = subprocess.Popen([sys.executable, "-m", "services.app.cli", "demo", *args, "--web-port", "0",
                             "--keep-serving"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    url = ""
    deadline = time.monotonic() + 60
    while not url and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        if m := re.search(r"web view: (http://\S+)", line):
            url = m.group(1)
    try:
        assert url, f"kueuelog demo {' '.join(args)} prints the web view's URL"
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.infra.browser")
    parser.add_argument("command", choices=("install",))
    parser.parse_args()
    try:
        print(ensure_chromium())
    except BrowserUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
