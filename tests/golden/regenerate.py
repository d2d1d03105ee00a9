"""Regenerates the golden logs: ``python -m tests.golden.regenerate``.

Each golden log is a deterministic run of the whole loop (seeded manifests,
scheduler, actuator, simulated cluster in simulated time) exported as JSON
lines: every record of cluster-events and decisions. They are committed; the
golden tests replay them on every run and require every recorded decision to
be re-derived byte for byte. Regenerate only when a change of decisions is
intended, and say so in the commit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from events.envelope import Topics
from events.manifests import load
from services.app.driver import drive_until_idle
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import ArrivalStream

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
# name -> [(manifest file, how many of its documents; None: all)]
CASES: dict[str, list[tuple[Path, int | None]]] = {
    "examples-morning": [(EXAMPLES / "00-cluster.yaml", None), (EXAMPLES / "10-queues.yaml", None),
                         (EXAMPLES / "20-jobs.yaml", 60)],
    "preemption-and-fair-sharing": [(HERE / "fair-sharing.yaml", None)],
}


def manifests(case: list[tuple[Path, int | None]]) -> dict[str, str]:
    files = {}
    for path, limit in case:
        text = path.read_text(encoding="utf-8")
        if limit is not None:
            text = "\n---\n".join(text.split("\n---\n")[:limit])
        files[path.name] = text
    return files


def export(log: SqliteLog, topics: Topics, out: Path) -> None:
    with out.open("w", encoding="utf-8") as f:
        for topic in (topics.cluster_events, topics.decisions):
            offset = 0
            while batch := log.read(topic, offset, 5000):
                for rec in batch:
                    row = {"topic": topic.rsplit(".", 1)[1], "key": rec.key, "value": json.loads(rec.value)}
                    f.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
                offset = batch[-1].offset + 1


def regenerate(name: str, case: list[tuple[Path, int | None]]) -> Path:
    topics = Topics()
    with tempfile.TemporaryDirectory() as tmp:
        log = SqliteLog(tmp)
        files = manifests(case)
        load(files)  # fail early on a bad manifest
        arrivals = ArrivalStream.from_files(log, files, topics=topics)
        drive_until_idle(log, topics=topics, arrivals=arrivals)
        out = HERE / f"{name}.jsonl"
        export(log, topics, out)
        log.close()
    return out


def main() -> None:
    for name, case in CASES.items():
        print(regenerate(name, case))


if __name__ == "__main__":
    main()
