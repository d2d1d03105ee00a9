"""Flavor assignment (Kueue's ``pkg/scheduler/flavorassigner``), observed through admissions.

Section 3 of the Kueue digest is the specification: flavors are tried in the
ClusterQueue's order; each resource group is assigned on its own; taints must be
tolerated by the pod or the flavor; nodeSelector and required node affinity are
matched only on label keys that some flavor of the group uses; flavor fungibility
decides whether a borrowing / preempting flavor stops the search; pending
messages are ``couldn't assign flavors to pod set <name>: <sorted reasons>``.
"""

from __future__ import annotations

from typing import Any

import pytest

from events import objects as o
from services.core.flavors import Mode, is_preferred
from tests.builders import (
    Builder,
    WorkloadBuilder,
    a_cluster_queue,
    a_cohort,
    a_configuration,
    a_flavor,
    a_local_queue,
    a_namespace,
    a_workload,
    simulate,
)

GPU = "example.com/gpu"


def _wl(name: str = "w") -> WorkloadBuilder:
    return a_workload("ns", name).queue("lq")


def _run(
    cq: Builder,
    *workloads: Builder,
    flavors: list[Builder] | None = None,
    extra: list[Builder] | None = None,
    cycles: int | None = None,
):
    flavors = flavors if flavors is not None else [a_flavor("f"), a_flavor("f1"), a_flavor("f2")]
    return simulate(
        *flavors,
        a_namespace("ns"),
        cq,
        a_local_queue("ns", "lq", cq.body["metadata"]["name"]),
        *(extra or []),
        *workloads,
        cycles=cycles,
    )


def _with_affinity(wl: WorkloadBuilder, *terms: list[tuple[str, str, list[str]]]) -> WorkloadBuilder:
    """Required node affinity on the last podSet: terms are ORed, expressions in a term ANDed."""
    spec = wl.body["spec"]["podSets"][-1]["template"]["spec"]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in term]}
                    for term in terms
                ]
            }
        }
    }
    return wl


def _pending_message(*reasons: str, pod_set: str = "main") -> str:
    return f"couldn't assign flavors to pod set {pod_set}: {', '.join(reasons)}"


def _max(res: str, flavor: str, previous: str, request: str, capacity: str) -> str:
    return (
        f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests ({previous}) "
        f"+ current podset request ({request}) > maximum capacity ({capacity})"
    )


def _unused(res: str, flavor: str, more: str) -> str:
    return f"insufficient unused quota for {res} in flavor {flavor}, {more} more needed"


# --- flavor order ---------------------------------------------------------------------------------


def _running(name: str, flavor: str, cpu: str) -> WorkloadBuilder:
    return _wl(name).request(cpu=cpu).admitted("cq", {"cpu": flavor})


@pytest.mark.parametrize(
    ("cpu", "running", "want_flavor", "want_message"),
    [
        pytest.param("2", [], "f1", "", id="fits the first flavor: first flavor"),
        pytest.param("3", [], "f2", "", id="too big for the first flavor: the second one"),
        pytest.param(
            "2", [_running("r1", "f1", "1")], "f2", "", id="first flavor has only 1 unused core left: the second one"
        ),
        pytest.param(
            "5",
            [],
            None,
            _pending_message(_max("cpu", "f1", "0", "5", "2"), _max("cpu", "f2", "0", "5", "4")),
            id="bigger than every flavor: pending, each flavor's maximum capacity in the message",
        ),
        pytest.param(
            "2",
            [_running("r1", "f1", "1"), _running("r2", "f2", "3")],
            None,
            _pending_message(_unused("cpu", "f1", "1"), _unused("cpu", "f2", "1")),
            id="both flavors partly used: pending, how much is missing in each",
        ),
        pytest.param(
            "1500m",
            [_running("r1", "f1", "1"), _running("r2", "f2", "3500m")],
            None,
            _pending_message(_unused("cpu", "f1", "500m"), _unused("cpu", "f2", "1")),
            id="missing amounts are rendered as quantities (500m)",
        ),
    ],
)
def test_flavors_are_tried_in_the_cluster_queues_order(cpu, running, want_flavor, want_message):
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 2}), ("f2", {"cpu": 4}))
    out = _run(cq, *running, _wl().request(cpu=cpu).created(100))
    if want_flavor is None:
        assert out.wl("ns/w").pending
        # Kueue >= 0.19 writes the flavor assigner's NoFit reason (UnadmittedWorkloadsObservability).
        want_reason = "ExceedsMaxQuota" if "maximum capacity" in want_message else "WaitingForQuota"
        assert out.condition("ns/w", "QuotaReserved") == ("False", want_reason)
    else:
        assert out.flavors("ns/w") == {"cpu": want_flavor}
    assert out.message("ns/w") == (want_message or "Quota reserved in ClusterQueue cq")


# --- resource groups ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "want_flavors"),
    [
        pytest.param(
            {"cpu": "2", "memory": "1Gi", GPU: "1"},
            {"cpu": "f1", "memory": "f1", GPU: "g1"},
            id="everything fits the first flavor of each group",
        ),
        pytest.param(
            {"cpu": "2", "memory": "6Gi", GPU: "1"},
            {"cpu": "f2", "memory": "f2", GPU: "g1"},
            id="memory does not fit f1: cpu moves with it to f2, the gpu group stays on g1",
        ),
        pytest.param(
            {"cpu": "6", "memory": "1Gi", GPU: "3"},
            {"cpu": "f2", "memory": "f2", GPU: "g2"},
            id="each group picks its own second flavor",
        ),
        pytest.param(
            {"cpu": "1", "memory": "1Gi", GPU: "2"},
            {"cpu": "f1", "memory": "f1", GPU: "g2"},
            id="the gpu group moves on without moving the cpu/memory group",
        ),
    ],
)
def test_resource_groups_are_assigned_independently(requests, want_flavors):
    cq = (
        a_cluster_queue("cq")
        .group(("f1", {"cpu": 4, "memory": "4Gi"}), ("f2", {"cpu": 8, "memory": "8Gi"}))
        .group(("g1", {GPU: 1}), ("g2", {GPU: 4}))
    )
    wl = _wl()
    wl.pod_set("main", 1, **{k.replace(".", "_").replace("/", "__"): v for k, v in requests.items()})
    out = _run(cq, wl, flavors=[a_flavor(n) for n in ("f1", "f2", "g1", "g2")])
    assert out.flavors("ns/w") == want_flavors


def test_the_message_names_only_the_resource_group_that_failed():
    """Kueue replaces the reasons gathered so far with the failing resource's status (``groupStatus =
    *status; break``): cpu's try of f1 is not reported once the gpu group fails."""
    cq = (a_cluster_queue("cq").group(("f1", {"cpu": 1}), ("f2", {"cpu": 4})).group(("g1", {GPU: 1})))
    wl = _wl().pod_set("main", 1, cpu="2", example_com__gpu="2")
    out = _run(cq, wl, flavors=[a_flavor(n) for n in ("f1", "f2", "g1")])
    assert out.wl("ns/w").pending
    assert out.message("ns/w") == _pending_message(_max(GPU, "g1", "0", "2", "1"))


def test_a_resource_group_that_fits_adds_nothing_to_the_message():
    """The cpu group tries f1 (too small) and fits on f2; the gpu group needs preemption. Kueue's
    ``findFlavorForPodSets`` returns no status for a group whose chosen flavor fits, so only the
    gpu group's reason is in the message, not cpu's try of f1."""
    cq = (
        a_cluster_queue("cq")
        .group(("f1", {"cpu": 1}), ("f2", {"cpu": 4}))
        .group(("g1", {GPU: 1}))
        .preemption(within="LowerPriority")
    )
    out = _run(
        cq,
        _wl("low").pod_set("main", 1, example_com__gpu="1").priority(0).admitted("cq", {GPU: "g1"}),
        _wl("high").pod_set("main", 1, cpu="2", example_com__gpu="1").priority(10).created(100),
        flavors=[a_flavor(n) for n in ("f1", "f2", "g1")],
        cycles=1,
    )
    assert out.preempted() == ["ns/low"]
    assert out.message("ns/high") == (
        _pending_message(_unused(GPU, "g1", "1")) + ". Pending the preemption of 1 workload(s)"
    )


@pytest.mark.parametrize("memory_first", [pytest.param(False, id="cpu covered first"),
                                          pytest.param(True, id="memory covered first")])
def test_every_resource_of_a_flavor_that_does_not_fit_is_reported(memory_first):
    """Kueue's ``findFlavorForPodSets`` checks every requested resource of a flavor: the closure
    returns early for the resources after one that does not fit, but the loop goes on, and their
    reasons are reported too, whatever the order of coveredResources."""
    quotas = {"memory": "4Gi", "cpu": 2} if memory_first else {"cpu": 2, "memory": "4Gi"}
    out = _run(
        a_cluster_queue("cq").group(("f1", quotas)),
        _wl("running").request(memory="4Gi").admitted("cq", {"memory": "f1"}),
        _wl().request(cpu="3", memory="1Gi").created(100),
    )
    assert out.wl("ns/w").pending
    assert out.message("ns/w") == _pending_message(_max("cpu", "f1", "0", "3", "2"), _unused("memory", "f1", "1Gi"))
    assert out.wl("ns/w").pending_reason == "ExceedsMaxQuota"


@pytest.mark.parametrize(
    ("flavors", "cq_flavors", "requests", "want_reason"),
    [
        pytest.param(
            [a_flavor("f1").labels(zone="a"), a_flavor("f2")],
            (("f1", {"cpu": 4}), ("f2", {"cpu": 2})),
            {"cpu": "3"},
            "ExceedsMaxQuota",
            id="f1 does not match, f2 is too small: the least severe flavor names the reason",
        ),
        pytest.param(
            [a_flavor("f1").labels(zone="a"), a_flavor("f2").labels(zone="a")],
            (("f1", {"cpu": 4}), ("f2", {"cpu": 2})),
            {"cpu": "1"},
            "NoMatchingFlavor",
            id="no flavor matches",
        ),
        pytest.param(
            [a_flavor("f1"), a_flavor("f2")],
            (("f1", {"cpu": 2}), ("f2", {"cpu": 4})),
            {"cpu": "5"},
            "ExceedsMaxQuota",
            id="every flavor is too small",
        ),
    ],
)
def test_pending_reason_of_a_pod_set_that_fits_nowhere(flavors, cq_flavors, requests, want_reason):
    """Kueue's ``resolveNoFitReason``: per resource group the least severe reason among the flavors
    that did not fit (NoMatchingFlavor > ExceedsMaxQuota > WaitingForQuota), across groups the
    most severe."""
    wl = _wl().pod_set("main", 1, node_selector={"zone": "b"}, **requests)
    out = _run(a_cluster_queue("cq").group(*cq_flavors), wl, flavors=flavors)
    assert out.wl("ns/w").pending
    assert out.wl("ns/w").pending_reason == want_reason


def test_a_resource_no_group_covers_leaves_the_workload_pending():
    cq = a_cluster_queue("cq").flavor("f", cpu=8)
    out = _run(cq, _wl().request(cpu="1", memory="1Gi"))
    assert out.wl("ns/w").pending
    assert out.message("ns/w") == _pending_message("resource memory unavailable in ClusterQueue")


def test_a_zero_request_of_an_uncovered_resource_is_ignored():
    cq = a_cluster_queue("cq").flavor("f", cpu=8)
    out = _run(cq, _wl().request(cpu="1", memory="0"))
    assert out.flavors("ns/w") == {"cpu": "f"}


@pytest.mark.parametrize(
    ("gpu_flavor", "want_flavors", "want_message"),
    [
        pytest.param(a_flavor("g1"), {"cpu": "f", GPU: "g1"}, "", id="the zero request gets its group's flavor"),
        pytest.param(
            a_flavor("g1").labels(zone="a"),
            None,
            _pending_message("flavor g1 doesn't match node affinity"),
            id="no flavor of its group matches the podSet: pending, though nothing is requested there",
        ),
    ],
)
def test_a_zero_request_of_a_covered_resource_is_assigned_a_flavor(gpu_flavor, want_flavors, want_message):
    """Kueue's 'zero resource request defined in clusterQueue should get flavor assigned'
    (flavorassigner_test.go, kubernetes-sigs/kueue#8079): only a zero request for a resource the
    ClusterQueue does not cover is skipped; a covered one goes through the flavor search like any
    other and is admitted with a usage of 0."""
    cq = a_cluster_queue("cq").flavor("f", cpu=8).group(("g1", {GPU: 4}))
    wl = _wl().pod_set("main", 1, node_selector={"zone": "b"}, cpu="1", example_com__gpu="0")
    out = _run(cq, wl, flavors=[a_flavor("f"), gpu_flavor])
    if want_flavors is None:
        assert out.wl("ns/w").pending
        assert out.message("ns/w") == want_message
    else:
        assert out.flavors("ns/w") == want_flavors
        usage = dict(out.wl("ns/w").admission.pod_set_assignments[0].resource_usage)
        assert usage == {"cpu": 1000, GPU: 0}


# --- taints and tolerations -----------------------------------------------------------------------


def _tol(key: str, value: str | None = None, effect: str | None = "NoSchedule", op: str = "Equal") -> dict[str, str]:
    t = {"key": key, "operator": op}
    if value is not None:
        t["value"] = value
    if effect is not None:
        t["effect"] = effect
    return t


@pytest.mark.parametrize(
    ("f1", "f2", "tolerations", "want_flavor", "want_message"),
    [
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            None,
            "f2",
            "",
            id="untolerated NoSchedule taint: skip to the next flavor",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            [_tol("spot", "true")],
            "f1",
            "",
            id="pod tolerates the taint (Equal): the tainted flavor is used",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            [_tol("spot", effect=None, op="Exists")],
            "f1",
            "",
            id="pod tolerates the key with Exists and no effect",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            [{"operator": "Exists"}],
            "f1",
            "",
            id="Exists with an empty key tolerates every taint",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            [_tol("spot", "false")],
            "f2",
            "",
            id="toleration for another value does not tolerate",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2"),
            [_tol("spot", "true", effect="NoExecute")],
            "f2",
            "",
            id="toleration for another effect does not tolerate",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true").toleration("spot", "true"),
            a_flavor("f2"),
            None,
            "f1",
            "",
            id="the flavor's own tolerations count as the pod's",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true", "PreferNoSchedule"),
            a_flavor("f2"),
            None,
            "f1",
            "",
            id="PreferNoSchedule taints are ignored",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true", "NoExecute"),
            a_flavor("f2"),
            None,
            "f2",
            "",
            id="untolerated NoExecute taint: skip",
        ),
        pytest.param(
            a_flavor("f1").taint("spot", "true"),
            a_flavor("f2").taint("zone", "x", "NoExecute"),
            None,
            None,
            _pending_message(
                "untolerated taint {spot true NoSchedule <nil>} in flavor f1",
                "untolerated taint {zone x NoExecute <nil>} in flavor f2",
            ),
            id="every flavor tainted: pending, each taint printed as Kueue prints it ({key value effect <nil>})",
        ),
        pytest.param(
            a_flavor("f1").taint("dedicated", ""),
            a_flavor("f2").taint("zone", "x", "NoExecute"),
            None,
            None,
            _pending_message(
                "untolerated taint {dedicated  NoSchedule <nil>} in flavor f1",
                "untolerated taint {zone x NoExecute <nil>} in flavor f2",
            ),
            id="a taint without a value: an empty field between key and effect",
        ),
    ],
)
def test_taints_and_tolerations(f1, f2, tolerations, want_flavor, want_message):
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4}))
    out = _run(cq, _wl().pod_set("main", 1, tolerations=tolerations, cpu="1"), flavors=[f1, f2])
    if want_flavor is None:
        assert out.wl("ns/w").pending
        assert out.message("ns/w") == want_message
    else:
        assert out.flavors("ns/w") == {"cpu": want_flavor}


# --- nodeSelector and required node affinity ------------------------------------------------------

ZONES = [a_flavor("f1").labels(zone="a"), a_flavor("f2").labels(zone="b")]
NO_ZONE_MATCHES = _pending_message("flavor f1 doesn't match node affinity", "flavor f2 doesn't match node affinity")


@pytest.mark.parametrize(
    ("selector", "terms", "want_flavor", "want_message"),
    [
        pytest.param(None, [], "f1", "", id="no selector: the first flavor"),
        pytest.param({"zone": "b"}, [], "f2", "", id="nodeSelector zone=b: the flavor labelled zone=b"),
        pytest.param({"zone": "c"}, [], None, NO_ZONE_MATCHES, id="nodeSelector no flavor satisfies: pending"),
        pytest.param({"disk": "ssd"}, [], "f1", "", id="nodeSelector on a key no flavor uses is ignored"),
        pytest.param(
            {"zone": "b", "disk": "ssd"}, [], "f2", "", id="nodeSelector: only the keys flavors use are matched"
        ),
        pytest.param(None, [[("zone", "In", ["b"])]], "f2", "", id="affinity zone In [b]"),
        pytest.param(None, [[("zone", "NotIn", ["a"])]], "f2", "", id="affinity zone NotIn [a]"),
        pytest.param(None, [[("zone", "Exists", [])]], "f1", "", id="affinity zone Exists"),
        pytest.param(
            None,
            [[("zone", "DoesNotExist", [])]],
            None,
            NO_ZONE_MATCHES,
            id="affinity zone DoesNotExist: every flavor has a zone: pending",
        ),
        pytest.param(None, [[("zone", "In", ["c"])], [("zone", "In", ["b"])]], "f2", "", id="affinity terms are ORed"),
        pytest.param(
            None,
            [[("zone", "In", ["b"]), ("disk", "In", ["ssd"])]],
            "f2",
            "",
            id="affinity expression on an unused key is dropped from its term",
        ),
        pytest.param(
            None, [[("disk", "In", ["ssd"])]], "f1", "", id="affinity only on an unused key matches every flavor"
        ),
        pytest.param(
            None,
            [[("zone", "In", ["c"])], [("disk", "In", ["ssd"])]],
            "f1",
            "",
            id="a term left empty after filtering drops all terms: matches every flavor",
        ),
        pytest.param(
            {"zone": "a"},
            [[("zone", "In", ["b"])]],
            None,
            NO_ZONE_MATCHES,
            id="nodeSelector and affinity must both match",
        ),
    ],
)
def test_node_selector_and_required_affinity(selector, terms, want_flavor, want_message):
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4}))
    wl = _wl().pod_set("main", 1, node_selector=selector, cpu="1")
    if terms:
        _with_affinity(wl, *terms)
    out = _run(cq, wl, flavors=ZONES)
    if want_flavor is None:
        assert out.wl("ns/w").pending
        assert out.message("ns/w") == want_message
    else:
        assert out.flavors("ns/w") == {"cpu": want_flavor}


def test_node_selector_keys_are_those_of_the_resource_groups_own_flavors():
    """zone is a key of the cpu group only: the gpu group's flavor, which has no zone, still matches."""
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4})).group(("g1", {GPU: 4}))
    flavors = [*ZONES, a_flavor("g1").labels(**{"gpu-type": "t4"})]
    wl = _wl().pod_set("main", 1, node_selector={"zone": "b"}, cpu="1", example_com__gpu="1")
    out = _run(cq, wl, flavors=flavors)
    assert out.flavors("ns/w") == {"cpu": "f2", GPU: "g1"}


@pytest.mark.parametrize(
    ("flavors", "selector", "terms", "want_flavor", "want_message"),
    [
        pytest.param(
            [a_flavor("f1"), a_flavor("f2").labels(zone="b")],
            {"zone": "b"},
            [],
            "f1",
            "",
            id="an unlabelled flavor ahead of a labelled one matches a selector on the other's key",
        ),
        pytest.param(
            [a_flavor("f1").labels(x="a"), a_flavor("f2").labels(x="b", y="k")],
            {"x": "a", "y": "g"},
            [],
            "f1",
            "",
            id="a flavor without key y is matched on x alone, though the next flavor sets y",
        ),
        pytest.param(
            [a_flavor("f1").labels(x="a"), a_flavor("f2").labels(x="b", y="k")],
            {"x": "b", "y": "g"},
            [],
            None,
            NO_ZONE_MATCHES,
            id="a flavor that sets the key must match it: y=k is not y=g, and f1's x=a is not x=b",
        ),
        pytest.param(
            [a_flavor("f1").labels(zone="a"), a_flavor("f2").labels(disk="ssd")],
            None,
            [[("disk", "In", ["hdd"])]],
            "f1",
            "",
            id="an affinity term only on a key of another flavor is dropped: matches the flavor without it",
        ),
        pytest.param(
            [a_flavor("f1").labels(zone="a"), a_flavor("f2").labels(zone="b")],
            {"zone": "c"},
            [],
            None,
            NO_ZONE_MATCHES,
            id="both flavors set the key and neither value matches: pending",
        ),
    ],
)
def test_node_selector_is_matched_on_each_flavors_own_label_keys(flavors, selector, terms, want_flavor, want_message):
    """Kueue's ``checkFlavorForPodSets`` builds the selector from each flavor's own label keys
    (kubernetes-sigs/kueue#12449, v0.19): up to v0.18 the keys were those of every flavor of the
    resource group, so an unlabelled flavor failed a selector on a key its neighbour sets."""
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4}))
    wl = _wl().pod_set("main", 1, node_selector=selector, cpu="1")
    if terms:
        _with_affinity(wl, *terms)
    out = _run(cq, wl, flavors=flavors)
    if want_flavor is None:
        assert out.wl("ns/w").pending
        assert out.message("ns/w") == want_message
    else:
        assert out.flavors("ns/w") == {"cpu": want_flavor}


# --- missing flavors ------------------------------------------------------------------------------


def test_a_missing_flavor_makes_the_cluster_queue_inactive():
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("ghost", {"cpu": 4}))
    out = _run(cq, _wl().request(cpu="1"), flavors=[a_flavor("f1")])
    assert out.admitted() == {}
    assert out.condition("ns/w", "QuotaReserved") == ("False", "Suspended")
    assert out.message("ns/w") == "ClusterQueue cq is inactive"


def test_a_flavor_declared_after_its_cluster_queue_is_found():
    cq = a_cluster_queue("cq").flavor("late", cpu=4)
    out = _run(cq, _wl().request(cpu="1"), flavors=[], extra=[a_flavor("late")])
    assert out.flavors("ns/w") == {"cpu": "late"}


# --- flavor fungibility ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when_can_borrow", "cpu", "want_flavor"),
    [
        pytest.param(None, "3", "f1", id="default MayStopSearch: borrowing on the first flavor stops the search"),
        pytest.param("Borrow", "3", "f1", id="deprecated Borrow behaves as MayStopSearch"),
        pytest.param("MayStopSearch", "3", "f1", id="MayStopSearch: borrow on f1 rather than fit on f2"),
        pytest.param("TryNextFlavor", "3", "f2", id="TryNextFlavor: fit on f2 rather than borrow on f1"),
        pytest.param(
            "TryNextFlavor",
            "5",
            "f1",
            id="TryNextFlavor: f2 cannot hold it, so the remembered borrowing flavor f1 is used",
        ),
        pytest.param("TryNextFlavor", "2", "f1", id="TryNextFlavor: no borrowing needed on f1: f1"),
    ],
)
def test_when_can_borrow(when_can_borrow, cpu, want_flavor):
    cq = a_cluster_queue("cq").cohort("co").group(("f1", {"cpu": 2}), ("f2", {"cpu": 4}))
    if when_can_borrow:
        cq = cq.fungibility(when_can_borrow=when_can_borrow)
    lender = a_cluster_queue("lender").cohort("co").flavor("f1", cpu=10)
    out = _run(cq, _wl().request(cpu=cpu), extra=[lender])
    assert out.flavors("ns/w") == {"cpu": want_flavor}


@pytest.mark.parametrize(
    ("when_can_preempt", "want_after_one_cycle", "want_final"),
    [
        pytest.param(
            None,
            {"ns/high": "f2", "ns/low": "f1"},
            {"ns/high": "f2", "ns/low": "f1"},
            id="default TryNextFlavor: fit on f2 rather than preempt on f1",
        ),
        pytest.param(
            "MayStopSearch",
            {"ns/high": None, "ns/low": None},
            {"ns/high": "f1", "ns/low": "f2"},
            id="MayStopSearch: preempt on f1; the victim later moves to f2",
        ),
    ],
)
def test_when_can_preempt(when_can_preempt, want_after_one_cycle, want_final):
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 4})).preemption(within="LowerPriority")
    if when_can_preempt:
        cq = cq.fungibility(when_can_preempt=when_can_preempt)
    objs = [
        _wl("low").request(cpu="4").priority(0).admitted("cq", {"cpu": "f1"}),
        _wl("high").request(cpu="4").priority(10).created(100),
    ]
    for cycles, want in ((1, want_after_one_cycle), (None, want_final)):
        out = _run(cq, *objs, cycles=cycles)
        got = {k: (out.flavors(k)["cpu"] if k in out.admitted() else None) for k in want}
        assert got == want, f"cycles={cycles}"


@pytest.mark.parametrize(
    ("preference", "want_admitted_on", "want_preempted"),
    [
        pytest.param(
            None, "f1", [], id="no preference: the better mode wins: fit by borrowing on f1 over preempting on f2"
        ),
        pytest.param(
            "BorrowingOverPreemption",
            "f1",
            [],
            id="BorrowingOverPreemption: the better mode first: fit by borrowing on f1",
        ),
        pytest.param(
            "PreemptionOverBorrowing",
            None,
            ["ns/low"],
            id="PreemptionOverBorrowing: the lower borrowing level first: preempt on f2 without borrowing",
        ),
    ],
)
def test_preference_when_both_policies_try_the_next_flavor(preference, want_admitted_on, want_preempted):
    cq = (
        a_cluster_queue("cq")
        .cohort("co")
        .group(("f1", {"cpu": 2}), ("f2", {"cpu": 4}))
        .preemption(within="LowerPriority")
        .fungibility(when_can_borrow="TryNextFlavor", when_can_preempt="TryNextFlavor", preference=preference)
    )
    lender = a_cluster_queue("lender").cohort("co").flavor("f1", cpu=10)
    out = _run(
        cq,
        _wl("low").request(cpu="4").priority(0).admitted("cq", {"cpu": "f2"}),
        _wl("high").request(cpu="3").priority(10).created(100),
        extra=[lender],
        cycles=1,
    )
    assert out.preempted() == want_preempted
    if want_admitted_on is None:
        assert out.wl("ns/high").pending
    else:
        assert out.flavors("ns/high") == {"cpu": want_admitted_on}


@pytest.mark.parametrize("fair_sharing", [pytest.param(False, id="classical"), pytest.param(True, id="fair sharing")])
@pytest.mark.parametrize(
    ("preference", "want_admitted_on", "want_preempted"),
    [
        pytest.param(
            "PreemptionOverBorrowing",
            None,
            ["ns/low"],
            id="PreemptionOverBorrowing: preempt on the first flavor instead of borrowing on the second",
        ),
        pytest.param(
            "BorrowingOverPreemption",
            "spot",
            [],
            id="BorrowingOverPreemption: borrow on the second flavor instead of preempting on the first",
        ),
    ],
)
def test_preference_between_preempting_on_the_first_flavor_and_borrowing_on_the_second(
    fair_sharing, preference, want_admitted_on, want_preempted
):
    """Kueue's scheduler_test cases for kubernetes-sigs/kueue#9464: on-demand is full of a
    lower-priority workload of the same ClusterQueue; spot has no nominal quota of its own and
    borrows all of it from the lender. The preference decides, with and without fair sharing."""
    cq = (
        a_cluster_queue("cq")
        .cohort("co")
        .group(("on-demand", {"cpu": ("5", "0")}), ("spot", {"cpu": ("0", "5")}))
        .preemption(within="LowerPriority")
        .fungibility(when_can_borrow="TryNextFlavor", when_can_preempt="TryNextFlavor", preference=preference)
    )
    lender = a_cluster_queue("lender").cohort("co").group(("on-demand", {"cpu": "0"}), ("spot", {"cpu": "5"}))
    extra: list[Builder] = [lender, *([a_configuration().fair_sharing()] if fair_sharing else [])]
    out = _run(
        cq,
        _wl("low").request(cpu="5").priority(-1).admitted("cq", {"cpu": "on-demand"}),
        _wl("high").request(cpu="5").priority(0).created(100),
        flavors=[a_flavor("on-demand"), a_flavor("spot")],
        extra=extra,
        cycles=1,
    )
    assert out.preempted() == want_preempted
    if want_admitted_on is None:
        assert out.wl("ns/high").pending
        assert out.message("ns/high") == (
            _pending_message(_unused("cpu", "on-demand", "5")) + ". Pending the preemption of 1 workload(s)"
        )
    else:
        assert out.flavors("ns/high") == {"cpu": want_admitted_on}


@pytest.mark.parametrize(
    ("fungibility", "want_after_one_cycle", "want_preempted"),
    [
        pytest.param(
            {"when_can_borrow": "TryNextFlavor", "when_can_preempt": "MayStopSearch"},
            None,
            ["ns/low"],
            id="borrow TryNextFlavor, preempt MayStopSearch: the flavor counts as preempting, not borrowing: "
            "stop on f1 and preempt",
        ),
        pytest.param(
            {"when_can_borrow": "TryNextFlavor", "when_can_preempt": "TryNextFlavor"},
            "f2",
            [],
            id="both TryNextFlavor: f1 needs preemption, so f2 where everything fits",
        ),
        pytest.param(
            {"when_can_borrow": "TryNextFlavor", "when_can_preempt": "TryNextFlavor",
             "preference": "PreemptionOverBorrowing"},
            "f2",
            [],
            id="PreemptionOverBorrowing: the flavor counts as borrowing: f2 where everything fits",
        ),
    ],
)
def test_a_flavor_where_one_resource_borrows_and_another_needs_preemption(
    fungibility, want_after_one_cycle, want_preempted
):
    """On f1, cpu fits only by borrowing from the lender and memory only by preempting ``low``
    (no borrowing). Kueue's ``findFlavorForPodSets`` represents the flavor by its worst resource as
    ``isPreferred`` orders them: under BorrowingOverPreemption that is memory's (Preempt, no
    borrowing), so ``shouldTryNextFlavor`` with whenCanPreempt MayStopSearch stops at f1 though
    whenCanBorrow is TryNextFlavor."""
    cq = (
        a_cluster_queue("cq")
        .cohort("co")
        .group(("f1", {"cpu": 2, "memory": "4Gi"}), ("f2", {"cpu": 4, "memory": "8Gi"}))
        .preemption(within="LowerPriority")
        .fungibility(**fungibility)
    )
    lender = a_cluster_queue("lender").cohort("co").flavor("f1", cpu=10)
    out = _run(
        cq,
        _wl("low").request(memory="4Gi").priority(0).admitted("cq", {"memory": "f1"}),
        _wl("high").request(cpu="3", memory="2Gi").priority(10).created(100),
        extra=[lender],
        cycles=1,
    )
    assert out.preempted() == want_preempted
    if want_after_one_cycle is None:
        assert out.wl("ns/high").pending
        assert out.message("ns/high") == (
            _pending_message(_unused("memory", "f1", "2Gi")) + ". Pending the preemption of 1 workload(s)"
        )
    else:
        assert out.flavors("ns/high") == {"cpu": want_after_one_cycle, "memory": want_after_one_cycle}


def test_preemption_over_borrowing_passes_over_a_flavor_without_preemption_candidates():
    """Kueue's 'Select deeper-borrowing flavor that fits when shallower-borrowing flavor has no
    preemption candidates' (TestHierarchical, kubernetes-sigs/kueue#13616): flavor one is full of a
    workload of the same priority (no candidates; borrowing level 1 after preemption), flavor two
    fits by borrowing from cohort two (level 2). Compared on borrowing alone, one would win and
    the workload would wait for nothing."""
    cq = (
        a_cluster_queue("cq")
        .cohort("one")
        .group(("one", {"cpu": ("4", "0")}), ("two", {"cpu": "0"}), ("three", {"cpu": "0"}))
        .preemption(within="LowerPriority", reclaim="LowerPriority")
        .fungibility(when_can_borrow="TryNextFlavor", when_can_preempt="TryNextFlavor",
                     preference="PreemptionOverBorrowing")
    )
    cohorts = [
        a_cohort("three").flavor("three", cpu="4"),
        a_cohort("two").parent("three").flavor("two", cpu="4"),
        a_cohort("one").parent("two").flavor("one", cpu="4"),
    ]
    out = _run(
        cq,
        _wl("running").request(cpu="4").priority(0).admitted("cq", {"cpu": "one"}),
        _wl("w").request(cpu="4").priority(0).created(100),
        flavors=[a_flavor("one"), a_flavor("two"), a_flavor("three")],
        extra=cohorts,
        cycles=1,
    )
    assert out.flavors("ns/w") == {"cpu": "two"}


P, NC, F = Mode.PREEMPT, Mode.NO_CANDIDATES, Mode.FIT


@pytest.mark.parametrize(
    ("a", "b", "preference", "want"),
    [
        pytest.param((F, 0), (P, 0), None, True, id="no preference: fit beats preempt"),
        pytest.param((P, 1), (F, 2), "BorrowingOverPreemption", False,
                     id="BorrowingOverPreemption: the mode first: fit by borrowing more beats preempt"),
        pytest.param((P, 1), (F, 2), "PreemptionOverBorrowing", True,
                     id="PreemptionOverBorrowing: the borrowing level first: preempt borrowing less beats fit"),
        pytest.param((P, 1), (F, 1), "PreemptionOverBorrowing", False,
                     id="PreemptionOverBorrowing: equal borrowing, the better mode breaks the tie"),
        pytest.param((NC, 1), (F, 2), "PreemptionOverBorrowing", False,
                     id="PreemptionOverBorrowing: no preemption candidates lose before borrowing is compared"),
        pytest.param((F, 2), (NC, 1), "PreemptionOverBorrowing", True,
                     id="PreemptionOverBorrowing: fit beats a shallower flavor without preemption candidates"),
        pytest.param((NC, 1), (Mode.NO_FIT, 0), None, True, id="no preemption candidates still beat no fit"),
        pytest.param((Mode.NO_FIT, 0), (NC, 1), None, False, id="no fit loses to no preemption candidates"),
        pytest.param((NC, 1), (NC, 2), "PreemptionOverBorrowing", True,
                     id="two flavors without candidates: the lower borrowing level wins"),
        pytest.param((NC, 2), (NC, 1), "PreemptionOverBorrowing", False,
                     id="two flavors without candidates: the higher borrowing level loses"),
    ],
)
def test_is_preferred(a, b, preference, want):
    """Kueue's ``TestIsPreferred`` (flavorassigner_test.go), on (mode, borrowing level) pairs."""
    ff = o.FlavorFungibility(
        when_can_borrow=o.WhenCanBorrow.TRY_NEXT_FLAVOR,
        when_can_preempt=o.WhenCanPreempt.TRY_NEXT_FLAVOR,
        preference=o.FungibilityPreference(preference) if preference else None,
    )
    assert is_preferred(a[0], a[1], b[0], b[1], ff) is want


# --- the pods resource ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "count", "want_flavors", "want_message"),
    [
        pytest.param(
            [[("f", {"cpu": 10, "pods": 5})]], 3, {"cpu": "f", "pods": "f"}, "", id="pods counted with cpu in one group"
        ),
        pytest.param(
            [[("f", {"cpu": 10, "pods": 2})]],
            3,
            None,
            _pending_message(_max("pods", "f", "0", "3", "2")),
            id="3 pods against a pods quota of 2: pending",
        ),
        pytest.param(
            [[("f1", {"cpu": 10, "pods": 2}), ("f2", {"cpu": 10, "pods": 5})]],
            3,
            {"cpu": "f2", "pods": "f2"},
            "",
            id="pods quota too small on f1: cpu and pods move to f2 together",
        ),
        pytest.param(
            [[("f1", {"cpu": 10})], [("p1", {"pods": 2}), ("p2", {"pods": 4})]],
            3,
            {"cpu": "f1", "pods": "p2"},
            "",
            id="pods in a group of its own picks its own flavor",
        ),
    ],
)
def test_pods_resource(groups, count, want_flavors, want_message):
    cq = a_cluster_queue("cq")
    for g in groups:
        cq = cq.group(*g)
    flavors = [a_flavor(n) for n in ("f", "f1", "f2", "p1", "p2")]
    out = _run(cq, _wl().request(count, cpu="1"), flavors=flavors)
    if want_flavors is None:
        assert out.wl("ns/w").pending
        assert out.message("ns/w") == want_message
        return
    assert out.flavors("ns/w") == want_flavors
    usage = dict(out.wl("ns/w").admission.pod_set_assignments[0].resource_usage)
    assert usage == {"cpu": count * 1000, "pods": count}


# --- several podSets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver_cpu", "worker_cpu", "want_flavors"),
    [
        pytest.param("2", "1", {"driver/cpu": "f1", "workers/cpu": "f1"}, id="2 + 2x1 fit f1 together"),
        pytest.param(
            "3",
            "1",
            {"driver/cpu": "f1", "workers/cpu": "f2"},
            id="the workers see the driver's 3 cores on f1 and move to f2",
        ),
        pytest.param(
            "5",
            "1",
            {"driver/cpu": "f2", "workers/cpu": "f1"},
            id="the driver does not fit f1; the workers still start from f1",
        ),
    ],
)
def test_pod_sets_are_assigned_in_order_and_see_each_others_usage(driver_cpu, worker_cpu, want_flavors):
    cq = a_cluster_queue("cq").group(("f1", {"cpu": 4}), ("f2", {"cpu": 10}))
    wl = _wl().pod_set("driver", 1, cpu=driver_cpu).pod_set("workers", 2, cpu=worker_cpu)
    out = _run(cq, wl)
    assert out.flavors("ns/w") == want_flavors


def test_the_message_names_only_the_first_pod_set_that_failed():
    """Kueue stops at the first podSet that gets no flavor; later podSets are not tried."""
    cq = a_cluster_queue("cq").flavor("f", cpu=4)
    wl = _wl().pod_set("first", 1, cpu="5").pod_set("second", 1, cpu="6")
    out = _run(cq, wl)
    assert out.message("ns/w") == _pending_message(_max("cpu", "f", "0", "5", "4"), pod_set="first")


@pytest.mark.parametrize(
    ("running", "want_message"),
    [
        pytest.param(
            [],
            _pending_message(_max("cpu", "f", "3", "2", "4"), pod_set="workers"),
            id="driver 3 + workers 2 > 4: maximum capacity, naming what earlier podSets took",
        ),
        pytest.param(
            ["2"],
            _pending_message(_unused("cpu", "f", "1"), pod_set="workers"),
            id="driver 3 fits the 4 unused cores, workers then miss 1",
        ),
    ],
)
def test_pending_message_of_a_later_pod_set(running, want_message):
    cq = a_cluster_queue("cq").flavor("f", cpu=4 + sum(int(r) for r in running))
    objs: list[Any] = [_wl(f"r{i}").request(cpu=r).admitted("cq", {"cpu": "f"}) for i, r in enumerate(running)]
    wl = _wl().pod_set("driver", 1, cpu="3").pod_set("workers", 2, cpu="1").created(100)
    out = _run(cq, *objs, wl)
    assert out.wl("ns/w").pending
    assert out.message("ns/w") == want_message
