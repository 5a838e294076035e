"""Round 13 of issue 19's rules (branch i19-r13), logs mode: the misses of field-1's first
measure (tests/fixtures/diagnose-field/issues-1: real pasted logs), each by its mechanism:
torch's monitored barrier (its reporter a victim, the rank it lost named only where it is the
one rank that did not reach it: real captures in tests/fixtures/diagnose/rules13), a
launcher's report of the one child that failed, and an exception torch's excepthook printed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import FIXTURES, assert_culprits, diagnose_saved, named_ranks

FIELD = FIXTURES / "diagnose-field" / "issues-1" / "saved"
SCEN = FIXTURES / "diagnose" / "rules13"
# torch 2.13's words on a rank that reached the barrier (ProcessGroupGloo.cpp, as captured in rules13)
REACHED = ("Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
           "from rank 0. Please check rank 0 logs for faulty rank.")


def _folder(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


# ---------------------------------------------------------------- the monitored barrier


def test_the_captures_hold_torchs_own_words():
    assert REACHED in (SCEN / "mbarrier-exit-w2-r0" / "rank1.log").read_text()
    assert REACHED in (SCEN / "mbarrier-absent-w3-r2" / "rank1.log").read_text()
    assert "[Rank 0]: Rank 2 failed to pass monitoredBarrier in 3000 ms" in (
        SCEN / "mbarrier-absent-w3-r2" / "rank0.log").read_text()


def test_a_pasted_barrier_report_never_names_its_reporter():
    # rank 1's only error is torch's "Rank 1 successfully reached monitoredBarrier ... from
    # rank 0": hc named rank 1 dead, the reporter; it is a victim
    verdict = diagnose_saved(FIELD / "lightning-ddp-rank1-monitored-barrier-blames-rank0")
    assert 1 not in named_ranks(verdict)


def test_a_pasted_barrier_report_without_the_world_names_no_rank():
    # rank 1 prints the same words when a third rank was the one missing and rank 0 only
    # reported it (mbarrier-absent-w3-r2): with no world size in the text, the two ranks heard
    # (0 and 1) are not the world, and rank 0 is not named on the reporter's word alone
    verdict = diagnose_saved(FIELD / "lightning-ddp-rank1-monitored-barrier-blames-rank0")
    assert named_ranks(verdict) == []


def test_a_pasted_barrier_report_beside_rank_0s_exit_code_names_no_rank():
    # torchrun's `failed (exitcode: 1) local_rank: 0` beside rank 1's words: rank 0 exits with
    # code 1 as well when it raises `Rank 2 failed to pass monitoredBarrier` about another
    # rank, so without rank 0's own output or the world size nobody is named
    verdict = diagnose_saved(FIELD / "xtuner-rank1-monitored-barrier-names-rank0-then-local-rank0-exit1")
    assert named_ranks(verdict) == []


def test_rank_0_that_exited_is_named_and_the_reporter_is_its_victim():
    assert_culprits(diagnose_saved(SCEN / "mbarrier-exit-w2-r0"), "dead-rank", [0], [1])


def test_rank_0_that_hung_is_stuck_by_the_reporters_timeout():
    # the original exception under rank 1's words is gloo's timeout: rank 0 never answered
    assert_culprits(diagnose_saved(SCEN / "mbarrier-hang-w2-r0"), "stuck-rank", [0], [1])


def test_rank_0s_report_of_an_absent_rank_wins_over_the_reporters():
    # rank 2 never came; rank 0 said so and raised; rank 1 lost rank 0 with the same words
    assert_culprits(diagnose_saved(SCEN / "mbarrier-absent-w3-r2"), "stuck-rank", [2], [0, 1])


def test_a_known_rank_that_did_not_report_keeps_rank_0_unnamed(tmp_path):
    # without rank 0's report, rank 1 lost rank 0 while rank 2 (known, its own log) reported
    # nothing: rank 0 may only have raised for rank 2 (the capture shows exactly that), so the
    # barrier names no one
    folder = tmp_path / "job"
    shutil.copytree(SCEN / "mbarrier-absent-w3-r2", folder)
    (folder / "rank0.log").unlink()
    verdict = diagnose_saved(folder)
    assert 0 not in named_ranks(verdict) and 1 not in named_ranks(verdict), verdict.summary


# ---------------------------------------------------------------- the launcher's failed child


def test_torch_19s_banner_gives_the_global_rank_of_the_failed_child():
    from healthcheck.parsers.torch_log import parse_torch_log

    log = parse_torch_log("Child process 32378 (local_rank 0) FAILED (exitcode 1)\n")
    (w,) = log.worker_failures
    assert (w.rank, w.local_rank, w.pid, w.exitcode) == (0, None, 32378, 1)


@pytest.mark.parametrize(("case", "rank"), [("longchat-legacy-sigterm-eight-then-local-rank-4-sigkill", 4),
                                            ("lptn-torch19-child-failed-no-error-file-local-rank0-exit1", 0)])
def test_the_one_child_a_launcher_reports_failed_is_the_dead_rank(case, rank):
    # the agent stopped eight children and reports local rank 4 killed (-9), torch 1.9's
    # banner child 0 exit 1: no rank's own output in the paste, so hc named no one
    verdict = diagnose_saved(FIELD / case)
    assert_culprits(verdict, "dead-rank", [rank], [])


def _longchat_with(tmp_path: Path, extra: str) -> Path:
    text = (FIELD / "longchat-legacy-sigterm-eight-then-local-rank-4-sigkill" / "paste.log").read_text()
    return _folder(tmp_path, "job", {"paste.log": text + extra})


def test_a_rank_beyond_the_agents_children_keeps_the_local_rank_unnamed(tmp_path):
    # nine children on this agent, and the text speaks of rank 11 too (rules13's own line
    # format, relabelled): another node's; local rank 4 is then no global rank
    line = (SCEN / "mbarrier-exit-w2-r0" / "rank1.log").read_text().splitlines()[1].replace("[rank1]", "[rank11]")
    verdict = diagnose_saved(_longchat_with(tmp_path, line + "\n"))
    assert 4 not in named_ranks(verdict), verdict.summary


def test_a_timeout_in_the_text_makes_the_first_child_to_fail_no_culprit(tmp_path):
    # gloo's timeout (a rules13 capture's line, relabelled to a local child): the first child to
    # exit may have waited on a hung rank, which exits last
    timeout = next(x for x in (SCEN / "mbarrier-hang-w2-r0" / "rank1.log").read_text().splitlines()
                   if "Timed out waiting" in x).replace("[rank1]", "[rank2]")
    verdict = diagnose_saved(_longchat_with(tmp_path, timeout + "\n"))
    assert 4 not in named_ranks(verdict), verdict.summary


def test_two_reports_name_no_child():
    # a writer's two runs, each agent's own first failure: which one is meant is not said
    path = FIXTURES / "field" / "issues-12" / "torch-log" / "prose-two-bracket-error-failed-lines-minus9-local-rank-1-then-0.txt"
    assert named_ranks(diagnose_saved(path)) == []


def test_an_abort_the_launcher_reports_is_no_death_of_its_own():
    # -6: the NCCL watchdog's or gloo's abort after a peer failed (a real torch 1.10 paste)
    path = FIXTURES / "field" / "issues-15" / "torch-log" / \
        "tilde-fence-memory-lines-then-torch-1.10-agent-failed-minus-6-load-entry-point.txt"
    assert named_ranks(diagnose_saved(path)) == []


# ---------------------------------------------------------------- an exception nothing caught


def test_a_stamped_one_line_exception_torch_printed_is_the_ranks_death():
    # `2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: ...` and no traceback lines
    assert_culprits(diagnose_saved(FIELD / "qwen-coder-stamped-rank3-oom-then-filelock-debug"), "dead-rank", [3], [])


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB."  # qwen-coder's paste


@pytest.mark.parametrize(("label", "uncaught"), [("[rank3]: ", True), ("2024-11-20 14:37:16 [rank3]: ", True),
                                                 ("[rank: 3] ", False), ("[default3]:", False)])
def test_only_torchs_excepthook_label_says_nothing_caught_it(label, uncaught):
    # torch's sys.excepthook (distributed_c10d.py) puts `[rankN]: ` before an uncaught
    # exception's lines; Lightning's `[rank: N] ` and torchrun's `[default3]:` label any line
    from healthcheck.parsers.torch_log import parse_torch_log

    (e,) = parse_torch_log(label + OOM + "\n").exceptions
    assert e.uncaught is uncaught


def test_a_logged_one_line_exception_is_no_death(tmp_path):
    # qwen-coder's paste with the OOM line under Lightning's logger prefix: it may have been
    # caught and logged, and the job's lines went on after it
    case = "qwen-coder-stamped-rank3-oom-then-filelock-debug"
    text = (FIELD / case / "paste.log").read_text()
    assert "[rank3]: torch.OutOfMemoryError" in text
    verdict = diagnose_saved(_folder(tmp_path, "job", {"paste.log": text.replace("[rank3]: ", "[rank: 3] ")}))
    assert named_ranks(verdict) == [], verdict.summary
