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
import os
import shutil
import subprocess
import sys
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
