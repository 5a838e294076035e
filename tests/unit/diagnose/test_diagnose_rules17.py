"""Round 17 of issue 19's rules (branch i19-r17), on the mechanisms held-out-12 and field-6
missed (both read in this round): a structured log's records (one JSON object per line) read
into the per-rank lines every rule reads, a native death (a glog FATAL line, a supervisor's
exit report) placed at its rank, a store key waited for by the program's own code (stuck
mid-training, a setup that could not finish before it), torchrun's SIGKILL of a worker that
outlived its SIGTERM (a hang, not a death), the store's host that left quietly, task files
named `train-N.out`, and pytest's `E       ` mark. The job outputs are held-out-12's saved
captures (real gloo runs, tests/fixtures/diagnose-jobs/held-out-12/saved), copied to a
neutral folder; the paste is field-6's (tests/fixtures/diagnose-field/issues-6)."""

from __future__ import annotations

import json
import shutil

from support import FIXTURES, diagnose_saved, named_ranks

from healthcheck.diagnose.taskfiles import task_ranks
from healthcheck.parsers.jsonlog import MAX_RECORD, decode
from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.torch_log import parse_torch_log

H12 = FIXTURES / "diagnose-jobs" / "held-out-12" / "saved"
FIELD6 = FIXTURES / "diagnose-field" / "issues-6" / "saved"


def _saved(tmp_path, slug: str):
    """The verdict on a held-out-12 job's saved output, read from a folder whose name says nothing."""
    job = tmp_path / "job"
    shutil.copytree(H12 / slug, job)
    return diagnose_saved(job)


def _every_rank_waiting_on_the_store(tmp_path, run_prefix: str):
    """The stale-run-id job with rank 2's store wait given to ranks 0 and 1 too (their labels
    changed), theirs under `run_prefix` (rank 2's, as captured, is a previous run's: run-6e21)."""
    job = tmp_path / "job"
    shutil.copytree(H12 / "h12-co-stale-run-id-plain-w3-r2", job)
    waits = (job / "rank2.log").read_text().splitlines()
    for r in (0, 1):
        mine = [x.replace("[rank2]", f"[rank{r}]").replace("run-6e21", run_prefix) for x in waits]
        (job / f"rank{r}.log").write_text("\n".join(mine) + "\n")
    return job


def _record_line(slug: str, name: str, words: str) -> str:
    return next(x for x in (H12 / slug / name).read_text().splitlines() if words in x)


# ---------------------------------------------------------------- structured logs


def test_a_json_records_traceback_is_read_as_its_ranks_lines_on_the_records_line():
    line = _record_line("h12-sp-rope-index-plain-w3-r1", "rank1.log", '"rank failed"')
    lines = list(read_lines("first line\n" + line + "\n", records=True))
    record = [x for x in lines if x.number == 2]
    assert all(x.rank == 1 for x in record)
    assert record[0].text == "ERROR: rank failed" and record[0].stamp.startswith("2026-11-28T14:16:51.751")
    assert record[1].text == "Traceback (most recent call last):"
    assert record[-1].text.startswith("IndexError: index 520 is out of bounds")


def test_a_json_record_behind_a_launchers_label_keeps_the_label():
    line = _record_line("h12-sp-rope-index-torchrun-w4-r0-r3", "torchrun.log", '"rank": 3, "msg": "rank failed"')
    lines = [x for x in read_lines(line, records=True) if x.text]
    assert {x.local_rank for x in lines} == {3} and {x.rank for x in lines} == {3}
    assert any(x.text.startswith("IndexError:") for x in lines)


def test_json_after_a_programs_words_or_too_long_is_no_record():
    said = '[rank0]: config: {"msg": "lr", "rank": 3, "exc_info": "Traceback (most recent call last):\\nX: y"}'
    assert [x.text for x in read_lines(said, records=True)] == ['config: {"msg": "lr", "rank": 3, "exc_info": '
                                                  '"Traceback (most recent call last):\\nX: y"}']
    huge = json.dumps({"msg": "x" * MAX_RECORD, "rank": 1})
    assert decode(huge) is None


def test_nested_fields_are_read_and_a_traceback_below_error_is_not():
    # loguru's serialize=True shape: the formatted text, the rank in record.extra, level and
    # time as objects (made up here to test the keys, not a capture)
    rec = decode(json.dumps({"text": "ERROR boom\nTraceback (most recent call last):\nValueError: x\n",
                             "record": {"extra": {"rank": 2}, "level": {"name": "ERROR"},
                                        "time": {"timestamp": 1795829810.5}}}))
    assert rec is not None and rec.rank == 2 and rec.lines[-1] == "ValueError: x"
    assert rec.stamp.startswith("20")
    retried = decode(json.dumps({"level": "WARNING", "rank": 1, "msg": "retrying",
                                 "exc_info": "Traceback (most recent call last):\nValueError: x"}))
    assert retried is not None and retried.lines == ("WARNING: retrying",)
    config = decode(json.dumps({"msg": "model", "config": {"lora": {"rank": 16}}}))
    assert config is not None and config.rank is None


def test_a_rank_whose_json_log_holds_its_own_exception_is_named_dead(tmp_path):
    # every rank logs "rank failed" with its traceback inside `exc_info`: hc read none of
    # them ("the job shows no failure")
    v = _saved(tmp_path, "h12-sp-rope-index-plain-w3-r1")
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary
    assert "IndexError" in v.summary


def test_timeouts_inside_json_records_are_the_post_mortems(tmp_path):
    v = _saved(tmp_path, "h12-sp-skip-a2a-srun-labelled-w3-r2")
    assert v.cls == "collective-mismatch" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- pytest's mark


def test_pytests_e_mark_is_taken_off_a_run_of_marked_lines():
    text = (FIELD6 / "pytest-e-prefixed-process-3-raised-nccl-system-error-in-ddp-init" / "paste.log").read_text()
    lines = list(read_lines(text))
    assert lines[0].text == "torch.multiprocessing.spawn.ProcessRaisedException:"
    assert lines[3].text == "Traceback (most recent call last):"
    log = parse_torch_log(text)
    assert any(e.type == "RuntimeError" and e.rank == 3 for e in log.exceptions)
    one = list(read_lines("E       not pytest's\nplain line\n"))
    assert one[0].text == "E       not pytest's"


# ---------------------------------------------------------------- native deaths


def test_a_glog_fatal_line_is_its_ranks_death_with_its_reason(tmp_path):
    # rotated supervisor, the check line unlabelled in job.log.1: its thread id is the pid the
    # supervisor's "worker 0 (pid 11006) exited with status -6" gives rank 0. hc named rank
    # 0 only as one that "left early", with no reason
    v = _saved(tmp_path, "h12-sp-abort-rotated-spawn-w3-r0")
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary
    assert "Check failed" in v.summary


def test_glog_fatal_and_a_supervisors_exit_report_are_read():
    log = parse_torch_log("[rank2]:F1128 14:18:26.123163 10899 fused_attn.cc:212] Check failed: a == b (1 vs. 2)\n"
                          "launcher: worker 2 (pid 10899) exited with status -6\n")
    fatal = [e for e in log.exceptions if e.native]
    assert [(e.rank, e.type, e.pid, e.frame) for e in fatal] == [(2, "Check failed", 10899, "fused_attn.cc:212")]
    exits = [(t.tasks, t.pid, t.exitcode, t.signal, t.launcher) for t in log.task_exits]
    assert exits == [((2,), 10899, -6, "SIGABRT", "supervisor")]
    spawn = parse_torch_log("Exception: process 3 terminated with exit code 1\n")
    assert all(t.launcher != "supervisor" for t in spawn.task_exits)


# ---------------------------------------------------------------- the store


def test_a_store_wait_mid_training_while_the_others_wait_in_a_collective_is_stuck(tmp_path):
    # rank 0 waits for a shuffle seed no rank sets after two epochs; ranks 1-3 time out in
    # all_reduce. hc said init-failure naming no rank
    v = _saved(tmp_path, "h12-co-store-wait-torchrun-w4-r0")
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


def test_a_setup_key_waited_for_before_the_loop_while_the_others_wait_in_a_collective(tmp_path):
    # rank 2 waits for the dataset index under another run's prefix; its peers had gone on
    # into the first broadcast. hc said init-failure naming no rank
    v = _saved(tmp_path, "h12-co-stale-run-id-plain-w3-r2")
    assert v.cls == "init-failure" and named_ranks(v) == [2], v.summary


def test_store_waits_on_every_rank_name_nobody(tmp_path):
    # the same job with every rank's error a store wait: no rank waited in a collective for
    # the others, so no store wait stands out
    v = diagnose_saved(_every_rank_waiting_on_the_store(tmp_path, run_prefix="run-6e21"))
    assert named_ranks(v) == [], v.summary


def test_the_store_host_that_left_quietly_is_named_when_its_peer_lost_the_store(tmp_path):
    # mpirun w2: rank 0 logs "work queue drained: leaving" and exits 0; rank 1 dies in
    # store.add ("Connection was likely closed. Did the remote server shutdown or crash?")
    v = _saved(tmp_path, "h12-co-exit-early-mpirun-w2-r0")
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- launchers


def test_torchruns_sigkill_after_its_sigterm_went_unheeded_is_a_hang_not_a_death(tmp_path):
    # rank 2 hangs in its SIGTERM handler; torchrun: "Unable to shutdown process 12320 via
    # 15, forcefully exiting via 9". hc said "rank 2 died (killed by SIGKILL)"
    v = _saved(tmp_path, "h12-sp-term-hang-hc-run-torchrun-w3-r2")
    assert v.cls == "stuck-rank" and named_ranks(v) == [2], v.summary
    log = parse_torch_log("W1128 14:20:04.278000 12261 torch/distributed/elastic/multiprocessing/api.py:1047] "
                          "Unable to shutdown process 12320 via 15, forcefully exiting via 9\n")
    assert [(c.pid, c.signal, c.forced) for c in log.closing_signals] == [(12320, "SIGKILL", True)]


def test_task_files_named_by_a_stem_and_the_number_are_their_ranks():
    files = [("d/train-0.err", 0), ("d/train-0.out", None), ("d/train-1.err", 1), ("d/train-1.out", None),
             ("d/train-2.err", None), ("d/train-2.out", None), ("d/other-7.out", None)]
    assert task_ranks(files) == {"d/train-0.out": 0, "d/train-1.out": 1, "d/train-2.err": 2, "d/train-2.out": 2}
    assert task_ranks([("d/train-0.err", 1), ("d/train-1.err", None)]) == {}


def test_a_quiet_rank_in_split_task_files_that_exited_0_is_named(tmp_path):
    # split layout under `hc run`: rank 2's train-2.out holds "work queue drained: leaving"
    # and the launcher says it exited 0; hc read train-2.* as no rank's
    v = _saved(tmp_path, "h12-co-exit-early-hc-run-split-spawn-w3-r2")
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_the_rank_waiting_under_another_key_prefix_than_every_other_rank_is_named(tmp_path):
    # the stale-run-id job with every rank's error its store wait: ranks 0 and 1 under this
    # run's prefix (run-7f3a), rank 2 under a previous run's (run-6e21, as captured)
    v = diagnose_saved(_every_rank_waiting_on_the_store(tmp_path, run_prefix="run-7f3a"))
    assert v.cls == "init-failure" and named_ranks(v) == [2], v.summary
