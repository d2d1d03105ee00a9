"""The on-cluster contract is spelled in one place: ``events/cluster.py``.

Every label and annotation key, the API group, and the Workload condition types are defined
there; everywhere else in ``events/`` and ``services/`` names them through its constants. These
tests read the source (the Python syntax tree, docstrings excluded) and fail when a second
spelling appears, so two copies of a key cannot drift apart again.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from events import cluster
from events.cluster import ConditionType

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "events" / "cluster.py"
KEY = re.compile(r"(kueuelog\.io|kueue\.x-k8s\.io)(/|$)")

HELP_TEXTS = {
    # Documentation for people (``--help`` texts), not keys we read or write: (file, a fragment).
    ("services/app/cli.py", "batch/v1 Job with kueue.x-k8s.io/queue-name, Namespace"),
    ("services/app/cli.py", "how long a Job runs without a kueuelog.io/sim-duration annotation"),
    ("services/app/cli.py", "(label kueuelog.io/rejected; it runs outside quota)"),
    ("services/app/viewcli.py", "the log never saw finish and without kueuelog.io/sim-duration"),
    ("services/app/viewcli.py", "Kueue's visibility API (/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/CQ/"),
}
NOT_CONDITIONS = {
    # The job reconciler's plan type Finished, exported by name.
    ("services/actuator/job_reconciler.py", "Finished"),
}


def _sources() -> Iterator[Path]:
    for top in ("events", "services"):
        yield from sorted((ROOT / top).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
        if isinstance(node, ast.Module | ast.ClassDef):
            # attribute docstrings: a bare string right after an assignment
            for before, after in zip(node.body, node.body[1:], strict=False):
                if (isinstance(before, ast.Assign | ast.AnnAssign) and isinstance(after, ast.Expr)
                        and isinstance(after.value, ast.Constant)):
                    out.add(id(after.value))
    return out


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def _help_text(path: Path, text: str) -> bool:
    where = str(path.relative_to(ROOT))
    return any(where == file and fragment in text for file, fragment in HELP_TEXTS)


def test_every_label_and_annotation_key_is_spelled_only_in_the_contract() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in _sources() if path != CONTRACT
        for line, text in _strings(path)
        if KEY.search(text) and not _help_text(path, text)
    ]
    assert found == [], "use the constants of events/cluster.py instead:\n" + "\n".join(found)


def test_condition_types_are_spelled_only_in_the_contract() -> None:
    types = {str(t) for t in ConditionType}
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in _sources() if path != CONTRACT
        for line, text in _strings(path)
        if text in types and (str(path.relative_to(ROOT)), text) not in NOT_CONDITIONS
    ]
    assert found == [], "use events.cluster.ConditionType instead:\n" + "\n".join(found)


def test_the_scan_finds_the_contracts_own_keys() -> None:
    """The scan is not vacuous: run over the contract itself, it finds the keys."""
    keys = [text for _, text in _strings(CONTRACT) if KEY.search(text)]
    assert "kueuelog.io/" in keys and cluster.KUEUE_GROUP in keys
    assert cluster.EVICTED_ANNOTATION == "kueuelog.io/evicted"  # what a Job written by an older version carries
