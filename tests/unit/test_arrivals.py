"""Seeding is idempotent by object, whatever path names the manifests."""

from __future__ import annotations

import os
from pathlib import Path

from events.envelope import Topics
from events.manifests import load
from services.runtime.sqlite import SqliteLog
from services.simcluster.arrivals import ArrivalStream, arrival_schedule, read_files, seed_all

T = Topics()
EXAMPLES = sorted(Path("examples").glob("*.yaml"))


def test_seeding_again_through_another_path_spelling_appends_nothing(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log")
    relative = [str(p) for p in EXAMPLES]
    absolute = [str(p.resolve()) for p in EXAMPLES]
    dotted = [os.path.join(".", "examples", "..", str(p)) for p in EXAMPLES]
    first = seed_all(log, load(read_files(relative)))
    assert first > 300
    assert seed_all(log, load(read_files(absolute))) == 0
    assert seed_all(log, load(read_files(dotted))) == 0
    assert log.end_offset(T.cluster_events) == first


def test_a_changed_object_is_seeded_as_an_update(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log")
    flavor = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: spot\n"
    assert seed_all(log, load({"a.yaml": flavor})) == 1
    assert seed_all(log, load({"b.yaml": flavor})) == 0
    changed = flavor + "spec:\n  nodeLabels:\n    pool: spot\n"
    assert seed_all(log, load({"a.yaml": changed})) == 1


def test_an_arrival_stream_resumes_without_repeating_what_a_seed_through_another_path_wrote(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log")
    objects = load(read_files([str(p) for p in EXAMPLES]))
    seed_all(log, objects)
    again = load(read_files([str(p.resolve()) for p in EXAMPLES]))
    stream = ArrivalStream(log, arrival_schedule(again, start=0))
    assert stream.exhausted
