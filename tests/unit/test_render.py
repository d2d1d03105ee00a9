"""simulate's output: every pending workload says why, even one no cycle has looked at yet."""

from __future__ import annotations

from events.cluster import PENDING_REASON_ANNOTATION
from services.core.render import workload_list
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_workload, simulate


def _by_name(out) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {w["metadata"]["name"]: w for w in workload_list(out.state)["items"]}


def test_a_workload_behind_a_strict_fifo_head_says_so():
    out = simulate(
        a_flavor("f"), a_cluster_queue("cq").strict_fifo().flavor("f", cpu=4), a_local_queue("ns", "lq", "cq"),
        a_workload("ns", "big").queue("lq").request(cpu=5).created(0),
        a_workload("ns", "small").queue("lq").request(cpu=1).created(1),
    )
    small = _by_name(out)["small"]
    assert small["metadata"]["annotations"][PENDING_REASON_ANNOTATION] == "BlockedByStrictFIFO"
    (qr,) = [c for c in small["status"]["conditions"] if c["type"] == "QuotaReserved"]
    assert qr["status"] == "False" and qr["reason"] == "PendingEvaluation"  # Kueue's, for one not yet evaluated
    assert qr["message"] == ("Waiting in StrictFIFO ClusterQueue cq behind 1 workload(s); "
                             "the head, ns/big, cannot be admitted yet")
    big = _by_name(out)["big"]
    assert big["metadata"]["annotations"][PENDING_REASON_ANNOTATION] == "ExceedsMaxQuota"


def test_a_workload_no_cycle_has_reached_is_queued_with_its_position():
    out = simulate(
        a_flavor("f"), a_cluster_queue("cq").flavor("f", cpu=1), a_local_queue("ns", "lq", "cq"),
        *[a_workload("ns", f"w{i}").queue("lq").request(cpu=1).created(i) for i in range(3)],
        cycles=1,
    )
    items = _by_name(out)
    assert "admission" in items["w0"]["status"]
    assert items["w2"]["metadata"]["annotations"][PENDING_REASON_ANNOTATION] == "Queued"
    (qr,) = [c for c in items["w2"]["status"]["conditions"] if c["type"] == "QuotaReserved"]
    assert qr["message"] == "Queued in ClusterQueue cq at position 2; not considered by a cycle yet"
