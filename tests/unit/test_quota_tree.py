"""Kueue's resource-node arithmetic (``pkg/cache/scheduler/resource_node.go``) on quota.Node.

Every expected number is worked out by hand from the formulas in section 4 of the
Kueue digest:

    SubtreeQuota(cq)     = nominal
    SubtreeQuota(cohort) = own nominal + sum(child.SubtreeQuota - child.guaranteed)
    guaranteed(n)        = max(0, SubtreeQuota - lendingLimit) if lendingLimit else 0
    Usage(cohort)        = sum(max(0, child.Usage - child.guaranteed))
    available(root)      = SubtreeQuota - Usage                (may be negative)
    available(n)         = LocalAvailable(n) + min(available(parent),
                             SubtreeQuota - guaranteed - max(0, Usage - guaranteed) + borrowingLimit)
    potential(root)      = SubtreeQuota
    potential(n)         = min(guaranteed + potential(parent), SubtreeQuota + borrowingLimit)

The trees are built from manifests (ClusterQueues with ``cohort``, Cohorts with
``parentName`` and their own resourceGroups) so that the index wiring is covered too.
Quantities are cpu, i.e. milli-units: ``C`` is one core.
"""

from __future__ import annotations

import pytest

from services.core.quota import Node, NodeKind, cluster_queue_key, cohort_key, recompute_subtree
from tests.builders import Builder, a_cluster_queue, a_cohort, a_flavor, a_workload, build_state

C = 1000
FR = ("f", "cpu")


def _cq(name: str, cohort: str | None, nominal: int, borrowing: int | None = None, lending: int | None = None):
    limits = tuple(None if v is None else str(v) for v in (borrowing, lending))
    cq = a_cluster_queue(name).flavor("f", cpu=(str(nominal), *limits))
    return cq.cohort(cohort) if cohort else cq


def _usage(cq: str, cores: int) -> Builder:
    return a_workload("ns", f"running-in-{cq}").request(cpu=str(cores)).admitted(cq, {"cpu": "f"})


def _nodes(*objects: Builder) -> dict[str, Node]:
    state = build_state(a_flavor("f"), *objects)
    state.ensure_indexed()
    return {key.name: node for key, node in state.index.nodes.items()}


# --- shapes --------------------------------------------------------------------------------------

FLAT = [_cq("a", "co", 10), _cq("b", "co", 6)]
FLAT_A_LENDS_4 = [_cq("a", "co", 10, lending=4), _cq("b", "co", 6)]
FLAT_A_BORROWS_2 = [_cq("a", "co", 10, borrowing=2), _cq("b", "co", 6)]
FLAT_A_LENDS_4_BORROWS_3 = [_cq("a", "co", 10, borrowing=3, lending=4), _cq("b", "co", 6)]
# root (own nominal 4)
# ├── left (no quota of its own): a (5), b (3)
# └── right (own nominal 2, lendingLimit 1): c (6, lendingLimit 2)
TREE = [
    a_cohort("root").flavor("f", cpu="4"),
    a_cohort("left").parent("root"),
    a_cohort("right").parent("root").flavor("f", cpu=("2", None, "1")),
    _cq("a", "left", 5), _cq("b", "left", 3), _cq("c", "right", 6, lending=2),
]
TREE_LEFT_BORROWS_2 = [
    a_cohort("root").flavor("f", cpu="4"),
    a_cohort("left").parent("root").flavor("f", cpu=("0", "2")),
    a_cohort("right").parent("root").flavor("f", cpu=("2", None, "1")),
    _cq("a", "left", 5), _cq("b", "left", 3), _cq("c", "right", 6, lending=2),
]


@pytest.mark.parametrize(
    ("objects", "want"),
    [
        pytest.param(
            [*FLAT, _usage("a", 4)],
            {"a": (0, 12, 16), "b": (0, 12, 16), "co": (0, 12, 16)},
            id="flat cohort without limits: every queue sees the cohort's 16 minus the 4 in use",
        ),
        pytest.param(
            [*FLAT_A_LENDS_4, _usage("a", 8), _usage("b", 3)],
            # a keeps 6; the cohort holds 4 (lent by a) + 6 (b) = 10, of which 2 (a's excess) + 3 are used.
            {"a": (6, 5, 16), "b": (0, 5, 10), "co": (0, 5, 10)},
            id="lendingLimit 4 of 10: a keeps 6 for itself, the cohort pools only 4 of a's quota",
        ),
        pytest.param(
            [*FLAT_A_BORROWS_2, _usage("a", 9)],
            # a: min(16-9, 10-0 - 9 + 2) = 3 ; potential min(16, 10+2) = 12
            {"a": (0, 3, 12), "b": (0, 7, 16), "co": (0, 7, 16)},
            id="borrowingLimit 2: a at 9 of 10 may take only 3 more although the cohort has 7 free",
        ),
        pytest.param(
            [*FLAT_A_BORROWS_2, _usage("a", 9), _usage("b", 5)],
            {"a": (0, 2, 12), "b": (0, 2, 16), "co": (0, 2, 16)},
            id="borrowingLimit 2: the cohort's 2 free cores are tighter than the limit's 3",
        ),
        pytest.param(
            [*FLAT_A_LENDS_4_BORROWS_3, _usage("a", 7)],
            # co: 4 + 6 = 10, usage 7-6 = 1. a: 0 local + min(9, 4 - 1 + 3) = 6 -> at most 13 = 10 + 3.
            {"a": (6, 6, 13), "b": (0, 9, 10), "co": (0, 9, 10)},
            id="lending 4 and borrowing 3: a above its guarantee may still grow to nominal + borrowingLimit",
        ),
        pytest.param(
            [*FLAT_A_LENDS_4_BORROWS_3, _usage("a", 3)],
            # a: 3 local + min(10, 4 - 0 + 3) = 10 -> 3 + 10 = 13 = nominal + borrowingLimit.
            {"a": (6, 10, 13), "b": (0, 10, 10), "co": (0, 10, 10)},
            id="lending 4 and borrowing 3: a below its guarantee counts its own unused guarantee",
        ),
        pytest.param(
            [_cq("solo", None, 2), _usage("solo", 4)],
            {"solo": (0, -2, 2)},
            id="a ClusterQueue without cohort that holds more than its quota has negative availability",
        ),
        pytest.param(
            [a_cohort("pool").flavor("f", cpu="5"), _cq("a", "pool", 1)],
            {"a": (0, 6, 6), "pool": (0, 6, 6)},
            id="cohort-level nominal quota is borrowable by its ClusterQueues",
        ),
        pytest.param(
            [*TREE, _usage("a", 7), _usage("c", 5)],
            # subtrees: left 8, right 2 + (6-4) = 4 (keeps 3), root 4 + 8 + (4-3) = 13; root usage 7.
            {"a": (0, 6, 13), "b": (0, 6, 13), "left": (0, 6, 13),
             "c": (4, 8, 20), "right": (3, 8, 16), "root": (0, 6, 13)},
            id="cohort tree: lending limits at ClusterQueue and Cohort level, cohort nominal at the root",
        ),
        pytest.param(
            [*TREE_LEFT_BORROWS_2, _usage("a", 7), _usage("c", 5)],
            # left: min(6, 8 - 0 - 7 + 2) = 3 ; potential min(13, 8 + 2) = 10
            {"a": (0, 3, 10), "b": (0, 3, 10), "left": (0, 3, 10),
             "c": (4, 8, 20), "right": (3, 8, 16), "root": (0, 6, 13)},
            id="cohort tree: a borrowingLimit on a Cohort bounds every ClusterQueue below it",
        ),
    ],
)
def test_guaranteed_available_and_potential_available(objects, want):
    nodes = _nodes(*objects)
    got = {name: (nodes[name].guaranteed(FR) // C, nodes[name].available(FR) // C,
                  nodes[name].potential_available(FR) // C) for name in want}
    assert got == want


@pytest.mark.parametrize(
    ("objects", "want_subtree", "want_usage"),
    [
        pytest.param(
            [*TREE, _usage("a", 7), _usage("c", 5)],
            {"a": 5, "b": 3, "c": 6, "left": 8, "right": 4, "root": 13},
            {"a": 7, "b": 0, "c": 5, "left": 7, "right": 1, "root": 7},
            id="cohort tree: subtree quota adds what children lend; usage counts only what exceeds guarantees",
        ),
        pytest.param(
            [*FLAT_A_LENDS_4, _usage("a", 5)],
            {"a": 10, "b": 6, "co": 10},
            {"a": 5, "b": 0, "co": 0},
            id="usage within the guarantee of a lending ClusterQueue does not reach the cohort",
        ),
    ],
)
def test_subtree_quota_and_usage_after_rebuild(objects, want_subtree, want_usage):
    nodes = _nodes(*objects)
    assert {n: nodes[n].subtree.get(FR, 0) // C for n in want_subtree} == want_subtree
    assert {n: nodes[n].usage.get(FR, 0) // C for n in want_usage} == want_usage


@pytest.mark.parametrize(
    ("objects", "want_heights"),
    [
        pytest.param(TREE, {"a": 0, "c": 0, "left": 1, "right": 1, "root": 2},
                     id="a cohort of ClusterQueues has height 1, its parent 2"),
        pytest.param(
            [a_cohort("top"), a_cohort("mid").parent("top"), a_cohort("low").parent("mid"), _cq("x", "low", 1)],
            {"x": 0, "low": 1, "mid": 2, "top": 3},
            id="a chain of cohorts: height grows by one per level",
        ),
        pytest.param(
            [a_cohort("top"), a_cohort("mid").parent("top"), _cq("x", "mid", 1), _cq("y", "top", 1)],
            {"mid": 1, "top": 2},
            id="a cohort with both a ClusterQueue and a child cohort takes the child's height plus one",
        ),
    ],
)
def test_heights(objects, want_heights):
    nodes = _nodes(*objects)
    assert {n: nodes[n].height for n in want_heights} == want_heights


@pytest.mark.parametrize(
    ("objects", "cq", "cores", "want"),
    [
        pytest.param([_cq("solo", None, 2)], "solo", 100, (0, False),
                     id="no cohort: never borrowing, nothing to reclaim in a hierarchy"),
        pytest.param([*FLAT, _usage("a", 4)], "a", 6, (0, True),
                     id="flat: 4 + 6 within a's nominal 10: level 0, may reclaim in the cohort"),
        pytest.param([*FLAT, _usage("a", 4)], "a", 7, (1, False),
                     id="flat: 4 + 7 borrows from the cohort root: level 1, nothing above to reclaim from"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "a", 1, (1, True),
                     id="tree: a borrowing 1 fits in left (8 >= 7 + 1): level 1 below the root"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "a", 2, (2, False),
                     id="tree: a borrowing 2 overflows left and fits at the root: level 2"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "c", 1, (0, True),
                     id="tree: c at 5 of 6 taking 1 more does not borrow"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "c", 2, (1, True),
                     id="tree: c borrowing 1 fits in right's own quota"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "c", 5, (2, False),
                     id="tree: c needs 5; right's 2 unused guarantee is not enough, the root covers the rest"),
        pytest.param([*TREE, _usage("a", 7), _usage("c", 5)], "c", 20, (2, False),
                     id="tree: more than the whole tree still reports the root's height"),
    ],
)
def test_lowest_subtree_that_fits(objects, cq, cores, want):
    nodes = _nodes(*objects)
    assert nodes[cq].lowest_subtree_that_fits(FR, cores * C) == want


@pytest.mark.parametrize(
    ("ops", "want_usage"),
    [
        pytest.param([("add", "a", 4)], {"a": 4, "left": 4, "root": 4},
                     id="add to a ClusterQueue without guarantee: all of it reaches the root"),
        pytest.param([("add", "c", 3)], {"c": 3, "right": 0, "root": 0},
                     id="add within c's guarantee of 4: nothing goes up"),
        pytest.param([("add", "c", 5)], {"c": 5, "right": 1, "root": 0},
                     id="add 5 to c: 1 above its guarantee goes to right, which keeps it within its own 3"),
        pytest.param([("add", "c", 5), ("add", "c", 3)], {"c": 8, "right": 4, "root": 1},
                     id="add 5 then 3 to c: right exceeds its guarantee by 1, which reaches the root"),
        pytest.param([("add", "c", 8), ("remove", "c", 6)], {"c": 2, "right": 0, "root": 0},
                     id="remove gives back to the parents only what was stored there"),
        pytest.param([("add", "a", 4), ("add", "b", 5), ("remove", "a", 4)],
                     {"a": 0, "b": 5, "left": 5, "root": 5},
                     id="siblings add up in their cohort; removing one leaves the other's usage"),
        pytest.param([("add", "c", 8), ("add", "a", 2), ("remove", "c", 8), ("remove", "a", 2)],
                     {"a": 0, "c": 0, "left": 0, "right": 0, "root": 0},
                     id="add then remove everything: the tree is empty again"),
    ],
)
def test_add_and_remove_usage_propagate_like_a_rebuild(ops, want_usage):
    nodes = _nodes(*TREE)
    for op, cq, cores in ops:
        (nodes[cq].add_usage if op == "add" else nodes[cq].remove_usage)(FR, cores * C)
    got = {n: nodes[n].usage.get(FR, 0) // C for n in want_usage}
    assert got == want_usage
    # The incremental result is exactly what a bottom-up rebuild from the ClusterQueues gives.
    incremental = {n: node.usage.get(FR, 0) for n, node in nodes.items()}
    recompute_subtree(nodes["root"])
    assert {n: node.usage.get(FR, 0) for n, node in nodes.items()} == incremental


# --- node keys -------------------------------------------------------------------------------------


def test_node_keys_sort_as_the_kind_slash_name_strings_they_replace():
    state = build_state(a_flavor("f"), *TREE, _cq("co", "co", 1), _cq("a-b", None, 1), _cq("a.c", "left", 1))
    state.ensure_indexed()
    keys = list(state.index.nodes)
    assert {key.kind for key in keys} == {NodeKind.COHORT, NodeKind.CLUSTER_QUEUE}
    assert [str(key) for key in sorted(keys)] == sorted(str(key) for key in keys)
    assert str(cluster_queue_key("co")) == "cq/co" and str(cohort_key("co")) == "cohort/co"
    assert cluster_queue_key("co") != cohort_key("co")  # a ClusterQueue and a Cohort may share a name
    assert state.index.nodes[cluster_queue_key("co")].parent is state.index.nodes[cohort_key("co")]
