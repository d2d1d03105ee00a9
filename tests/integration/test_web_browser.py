"""The web view in a real headless browser (Debian's chromium, driven by Playwright), while
``kueuelog demo`` runs: the page loads and shows the demo's queues, it updates live (Server-Sent
Events), a workload's page shows its history with links to preemptor and victims; and Kueue's
visibility API answers over HTTP from the same server.

Screenshots are kept as test artefacts in ``.artifacts/browser/`` (gitignored).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.infra.browser import LAUNCH_ARGS, demo_serving, ensure_chromium

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".artifacts" / "browser"


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`kueuelog demo` paced so that it runs for a while, its web view on a free port, kept up
    after the demo ends; stopped with SIGINT at the end of the module."""
    where = tmp_path_factory.mktemp("web-demo")
    examples = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))
    with demo_serving([*examples, "--dir", str(where / "log"), "--pace", "0.03"], ROOT) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = ensure_chromium()  # installs Debian's chromium if missing; raises (fails) if it cannot
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium), args=list(LAUNCH_ARGS))
        try:
            yield b
        finally:
            b.close()


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_page_shows_the_demos_queues_and_updates_live(demo_url: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(demo_url)
    for cq in ("team-a-cq", "team-b-cq", "ml-cq"):
        expect(page.locator(f'#cluster-queues tr[data-cq="{cq}"]').first).to_be_visible(timeout=30_000)
    expect(page.locator("#cohorts .node.cohort").first).to_be_visible()
    expect(page.locator("#local-queues tbody tr")).not_to_have_count(0)
    expect(page.locator("#live")).to_have_class("on", timeout=30_000)
    first = page.locator("#clock").inner_text()
    _shot(page, "01-queues")
    # Live: the simulated clock moves and decisions arrive without a reload.
    page.wait_for_function("(before) => document.querySelector('#clock').textContent !== before", arg=first,
                           timeout=60_000)
    expect(page.locator("#decisions li").first).to_be_visible(timeout=60_000)
    assert page.locator("#clock").inner_text() != first
    _shot(page, "02-live")
    page.close()


def test_a_workloads_page_shows_its_history_with_links(demo_url: str, browser: Browser) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(demo_url)
    # A preempted workload's page links its preemptor; wait for the demo's first eviction.
    evicted = page.locator("#decisions li.EvictWorkload a").first
    expect(evicted).to_be_visible(timeout=120_000)
    link = evicted.element_handle()  # this element: the live list may move on before the click
    assert link is not None
    victim = link.inner_text()
    link.click()
    expect(page.locator("#workload-title")).to_have_text(victim)
    expect(page.locator("#workload-answer")).to_contain_text(victim.split("/")[0] + "/", timeout=60_000)
    expect(page.locator("#workload-answer")).to_contain_text("evicted")
    expect(page.locator("#timeline li.submitted")).to_have_count(1)
    expect(page.locator("#timeline li.evicted").first).to_be_visible()
    expect(page.locator("#timeline li.evicted a").first).to_be_visible()
    preemptor = page.locator("#timeline li.evicted a").first.element_handle()
    assert preemptor is not None
    preemptor_key = preemptor.inner_text()
    _shot(page, "03-workload-victim")
    preemptor.click()
    expect(page.locator("#workload-title")).to_have_text(preemptor_key)
    expect(page.locator("#timeline li.preempted", has_text=victim).first).to_be_visible(timeout=60_000)
    _shot(page, "04-workload-preemptor")
    # The list, filtered by ClusterQueue, and the usage plots.
    page.goto(demo_url + "#/workloads?clusterQueue=team-a-cq")
    expect(page.locator("#workloads tbody tr").first).to_be_visible(timeout=30_000)
    assert all(t == "team-a-cq" for t in page.locator("#workloads tbody tr td:nth-child(4)").all_inner_texts())
    _shot(page, "05-workloads")
    page.goto(demo_url + "#/usage")
    expect(page.locator("#usage-cq svg.plot polyline").first).to_be_attached(timeout=30_000)
    expect(page.locator("#usage-flavor svg.plot").first).to_be_visible()
    _shot(page, "06-usage")
    page.close()


def test_the_visibility_api_answers_kueues_shape_over_http(demo_url: str) -> None:
    base = demo_url + "apis/visibility.kueue.x-k8s.io/v1beta2"
    status, doc = _get(base + "/clusterqueues/team-b-cq/pendingworkloads?limit=5")
    assert status == 200 and doc["kind"] == "PendingWorkloadsSummary"
    assert doc["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert [i["positionInClusterQueue"] for i in doc["items"]] == list(range(len(doc["items"])))
    status, doc = _get(base + "/namespaces/team-b/localqueues/default/pendingworkloads")
    assert status == 200 and all(i["localQueueName"] == "default" for i in doc["items"])
    status, doc = _get(base + "/clusterqueues/no-such-cq/pendingworkloads")
    assert status == 404 and doc["kind"] == "Status" and doc["reason"] == "NotFound"
    status, doc = _get(base + "/clusterqueues/team-b-cq/pendingworkloads?offset=x")
    assert status == 400 and "offset" in doc["message"]
