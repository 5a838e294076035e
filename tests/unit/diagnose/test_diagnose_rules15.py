"""Round 15 of issue 19's rules (branch i19-r15), logs mode: the misses of field-3's and
field-4's first measures (tests/fixtures/diagnose-field/issues-3, issues-4: real pasted
logs), each by its mechanism: ProcessGroupWrapper's fingerprint check read for the first
rank that differs, the flight recorder analyser's missing ranks, the launchers' reports of
the failed process (Horovod's runner, DeepSpeed's launcher), socket errors that cannot
tell a dead peer from a network fault.
"""

from __future__ import annotations

from pathlib import Path

from support import FIXTURES, assert_culprits, diagnose_saved, named_ranks

FIELD3 = FIXTURES / "diagnose-field" / "issues-3" / "saved"
FIELD4 = FIXTURES / "diagnose-field" / "issues-4" / "saved"


def _folder(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def _paste_line(folder: Path, words: str) -> str:
    """The paste's first line holding `words` (a real line, quoted in a test)."""
    return next(line for line in (folder / "paste.log").read_text().splitlines() if words in line)


# ---------------------------------------------------------------- the fingerprint check

SIMPLETUNER = FIELD3 / "simpletuner-rank-log-prefix-circuit-breaker-rank7-at-seq0-reduce"
ELASTIC_BOX = FIELD4 / "elastic-box-error-file-traceback-barrier-fingerprint-rank2-seq0"
MS_SWIFT = FIELD3 / "ms-swift-rank1-fingerprint-allreduce-shape-differs-from-rank0"
LIGHTNING = FIELD3 / "lightning-broadcast-object-list-rank1-fingerprint-cut-at-but-rank0"


def test_the_fingerprint_check_names_the_first_rank_that_differs_behind_a_trainers_prefix():
    # `[RANK 1] ... GPU circuit breaker OPEN: cuda_error - Detected mismatch ... Rank 1 is
    # running collective: CollectiveFingerPrint(SequenceNumber=101, OpType=ALLGATHER, ...), but
    # Rank 7 is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE)`: rank
    # 1 compared with ranks 0..6 first and they agreed; rank 7 is a desync, not a shape
    assert "Rank 7 is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE)" in \
        _paste_line(SIMPLETUNER, "Detected mismatch")
    assert_culprits(diagnose_saved(SIMPLETUNER), "collective-mismatch", [7], [1])


def test_the_fingerprint_check_is_read_inside_torchruns_error_file_traceback():
    # the box's `traceback : Traceback ...` entry ends `  RuntimeError: Detected mismatch between
    # collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=
    # 1OpType=BARRIER), but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=
    # 0OpType=BARRIER)`: rank 0 agreed with rank 1, rank 2 is a barrier behind
    line = _paste_line(ELASTIC_BOX, "Detected mismatch")
    assert line.startswith("  RuntimeError: Detected mismatch between collectives on ranks. Rank 1 ")
    assert_culprits(diagnose_saved(ELASTIC_BOX), "collective-mismatch", [2], [1])


def test_a_fingerprint_report_against_rank_0_names_no_rank(tmp_path):
    # rank 1 against rank 0, the first rank it compares with: which of the two is odd is not known
    verdict = diagnose_saved(MS_SWIFT)
    assert verdict.cls == "shape-mismatch" and named_ranks(verdict) == []
    verdict = diagnose_saved(LIGHTNING)
    assert verdict.cls == "collective-mismatch" and named_ranks(verdict) == []


def test_a_pair_whose_reporter_is_rank_0_names_no_rank(tmp_path):
    # field-4's line with its ranks as a world of 2 would print them (rank 0 reports rank 1:
    # no rank but the reporter is seen agreeing), constructed from the real line's words
    real = _paste_line(ELASTIC_BOX, "Detected mismatch").strip()
    pair = real.replace("Rank 1 is running", "Rank 0 is running").replace("but Rank 2 is", "but Rank 1 is")
    verdict = diagnose_saved(_folder(tmp_path, "pair", {"rank0.log": f"[rank0]: {pair}\n"}))
    assert verdict.cls == "collective-mismatch" and named_ranks(verdict) == []


def test_the_odd_rank_reporting_rank_0_does_not_undo_the_others_report(tmp_path):
    # rank 7's own check (rank 0 differs first) beside rank 1's: still rank 7; constructed
    # from simpletuner's real line, the sides swapped for rank 7's report
    real = _paste_line(SIMPLETUNER, "Detected mismatch")
    body = real[real.index("Detected mismatch"):]
    own = ("Detected mismatch between collectives on ranks. Rank 7 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE), but Rank 0 is running collective: "
           "CollectiveFingerPrint(SequenceNumber=101, OpType=ALLGATHER, TensorShape=[1], TensorDtypes=Long).")
    verdict = diagnose_saved(_folder(tmp_path, "both", {"job.log": f"[rank1]: RuntimeError: {body}\n"
                                                                    f"[rank7]: RuntimeError: {own}\n"}))
    assert_culprits(verdict, "collective-mismatch", [7], [0, 1])


# ---------------------------------------------------------------- the flight recorder analyser

FR_TRACE = FIELD3 / "fr-trace-buck-wrapper-not-all-ranks-joining-missing-3-to-7"


def test_the_flight_recorder_analysers_missing_ranks_are_stuck():
    # `Not all ranks joining collective: sequence number: 31117` ... `collective: nccl:all_reduce`,
    # `missing ranks: {3, 4, 5, 6, 7}`, `world size: 8`, `collective state: scheduled`
    assert "missing ranks: {3, 4, 5, 6, 7}" in (FR_TRACE / "paste.log").read_text()
    verdict = diagnose_saved(FR_TRACE)
    assert_culprits(verdict, "stuck-rank", [3, 4, 5, 6, 7], [0, 1, 2])
    assert "all_reduce" in verdict.summary


def test_the_analysers_colon_head_is_parsed():
    from healthcheck.parsers.flight_recorder import parse_fr_analysis

    found = parse_fr_analysis((FR_TRACE / "paste.log").read_text()).findings
    assert [(f.kind, f.seq, f.missing_ranks, f.world_size) for f in found] == [
        ("missing-ranks", 31117, (3, 4, 5, 6, 7), 8)]


def test_a_collective_no_rank_joined_names_no_one(tmp_path):
    # the paste's report with every rank of the world missing (constructed from its lines):
    # nobody entered, so nobody waits on the missing ones
    text = (FR_TRACE / "paste.log").read_text().replace("missing ranks: {3, 4, 5, 6, 7}",
                                                        "missing ranks: {0, 1, 2, 3, 4, 5, 6, 7}")
    verdict = diagnose_saved(_folder(tmp_path, "all", {"fr_trace.txt": text}))
    assert named_ranks(verdict) == []


# ---------------------------------------------------------------- launchers' reports

HOROVOD = FIELD4 / "determined-prefix-horovod-first-process-name-1-exit-1-containers"
DS_ONE = FIELD4 / "deepspeed-launcher-one-kill-then-error-cmd-local-rank-0-sigkill"
DS_FIVE = FIELD4 / "deepspeed-launcher-two-kills-then-error-cmd-local-rank-4-exit-1"
DS_TWO = FIELD4 / "deepspeed-prose-two-2080ti-kills-then-error-cmd-local-rank-1-cut"


def test_horovods_first_failed_process_is_the_dead_rank():
    # `... || RuntimeError: Horovod detected that one or more processes exited with non-zero
    # status, thus causing the job to be terminated. The first process to do so was:` then
    # `... || Exit code: 1` and `... || Process name: 1` behind Determined's prefix
    assert _paste_line(HOROVOD, "Process name:").endswith("|| Process name: 1")
    verdict = diagnose_saved(HOROVOD)
    assert_culprits(verdict, "dead-rank", [1], [])


def test_horovods_fields_far_from_its_head_name_no_one(tmp_path):
    # the paste's lines with the report's fields moved past the few lines that follow its head
    lines = (HOROVOD / "paste.log").read_text().splitlines()
    head = next(i for i, x in enumerate(lines) if "The first process to do so was:" in x)
    far = lines[:head + 1] + ["<>        [2021-12-07 10:43:01] 087c0ee7 || step"] * 6 + lines[head + 1:]
    verdict = diagnose_saved(_folder(tmp_path, "far", {"job.log": "\n".join(far) + "\n"}))
    assert named_ranks(verdict) == []


def test_deepspeeds_launcher_with_one_child_names_it():
    # `[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py',
    # '--local_rank=0', ...] exits with return code = -9`: the launcher's one child (its argv
    # is the last child it started, and it started one)
    assert "'--local_rank=0'" in _paste_line(DS_ONE, "sigkill_handler] [")
    verdict = diagnose_saved(DS_ONE)
    assert_culprits(verdict, "dead-rank", [0], [])


def test_deepspeeds_argv_of_its_last_child_names_no_one():
    # deepspeed/launcher/launch.py logs `{cmd} exits with return code = ...` with the `cmd` its
    # spawn loop left at the last child (local rank = children - 1), whichever child failed:
    # `--local_rank=4` and `--local_rank=1` say how many children there were, not which failed
    assert "'--local_rank=4'" in _paste_line(DS_FIVE, "sigkill_handler] [")
    assert "'--local_rank=1'" in _paste_line(DS_TWO, "sigkill_handler] [")
    assert named_ranks(diagnose_saved(DS_FIVE)) == []
    assert named_ranks(diagnose_saved(DS_TWO)) == []


def test_an_old_launchers_called_process_error_reads_alike(tmp_path):
    # the old launchers raise CalledProcessError with the same last `cmd`; constructed from
    # DS_ONE's real argument list in Python's CalledProcessError words
    line = _paste_line(DS_ONE, "sigkill_handler] [")
    argv = line[line.index("['"):line.index("] exits") + 1]
    one = f"subprocess.CalledProcessError: Command '{argv}' returned non-zero exit status 1.\n"
    assert_culprits(diagnose_saved(_folder(tmp_path, "one", {"job.log": one})), "dead-rank", [0], [])
    four = one.replace("'--local_rank=0'", "'--local_rank=3'")
    assert named_ranks(diagnose_saved(_folder(tmp_path, "four", {"job.log": four}))) == []


# ---------------------------------------------------------------- socket errors alone

AWS = FIELD3 / "nccl-aws-proxy-broken-pipe-connect-from-rank-9-closed-by-peer"


def test_socket_errors_alone_claim_no_network_fault():
    # `misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.200.84.247<58355> failed : Broken
    # pipe` and `NCCL WARN Net : Connection closed by remote peer ...`: what a peer that died
    # leaves as well; no IB completion error or link event says the network failed
    assert "failed : Broken pipe" in _paste_line(AWS, "NCCL WARN Net : Call to recv")
    verdict = diagnose_saved(AWS)
    assert verdict.cls == "unknown" and named_ranks(verdict) == []
    assert any("a peer went away or the network failed" in n for n in verdict.notes)


# ---------------------------------------------------------------- a stack labelled by the line above

FAIRSEQ = FIELD3 / "fairseq-rank0-py-spy-stack-idle-in-queue-get-under-data-iterator"


def test_the_line_above_a_pasted_stack_names_its_rank_and_one_stack_names_no_one(tmp_path):
    # `The stack for rank0:`, a fence, `Thread 0x7FA6E7C01740 (idle): "MainThread"` in queue.get
    # under fairseq's data iterator: the stack is rank 0's; with no peer shown waiting in a
    # collective, one look at one rank names no one (a slow data step looks the same). In a
    # folder whose name says no rank (the set's folder name holds `rank0`, which hc reads)
    text = (FAIRSEQ / "paste.log").read_text()
    assert text.startswith("The stack for rank0:\n```\nThread 0x7FA6E7C01740")
    verdict = diagnose_saved(_folder(tmp_path, "paste", {"paste.log": text}))
    assert [r.rank for r in verdict.ranks if r.stack] == [0]
    assert named_ranks(verdict) == []


def test_a_stack_label_is_read_only_right_above_the_stack_and_with_a_rank_number():
    from healthcheck.diagnose.stacklabel import label_rank

    stack = (FAIRSEQ / "paste.log").read_text().split("\n", 1)[1]  # from the fence on: the real stack
    assert label_rank("rank 3:\n" + stack) == 3
    assert label_rank("== rank 2 ==\n\n" + stack) == 2
    assert label_rank("The stack for rank0:\n" + stack) == 0
    assert label_rank(stack) is None
    assert label_rank("The stack for rank0:\nwhile it hung, the main thread was here:\n" + stack) is None
    assert label_rank("The stack for the last rank:\n" + stack) is None
    assert label_rank("rank 3 hung after 2 hours, here is its stack:\n" + stack) is None
