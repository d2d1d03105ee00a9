"""Seed 004's examples as cases in the format of ``../shared/conformance/`` (``tests/cases/checks``).

The header's ``expect`` block takes the shared keys (``admitted``, ``pending``) and, for two-phase
admission, ``conditions`` ({workload: {type: [status, reason or null]}}), ``checks`` ({workload:
{check: {field: value}}} on ``status.admissionChecks``), ``active`` ({workload: bool}) and
``consumes`` ({workload: suffix of the ProvisioningRequest its pods consume, '' for none}); the
extra header key ``provisioning`` lists ``--provisioning`` values and ``until`` is ``--until``
(simulated time runs: the autoscaler's answers, back-offs and the Jobs' runs play out). A Workload
made from a Job is matched through its ownerReference, as the shared runner does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from events.simautoscaler import parse_all
from services.app.simulate import fold_files, run, run_timed
from services.core.provisioning import CONSUME_ANNOTATION
from services.core.render import workload_list
from services.simcluster.durations import parse_duration

CASES = sorted((Path(__file__).parent.parent / "cases" / "checks").glob("*.yaml"))


def _split(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    header_text, _, manifests = text.partition("\n---\n")
    header = yaml.safe_load(header_text)
    assert header.get("kind") == "Case"
    return header, manifests


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for wl in items:
        meta = wl["metadata"]
        out[f"{meta['namespace']}/{meta['name']}"] = wl
        for ref in meta.get("ownerReferences") or []:
            out[f"{meta['namespace']}/{ref['name']}"] = wl
    return out


def _consumed(wl: dict[str, Any]) -> str:
    for check in wl["status"].get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            name = (update.get("annotations") or {}).get(CONSUME_ANNOTATION)
            if name:
                return str(name)
    return ""


def _check(expect: dict[str, Any], got: dict[str, dict[str, Any]]) -> None:
    for key, want in (expect.get("admitted") or {}).items():
        adm = got[key]["status"].get("admission")
        assert adm is not None, f"{key}: no quota reserved"
        assert adm["clusterQueue"] == want["clusterQueue"]
        for ps, flavors in (want.get("flavors") or {}).items():
            psa = next(p for p in adm["podSetAssignments"] if p["name"] == ps)
            assert {r: psa["flavors"][r] for r in flavors} == flavors
    for key in expect.get("pending") or []:
        assert "admission" not in got[key]["status"], f"{key}: holds quota"
    for key, conds in (expect.get("conditions") or {}).items():
        have = {c["type"]: c for c in got[key]["status"].get("conditions") or []}
        for type_, (status, reason) in conds.items():
            assert have[type_]["status"] == status, f"{key} {type_}: {have[type_]}"
            if reason is not None:
                assert have[type_]["reason"] == reason, f"{key} {type_}: {have[type_]}"
    for key, checks in (expect.get("checks") or {}).items():
        have = {c["name"]: c for c in got[key]["status"].get("admissionChecks") or []}
        for name, fields in checks.items():
            for field, value in fields.items():
                default = 0 if field == "retryCount" else None
                assert have[name].get(field, default) == value, f"{key} {name}: {have[name]}"
    for key, active in (expect.get("active") or {}).items():
        assert got[key]["spec"].get("active", True) == active
    for key, suffix in (expect.get("consumes") or {}).items():
        consumed = _consumed(got[key])
        assert consumed.endswith(suffix) if suffix else consumed == "", f"{key} consumes {consumed!r}"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_seed_004_case(path: Path) -> None:
    header, manifests = _split(path)
    behaviours = parse_all(header.get("provisioning") or [])
    state = fold_files({str(path): manifests})
    if header.get("until") is not None:
        result = run_timed(state, parse_duration(header["until"]), header.get("cycles"), behaviours=behaviours)
    else:
        result = run(state, header.get("cycles"), behaviours=behaviours)
    assert result.converged
    _check(header["expect"], _by_name(workload_list(result.state)["items"]))


def test_the_cases_are_there() -> None:
    assert len(CASES) >= 7
    assert sum(1 for p in CASES if "until" in _split(p)[0]) >= 2  # --provisioning with --until
