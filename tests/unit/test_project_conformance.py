"""The project's own conformance cases (tests/conformance/cases, the format of
../shared/conformance/FORMAT.md), run through the shared runner's own loading and checking code
against ``kueuelog simulate``. A case may add ``error:``, a text the refusal must contain."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "conformance" / "cases").glob("*.yaml"))
RUNNER = ROOT.parent / "shared" / "conformance" / "run.py"


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shared_conformance_run", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_there_are_cases() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path: Path) -> None:
    runner = _runner()
    case = runner.load_case(path)
    cli = [str(ROOT / ".venv" / "bin" / "kueuelog")]
    rc, out, err = runner.run_project(cli, ROOT, case)
    assert runner.check_case(case, rc, out, err) is None, (runner.check_case(case, rc, out, err), err[-2000:])
    if case.header.get("error"):
        assert rc == 2
        assert case.header["error"] in err, err
