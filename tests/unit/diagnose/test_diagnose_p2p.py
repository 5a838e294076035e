"""Issue 19, round 3: a send/recv pair in the wrong order (healthcheck/diagnose/p2p.py) and
one collective too many on one rank (healthcheck/diagnose/extracall.py), on the stacks of
real gloo jobs (torch 2.13 CPU, py-spy 0.4) of the tuning set, dumped while they hung by
tests/fixtures/diagnose/round3/make_round3.py. p2p: ranks 4 and 5 both receive first and
block in recv; ranks 0-1 wait in the broadcast after it, ranks 2-3 in the all_reduce after
that (three groups of two: no strict minority)."""

from __future__ import annotations

from support import FIXTURES

from healthcheck.diagnose.extracall import extra_call
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.stacks import StackGroup
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


def test_the_rank_with_one_collective_more_is_named_not_the_rank_waiting_for_it():
    """Live capture (make_round3.py), plain w5: rank 3 reduces one tensor more than its
    peers; its extra all_reduce (extra_collectives) pairs with the peers' all_reduce in
    train_step, and rank 1 waits in the broadcast rank 3 has not reached. Before: ranks 1
    and 3 named (rank 1 a victim)."""
    v = build(collect([ROUND3 / "extra-all-reduce-plain-w5-r3-live"]))
    assert v.cls == "collective-mismatch" and [o.rank for o in v.odd_ranks] == [3], v.summary
    assert "one collective more" in v.summary and "rank 1 waits for it" in v.summary, v.summary


def test_different_ops_without_a_shared_one_still_name_the_minority():
    """all_gather against all_reduce: no odd side shares the majority's op, so the
    narrowing leaves the stack mismatch's odd ranks as they were."""
    groups = [StackGroup(ranks=(0, 2, 3), label="all_reduce <- step", collective="all_reduce", function="step"),
              StackGroup(ranks=(1,), label="all_gather <- step", collective="all_gather", function="step")]
    assert extra_call(groups, (1,)) == (1,)
    groups.append(StackGroup(ranks=(4,), label="broadcast <- sync", collective="broadcast", function="sync"))
    assert extra_call(groups, (1, 4)) == (1, 4)
