"""The demo's workload kinds (``examples/30-workload-kinds.yaml``): a JobSet, a PyTorchJob, a
RayJob and a TrainJob on the ML team's queue go through the simulated cluster to the end, and ``explain`` names
each by its kind."""

from __future__ import annotations

from pathlib import Path

from events.envelope import Topics
from services.actuator.loop import Actuator
from services.actuator.sim_port import SimClusterPort
from services.app.driver import Loop
from services.app.logview import explain
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_demo_runs_a_jobset_a_pytorchjob_a_rayjob_and_a_trainjob(tmp_path: Path) -> None:
    topics = Topics()
    log = SqliteLog(tmp_path / "log", durable=False)
    files = {name: (EXAMPLES / name).read_text(encoding="utf-8")
             for name in ("00-cluster.yaml", "10-queues.yaml", "30-workload-kinds.yaml")}
    config = SimConfig()
    loop = Loop(Scheduler(log, topics=topics), Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                SimCluster.simulated(log, config, topics), ArrivalStream.from_files(log, files, topics=topics))

    def done() -> bool:
        records = loop.scheduler.state.workloads.values()
        return len(records) == 4 and all(r.finished for r in records)

    for _ in range(20_000):
        loop.round()
        if done():
            break
    assert done()
    kinds = sorted(r.obj.owner.kind for r in loop.scheduler.state.workloads.values() if r.obj.owner)
    assert kinds == ["JobSet", "PyTorchJob", "RayJob", "TrainJob"]
    for name, kind in (("eval-sweep", "JobSet"), ("finetune-ddp", "PyTorchJob"), ("batch-infer", "RayJob"),
                       ("pretrain", "TrainJob")):
        lines = explain(log, topics, f"ml/{name}")
        assert any(f"({kind} ml/{name}) to LocalQueue gpu" in line for line in lines), lines[:3]
