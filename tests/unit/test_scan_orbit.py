"""A multi-podSet workload whose flavor scan goes round in a circle must not stop simulated time.

The PyTorchJob asks one GPU for its Master and two for its Workers; ``gpu-t4`` has two free,
``gpu-a100`` (full, held by a Job pinned to it) none, and the ClusterQueue may not preempt. The
Master fits on ``gpu-t4`` (flavor 0), the Workers then fit nowhere; resuming, the Master tries
``gpu-a100`` (full) and the Workers fit on ``gpu-t4`` at flavor 0; and back again (Kueue's
LastTriedFlavorIdx, the same for it). Every such cycle used to count as "changed", so the scheduler
cycled without end at one instant and the loop never let time move on to the pinned Job's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.codec import decode_decision
from events.envelope import Topics
from events.manifests import parse_time
from events.messages import AdmitWorkload, AnyDecision, CycleCompleted
from services.actuator.loop import Actuator
from services.actuator.sim_port import SimClusterPort
from services.app.driver import Loop, NotIdle, drive, drive_until_idle
from services.runtime.sqlite import SqliteLog
from services.scheduler.service import Scheduler
from services.simcluster.arrivals import ArrivalStream
from services.simcluster.cluster import SimCluster, SimConfig

T = Topics()

QUEUES = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-t4}
spec: {nodeLabels: {gpu-type: nvidia-t4}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a100}
spec: {nodeLabels: {gpu-type: nvidia-a100}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: ml-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-t4
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
    - name: gpu-a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: gpu, namespace: ml}
spec: {clusterQueue: ml-cq}
"""

JOBS = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: on-a100
  namespace: ml
  creationTimestamp: "2025-01-01T09:00:00Z"
  labels: {kueue.x-k8s.io/queue-name: gpu}
  annotations: {kueuelog.io/sim-duration: 300s}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {gpu-type: nvidia-a100}
      containers:
      - name: c
        image: busybox
        resources: {requests: {nvidia.com/gpu: "2"}}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: finetune-ddp
  namespace: ml
  creationTimestamp: "2025-01-01T09:00:30Z"
  labels: {kueue.x-k8s.io/queue-name: gpu}
  annotations: {kueuelog.io/sim-duration: 180s}
spec:
  runPolicy: {suspend: true}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: busybox
            resources: {requests: {nvidia.com/gpu: "1"}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: pytorch
            image: busybox
            resources: {requests: {nvidia.com/gpu: "1"}}
"""


def _decisions(log: SqliteLog) -> list[AnyDecision | CycleCompleted]:
    return [decode_decision(r.value) for r in log.read(T.decisions, 0, 100_000)]


def test_a_circling_flavor_scan_lets_time_move_on_and_every_workload_finishes(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log", durable=False)
    arrivals = ArrivalStream.from_files(log, {"queues.yaml": QUEUES, "jobs.yaml": JOBS}, topics=T)
    result = drive_until_idle(log, arrivals=arrivals, max_rounds=500)  # NotIdle before: cycles without end
    records = result.scheduler.state.workloads
    assert len(records) == 2 and all(r.finished for r in records.values())
    decisions = _decisions(log)
    cycles = [d for d in decisions if isinstance(d, CycleCompleted)]
    # The circle was there: the PyTorchJob's scan resumed at flavor 0 for one podSet, then the other.
    scans = {h.last_tried for c in cycles for h in c.heads if h.key.startswith("ml/pytorchjob-")}
    assert {((0, 0, 0), (1, 0, -1)), ((0, 0, -1), (1, 0, 0))} <= scans
    assert len(cycles) < 100  # a few per event, not a thousand per step
    admitted = {d.name: d.time for d in decisions if isinstance(d, AdmitWorkload)}
    pinned = next(t for name, t in admitted.items() if name.startswith("job-on-a100"))
    pytorch = next(t for name, t in admitted.items() if name.startswith("pytorchjob-"))
    # Kueue's decision: the PyTorchJob waits for gpu-a100 to be freed by the pinned Job, 300s in.
    assert pytorch - pinned >= 300_000
    log.close()


class _Spinning(Scheduler):
    """A scheduler that, when it has nothing to do, still reports cycles run that decided nothing."""

    def step(self) -> int:
        done = super().step()
        if done == 0:
            self.last_events, self.last_decisions = 0, []
            return 1
        return done


def test_a_scheduler_step_that_decides_nothing_lets_simulated_time_move_on(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log", durable=False)
    config = SimConfig()
    loop = Loop(_Spinning(log, topics=T), Actuator(log, SimClusterPort(T, config.cluster), topics=T),
                SimCluster.simulated(log, config, T),
                ArrivalStream.from_files(log, {"queues.yaml": QUEUES, "jobs.yaml": JOBS}, topics=T))
    with pytest.raises(NotIdle):  # it never says it is done, so the run never finishes
        drive(loop, max_rounds=500)
    records = loop.scheduler.state.workloads
    # ... yet time went on: both arrived, ran and finished, the PyTorchJob after the pinned Job.
    assert len(records) == 2 and all(r.finished for r in records.values())
    assert loop.scheduler.state.now >= parse_time("2025-01-01T09:08:00Z")
    log.close()
