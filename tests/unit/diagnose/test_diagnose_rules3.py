"""Issue 19, round 3 of the rules (branch i19-rules3): `hc diagnose logs` on real gloo jobs
of this round (tests/fixtures/diagnose/rules3, made by make_rules3.py with torch 2.13 on
CPU) names the rank whose own doing failed the job, never a peer that failed after it.

* a rank that left (its shard ran out: destroy_process_group, then a slow exit 0) and that
  torchrun's agent SIGTERMed with the survivors once a peer failed: its SIGTERM is the
  agent's, and no `[rankN]:` traceback of it is in a console that holds its peers';
* a rank that ended itself without a word (os._exit(3) in a loader thread) that mpirun's
  non-zero-exit box names: that rank alone, never the ranks mpirun stopped after it;
* a loader thread that dies of an uncaught exception (`Exception in thread NAME:` and its
  traceback) while the main thread waits for its batch: the rank lives, blocked outside
  any collective while its peers time out: stuck, not dead;
* every rank waits in a collective, no side a strict majority: a broadcast whose root
  (`src`, py-spy `--locals`) one rank names differently (two ranks at that call, two in the
  next broadcast); a rank in a second barrier, behind every other rank in `train_step`
  (two wait in the broadcast after it, two in the all_reduce after that);
* an all_gather whose output list is one short on one rank: gloo refuses that rank's
  arguments before any exchange (`ProcessGroupGloo::allgather: invalid output tensor
  list`), a shape error of that rank; its peers' "Connection closed" are collateral.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved

from healthcheck.parsers.torch_log import parse_torch_log

SCEN = FIXTURES / "diagnose" / "rules3"

CASES = {
    # scenario: (class, the culprit ranks, the ranks that failed because of them)
    "short-shard-torchrun": ("dead-rank", [2], [0, 1, 3]),
    "short-shard-fast-torchrun": ("dead-rank", [1], [0, 2, 3]),
    "thread-exit-mpirun": ("dead-rank", [1], [0, 2, 3]),
    "gather-short": ("shape-mismatch", [0], [1, 2]),
    "thread-died": ("stuck-rank", [3], [0, 1, 2]),
    "extra-barrier": ("collective-mismatch", [2], [0, 1, 3]),
    "two-raise": ("dead-rank", [0, 3], [1, 2]),
    # live (py-spy --json --locals of every rank while the job hung, saved)
    "wrong-root-live": ("collective-mismatch", [2], [0, 1, 3]),
    "extra-barrier-live": ("collective-mismatch", [1], [0, 2, 3, 4]),
    "scatter-mix-live": ("collective-mismatch", [0], [1, 2, 3]),
}


def verdict(scenario: str):
    return diagnose_saved(SCEN / scenario)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_the_culprit_is_named_and_no_victim(scenario):
    cls, culprits, victims = CASES[scenario]
    v = verdict(scenario)
    assert_culprits(v, cls, culprits, victims)
    main = v.findings[0]
    assert main.lines and any(e.rank in culprits for e in main.lines), main.lines


def test_a_rank_that_left_is_named_though_torchrun_stopped_it():
    """Its exit record is the agent's SIGTERM: the verdict says it left, not that it was
    killed, and names the peers' connection errors as collateral."""
    v = verdict("short-shard-torchrun")
    assert "left the job early" in v.summary and "exited -15" not in v.summary, v.summary
    assert any("SIGTERM reached it only after" in e.text for e in v.findings[0].lines)
    assert "collateral" in v.summary


def test_a_silent_non_zero_exit_is_named_with_its_status_and_only_the_first():
    v = verdict("thread-exit-mpirun")
    assert "exited 3" in v.summary, v.summary
    assert "only the first" in v.summary  # mpirun cannot say whether another rank died with it


def test_a_refused_argument_list_is_that_ranks_shape_error():
    v = verdict("gather-short")
    assert "all_gather" in v.summary or "allgather" in v.summary, v.summary
    assert "expected length 3, got 2" in " ".join(e.text for e in v.findings[0].lines)


def test_a_silent_rank_torchrun_stopped_is_no_leaver_where_another_rank_failed_otherwise():
    """The tuning set's small-size job under torchrun: rank 2 is aborted by gloo's size
    check, rank 1 then reads "Connection reset", rank 0 printed nothing before the agent's
    SIGTERM. Rank 0 did not leave: it was stopped; no rank is named dead."""
    v = diagnose_saved(FIXTURES / "diagnose-jobs" / "tuning" / "small-size-torchrun-w3-r2")
    assert v.cls == "shape-mismatch", v.summary
    assert 0 not in {o.rank for o in v.odd_ranks}


def test_a_threads_exception_is_marked_with_its_thread_and_is_no_ranks_death():
    text = (SCEN / "thread-died" / "rank3.log").read_text()
    excs = parse_torch_log(text).exceptions
    assert [(e.type, e.thread) for e in excs] == [("OSError", "prefetch-0")]
    assert parse_torch_log("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                           "ValueError: x\n").exceptions[0].thread == ""
    v = verdict("thread-died")
    assert "prefetch-0" in v.summary and "died" in v.summary, v.summary
    assert not any(f.cls == "dead-rank" for f in v.findings)


def test_a_rank_with_another_root_is_named_from_the_calls_arguments():
    v = verdict("wrong-root-live")
    assert "src 2" in v.summary and "src 0" in v.summary, v.summary


def test_the_rank_behind_every_other_one_in_the_program_is_named_not_those_between():
    """extra-barrier-live: rank 1 in its second barrier (train_step line 104), ranks 0 and 3
    in the broadcast after it (105), ranks 2 and 4 in the all_reduce after that (107): no
    side is a majority. Rank 1 is behind every other rank: named; 0 and 3 wait for it."""
    v = verdict("extra-barrier-live")
    assert "before every other rank" in v.summary and "train_step" in v.summary, v.summary


def test_two_roots_and_no_majority_name_no_rank(tmp_path):
    """The wrong-root job with only the two ranks at the broadcast of two roots: which root
    is wrong nothing says, so no rank is named."""
    import shutil
    for r in (0, 2):
        shutil.copy(SCEN / "wrong-root-live" / f"py-spy-rank{r}.json", tmp_path)
        shutil.copy(SCEN / "wrong-root-live" / f"rank{r}.log", tmp_path)
    v = diagnose_saved(tmp_path)
    assert not v.odd_ranks, v.summary


def test_a_live_sample_keeps_the_root_its_rank_called_with():
    """Live, the locals are reduced to a StackSample at once: it keeps the root, so the
    rule reads it from the samples as from a saved dump."""
    from healthcheck.diagnose.motion import sample_of
    from healthcheck.diagnose.stacks import main_thread
    from healthcheck.parsers.py_spy import parse_py_spy

    roots = []
    for r in (0, 1, 2, 3):
        proc = parse_py_spy((SCEN / "wrong-root-live" / f"py-spy-rank{r}.json").read_text()).processes[0]
        roots.append(sample_of(main_thread(proc), 0.0, None).root)
    assert roots == [0, 0, 2, 0]


def test_from_saved_logs_the_rank_behind_the_others_is_named_not_the_rank_waiting_for_it():
    """extra-barrier (plain w4, saved): every rank times out; rank 2 in its second barrier
    (train_step line 104), rank 0 in the broadcast after it (105), ranks 1 and 3 in the
    all_reduce after that (107). The tracebacks' own frames place rank 2 before the others."""
    v = verdict("extra-barrier")
    assert "before every other rank in train_step" in v.summary and "waiting for it" in v.summary, v.summary
    chain = [e for e in parse_torch_log((SCEN / "extra-barrier" / "rank2.log").read_text()).exceptions][0].chain
    assert [c.split(" in ")[1] for c in chain] == ["<module>", "main", "train_step", "checkpoint_barrier"]


def test_two_ranks_that_raised_in_one_step_are_both_named_though_their_stamps_are_apart():
    """two-raise (plain w4): ranks 0 and 3 raise in their own code at step 2; the ranks log
    their step unevenly, so rank 3's last line is 0.4 s after rank 0's and after rank 1's
    (whose all_reduce then failed), but before rank 2's: it made no more progress than a
    rank still in that step. Both are named (was: rank 0 alone, rank 3 "after it")."""
    v = verdict("two-raise")
    assert "raised together" in v.summary and "after it" not in v.summary, v.summary


def test_a_rank_torchruns_block_skips_exited_0_and_a_silent_stopped_rank_is_no_leaver_beside_it():
    """short-shard-fast-torchrun: rank 1 leaves and exits 0 at once (the block lists local
    ranks 0, 2 and 3 only); rank 2, slower than its peers, was SIGTERMed by the agent
    before it printed its error. Rank 1 is named (exit 0), rank 2 is not."""
    v = verdict("short-shard-fast-torchrun")
    assert "exited 0" in v.summary, v.summary
