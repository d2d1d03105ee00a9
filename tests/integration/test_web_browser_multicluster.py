"""The web view of ``kueuelog demo --clusters N`` in a real headless browser: a line per worker
cluster, whose counts move while the demo runs (live, over Server-Sent Events), and whose finished
counts add up to the demo's workloads at the end. (The one-cluster page: test_web_browser.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.infra.browser import LAUNCH_ARGS, demo_serving, ensure_chromium

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts" / "browser"
JOBS = 40


@pytest.fixture
def demo_url(tmp_path: Path) -> Iterator[str]:
    with demo_serving(["--clusters", "3", "--jobs", str(JOBS), "--dir", str(tmp_path / "log"), "--pace", "0.05"],
                      tmp_path) as url:
        yield url


def test_the_page_shows_a_line_per_worker_with_its_placements(demo_url: str) -> None:
    chromium = ensure_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=list(LAUNCH_ARGS))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(demo_url)
            for worker in ("worker-1", "worker-2", "worker-3"):
                expect(page.locator(f'#worker-clusters tr[data-worker="{worker}"]')).to_be_visible(timeout=30_000)
            expect(page.locator("#workers-section")).to_be_visible()
            # Live: some workload is placed on worker-1 while the demo runs...
            page.wait_for_function(
                "() => Number(document.querySelector('#worker-clusters tr[data-worker=\"worker-1\"] td.placed')"
                "?.textContent) > 0", timeout=120_000)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "multicluster-01-workers.png"), full_page=True)
            # ...and at the end every workload finished on one worker, none is placed any more.
            page.wait_for_function(
                f"""() => [...document.querySelectorAll('#worker-clusters tbody tr')]
                      .reduce((n, tr) => n + Number(tr.children[4].textContent), 0) === {JOBS}""",
                timeout=300_000)
            placed = page.locator("#worker-clusters td.placed").all_inner_texts()
            assert placed == ["0", "0", "0"]
            stream = page.locator("#decisions li").all_inner_texts()
            assert stream and not [t for t in stream if "AdmitChecked(" in t], "decisions in words, not reprs"
            page.screenshot(path=str(ARTIFACTS / "multicluster-02-done.png"), full_page=True)
            page.close()
        finally:
            browser.close()
