"""Issue 19, round 3: a send/recv pair in the wrong order, on the stacks
(healthcheck/diagnose/p2p.py). A real gloo job (torch 2.13 CPU, py-spy 0.4) of the tuning
set, dumped while it hung by tests/fixtures/diagnose/round3/make_round3.py: ranks 4 and 5
both receive first and block in recv; ranks 0-1 wait in the broadcast after it, ranks 2-3
in the all_reduce after that (three groups of two: no strict minority)."""

from __future__ import annotations

from support import FIXTURES

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build

ROUND3 = FIXTURES / "diagnose" / "round3"


def test_ranks_deadlocked_in_recv_are_named_while_the_others_wait_in_collectives():
    """Before: unknown ("no odd stack")."""
    v = build(collect([ROUND3 / "p2p-order-plain-w6-r4-r5-live"]))
    assert v.cls == "collective-mismatch" and [o.rank for o in v.odd_ranks] == [4, 5], v.summary
    assert "recv" in v.summary and "point-to-point" in v.summary, v.summary


def test_ranks_all_in_collectives_are_not_named_by_the_p2p_rule():
    """The skipped-collective capture (every rank in a collective, none in send/recv) keeps
    its own answer: the p2p rule speaks only of send/recv."""
    v = build(collect([FIXTURES / "diagnose" / "skip"]))
    assert "point-to-point" not in v.summary, v.summary
