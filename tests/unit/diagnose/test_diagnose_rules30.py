"""Round 30 of issue 19's rules (branch x/r30): field-23's misses, at their mechanisms.

* vLLM v1's executor names a dead worker by its name, `Worker proc VllmWorker-1 died`: the
  index of a named worker is its place among the workers, a rank, not a pid;
* a rank's traceback cut before its exception line (vLLM v1's `WorkerProc failed to start`,
  SGLang's `Scheduler hit an exception`, DeepSpeed's frames) names that rank where it is all
  the failure the text shows; the Ray-style prefix's `rank=N` / `TPN` and SGLang's
  `[date time TPN]` place their lines on that rank;
* a tool's fault-signal end (HPE MPT's `Rank 57(g:57) received signal SIGSEGV(11).`) joins
  the rank srun reported segfaulted: each faulted of its own;
* two processes' `terminate called` lines before either's `what():` each get a what(); a
  message ending with its own rank (`... rank: 0`) is placed on that rank;
* torchrun's agent: where the failed child's pid less its local rank is the lowest pid sent a
  closing signal, the spawn's pids are consecutive and an unsignalled pid between had ended
  unreported, so the failed child is not singled out.

The field pastes are read as they are (tests/fixtures/diagnose-field/issues-23); the other texts
were WRITTEN here in the shapes those tools print.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, diagnose_paste, named_ranks

from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.torch_log.state import end_named_rank

_FIELD = FIXTURES / "diagnose-field" / "issues-23" / "saved"


def _paste(case: str) -> str:
    return (_FIELD / case / "paste.log").read_text()


# ---------------------------------------------------------------- named workers


def test_vllm_worker_proc_died_names_its_worker(tmp_path):
    v = diagnose_paste(tmp_path, _paste("vllm-v1-engine-reports-worker-1-died-seven-tp-peers-parent-exited"))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_a_named_worker_of_another_tool_dies_the_same(tmp_path):
    text = ("(EngineCore_0 pid=9) ERROR 01-02 03:04:05 [multiproc_executor.py:140] Worker proc VllmWorker-3 died "
            "unexpectedly, shutting down executor.\n"
            "(VllmWorker TP0 pid=20) INFO 01-02 03:04:05 [multiproc_executor.py:520] Parent process exited, "
            "terminating worker\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


# ---------------------------------------------------------------- rank prefixes and cut tracebacks


@pytest.mark.parametrize(("text", "rank"), [
    ("(VllmWorker rank=2 pid=808339) ERROR 06-10 03:43:33 [x.py:1] boom\n", 2),
    ("(VllmWorker TP3 pid=406) INFO 06-10 03:43:33 [x.py:1] hello\n", 3),
    ("(EngineCore_0 pid=9) INFO 06-10 03:43:33 [x.py:1] hello\n", None),
    ("[2026-06-28 14:02:26 TP5] Scheduler hit an exception\n", 5),
    ("[2026-06-28 14:02:26 TP5 EP5] Scheduler hit an exception\n", 5),
    ("[2026-06-28 14:02:26] Received sigquit from a child process.\n", None),
])
def test_a_worker_prefix_places_its_rank(text, rank):
    line = next(iter(read_lines(text)))
    assert line.global_rank == rank


@pytest.mark.parametrize(("case", "rank"), [
    ("vllm-v1-rank2-workerproc-failed-to-start-in-load-model-cut", 2),
    ("sglang-sigquit-kill-tree-then-tp5-scheduler-exception-in-prefill-graph-capture", 5),
    ("deepspeed-zero3-offload-world-2-rank0-traceback-in-initialize-cut", 0),
])
def test_a_ranks_cut_traceback_alone_names_it(tmp_path, case, rank):
    v = diagnose_paste(tmp_path, _paste(case))
    assert v.cls == "dead-rank" and named_ranks(v) == [rank], v.summary


def test_every_rank_cut_names_none(tmp_path):
    text = "".join(f"[rank{r}]: Traceback (most recent call last):\n"
                   f"[rank{r}]:   File \"/x/train.py\", line 3, in <module>\n" for r in range(4))
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- MPI fault reports


def test_hpe_mpt_faulted_ranks_join_sruns_task(tmp_path):
    v = diagnose_paste(tmp_path, _paste("hpe-mpt-srun-nalu-ranks-57-and-23-sigsegv-then-srun-task-0-segfault"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0, 23, 57], v.summary


@pytest.mark.parametrize(("message", "rank"), [
    ("NCCL failure: unhandled cuda error in nccl_mpi_all_reduce.cu at line: 86 rank: 0", 0),
    ("bad shape (rank 2)", 2),
    ("Connection closed by remote rank 3", None),
    ("timed out waiting for rank 1", None),
    ("no rank here", None),
])
def test_a_message_ending_with_its_rank(message, rank):
    assert end_named_rank(message) == rank


def test_interleaved_terminates_each_get_their_what():
    text = ("terminate called after throwing an instance of 'std::runtime_error'\n"
            "terminate called after throwing an instance of 'std::runtime_error'\n"
            "  what():  NCCL failure: unhandled cuda error in a.cu at line: 86 rank: 0\n"
            "\n[h:1] *** Process received signal ***\n"
            "  what():  NCCL failure: unhandled cuda error in a.cu at line: 86 rank: 1\n")
    log = parse_torch_log(text)
    assert [(e.rank, e.message[-7:]) for e in log.exceptions if e.type == "std::runtime_error"] == [
        (0, "rank: 0"), (1, "rank: 1")]


# ---------------------------------------------------------------- the launcher's unreported children


def test_accelerates_failed_child_is_not_singled_out(tmp_path):
    v = diagnose_paste(tmp_path, _paste("accelerate-ds-eight-procs-sigterm-three-then-local-rank-1-sigsegv-four-"
                                        "pids-gone"))
    assert named_ranks(v) == [], v.summary


def test_a_failed_child_anchored_with_no_gap_is_named(tmp_path):
    api = "[2024-11-26 02:04:28,495] torch.distributed.elastic.multiprocessing.api: "
    text = (f"{api}[WARNING] Sending process 500 closing signal SIGTERM\n"
            f"{api}[WARNING] Sending process 502 closing signal SIGTERM\n"
            f"{api}[WARNING] Sending process 503 closing signal SIGTERM\n"
            f"{api}[ERROR] failed (exitcode: -11) local_rank: 1 (pid: 501) of binary: /usr/bin/python\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_a_cut_traceback_beside_other_ranks_warnings_names_none(tmp_path):
    text = ("201: :41367:41367 [1] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available\n"
            "201: Traceback (most recent call last):\n"
            "201:   File \"/x/pretrain_gpt.py\", line 124, in <module>\n"
            "202: :41368:41368 [2] enqueue.cc:422 NCCL WARN Error : no algorithm/protocol available\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "dead-rank" and named_ranks(v) == [], v.summary


def test_frames_with_no_header_name_none(tmp_path):
    text = ("[rank0]:   File \"/x/module.py\", line 1736, in _wrapped_call_impl\n"
            "[rank0]:     return self._call_impl(*args, **kwargs)\n"
            "[rank0]:   File \"/x/types.py\", line 319, in wait\n"
            "[rank0]:     ret: W = self._wait_impl()\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary
