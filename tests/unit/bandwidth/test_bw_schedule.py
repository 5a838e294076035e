"""Planning bandwidth tests between nodes: the circle method, group testing, bisection."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest

from healthcheck.bandwidth.schedule import (
    Test,
    bisection_rounds,
    circle_rounds,
    group_rounds,
    group_sizes,
    groups,
    split_tests,
)


def names(n: int) -> list[str]:
    return [f"gpu{i:03d}" for i in range(n)]


@pytest.mark.parametrize("n", range(2, 41))
def test_the_circle_method_meets_every_pair_once_in_disjoint_rounds(n):
    nodes = names(n)
    rounds = circle_rounds(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = Counter(frozenset(p) for rnd in rounds for p in rnd)
    assert set(seen) == {frozenset(p) for p in itertools.combinations(nodes, 2)}
    assert set(seen.values()) == {1}
    for rnd in rounds:
        members = [m for p in rnd for m in p]
        assert len(members) == len(set(members))  # disjoint: a node is in one test per round
        assert len(rnd) == n // 2
        assert all(a != b for a, b in rnd)
    if n % 2:  # the bye: each node sits out exactly one round
        idle = Counter(next(m for m in nodes if m not in {x for p in rnd for x in p}) for rnd in rounds)
        assert set(idle) == set(nodes) and set(idle.values()) == {1}
    assert circle_rounds(nodes) == rounds  # deterministic for a given order


def test_the_circle_method_names_pairs_in_input_order_and_refuses_duplicates():
    assert circle_rounds(["b", "a", "c", "d"])[0] == [("b", "d"), ("a", "c")]
    assert circle_rounds([]) == [] and circle_rounds(["solo"]) == []
    with pytest.raises(ValueError, match="twice"):
        circle_rounds(["a", "b", "a"])


@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 9, 10, 17, 63, 64, 65, 100, 2048])
@pytest.mark.parametrize("k", [2, 3, 4, 8, 16])
def test_groups_cover_every_node_exactly_once_and_leave_no_remainder(n, k):
    nodes = names(n)
    gs = groups(nodes, k, seed=7)
    flat = [m for g in gs for m in g]
    assert sorted(flat) == sorted(nodes) and len(flat) == n  # every node, once
    sizes = [len(g) for g in gs]
    assert min(sizes) >= 2 and max(sizes) - min(sizes) <= 1
    if k == 2 and n % 2:  # pairs of an odd count: one group of three, never a node alone
        assert max(sizes) == 3 and len(gs) == n // 2
    else:
        assert max(sizes) <= k and len(gs) == math.ceil(n / k)
    assert sizes == group_sizes(n, k)


def test_groups_are_seeded_random_and_regrouping_changes_partners():
    nodes = names(64)
    assert groups(nodes, 8, seed=1) == groups(list(reversed(nodes)), 8, seed=1)  # the seed alone decides
    assert groups(nodes, 8, seed=1) != groups(nodes, 8, seed=2)
    first, second = group_rounds(nodes, 8, seed=3, rounds=2)
    assert first == groups(nodes, 8, seed=3)
    together = {frozenset(p) for g in first for p in itertools.combinations(g, 2)}
    again = {frozenset(p) for g in second for p in itertools.combinations(g, 2)}
    assert len(together & again) < len(together) / 4  # most partners are new


@pytest.mark.parametrize("n,k", [(64, 8), (2048, 8), (100, 8), (2048, 16)])
def test_regrouping_keeps_earlier_partners_apart(n, k):
    nodes = names(n)
    rounds = group_rounds(nodes, k, seed=1, rounds=2)
    pairs = [{frozenset(p) for g in rnd for p in itertools.combinations(g, 2)} for rnd in rounds]
    assert len(pairs[0] & pairs[1]) <= 1  # random regrouping alone would repeat ~n*(k-1)/2 * k/n
    for rnd in rounds:
        assert sorted(m for g in rnd for m in g) == sorted(nodes)
        assert [len(g) for g in rnd] == group_sizes(n, k)


def test_groups_spread_each_leaf_over_many_groups():
    rails = {f"n{leaf}{i:02d}": f"leaf{leaf}" for leaf in range(4) for i in range(16)}
    gs = groups(list(rails), 4, seed=0, rails=rails)
    assert all(len({rails[m] for m in g}) == 4 for g in gs)  # every group crosses the spine
    again = groups(list(rails), 4, seed=1, rails=rails, avoid=gs)
    assert all(len({rails[m] for m in g}) == 4 for g in again)  # and still does when regrouped
    uneven = {**{f"a{i:02d}": "big" for i in range(12)}, **{f"b{i}": "small" for i in range(4)}}
    gs = groups(list(uneven), 4, seed=5, rails=uneven)
    assert all(sum(uneven[m] == "small" for m in g) == 1 for g in gs)  # the small leaf is not bunched


def test_groups_refuse_what_cannot_be_measured():
    with pytest.raises(ValueError, match="two nodes"):
        groups(["a", "b"], 1)
    with pytest.raises(ValueError, match="test needs two"):
        groups(["a"], 4)
    with pytest.raises(ValueError, match="twice"):
        groups(["a", "b", "a"], 2)


def test_bisection_splits_a_failed_group_down_to_known_good_pairs():
    group = [f"s{i}" for i in range(8)]
    good = ["g1", "g2", "g3", "g4"]
    halves = split_tests(group, good)
    assert halves == [Test(("s0", "s1", "s2", "s3"), "split"), Test(("s4", "s5", "s6", "s7"), "split")]
    # three: a half of two alone, the odd one with a known-good partner
    assert split_tests(["a", "b", "c"], good) == [Test(("a", "b"), "split"), Test(("c", "g1"), "confirm")]
    # two: each with its own partner, never one of the group
    assert split_tests(["a", "b"], ["a", "g1", "g2"]) == [Test(("a", "g1"), "confirm"), Test(("b", "g2"), "confirm")]
    # partners run out: only what can be measured now
    assert split_tests(["a", "b"], ["g1"]) == [Test(("a", "g1"), "confirm")]
    # padded halves keep the size of the test that fell short
    padded = split_tests(group[:4], good, pad=True)
    assert [len(t.members) for t in padded] == [4, 4]
    assert {m for t in padded for m in t.members} == {*group[:4], *good}


def test_bisection_of_a_single_culprit_follows_its_half_to_the_end():
    group = [f"s{i}" for i in range(16)]
    good = [f"g{i}" for i in range(8)]
    for culprit in group:
        block, rounds = list(group), 0
        while True:
            tests = split_tests(block, good)
            rounds += 1
            hit = next(t for t in tests if culprit in t.members)
            if hit.purpose == "confirm":
                break
            block = list(hit.members)
        assert rounds <= bisection_rounds(16) == 4
    assert [bisection_rounds(n) for n in (1, 2, 3, 4, 8, 9)] == [1, 1, 2, 2, 3, 4]
