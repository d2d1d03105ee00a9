"""``kueuelog tail --type``: every decision a user may want to follow has a name, and the names the
command line accepts are the ones tail selects by."""

from __future__ import annotations

import asyncio
from pathlib import Path

from events import objects as o
from events.codec import encode
from events.envelope import Topics
from events.messages import (
    MarkPending,
    PendingReason,
    PlacementEnd,
    PlaceWorkload,
    RemovePlacement,
    UpdateLocalQueueFairSharing,
)
from services.app.cli import TAIL_TYPE_NAMES, main
from services.app.logview import TAIL_TYPES, tail
from services.runtime.sqlite import SqliteLog

ADM = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "pool"),), resource_usage=(("cpu", 1000),), count=1),))


def test_the_command_line_names_are_tails() -> None:
    assert tuple(TAIL_TYPES) == TAIL_TYPE_NAMES


def test_placements_and_queue_status_can_be_followed(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log")
    topics = Topics()
    log.append(topics.decisions, [("k", encode(d)) for d in (
        MarkPending(id="c1-0", cycle=1, time=0, namespace="ns", name="a", cluster_queue="cq",
                    reason=PendingReason.WAITING_FOR_QUOTA, message="no room"),
        PlaceWorkload(id="c1-1", cycle=1, time=0, namespace="ns", name="b", cluster_queue="cq", cluster="worker-1",
                      check="mk", admission=ADM),
        RemovePlacement(id="c2-0", cycle=2, time=0, namespace="ns", name="b", cluster_queue="cq", cluster="worker-1",
                        check="mk", reason=PlacementEnd.WORKLOAD_FINISHED),
        UpdateLocalQueueFairSharing(id="c2-1", cycle=2, time=0, namespace="ns", name="lq", cluster_queue="cq"),
    )])
    lines: list[str] = []

    async def follow() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(tail(log, topics, types={"Place", "RemovePlacement"}, queue=None, from_start=True,
                                        emit=lines.append, stop=stop))
        for _ in range(100):
            if len(lines) >= 2:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(follow())
    log.close()
    assert [line.split()[3] for line in lines] == ["PlaceWorkload", "RemovePlacement"]


def test_an_unknown_type_is_refused_listing_the_names(tmp_path: Path, capsys: object) -> None:
    import pytest

    assert isinstance(capsys, pytest.CaptureFixture)
    (tmp_path / "log").mkdir()
    assert main(["tail", "--log", str(tmp_path / "log"), "--type", "Place,Teleport"]) == 2
    err = capsys.readouterr().err
    assert "Teleport" in err and "PlacementWaiting" in err
