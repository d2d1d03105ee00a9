"""Seed 003 (ACK capacity scheduling), its borrowing / reclaim walk-through, with Kueue objects.

The ElasticQuotaTree root(40) -> a(min 20, max 40) -> a.1, a.2 and b(min 20, max 40) -> b.1, b.2,
each leaf min 10 / max 20 CPUs, becomes a Cohort tree: leaves are ClusterQueues with
nominalQuota = min and borrowingLimit = max - min, and reclaimWithinCohort: Any. Each namespace
runs 5 pods of 5 CPUs (one Workload per pod).
"""

from __future__ import annotations

import pytest

from events.manifests import Document, normalize
from events.messages import ObjectApplied
from services.app.simulate import run
from services.core.state import State, fold
from tests.builders import a_cluster_queue, a_cohort, a_flavor, a_local_queue, a_workload

FAIR = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "fairSharing": {"enable": True}}
LEAVES = {"namespace1": ("a-1", "a"), "namespace2": ("a-2", "a"),
          "namespace3": ("b-1", "b"), "namespace4": ("b-2", "b")}


def _quota_tree(*, nested: bool = False) -> list[object]:
    """Flat: the four leaves in one cohort whose 40 CPUs are their nominal quotas. Nested: a Cohort
    tree root -> a, b mirroring the ElasticQuotaTree (the inner nodes hold no quota of their own,
    since in Kueue a cohort's quota adds to its children's instead of bounding them)."""
    objs: list[object] = [a_flavor("default")]
    if nested:
        objs += [a_cohort("a").parent("root"), a_cohort("b").parent("root")]
    for ns, (cq, cohort) in LEAVES.items():
        cohort_name = cohort if nested else "root"
        objs.append(a_cluster_queue(cq).cohort(cohort_name).flavor("default", cpu=(10, 10)).preemption(reclaim="Any"))
        objs.append(a_local_queue(ns, "lq", cq))
    return objs


def _pods(ns: str, start: int) -> list[object]:
    return [a_workload(ns, f"pod-{i}").queue("lq").request(cpu=5).created(start + i) for i in range(5)]


class Cluster:
    def __init__(self, *objs: object) -> None:
        self.state = State()
        self.n = 0
        self.apply(*objs)

    def apply(self, *objs: object) -> Cluster:
        for b in objs:
            self.n += 1
            body = b.obj() if hasattr(b, "obj") else b  # type: ignore[attr-defined]
            obj = normalize(Document("seed-003.yaml", self.n, body))
            assert obj is not None
            fold(self.state, ObjectApplied(time=getattr(obj, "creation_time", None) or 0, object=obj))
        result = run(self.state, None)
        assert result.converged
        return self

    def running(self) -> dict[str, int]:
        out = dict.fromkeys(LEAVES, 0)
        for rec in self.state.workloads.values():
            if rec.admission is not None and not rec.evicting:
                out[rec.obj.namespace] += 1
        return out


@pytest.mark.parametrize(
    ("fair", "nested", "want_after_ns3", "want_reasons"),
    [
        # Every reclaimer stays within its nominal quota: Kueue reclaims without comparing shares
        # (FairSharingPreemptWithinNominal), so the reason is InCohortReclamation.
        pytest.param(True, False, (3, 3, 2, 0), {"InCohortReclamation"},
                     id="fair sharing, flat cohort: exactly the document (one pod back from each of a.1 and a.2)"),
        pytest.param(False, False, (4, 2, 2, 0), {"InCohortReclamation"},
                     id="classical, flat cohort: the two most recently admitted pods (namespace2) are reclaimed"),
        pytest.param(False, True, (2, 2, 4, 0), {"InCohortReclamation"},
                     id="classical, cohort tree: b.1 may also use idle b.2's quota (hierarchical reclaim)"),
        # b.1's first two pods are within its nominal quota (InCohortReclamation); the two it
        # borrows for are won on shares (InCohortFairSharing).
        pytest.param(True, True, (2, 2, 4, 0), {"InCohortReclamation", "InCohortFairSharing"},
                     id="fair sharing, cohort tree: root.b as a whole is owed 20"),
    ],
)
def test_idle_quota_is_borrowed_up_to_max_then_reclaimed_down_to_min(
    fair: bool, nested: bool, want_after_ns3: tuple[int, ...], want_reasons: set[str]
) -> None:
    cluster = Cluster(*([FAIR] if fair else []), *_quota_tree(nested=nested))
    # namespace1 borrows idle quota up to its max of 20: 4 of 5 pods run, 1 is pending.
    assert tuple(cluster.apply(*_pods("namespace1", 0)).running().values()) == (4, 0, 0, 0)
    # namespace2 too: the root's 40 CPUs are all in use.
    assert tuple(cluster.apply(*_pods("namespace2", 100)).running().values()) == (4, 4, 0, 0)
    # namespace3 reclaims what it is guaranteed from the borrowers under root.a.
    assert tuple(cluster.apply(*_pods("namespace3", 200)).running().values()) == want_after_ns3
    # namespace4 reclaims its min as well: every quota ends at its guaranteed min, 2 pods each.
    assert tuple(cluster.apply(*_pods("namespace4", 300)).running().values()) == (2, 2, 2, 2)
    reasons = {c.reason for r in cluster.state.workloads.values() if (c := r.conditions.get("Preempted"))}
    assert reasons == want_reasons
    pending = [r for r in cluster.state.workloads.values() if r.pending]
    assert len(pending) == 12
