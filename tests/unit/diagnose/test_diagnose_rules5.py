"""Issue 19, round 5 of the rules (branch i19-rules5): `hc diagnose logs` on real gloo jobs
of this round (tests/fixtures/diagnose/rules5, made by make_rules5.py with torch 2.13 on
CPU): the rank whose own arguments were off is named where gloo's algorithm and every
rank's output settle it, and where they do not, no victim is named in its place.

* a broadcast one rank calls with another src: gloo's binomial tree leaves that rank and
  its parent in the others' tree waiting on sends while the others go on; replaying the
  tree names the rank whose src was off where only it explains what every rank printed,
  and names neither where the tree is symmetric (never the parent, never a rank that
  went on);
* a size check gloo failed inside an all_to_all: alltoallv exchanges with every peer at
  once, so no ring neighbour is said to be the sender, and no rank is named;
* reduce_scatter_tensor with one rank's dtype off: the rank before it in gloo's ring
  aborts; the pair is said (the two ranks of the ring), and neither is named since one
  report cannot say which of the two is odd.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, diagnose_saved, named_ranks

SCEN = FIXTURES / "diagnose" / "rules5"


def verdict(scenario: str):
    return diagnose_saved(SCEN / scenario)


@pytest.mark.parametrize(("scenario", "culprit"), [("wrongroot-w5-r3", 3), ("wrongroot-mpirun-w7-r4", 4)])
def test_a_broadcast_with_another_src_names_that_rank_not_its_parent(scenario, culprit):
    v = verdict(scenario)
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary


@pytest.mark.parametrize("scenario", ["wrongroot-w3-r1", "wrongroot-torchrun-w4-r2"])
def test_a_symmetric_broadcast_tree_names_no_victim(scenario):
    # w3 r1: ranks 0 and 1 wait in the broadcast (rank 0 cut short by rank 1's exit), rank 2
    # went on to the all_reduce; w4 r2: 2 against 2. A src off on either stuck rank gives the
    # same outputs: no rank is named, and never the rank that went on
    v = verdict(scenario)
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == [], v.summary


def test_the_tree_replay_never_names_the_parent():
    from healthcheck.diagnose.bcastroot import simulate, wrong_src

    # every world 2-8, every rank with src = itself among src 0: whatever is named is the rank
    for world in range(2, 9):
        for odd in range(1, world):
            roots = [0] * world
            roots[odd] = odd
            outcomes = simulate(roots)
            stuck = {r: f"Timed out waiting 1ms for {o} operation" for r, o in enumerate(outcomes) if o != "ok"}
            found = wrong_src(stuck, [r for r, o in enumerate(outcomes) if o == "ok"], world)
            assert found is None or found[0] in ((), (odd,)), (world, odd, found)


@pytest.mark.parametrize("scenario", ["a2amore-w5-r2", "a2amore-torchrun-w4-r0"])
def test_an_all_to_all_size_check_claims_no_ring_sender(scenario):
    v = verdict(scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [], v.summary
    assert "ring" not in v.summary and "all_to_all" in v.summary, v.summary


@pytest.mark.parametrize(("scenario", "pair"), [("rswide-w4-r2", (1, 2)), ("rswide-mpirun-w6-r5", (4, 5)),
                                                ("rsnarrow-w5-r1", (1, 2))])
def test_a_reduce_scatter_dtype_off_says_its_ring_pair_and_names_neither(scenario, pair):
    v = verdict(scenario)
    assert v.cls == "shape-mismatch", v.summary
    assert named_ranks(v) == [], v.summary
    assert f"ranks {pair[0]} and {pair[1]}" in v.summary and "2:1" in v.summary, v.summary


# ---------------------------------------------------------------- a rank a step off the others


@pytest.mark.parametrize(("scenario", "culprit"), [("condskip-torchrun-w3-r1", 1), ("condskip-w3-r2", 2)])
def test_a_rank_that_skipped_a_collective_is_named_by_the_step_it_ran_ahead(scenario, culprit):
    # the culprit skips a 1-element all_reduce: its loss all_reduce pairs with the peers'
    # flag, it logs the step they never finish, and its next gradient all_reduce makes gloo
    # abort a peer on the size check: the skipper is named (desync), not the pair gloo's
    # ring report gives
    v = verdict(scenario)
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary


@pytest.mark.parametrize("scenario", ["condskip-w4-r3", "condskip-mpirun-w5-r0", "condskip-torchrun-w4-r2"])
def test_a_skip_whose_ranks_all_logged_one_step_names_no_rank(scenario):
    # at worlds 4-5 the pairings complete on every rank and all time out at the same step and
    # call site: nothing in the text says who skipped, and no victim is named
    assert named_ranks(verdict(scenario)) == []


def test_the_step_parser_keeps_each_ranks_last_step_and_reads_no_traceback():
    from healthcheck.parsers.torch_log import MAX_LISTED, parse_torch_log

    lines = [f"[rank0]:step {n} loss 1.0" for n in range(MAX_LISTED + 5)]
    lines += ["[rank1]:2026-11-27 19:40:29,270 INFO [train] Step: 7, 3.2 steps/s",
              '[rank1]:  File "train.py", line 655, in train_step',
              "[rank2]:throughput 12 steps/s", "[rank1]:ERROR rank1 collective failed at step 8",
              "[rank1]:Traceback (most recent call last):",
              "[rank1]:RuntimeError: boom"]
    log = parse_torch_log("\n".join(lines))
    steps = {s.rank: s.step for s in log.last_steps}
    assert steps == {0: MAX_LISTED + 4, 1: 7}


# ---------------------------------------------------------------- process groups built in another order


@pytest.mark.parametrize(("scenario", "culprit"), [("grouporder-live-w6-r3", 3), ("grouporder-live-w5-r2", 2)])
def test_a_rank_that_built_its_groups_in_another_order_is_named_not_the_rank_waiting(scenario, culprit):
    # w6: rank 3 built the odd ranks' group first; ranks 1 and 5 wait in new_group for it
    # (they look stuck) while it is in the training loop. w5: rank 2 waits to create the
    # even ranks' group as '2' where ranks 0 and 4 wait in it as '1'
    v = verdict(scenario)
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == [culprit], v.summary


def test_two_members_past_new_group_name_neither_and_no_waiting_rank():
    # w4 r1: rank 1's odd group took the even group's name and rank 2 met it there: both are
    # past every new_group, ranks 0 and 3 wait; none is named (the stacks do not say which)
    v = verdict("grouporder-live-w4-r1")
    assert v.cls == "collective-mismatch", v.summary
    assert named_ranks(v) == [], v.summary


def test_a_live_sample_keeps_the_group_its_rank_waits_to_create():
    from healthcheck.diagnose.motion import sample_of
    from healthcheck.diagnose.stacks import main_thread
    from healthcheck.parsers.py_spy import parse_py_spy

    proc = parse_py_spy((SCEN / "grouporder-live-w6-r3" / "py-spy-rank1.json").read_text()).processes[0]
    sample = sample_of(main_thread(proc), 0.0, None)
    assert sample.creating == (1, 3, 5) and sample.in_new_group


# ---------------------------------------------------------------- os._exit under mpirun (a check, not a fix)


@pytest.mark.parametrize(("scenario", "culprit"), [("osexit-mpirun-w4-r2", 2), ("osexit-mpirun-w5-r1r3", 3),
                                                   ("osexit-w4-r1", 1)])
def test_a_rank_that_called_os_exit_is_named_and_never_a_peer(scenario, culprit):
    # no traceback: mpirun's box names the first rank that exited non-zero (w5: ranks 1 and 3
    # both exited, mpirun names 3 only; rank 1 printed nothing, as did the ranks it stopped)
    v = verdict(scenario)
    assert v.cls == "dead-rank", v.summary
    assert named_ranks(v) == [culprit], v.summary


def test_the_ranks_that_printed_nothing_beside_mpiruns_first_exit_are_said():
    # rank 1 exited too; mpirun names rank 3 alone and stopped rank 0 before it printed:
    # ranks 0 and 1 are said as the ranks that may have left with it, neither named
    v = verdict("osexit-mpirun-w5-r1r3")
    assert named_ranks(v) == [3], v.summary
    assert "ranks 0-1 printed no error either" in v.summary, v.summary
