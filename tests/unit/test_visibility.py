"""Kueue's visibility API from our state: the same JSON shape as Kueue's
``visibility.kueue.x-k8s.io`` ``pendingworkloads`` subresource (``apis/visibility/v1beta2/types.go``:
PendingWorkloadsSummary with items of PendingWorkload), the same order and positions, and
the same paging (``pkg/visibility/storage/pending_workloads_{cq,lq}.go``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.web import visibility
from tests.builders import a_cluster_queue, a_flavor, a_local_queue, a_namespace, a_workload, simulate

# The JSON names of Kueue's Go types (their `json:"..."` tags), and which are always present.
SUMMARY_KEYS = {"kind", "apiVersion", "metadata", "items"}
ITEM_KEYS = {"metadata", "priority", "localQueueName", "positionInClusterQueue", "positionInLocalQueue"}
ITEM_META_KEYS = {"name", "namespace", "creationTimestamp", "ownerReferences", "annotations"}


def _state() -> Any:
    """One ClusterQueue with 1 cpu, fully used by a running workload; five pending ones over two
    LocalQueues (a and b) of namespace ns, in priority then creation order: p-hi (a), b-1 (b),
    a-1 (a), b-2 (b), a-2 (a)."""
    objects = [a_flavor("f"), a_namespace("ns"), a_cluster_queue("cq").flavor("f", cpu=1),
               a_local_queue("ns", "a", "cq"), a_local_queue("ns", "b", "cq"),
               a_workload("ns", "running").queue("a").request(cpu="1").created(1).admitted("cq", {"cpu": "f"})]
    for name, queue, created, prio in (("a-1", "a", 30, 0), ("b-1", "b", 20, 0), ("a-2", "a", 50, 0),
                                       ("b-2", "b", 40, 0), ("p-hi", "a", 60, 5)):
        objects.append(a_workload("ns", name).queue(queue).request(cpu="1").created(created).priority(prio))
    return simulate(*objects).state


def _names(doc: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in doc["items"]]


def test_the_summary_has_kueues_shape() -> None:
    doc = visibility.cluster_queue_pending(_state(), "cq")
    assert set(doc) == SUMMARY_KEYS
    assert doc["kind"] == "PendingWorkloadsSummary"
    assert doc["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta2"
    assert doc["metadata"] == {"creationTimestamp": None}
    for item in doc["items"]:
        assert set(item) == ITEM_KEYS
        assert set(item["metadata"]) <= ITEM_META_KEYS and {"name", "namespace"} <= set(item["metadata"])
        assert isinstance(item["priority"], int) and isinstance(item["positionInClusterQueue"], int)
        assert item["metadata"]["annotations"]["kueuelog.io/pending-reason"] in ("WaitingForQuota", "Queued")
    assert visibility.cluster_queue_pending(_state(), "cq", version="v1beta1")["apiVersion"] == \
        "visibility.kueue.x-k8s.io/v1beta1"


@pytest.mark.parametrize(("limit", "offset", "want"), [
    pytest.param(None, None, [("p-hi", 0, 0), ("b-1", 1, 0), ("a-1", 2, 1), ("b-2", 3, 1), ("a-2", 4, 2)],
                 id="the whole queue: priority first, then creation; positions count from 0 in both queues"),
    pytest.param(2, 1, [("b-1", 1, 0), ("a-1", 2, 1)],
                 id="a page: positions stay those in the whole queue"),
    pytest.param(0, 0, [], id="limit 0: nothing"),
    pytest.param(-3, -1, [], id="negative limit and offset are bounded as Kueue bounds them"),
    pytest.param(10, 99, [], id="an offset past the end: nothing"),
])
def test_cluster_queue_order_and_paging(limit: int | None, offset: int | None,
                                        want: list[tuple[str, int, int]]) -> None:
    assert _names(visibility.cluster_queue_pending(_state(), "cq", limit=limit, offset=offset)) == want


@pytest.mark.parametrize(("queue", "limit", "offset", "want"), [
    pytest.param("a", None, None, [("p-hi", 0, 0), ("a-1", 2, 1), ("a-2", 4, 2)],
                 id="a LocalQueue's workloads with their positions in both queues"),
    pytest.param("b", None, None, [("b-1", 1, 0), ("b-2", 3, 1)], id="the other LocalQueue"),
    pytest.param("a", 1, 1, [("a-1", 2, 1)], id="paged within the LocalQueue"),
])
def test_local_queue_order_and_paging(queue: str, limit: int | None, offset: int | None,
                                      want: list[tuple[str, int, int]]) -> None:
    assert _names(visibility.local_queue_pending(_state(), "ns", queue, limit=limit, offset=offset)) == want


def test_unknown_queues_are_not_found_with_kueues_wording() -> None:
    cq_missing = re.escape('clusterqueues.visibility.kueue.x-k8s.io "nope" not found')
    with pytest.raises(visibility.NotFound, match=cq_missing):
        visibility.cluster_queue_pending(_state(), "nope")
    with pytest.raises(visibility.NotFound, match=re.escape('localqueues.visibility.kueue.x-k8s.io "nope" not found')):
        visibility.local_queue_pending(_state(), "ns", "nope")


def test_the_limit_is_bounded_by_kueues_maximum() -> None:
    assert visibility.bounded(None, None) == (1000, 0)
    assert visibility.bounded(10**9, 5) == (100_000, 5)
