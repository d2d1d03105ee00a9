"""Flavor scan progress across scheduling cycles (Kueue's LastAssignment, ``pkg/scheduler/scheduler.go``).

A head's flavor scan records, per podSet and resource group, the last flavor it
tried; the next attempt resumes after it while the record holds. Under the beta
feature gate FlavorFungibilityPreserveScanProgress (on by default; a
Configuration's ``featureGates`` can switch it off) a head skipped in a cycle
keeps its progress, and progress from the preceding cycle holds whatever the
ClusterQueue's generation, unless the workload's scheduling shape changed.
"""

from __future__ import annotations

import pytest

from events import objects as o
from events.manifests import Document, ManifestError, normalize
from events.messages import ObjectApplied, WorkloadFinished
from services.app.simulate import run
from services.core.cycle import scan_resume
from services.core.state import fold, generation
from tests.builders import (
    Builder,
    Outcome,
    WorkloadBuilder,
    a_cluster_queue,
    a_configuration,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_workload,
    build_state,
)


def _wl(name: str) -> WorkloadBuilder:
    return a_workload("ns", name)


SCAN_GATE = "FlavorFungibilityPreserveScanProgress"


def _skipped_on_f1_in_cycle_one(*config: Builder) -> Outcome:
    """Cycle 1: ``a`` stops its scan at f1, where it fits by borrowing what cq-b does not use; ``b``
    (cq-b, not borrowing, so ordered first) takes that quota and ``a`` is skipped. Then ``b``
    finishes: f1 is free again, and f2 has room for ``a`` too."""
    state = build_state(
        a_flavor("f1"), a_flavor("f2"), a_namespace("ns"), *config,
        a_cluster_queue("cq-a").cohort("co").group(("f1", {"cpu": 0}), ("f2", {"cpu": 3})),
        a_cluster_queue("cq-b").cohort("co").flavor("f1", cpu=2),
        a_local_queue("ns", "lq-a", "cq-a"), a_local_queue("ns", "lq-b", "cq-b"),
        a_workload("ns", "r").queue("lq-a").request(cpu="1").admitted("cq-a", {"cpu": "f2"}),
        a_workload("ns", "b").queue("lq-b").request(cpu="2").created(0),
        a_workload("ns", "a").queue("lq-a").request(cpu="2").created(100),
    )
    out = Outcome(run(state, 1))
    assert out.flavors("ns/b") == {"cpu": "f1"}
    assert out.message("ns/a") == "Workload no longer fits after processing another workload"
    fold(state, WorkloadFinished(namespace="ns", name="b"))
    return out


def _update(out: Outcome, wl: WorkloadBuilder) -> None:
    obj = normalize(Document("test.yaml", 1, wl.obj()))
    assert obj is not None
    fold(out.state, ObjectApplied(time=0, object=obj))


@pytest.mark.parametrize(
    ("config", "between", "want_flavor"),
    [
        pytest.param([], [], "f2", id="gate on (Kueue's default): the skipped workload resumes its scan at f2"),
        pytest.param(
            [a_configuration().feature_gate(SCAN_GATE, False)],
            [],
            "f1",
            id="gate off: a skipped workload starts over at f1, free again",
        ),
        pytest.param(
            [],
            [WorkloadFinished(namespace="ns", name="r")],
            "f2",
            id="gate on: cq-a's generation moved (r finished), yet the next cycle still resumes at f2",
        ),
        pytest.param(
            [],
            [_wl("a").queue("lq-a").request(cpu="1500m").created(100)],
            "f1",
            id="gate on: a's podSets changed between the cycles: the scan starts over",
        ),
        pytest.param(
            [],
            [_wl("a").queue("lq-a").request(cpu="2").created(100).label("team", "x")],
            "f2",
            id="gate on: an update that keeps the scheduling shape keeps the progress",
        ),
        pytest.param(
            [a_configuration().feature_gate(SCAN_GATE, False)],
            [WorkloadFinished(namespace="ns", name="r")],
            "f1",
            id="gate off: and the generation moved: starts over",
        ),
    ],
)
def test_a_skipped_workload_resumes_its_flavor_scan_in_the_next_cycle(config, between, want_flavor):
    """Kueue's ``markSkipped`` keeps the entry's LastAssignment under the beta gate
    FlavorFungibilityPreserveScanProgress (on by default), and ``lastAssignmentOutdated`` keeps an
    assignment from the preceding cycle whatever the ClusterQueue's generation, unless the
    workload's scheduling shape changed (scheduler.go; kubernetes-sigs/kueue#13956)."""
    out = _skipped_on_f1_in_cycle_one(*config)
    for item in between:
        if isinstance(item, Builder):
            _update(out, item)
        else:
            fold(out.state, item)
    run(out.state, 1)
    assert out.flavors("ns/a") == {"cpu": want_flavor}


@pytest.mark.parametrize(
    ("gates", "want_error"),
    [
        pytest.param({SCAN_GATE: False}, None, id="the scan progress gate switched off"),
        pytest.param({SCAN_GATE: True}, None, id="the scan progress gate at its default"),
        pytest.param(
            {"PartialAdmission": True},
            "featureGates.PartialAdmission: unknown or unsupported feature gate 'PartialAdmission': kueuelog "
            "follows Kueue's defaults and lets a Configuration switch only AdmissionFairSharing, "
            "DisableWaitForPodsReady, FlavorFungibilityPreserveScanProgress",
            id="a gate kueuelog does not switch: refused, naming the gate",
        ),
    ],
)
def test_configuration_feature_gates(gates, want_error):
    body = a_configuration().obj() | {"featureGates": gates}
    if want_error is None:
        cfg = normalize(Document("config.yaml", 1, body))
        assert isinstance(cfg, o.Configuration)
        assert cfg.flavor_fungibility_preserve_scan_progress is gates[SCAN_GATE]
    else:
        with pytest.raises(ManifestError) as err:
            normalize(Document("config.yaml", 1, body))
        assert want_error in str(err.value)


@pytest.mark.parametrize(
    ("gate", "recorded_in", "generation_moved", "want_resume"),
    [
        pytest.param(True, 4, False, True, id="gate on, recorded in the preceding cycle"),
        pytest.param(True, 5, True, True, id="gate on, recorded in this cycle, generation moved"),
        pytest.param(True, 4, True, True, id="gate on, recorded in the preceding cycle survives a generation bump"),
        pytest.param(True, 3, True, False, id="gate on, older than one cycle: the generation check decides"),
        pytest.param(True, 3, False, True, id="gate on, older than one cycle, generation unchanged"),
        pytest.param(False, 4, True, False, id="gate off: the preceding cycle gets no special treatment"),
        pytest.param(False, 1, False, True, id="gate off: generation unchanged"),
    ],
)
def test_when_recorded_scan_progress_is_outdated(gate, recorded_in, generation_moved, want_resume):
    """Kueue's ``TestLastAssignmentOutdated`` (scheduler_test.go), in cycle 5."""
    state = build_state(
        a_flavor("f1"), a_flavor("f2"), a_namespace("ns"),
        a_configuration().feature_gate(SCAN_GATE, gate),
        a_cluster_queue("cq").group(("f1", {"cpu": 1}), ("f2", {"cpu": 1})),
        a_local_queue("ns", "lq", "cq"),
        _wl("a").queue("lq").request(cpu="1"),
    )
    state.ensure_indexed()
    rec = state.workloads["ns/a"]
    rec.last_tried, rec.last_cycle, rec.last_generation = {(0, 0): 0}, recorded_in, generation(state, "cq")
    state.cycles = 5
    if generation_moved:
        state.generations["cq"] = state.generations.get("cq", 0) + 1
    assert (scan_resume(state, "cq", rec) is not None) is want_resume


def test_a_pod_set_without_flavors_records_no_scan_progress():
    """The cpu group stops at f1 (it fits), the gpu group fits nowhere: Kueue leaves the podSet
    without flavors, so Assignment.append records no LastTriedFlavorIdx for it and
    PendingFlavors is false: the workload is parked (BestEffortFIFO), not retried from f2."""
    gpu = "example.com/gpu"
    state = build_state(
        a_flavor("f1"), a_flavor("f2"), a_flavor("g1"), a_namespace("ns"),
        a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4})).group(("g1", {gpu: 1})),
        a_local_queue("ns", "lq", "cq"),
        _wl("w").queue("lq").pod_set("main", 1, cpu="1", example_com__gpu="2"),
    )
    out = Outcome(run(state, 1))
    rec = out.wl("ns/w")
    assert rec.pending
    assert out.message("ns/w") == (
        "couldn't assign flavors to pod set main: insufficient quota for example.com/gpu in flavor g1, "
        "previously considered podsets requests (0) + current podset request (2) > maximum capacity (1)"
    )
    assert rec.last_tried == {}
    assert rec.inadmissible
