"""Round 18 of issue 19's rules (branch i19-r18), on the mechanisms field-8 and field-7 missed
(both read in this round, tests/fixtures/diagnose-field/issues-8 and issues-7): HPE PALS's and
MPICH Hydra's word on how each rank ended, Open MPI's box sentence a wrap split, a table or
log viewer's columns before a rank's label, a SIGABRT torchrun reports of a rank that shows
nothing of its own, and a fingerprint report whose agreeing side is no strict majority.
Where a case is field-8's or field-7's own paste it is copied to a neutral folder; the other
texts are built here in the shapes those pastes and the tools' sources show."""

from __future__ import annotations

import shutil

from support import FIXTURES, diagnose_paste, diagnose_saved, named_ranks

from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.torch_log import parse_torch_log

FIELD8 = FIXTURES / "diagnose-field" / "issues-8" / "saved"
FIELD7 = FIXTURES / "diagnose-field" / "issues-7" / "saved"



def _field(tmp_path, folder, case: str):
    job = tmp_path / "job"
    shutil.copytree(folder / case, job)
    return diagnose_saved(job)


# ---------------------------------------------------------------- PALS and Hydra


def test_pals_lines_are_each_ranks_end():
    log = parse_torch_log("x1000c0s1b0n0: rank 3 died from signal 9\n"
                          "x1000c0s2b0n0...: rank  10 exited with code 1   <- note\n")
    ends = [(t.launcher, t.tasks, t.signal, t.exitcode, t.host) for t in log.task_exits]
    assert ("pals", (3,), "SIGKILL", None, "x1000c0s1b0n0") in ends
    assert ("pals", (10,), "", 1, "x1000c0s2b0n0") in ends


def test_pals_sigkill_among_sigterms_names_the_killed_rank(tmp_path):
    v = diagnose_paste(tmp_path, "job ended:\n"
                         "x3003c0s7b0n0: rank 2 died from signal 15\n"
                         "x3003c0s1b0n0: rank 5 died from signal 9\n"
                         "x3003c0s7b0n0: rank 0 died from signal 15\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [5], v.summary


def test_field8_pals_two_annotated_lines_name_rank_12(tmp_path):
    v = _field(tmp_path, FIELD8, "pals-two-lines-rank-12-signal-9-rank-1-signal-15-annotated")
    assert v.cls == "dead-rank" and named_ranks(v) == [12], v.summary


_HYDRA = ("===================================================================================\n"
          "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
          "=   RANK {rank} PID {pid} RUNNING AT gn59\n"
          "=   KILLED BY SIGNAL: {sig} (Killed)\n"
          "===================================================================================\n")


def test_one_hydra_box_names_its_rank(tmp_path):
    v = diagnose_paste(tmp_path, "step 10 loss 1.2\n" + _HYDRA.format(rank=3, pid=5493, sig=9))
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_several_hydra_boxes_name_none(tmp_path):
    # Hydra's cleanup kills the remaining processes and boxes them too: no order of death
    v = diagnose_paste(tmp_path, _HYDRA.format(rank=0, pid=5490, sig=9) + "\n" + _HYDRA.format(rank=1, pid=5491, sig=9))
    assert named_ranks(v) == [], v.summary


def test_old_hydra_box_without_a_rank_names_none(tmp_path):
    v = diagnose_paste(tmp_path, "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
                         "=   PID 28488 RUNNING AT host-a\n=   EXIT CODE: 9\n"
                         "=   CLEANING UP REMAINING PROCESSES\n")
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- a SIGABRT with nothing of the rank's own

_BOX = ("Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-28_10:00:05\n"
        "  host      : node-a\n"
        "  rank      : {rank} (local_rank: {rank})\n"
        "  exitcode  : -6 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 6 (SIGABRT) received by PID 4242\n"
        "============================================================\n")


def test_a_sigabrt_in_torchruns_box_alone_names_no_rank_and_says_why(tmp_path):
    v = diagnose_paste(tmp_path, _BOX.format(rank=2))
    assert named_ranks(v) == [] and v.cls == "unknown", v.summary
    assert "SIGABRT" in v.summary and "watchdog" in v.summary and "rank 2" in v.summary


def test_field8_torchrun_box_tail_sigabrt_names_none(tmp_path):
    v = _field(tmp_path, FIELD8, "torchrun-box-tail-rank-0-sigabrt-only")
    assert named_ranks(v) == [] and "no evidence against it" in v.summary, v.summary


_TWO_ABORTS = ("============================================================\n"
               "train.py FAILED\n"
               "------------------------------------------------------------\n"
               "Failures:\n"
               "[1]:\n"
               "  time      : 2026-11-28_10:00:05\n"
               "  host      : node-a\n"
               "  rank      : 3 (local_rank: 3)\n"
               "  exitcode  : -6 (pid: 4243)\n"
               "  error_file: <N/A>\n"
               "  traceback : Signal 6 (SIGABRT) received by PID 4243\n"
               "------------------------------------------------------------\n")


def test_a_whole_box_with_two_sigabrts_and_nothing_of_theirs_names_none(tmp_path):
    # every rank that waited in a timed-out collective is aborted by its watchdog alike
    v = diagnose_paste(tmp_path, _TWO_ABORTS + _BOX.format(rank=2))
    assert named_ranks(v) == [], v.summary


def test_a_box_that_lists_its_one_sigabrt_and_no_other_failure_still_names_it(tmp_path):
    # field-5's box cut inside its Failures section: `<NO_OTHER_FAILURES>` then the root cause
    v = _field(tmp_path, FIXTURES / "diagnose-field" / "issues-5" / "saved",
               "elastic-box-no-other-failures-root-cause-rank1-sigabrt-then-script-echo")
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary
    log = parse_torch_log("  <NO_OTHER_FAILURES>\n----------\n" + _BOX.format(rank=2))
    assert [b.no_other_failures for b in log.child_failed] == [True]


def test_a_sigabrt_of_a_rank_whose_own_lines_are_in_the_text_is_still_its_death(tmp_path):
    v = diagnose_paste(tmp_path, "[rank2]: step 41 loss 0.93\n"
                         "[rank2]: python: kernels.cc:88: void pack(): Assertion `n % 8 == 0' failed.\n"
                         + _BOX.format(rank=2))
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- Open MPI's sentence split by a wrap

_SENTENCE = "mpiexec noticed that process rank 5 with PID 10313 on node proton exited on signal 6 (Aborted)."


def _exits(text: str) -> list[tuple[tuple[int, ...], str, str]]:
    return [(t.tasks, t.signal, t.launcher) for t in parse_torch_log(text).task_exits]


def test_open_mpis_sentence_survives_a_word_wrap_at_any_blank():
    blanks = [i for i, c in enumerate(_SENTENCE) if c == " "]
    for at in blanks:
        for keep in ("", " "):  # a terminal keeps the blank at the cut, an editor's reflow drops it
            text = "----\n" + _SENTENCE[:at] + keep + "\n" + _SENTENCE[at + 1:] + "\n----\n"
            assert _exits(text) == [((5,), "SIGABRT", "mpirun")], (at, text)


def test_open_mpis_sentence_survives_a_character_wrap_and_three_lines():
    text = _SENTENCE[:30] + "\n" + _SENTENCE[30:70] + "\n" + _SENTENCE[70:] + "\n"
    assert _exits(text) == [((5,), "SIGABRT", "mpirun")]


def test_a_line_that_only_starts_like_the_sentence_joins_nothing():
    text = "mpirun noticed that the job was slow\nstep 3 loss 1.0\nstep 4 loss 0.9\nstep 5 loss 0.8\n"
    log = parse_torch_log(text, rank_output=True)
    assert log.task_exits == () and len(log.last_steps) == 1


def test_field8_mpiexec_box_wrapped_before_signal_names_rank_0(tmp_path):
    v = _field(tmp_path, FIELD8, "mpiexec-rank-0-signal-6-wrapped-eight-killed-mpi-app")
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- columns before the rank's label


def test_a_runners_pipe_column_is_taken_off_and_the_rank_label_read():
    text = "".join(f"        | [rank1]: line {i}\n" for i in range(5)) + "    * an unprefixed summary line\n"
    lines = [x for x in read_lines(text) if x.text.startswith("line")]
    assert len(lines) == 5 and {x.rank for x in lines} == {1} and lines[0].text == "line 0"


def test_a_log_viewers_stamp_column_is_kept_as_the_lines_stamp():
    text = "".join(f"  | 2024-08-23T22:22:5{i}.879Z | 3: step {i}\n" for i in range(5))
    lines = list(read_lines(text))
    assert {x.task for x in lines} == {3} and lines[0].text == "step 0"
    assert lines[0].stamp.startswith("2024-08-23T22:22:50")


def test_a_table_whose_rows_end_at_their_border_keeps_its_columns():
    text = "".join(f"| {i}  NVIDIA H100  On | 00000000:1{i}:00.0 Off |\n" for i in range(5))
    assert [x.text for x in read_lines(text)] == text.splitlines()


def test_field8_runner_prefixed_dataloader_error_names_rank_0(tmp_path):
    v = _field(tmp_path, FIELD8, "benchmark-runner-pipe-prefixed-rank-0-dataloader-filenotfound-sigterm")
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- a fingerprint side that is no majority

_FP_CASE = "collective-fingerprint-allgather-shape-1435-vs-1436-ranks-1-2"


def _fp_line() -> str:
    text = (FIELD7 / _FP_CASE / "paste.log").read_text()
    return next(x for x in text.splitlines() if "Detected mismatch" in x)


def test_a_torchrun_command_gives_the_world_it_launches():
    assert parse_torch_log("torchrun --standalone --nproc_per_node 4 -m train\n"
                           "[rank0]: RuntimeError: boom\n").launched_world == 4
    assert parse_torch_log("torchrun --nnodes=2 --nproc-per-node=8 train.py\n"
                           "[rank0]: RuntimeError: boom\n").launched_world == 16
    for elastic in ("torchrun --nnodes 1:4 --nproc_per_node 8 t.py", "torchrun --nnodes=$N --nproc_per_node 8 t.py",
                    "torchrun --nproc_per_node gpu t.py"):
        assert parse_torch_log(elastic + "\n[rank0]: RuntimeError: boom\n").launched_world is None


def test_field7_two_agreeing_ranks_of_a_world_of_4_name_no_rank_and_say_both_sides(tmp_path):
    v = _field(tmp_path, FIELD7, _FP_CASE)
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary
    assert "1435" in v.summary and "1436" in v.summary and "world of 4" in v.summary


def test_the_same_report_names_the_rank_that_differs_in_a_world_of_3_not_of_4(tmp_path):
    v = diagnose_paste(tmp_path / "w3", "torchrun --standalone --nproc_per_node 3 -m infer\n" + _fp_line() + "\n")
    assert v.cls == "shape-mismatch" and named_ranks(v) == [2], v.summary
    v = diagnose_paste(tmp_path / "w4", "$ torchrun --standalone --nproc_per_node 4 -m infer\n" + _fp_line() + "\n")
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary


def test_three_agreeing_ranks_of_a_world_of_4_name_the_fourth(tmp_path):
    line = _fp_line().replace("Rank 1 is running", "Rank 2 is running").replace("but Rank 2 is", "but Rank 3 is")
    v = diagnose_paste(tmp_path, "torchrun --standalone --nproc_per_node 4 -m infer\n" + line + "\n")
    assert v.cls == "shape-mismatch" and named_ranks(v) == [3], v.summary


def test_a_larger_world_of_the_ranks_environment_decides_too(tmp_path):
    # ranks 0 and 1 agree against rank 2; the text shows a rank 5 of its own (its file): no majority of 6
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text(f"[rank1]: {_fp_line().strip()}\n")
    (job / "rank5.log").write_text("[rank5]: step 3 loss 0.5\n")
    v = diagnose_saved(job)
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary
