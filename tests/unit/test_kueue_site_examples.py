"""Kueue's published examples (site/static/examples) through ``kueuelog simulate``.

The corpus is tests/fixtures/kueue-site-examples (README there): ``index.yaml`` says what becomes
of every file Kueue publishes; ``cases/`` restates each example we take as a scenario with the
outcome Kueue produces (the header's ``notes`` say why); ``refused.yaml`` holds, for every
example we do not take yet, the document that is refused and the one line that refuses it.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.app.cli import main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-site-examples"
CASES = sorted((CORPUS / "cases").glob("*.yaml"))
JOB_KINDS = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-job-kinds"
INDEX: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "index.yaml").read_text())
REFUSED: list[dict[str, Any]] = yaml.safe_load((CORPUS / "refused.yaml").read_text())


def split_case(path: Path) -> tuple[dict[str, Any], str]:
    """The header (first document) and the manifests after it, as written."""
    text = path.read_text()
    head, _, manifests = text.partition("\n---\n")
    header = yaml.safe_load(head)
    assert header["kind"] == "Case", path.name
    return header, manifests


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], manifests: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "manifests.yaml"
    path.write_text(manifests)
    code = main(["simulate", str(path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _names(item: dict[str, Any]) -> list[str]:
    meta = item["metadata"]
    return [meta["name"], *(ref["name"] for ref in meta.get("ownerReferences", []))]


def find(items: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The one Workload ``ns/name`` names: by its name or its Job's (a glob for generateName)."""
    ns, pattern = key.split("/", 1)
    hits = [i for i in items if i["metadata"]["namespace"] == ns
            and any(fnmatch.fnmatchcase(n, pattern) for n in _names(i))]
    assert len(hits) == 1, f"{key}: {len(hits)} workloads match"
    return hits[0]


def _condition(item: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in item["status"].get("conditions", []) if c["type"] == ctype), None)


def check_admitted(items: list[dict[str, Any]], key: str, want: dict[str, Any]) -> None:
    adm = find(items, key)["status"].get("admission")
    assert adm is not None, f"{key} has no quota reserved"
    assert adm["clusterQueue"] == want["clusterQueue"], key
    by_podset = {psa["name"]: psa for psa in adm["podSetAssignments"]}
    for field in ("flavors", "count", "resourceUsage"):
        for podset, value in want.get(field, {}).items():
            assert by_podset[podset][field] == value, (key, podset, field)


def check_case(header: dict[str, Any], items: list[dict[str, Any]]) -> None:
    expect = header["expect"]
    if "workloads" in expect:
        assert len(items) == expect["workloads"]
    for key, want in expect.get("admitted", {}).items():
        check_admitted(items, key, want)
    for key in expect.get("pending", []):
        assert find(items, key)["status"].get("admission") is None, f"{key} has quota reserved"
    for key, text in expect.get("messages", {}).items():
        cond = _condition(find(items, key), "QuotaReserved")
        assert cond is not None and text in cond["message"], (key, cond)
    for key, conditions in expect.get("conditions", {}).items():
        item = find(items, key)
        for ctype, status in conditions.items():
            cond = _condition(item, ctype)
            assert cond is not None and cond["status"] == status, (key, ctype, cond)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_each_example_we_take_ends_as_kueue_ends_it(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    header, manifests = split_case(path)
    args = ["-o", "json"] + (["--cycles", str(header["cycles"])] if "cycles" in header else [])
    args += [str(a) for a in header.get("args", [])]  # e.g. how the simulated autoscaler answers
    code, out, err = simulate(tmp_path, capsys, manifests, *args)
    assert code == 0, err
    check_case(header, json.loads(out)["items"])


@pytest.mark.parametrize("entry", REFUSED, ids=[e["example"] for e in REFUSED])
def test_each_example_we_do_not_take_yet_is_refused_in_one_line_naming_what(
    entry: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    manifests = yaml.safe_dump_all(entry["manifests"], sort_keys=False)
    code, out, err = simulate(tmp_path, capsys, manifests, "-o", "json")
    assert (code, out) == (2, "")
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    assert entry["refusal"] in err, err


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_the_index_accounts_for_every_published_example_once() -> None:
    cases = {p.name for p in CASES}
    refused = [e["example"] for e in REFUSED]
    assert len(refused) == len(set(refused))
    named: set[str] = set()
    for example, what in INDEX.items():
        (kind, value), = what.items()
        if kind == "case":
            assert set(_listed(value)) <= cases, example
            named.update(_listed(value))
        elif kind == "refused":
            assert value in refused, example
        elif kind == "job-kind":
            assert (JOB_KINDS / value).is_file(), example
        else:
            assert kind in ("known-deviation", "not-a-manifest") and value, example
    assert named == cases  # every case restates at least one example
    assert all(INDEX[e]["refused"] == e for e in refused)
    assert len(INDEX) == 91  # the files of Kueue's site/static/examples at ff69552e


def test_every_case_names_its_kueue_source_and_says_why() -> None:
    for path in CASES:
        header, _ = split_case(path)
        assert header["source"].startswith("Kueue site/static/examples/"), path.name
        assert len(header["notes"].split()) >= 15, path.name
