"""Round 14 of issue 19's rules (branch i19-r14), logs mode: the false culprits and misses of
field-2 (tests/fixtures/diagnose-field/issues-2: real pasted logs) and held-out-11
(tests/fixtures/diagnose-jobs/held-out-11: replayed gloo jobs), each by its mechanism.

Where a field case's folder name holds a rank (`...-rank0`), the paste is copied into a folder
named in no rank's words first, so that a test reads what the paste alone says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support import FIXTURES, assert_culprits, diagnose_saved, named_ranks

from healthcheck.diagnose.sources import rank_from_name
from healthcheck.parsers.torch_log import parse_torch_log

FIELD2 = FIXTURES / "diagnose-field" / "issues-2" / "saved"
H11 = FIXTURES / "diagnose-jobs" / "held-out-11" / "saved"


def _neutral(tmp_path: Path, case: str) -> Path:
    """The field case's files in a folder whose name says nothing of a rank."""
    folder = tmp_path / "case"
    shutil.copytree(FIELD2 / case, folder)
    return folder


# ---------------------------------------------------------------- a traceback cut short


OFI = "ofi-rank3-verify-params-remote-exited-then-rank2-traceback-start"


def test_the_parser_keeps_a_traceback_the_text_ends_inside():
    log = parse_torch_log((FIELD2 / OFI / "paste.log").read_text())
    assert [c.rank for c in log.cut_tracebacks] == [2]
    assert [e.rank for e in log.exceptions] == [3]  # rank 3's traceback ended with its exception


def test_a_traceback_cut_before_its_exception_is_not_a_quiet_leaver(tmp_path):
    # rank 2's traceback opens at the paste's end beside rank 3's "remote process exited":
    # hc named rank 2 "left the job early: no error in its output"; its output is cut, not quiet
    verdict = diagnose_saved(_neutral(tmp_path, OFI))
    assert named_ranks(verdict) == [], verdict.summary


# ---------------------------------------------------------------- a folder named in words


BOX = "torchrun-box-four-ranks-exit1-same-second-root-cause-rank0"


def test_a_folder_named_in_words_gives_its_files_no_rank():
    assert rank_from_name(f"saved/{BOX}/paste.log") is None
    assert rank_from_name(f"saved/{OFI}/paste.log") is None
    # a folder that is a rank's label still is
    assert rank_from_name("job/rank_5/stdout.txt") == 5
    assert rank_from_name("job/worker-rank3/out.txt") == 3
    assert rank_from_name("logs/rank3.log") == 3


def test_torchruns_box_alone_with_one_second_for_every_rank_names_nobody():
    # every rank exit 1 at 07:01:51; the folder's name ("...-root-cause-rank0") made the paste
    # rank 0's own output and hc named rank 0 "exited 1 without printing an error"
    verdict = diagnose_saved(FIELD2 / BOX)
    assert named_ranks(verdict) == [], verdict.summary


# ---------------------------------------------------------------- Open MPI's box alone


def test_mpiruns_first_non_zero_exit_alone_names_its_rank(tmp_path):
    # `The first process to do so was: Process name: [[12167,1],10] Exit code: 3` and nothing
    # of any rank's own output: it was named only through the folder's "-rank-10-" before
    verdict = diagnose_saved(_neutral(tmp_path, "nccl-tests-mpirun-first-process-to-exit-rank-10-code-3"))
    assert_culprits(verdict, "dead-rank", [10], [])


def test_mpiruns_first_exit_beside_a_ranks_timeout_names_nobody(tmp_path):
    # a rank that timed out waited for another: the first to exit may be a victim, so the
    # box does not make it a dead rank (the timeouts' own rule may still read the wait)
    folder = _neutral(tmp_path, "nccl-tests-mpirun-first-process-to-exit-rank-10-code-3")
    text = (folder / "paste.log").read_text()
    (folder / "paste.log").write_text(
        "[rank4]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 4] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, "
        "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.\n" + text)
    assert diagnose_saved(folder).cls != "dead-rank"


def test_mpiruns_signal_line_with_its_pid_and_node_redacted_names_the_rank(tmp_path):
    # `mpirun noticed that process rank 1 with PID xxxxxx on node xxxxxxxx exited on signal 9`
    verdict = diagnose_saved(_neutral(tmp_path, "horovod-mpirun-redacted-rank1-killed-signal-9"))
    assert_culprits(verdict, "dead-rank", [1], [])
    assert all(not o.host for o in verdict.odd_ranks)  # a redacted node is no host


# ---------------------------------------------------------------- a point-to-point size mismatch


def test_a_reduce_to_a_node_leader_names_its_sender_not_the_aborted_leader():
    # rank 0 (node leader, reduce's root) aborted on "128 vs 64"; rank 1 raised inside
    # `reduce`, rank 2 in `all_reduce`, rank 3 in `broadcast`: hc read a broadcast and named
    # rank 0, the receiver; the message was rank 1's (its float64 gradient)
    verdict = diagnose_saved(H11 / "h11-hier-fp64-grad-plain-w4-r1")
    assert_culprits(verdict, "shape-mismatch", [1], [0, 2, 3])


def test_a_pipeline_activation_is_no_ring_chunk_and_the_aborted_receiver_is_not_named():
    # rank 3 aborted ("2560 vs 2048"), rank 2's connection reset in its own p2p wait (no c10d
    # function): which rank sent the text does not say; hc named rank 3, the receiver
    verdict = diagnose_saved(H11 / "h11-pp-activation-shape-torchrun-files-spawn-w4-r2")
    assert verdict.cls == "shape-mismatch"
    assert named_ranks(verdict) == [], verdict.summary


def test_a_pipeline_activation_is_not_read_as_a_ring_all_reduce():
    verdict = diagnose_saved(H11 / "h11-pp-activation-shape-plain-w3-r1")
    assert verdict.cls == "shape-mismatch"
    assert "ring" not in verdict.summary.split(";")[0], verdict.summary
    assert named_ranks(verdict) == []


# ---------------------------------------------------------------- C++'s exit-time terminate


def test_a_bare_terminate_after_a_victims_traceback_is_not_its_death():
    # rank 1's stderr holds `terminate called without an active exception` and its stdout the
    # connection reset it raised in all_reduce after rank 2 was SIGKILLed: hc named ranks 1-2
    verdict = diagnose_saved(H11 / "h11-hier-oom-kill-mpi-files-spawn-w4-r2")
    assert_culprits(verdict, "dead-rank", [2], [1, 3])


# ---------------------------------------------------------------- task files named by number


def test_a_task_file_named_by_its_number_is_that_ranks_output():
    # 0.out, 2.out, 3.out label their lines [rank0]/[rank2]/[rank3]; 1.out holds only rank 1's
    # own log lines (no error, no timeout): hc did not read it and named rank 0, a victim
    # that timed out in a send, where rank 1 never entered the exchange
    verdict = diagnose_saved(H11 / "h11-pp-offload-swallowed-task-files-spawn-w4-r1")
    assert_culprits(verdict, "stuck-rank", [1], [0, 2, 3])


def test_numbered_files_give_ranks_only_where_their_labels_agree():
    from healthcheck.diagnose.taskfiles import task_ranks

    assert task_ranks([("d/0.out", 0), ("d/1.out", None), ("d/2.out", 2)]) == {"d/1.out": 1}
    # a labelled file that names another rank than its number: the numbers are no ranks
    assert task_ranks([("d/0.out", 1), ("d/1.out", None)]) == {}
    # nothing confirms the numbers, or they do not run from 0
    assert task_ranks([("d/0.out", None), ("d/1.out", None)]) == {}
    assert task_ranks([("d/1.out", 1), ("d/2.out", None)]) == {}


# ---------------------------------------------------------------- hc run around a job's own launcher


def test_hc_run_around_a_program_that_starts_its_ranks_is_not_rank_0_of_world_1():
    # `hc run` saw no launcher's variables and wrote rank 0 of world 1; the ranks' own files
    # (mpirun --output-filename, started by the script) show ranks 0-4: hc refused ("ranks
    # beyond the world size 1 appear: 1-4"); rank 1 raised in its own forward()
    verdict = diagnose_saved(H11 / "h11-pp-stage-raise-hc-run-mpi-files-spawn-w5-r1-r3")
    assert verdict.cls == "dead-rank", verdict.summary
    assert 1 in named_ranks(verdict)


def test_hc_run_of_a_world_of_one_alone_keeps_its_rank():
    from healthcheck.diagnose.evidence import JobEvidence
    from healthcheck.diagnose.sources import Collected, lone_wrapper

    col = Collected(evidence=JobEvidence(job="t", collected_at="2026-11-28T00:00:00Z"))
    col.lone_runs.add("hc-run/hc-run.rank0.vm.1.json")
    col.evidence.rank(0)
    assert lone_wrapper(col) == frozenset()  # nothing beyond rank 0: the manifest may be right
    col.evidence.rank(3)
    assert lone_wrapper(col) == {"hc-run/hc-run.rank0.vm.1.json"}


# ---------------------------------------------------------------- a store key waited for mid-run


def test_a_checkpoint_commit_key_waited_for_after_steps_is_no_init_failure():
    # rank 1's `DistStoreError: wait timeout ... keys: .../ckpt/2/committed` raised in its own
    # checkpoint() after step 0 was logged; rank 0 (its disk full) never set it: hc said
    # init-failure, naming no rank
    verdict = diagnose_saved(H11 / "h11-ckpt-disk-full-srun-labelled-w2-r0")
    assert_culprits(verdict, "stuck-rank", [0], [1])


def test_a_store_wait_in_init_with_no_step_logged_stays_the_rendezvous(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "rank1.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "/job/train.py", line 9, in <module>\n'
        "    store.wait(['ready'])\n"
        "torch.distributed.DistStoreError: wait timeout after 6000ms, keys: /ready\n")
    (folder / "rank0.log").write_text("starting\n")
    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.storewait import midrun_store_waits

    assert midrun_store_waits(collect([folder])) == {}


# ---------------------------------------------------------------- a C module's lowercase error class


def test_a_traceback_ending_in_a_modules_lowercase_error_is_read():
    from healthcheck.parsers.torch_log.text import exception_head

    assert exception_head("struct.error: unpack requires a buffer of 8 bytes", in_traceback=True) == (
        "struct.error", " unpack requires a buffer of 8 bytes")
    assert exception_head("socket.timeout: timed out", in_traceback=True) is not None
    assert exception_head("struct.error: x") is None  # outside a traceback: no exception line
    assert exception_head("error: x", in_traceback=True) is None  # no module before it


def test_a_rank_that_raised_struct_error_in_a_worker_thread_future_is_named():
    # held-out-6: rank 2's traceback ends `struct.error: unpack requires a buffer of 8 bytes`;
    # unread, its traceback stayed open (cut), and the rank was no longer named
    verdict = diagnose_saved(FIXTURES / "diagnose-jobs" / "held-out-6" / "saved" / "h6-thread-future-raise-mpirun-w4-r2")
    assert_culprits(verdict, "dead-rank", [2], [0, 1, 3])


# ---------------------------------------------------------------- DETAIL's wrapper one sequence behind


DEEPSPEED = "deepspeed-wrapper-fingerprints-rank2-one-sequence-behind"


def test_the_rank_one_sequence_behind_in_details_wrapper_lines_is_stuck(tmp_path):
    # `[Rank 2] Running collective: CollectiveFingerPrint(SequenceNumber=1276, ...)`, ranks 0
    # and 1 at 1277: hc said unknown
    verdict = diagnose_saved(_neutral(tmp_path, DEEPSPEED))
    assert_culprits(verdict, "stuck-rank", [2], [0, 1])


def _wrapper_lines(case: str, keep: list[int]) -> str:
    lines = (FIELD2 / case / "paste.log").read_text().splitlines()
    return "\n".join(ln for ln in lines if any(f"[Rank {r}] Running" in ln for r in keep)) + "\n"


def test_two_ranks_wrapper_lines_name_nobody(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "paste.log").write_text(_wrapper_lines(DEEPSPEED, [0, 2]))
    assert named_ranks(diagnose_saved(folder)) == []


def test_wrapper_lines_with_no_majority_name_nobody(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    text = _wrapper_lines(DEEPSPEED, [0, 1, 2])
    text += text.splitlines()[1].replace("[Rank 0]", "[Rank 3]").replace("=1277", "=1275") + "\n"
    (folder / "paste.log").write_text(text)  # ranks 2 and 3 both behind: no one rank alone
    assert named_ranks(diagnose_saved(folder)) == []


# ---------------------------------------------------------------- a rank's own logged configuration


def test_the_rank_whose_logged_config_differs_while_a_group_is_created_is_named():
    # rank 3 logs "4 ranks, 2 nodes of 3" where ranks 0-2 log "of 2" (RANKS_PER_NODE=3 on rank
    # 3 only); rank 2 waits in new_group, the others time out in all_reduce: hc said
    # collective-mismatch "the logs do not say which member"
    verdict = diagnose_saved(H11 / "h11-hier-ranks-per-node-plain-w4-r3")
    assert_culprits(verdict, "init-failure", [3], [0, 1, 2])


def test_one_rank_off_needs_one_rank_alone():
    from healthcheck.diagnose.loggednumbers import one_rank_off

    line = "host vm: # ranks, # nodes of #"
    logged = {r: {line: (4, 2, 2)} for r in range(4)}
    assert one_rank_off(logged, {0, 1, 2, 3}) is None
    logged[3] = {line: (4, 2, 3)}
    assert one_rank_off(logged, {0, 1, 2, 3}) is not None
    logged[2] = {line: (4, 3, 2)}  # a second rank off in another number: not one rank alone
    assert one_rank_off(logged, {0, 1, 2, 3}) is None
    assert one_rank_off({r: {line: (4, 2, 2 + (r == 1))} for r in range(2)}, {0, 1}) is None  # two ranks
