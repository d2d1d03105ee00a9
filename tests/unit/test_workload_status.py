"""Status-only news (``UpdateWorkloadStatus``): its wire form, what the Kubernetes actuator writes
with it, and that it changes no ClusterQueue counts."""

from __future__ import annotations

from events import objects as o
from events.codec import decode_decision, encode
from events.messages import AdmitWorkload, UpdateWorkloadStatus
from services.actuator.kubeplan import QueueCounts, news_status, status_patch
from services.core import workload_status

T = 1_750_000_000_000
ADMISSION = o.Admission(cluster_queue="cq", pod_set_assignments=(
    o.PodSetAssignment(name="main", flavors=(("cpu", "default"),), resource_usage=(("cpu", 1000),), count=1),))
PENDING = o.AdmissionCheckState(name="prov", message="ETA 1m", last_transition_time=T + 1500)


def news(**kw: object) -> UpdateWorkloadStatus:
    return UpdateWorkloadStatus(id="c3-0", cycle=3, time=T, namespace="ns", name="w", cluster_queue="cq",
                                **kw)  # type: ignore[arg-type]


def test_its_wire_tag_is_explicit_and_its_fields_default() -> None:
    raw = encode(news(admission_checks=(PENDING,), requeue_at=T + 60_000))
    assert b'"type":"workload-status"' in raw
    assert decode_decision(raw) == news(admission_checks=(PENDING,), requeue_at=T + 60_000)
    bare = b'{"type":"workload-status","id":"c1-0","cycle":1,"namespace":"ns","name":"w"}'
    d = decode_decision(bare)
    assert (d.admission_checks, d.requeue_count, d.requeue_at) == ((), 0, None)


def test_the_checks_and_requeue_state_are_written_the_rest_kept() -> None:
    status = {"conditions": [{"type": "QuotaReserved", "status": "True"}], "admission": {"clusterQueue": "cq"},
              "admissionChecks": [{"name": "prov", "state": "Pending", "message": "",
                                   "lastTransitionTime": "2025-06-15T15:06:40Z"}]}
    out = news_status(status, news(admission_checks=(PENDING,), requeue_count=2, requeue_at=T + 60_400))
    assert out["conditions"] == status["conditions"] and out["admission"] == status["admission"]
    assert out["admissionChecks"] == [{"name": "prov", "state": "Pending", "message": "ETA 1m",
                                       "lastTransitionTime": "2025-06-15T15:06:41Z"}]
    assert out["requeueState"] == {"count": 2, "requeueAt": "2025-06-15T15:07:40Z"}  # whole seconds


def test_a_cleared_requeue_at_keeps_the_count_and_nothing_left_removes_it() -> None:
    status = {"requeueState": {"count": 1, "requeueAt": "2025-06-15T15:07:40Z"}}
    assert news_status(status, news(requeue_count=1))["requeueState"] == {"count": 1}
    assert "requeueState" not in news_status(status, news())
    patch = status_patch({"metadata": {"resourceVersion": "7"}, "status": status}, news_status(status, news()))
    assert patch == {"metadata": {"resourceVersion": "7"}, "status": {"requeueState": None}}


def test_writing_it_twice_changes_nothing_the_second_time() -> None:
    d = news(admission_checks=(PENDING,), requeue_at=T + 60_000)
    written = news_status({}, d)
    assert status_patch({"metadata": {"resourceVersion": "8"}, "status": written}, news_status(written, d)) is None


def test_it_changes_no_queue_counts() -> None:
    counts = QueueCounts()
    counts.fold(AdmitWorkload(id="c1-0", cycle=1, namespace="ns", name="w", cluster_queue="cq", admission=ADMISSION,
                              admission_checks=("prov",)))
    before = dict(counts.workloads)
    counts.dirty_cluster_queues.clear()
    counts.fold(news(admission_checks=(PENDING,)))
    assert counts.workloads == before and not counts.dirty_cluster_queues


def test_its_text() -> None:
    assert workload_status.text(news(admission_checks=(PENDING,))) == "status: prov Pending (ETA 1m)"
    text = workload_status.text(news(requeue_count=1, requeue_at=T))
    assert text.startswith("status: requeueState count 1 requeueAt")
    assert workload_status.text(news()) == "status: requeueAt cleared"
