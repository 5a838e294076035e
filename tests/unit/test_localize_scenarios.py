"""The localization detector on labelled scenarios it was not tuned on (tests/localize_scenarios.py,
HELD_OUT): 2, 3, 4, 6, 7 and 12 nodes; one or two slow nodes, a slow link, a fabric slow
everywhere, a node lost after its first test; quiet and noisy pairs; with and without a
pair floor. Through the deep sweep's own judging (run_pairs, its retries) and bw.pairs:
every culprit caught, no healthy node named or drained, every run finding the labels call
for given, and no run PASSing while something visible was slow. bin/bench prints the
same table for both sets."""

from __future__ import annotations

from collections import Counter

from localize_scenarios import HELD_OUT, TUNING, score


def test_the_held_out_set_covers_every_kind_at_every_size():
    kinds = Counter((sc.n, sc.name.split(": ", 1)[1]) for sc in HELD_OUT)
    for n in (3, 4, 6, 7, 12):
        for kind in ("healthy", "one slow node", "two slow nodes", "slow link", "fabric-wide"):
            assert kinds[(n, kind)] == 16, (n, kind)  # 4 seeds x quiet/noisy x floor or not
    assert sum(sc.lost is not None for sc in HELD_OUT) > 0 and sum(bool(sc.culprits) for sc in HELD_OUT) > 200
    # never the tuning set's scenarios again: other sizes, slowness, jitter, floors and seeds
    assert not {(sc.n, sc.seed) for sc in HELD_OUT} & {(sc.n, sc.seed) for sc in TUNING}


def test_held_out_every_culprit_caught_and_no_healthy_node_named_or_drained():
    s = score(HELD_OUT)
    assert s.false_culprits == [] and s.false_drains == []
    assert s.missed == [] and s.caught == s.culprits > 0
    assert s.unsaid == [] and s.said == s.to_say > 0  # one pair, or too few nodes: said, never a PASS
    assert s.silent == []
    assert s.links_found == s.links
