"""The project's own conformance cases (``tests/conformance/*.yaml``), in the format of
``../shared/conformance/`` and checked by its runner's own functions, so that a case here means
what it would mean there: the seed 002 (T9k Queue) examples."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "tests" / "conformance").glob("*.yaml"))
RUNNER = ROOT.parent / "shared" / "conformance" / "run.py"


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("shared_conformance_run", RUNNER)
    assert spec is not None and spec.loader is not None, f"no conformance runner at {RUNNER}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_there_are_cases() -> None:
    assert len(CASES) >= 5


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path: Path) -> None:
    run = _runner()
    case = run.load_case(path)
    cli = run.find_cli(ROOT)
    assert cli is not None, "kueuelog is not installed in .venv"
    rc, out, err = run.run_project(cli, ROOT, case)
    assert run.check_case(case, rc, out, err) is None, (rc, err[-2000:])
