"""The project's own conformance cases (tests/cases/*.yaml), in the format of ../shared/conformance.

Each file is a case header (``kind: Case``) followed by manifests; ``kueuelog simulate`` runs on
the manifests (in process, with the header's ``args``, e.g. ``--until 2h``) and the header's
``expect`` block is checked. Beyond the shared format's ``admitted`` / ``pending`` /
``preempted``, a case here may expect ``finished`` and ``unfinished`` workloads and
``requeued`` (a workload with ``status.requeueState`` whose Evicted condition, current or
"Previously: ...", says this).
A Job is named by its own name (matched through the Workload's ownerReferences).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.app.cli import main

CASES = sorted((Path(__file__).resolve().parents[1] / "cases").glob("*.yaml"))


def _find(items: list[dict[str, Any]], key: str) -> dict[str, Any]:
    ns, name = key.split("/", 1)
    for w in items:
        meta = w["metadata"]
        owners = [o["name"] for o in meta.get("ownerReferences", [])]
        if meta.get("namespace") == ns and (meta["name"] == name or name in owners):
            return w
    raise AssertionError(f"no Workload for {key}")


def _true(w: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in w["status"].get("conditions", []) if c["type"] == ctype and c["status"] == "True"), None)


def _check(expect: dict[str, Any], items: list[dict[str, Any]]) -> None:
    for key, want in (expect.get("admitted") or {}).items():
        w = _find(items, key)
        assert w["status"].get("admission", {}).get("clusterQueue") == want["clusterQueue"], f"{key} not admitted"
    for key in expect.get("pending") or []:
        assert "admission" not in _find(items, key)["status"], f"{key} should be pending"
    for key in expect.get("preempted") or []:
        assert _true(_find(items, key), "Preempted"), f"{key} should be preempted"
    for key in expect.get("finished") or []:
        assert _true(_find(items, key), "Finished"), f"{key} should have finished"
    for key in expect.get("unfinished") or []:
        assert not _true(_find(items, key), "Finished"), f"{key} should not have finished"
    for key, reason in (expect.get("requeued") or {}).items():
        w = _find(items, key)
        assert w["status"].get("requeueState", {}).get("count", 0) >= 1, f"{key} has no requeueState"
        evicted = next((c for c in w["status"].get("conditions", []) if c["type"] == "Evicted"), None)
        assert evicted is not None and reason in evicted["message"] + evicted["reason"], f"{key}: {evicted}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, *docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert header["kind"] == "Case"
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    rc = main(["simulate", str(manifests), *[str(a) for a in header.get("args") or []], "-o", "json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    _check(header["expect"], json.loads(out.out)["items"])


def test_there_are_cases() -> None:
    assert CASES, "tests/cases holds the project's own conformance cases"
