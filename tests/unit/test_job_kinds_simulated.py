"""The workload kinds through the simulated cluster and the log (``run all`` in simulated time):
Kueue's job-kind examples (``tests/fixtures/kueue-job-kinds``) arrive, are admitted, run and
finish (serving ones, a Deployment's pods, a StatefulSet, a LeaderWorkerSet, run on and never
finish), and ``explain`` names each by its kind."""

from __future__ import annotations

from pathlib import Path

from events.envelope import Topics
from services.actuator.loop import Actuator
from services.actuator.sim_port import SimClusterPort
from services.app.convert import expand
from services.app.driver import Loop
from services.app.logview import explain
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "kueue-job-kinds"


def test_kinds_run_to_the_end_in_the_simulated_cluster_and_explain_names_their_kind(tmp_path: Path) -> None:
    topics = Topics()
    log = SqliteLog(tmp_path / "log", durable=False)
    files = {p.name: p.read_text(encoding="utf-8") for p in sorted(DIR.glob("*.yaml"))}
    files = {"00-setup.yaml": files.pop("setup.yaml"), **files}
    config = SimConfig()
    loop = Loop(Scheduler(log, topics=topics), Actuator(log, SimClusterPort(topics, config.cluster), topics=topics),
                SimCluster.simulated(log, config, topics),
                ArrivalStream.from_files(log, files, topics=topics, expand=expand))

    serving = ("Deployment", "StatefulSet", "LeaderWorkerSet")

    def is_serving(r: object) -> bool:  # a Deployment's pods' Workloads are owned by the pods, marked never
        return dict(r.obj.annotations or ()).get("kueuelog.io/sim-duration") == "never"  # type: ignore[attr-defined]

    def settled() -> bool:
        records = loop.scheduler.state.workloads.values()
        return len(records) == 22 and all(r.admission is not None and not r.finished if is_serving(r) else r.finished
                                          for r in records)

    for _ in range(100_000):
        loop.round()
        if settled():
            break
    assert settled()  # serving Workloads (a Deployment's pods, a StatefulSet, a LeaderWorkerSet) run on, never end
    owners = sorted(r.obj.owner.kind for r in loop.scheduler.state.workloads.values() if r.obj.owner)
    assert owners == ["AppWrapper"] * 3 + [
        "JAXJob", "JobSet", "LeaderWorkerSet", "LeaderWorkerSet", "MPIJob", "PaddleJob", "Pod", "Pod", "Pod", "Pod",
        "PyTorchJob", "RayCluster", "RayJob", "RayService", "SparkApplication", "StatefulSet", "TFJob",
        "TrainJob", "XGBoostJob"]  # the pods: one plain, the group's first, the Deployment's two
    assert [k for k in owners if k in serving] == ["LeaderWorkerSet", "LeaderWorkerSet", "StatefulSet"]
    lines = explain(log, topics, "default/pytorchjob-mnist")
    assert any("as Workload default/pytorchjob-pytorchjob-mnist-" in line
               and "(PyTorchJob default/pytorchjob-mnist) to LocalQueue user-queue" in line for line in lines)
    lines = explain(log, topics, "default/pytorch-distributed")
    assert any("as Workload default/trainjob-pytorch-distributed-" in line
               and "(TrainJob default/pytorch-distributed) to LocalQueue user-queue" in line for line in lines)
    assert any("finished" in line for line in lines), lines
    lines = explain(log, topics, "default/kv-store")
    assert any("as Workload default/statefulset-kv-store-" in line
               and "(StatefulSet default/kv-store) to LocalQueue user-queue" in line for line in lines)
