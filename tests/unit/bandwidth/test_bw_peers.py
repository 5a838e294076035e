"""Tests between nodes judged against each other where no floor is set (bandwidth/peers.py):
the reference a test is short against, and the noise threshold a node's best test must be
below to be named the culprit (issue 18, after B.3)."""

from __future__ import annotations

import math
import random

import pytest

from healthcheck.bandwidth.peers import GROSS, peer_reference, peer_threshold, t_quantile

RIG_HEALTHY = [(("n1", "n2"), 0.59), (("n1", "n3"), 0.61), (("n1", "n4"), 0.64),
               (("n2", "n3"), 0.71), (("n2", "n4"), 0.80), (("n3", "n4"), 0.88)]


@pytest.mark.parametrize(("p", "df", "t"), [(0.025, 2, 4.303), (0.05, 10, 1.812), (0.001, 5, 5.893),
                                           (0.005, 1, 63.657), (0.0005, 30, 3.646)])
def test_the_student_t_quantile_matches_the_tables(p, df, t):
    assert t_quantile(p, df) == pytest.approx(t, abs=1e-3)


def test_a_node_lowest_by_chance_is_short_by_the_fraction_but_not_beyond_the_noise():
    """The rig's healthy sweep: node1's pairs below 0.9 of the others' median (short, as
    before), but its best far above what the sweep's spread allows a healthy pair."""
    ref = peer_reference(RIG_HEALTHY, 0.1)
    assert ref is not None
    assert ref.threshold == pytest.approx(0.9 * 0.80) and max(v for m, v in RIG_HEALTHY if "n1" in m) < ref.threshold
    assert ref.spread is not None and ref.noise_threshold < 0.64 / 2 and ref.suspected == ()
    assert peer_threshold(RIG_HEALTHY, 0.1) == ref.threshold


def test_three_nodes_cannot_measure_their_spread_so_only_a_quarter_counts():
    tests = [(("a", "b"), 0.012), (("b", "c"), 0.0121), (("a", "c"), 0.5)]
    ref = peer_reference(tests, 0.1)
    assert ref is not None and ref.spread is None
    assert ref.noise_threshold == pytest.approx(GROSS * 0.5) and ref.suspected == ("b",)
    mild = peer_reference([(("a", "b"), 0.6), (("b", "c"), 0.61), (("a", "c"), 1.0)], 0.1)
    # 0.6 of the third pair: short by the fraction, not 4x slower: b goes back to the reference
    assert mild is not None and mild.threshold == pytest.approx(0.9) and mild.suspected == ()
    assert mild.noise_threshold < 0.6


def test_a_node_far_below_a_wide_spread_is_still_beyond_it():
    """node4 at 0.025 among healthy pairs 5x apart (0.13-0.64): the spread is huge, but the
    bound never goes below a quarter of the reference, and node4 is well under it; node3 (in
    the two lowest healthy pairs) goes back to the reference."""
    tests = [(("n1", "n2"), 0.64), (("n1", "n3"), 0.13), (("n2", "n3"), 0.3),
             (("n1", "n4"), 0.025), (("n2", "n4"), 0.025), (("n3", "n4"), 0.025)]
    ref = peer_reference(tests, 0.1)
    assert ref is not None and ref.suspected == ("n4",)
    assert ref.noise_threshold == pytest.approx(GROSS * 0.3) and 0.025 < ref.noise_threshold < 0.13


def test_the_noise_threshold_falls_as_the_spread_grows_and_a_quiet_sweep_sees_a_mild_node():
    def sweep(jitter: float, slow: float, n: int = 8, seed: int = 1) -> list[tuple[tuple[str, str], float]]:
        rng = random.Random(seed)
        return [((f"n{a}", f"n{b}"), (slow if 0 in (a, b) else 1.0) * (1 + rng.uniform(-jitter, jitter)))
                for a in range(n) for b in range(a + 1, n)]

    quiet, noisy = peer_reference(sweep(0.03, 0.6), 0.1), peer_reference(sweep(0.3, 0.6), 0.1)
    assert quiet is not None and noisy is not None
    assert quiet.suspected == ("n0",) and quiet.noise_threshold > 0.62  # 0.6 +-3 %: beyond the noise
    assert noisy.noise_threshold < quiet.noise_threshold and noisy.spread > quiet.spread  # type: ignore[operator]
    healthy = peer_reference(sweep(0.3, 1.0), 0.1)
    assert healthy is not None and healthy.suspected == ()


def test_odd_figures_are_judged_not_fatal():
    assert peer_reference([(("a", "b"), 0.5)], 0.1) is None  # one pair: nothing to compare with
    assert peer_reference([(("a", "b"), 0.5), (("a", "b"), 0.4)], 0.1) is None  # two nodes
    zero = peer_reference([(("a", "b"), 0.0), (("b", "c"), 0.0), (("a", "c"), 0.5), (("a", "d"), 0.5),
                           (("c", "d"), 0.5), (("b", "d"), 0.0)], 0.1)
    assert zero is not None and zero.suspected == ("b",) and zero.noise_threshold > 0
    ref = peer_reference([(("a", "b"), math.nan), (("b", "c"), 1.0), (("a", "c"), 1.0), (("c", "d"), 1.0)], 0.1)
    assert ref is not None and math.isfinite(ref.noise_threshold)
