"""Round 28 of issue 19's rules (branch i19-r28): one general reader for a rank's own end.

A tool's one-line statement whose subject is an indexed member of the job (rank, process,
task, trainer, worker, replica, local_rank; `rank 3`, `rank=3`, `rank: 3`, `rank=[1, 2]`) and
whose predicate is an ending (aborted, exited, died, killed, terminated, crashed, failed,
received signal, called MPI_Abort), with its cause, is read in general
(parsers/torch_log/memberends.py) and judged where nothing more specific named a rank
(diagnose/memberends.py); an abort printed after another rank's shown fault is its victim
(diagnose/afterfault.py). Every text here was WRITTEN for these tests in the shapes the tools'
documented formats take (Paddle's launch_utils, HPE MPT, MPICH's MPI_Abort line, MVAPICH2's
handler, LSF/PBS/Kubernetes-style supervisors' one-line ends); none is a field case's text.
"""

from __future__ import annotations

import pytest
from support import diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log

_RUN = "step 20 loss 2.31\nstep 21 loss 2.29\n"  # the job's own output before the ends


# ---------------------------------------------------------------- the reader


@pytest.mark.parametrize(("line", "noun", "members", "verb", "signal", "code"), [
    ("ERROR 2023-01-02 10:11:12,345 launch_utils.py:600] ABORT!!! Out of all 8 trainers, the trainer process with "
     "rank=[5] was aborted. Please check its log.", "rank", (5,), "aborted", "", None),
    ("MPT ERROR: Rank 3(g:3) received signal SIGBUS(7).", "rank", (3,), "received signal", "SIGBUS", None),
    ("supervisor: worker 5 died from signal 9", "worker", (5,), "died", "SIGKILL", None),
    ("lsf: Task 3 exited with exit code 2.", "task", (3,), "exited", "", 2),
    ("replica 1 crashed (SIGSEGV)", "replica", (1,), "crashed", "SIGSEGV", None),
    ("[launcher] rank: 6 has exited with status=139", "rank", (6,), "exited", "", 139),
    ("pytorchjob: local_rank 2 was terminated", "local_rank", (2,), "terminated", "", None),
    ("trainer 4 segfaulted", "trainer", (4,), "segfaulted", "SIGSEGV", None),
])
def test_the_reader_takes_a_members_end_in_any_tools_words(line, noun, members, verb, signal, code):
    ends = parse_torch_log(line + "\n").member_ends
    assert len(ends) == 1, ends
    e = ends[0]
    assert (e.noun, e.members, e.verb, e.signal, e.exitcode) == (noun, members, verb, signal, code)


def test_the_reader_keeps_a_world_the_sentence_states():
    log = parse_torch_log("ABORT!!! Out of all 8 trainers, the trainer process with rank=[1, 4] was aborted.\n")
    assert log.member_ends[0].members == (1, 4) and log.member_ends[0].world == 8
    assert parse_torch_log("torch.distributed: rank 2 of 16 exited with code 1\n").member_ends[0].world == 16


@pytest.mark.parametrize("line", [
    "torch.distributed: rank 2 failed to connect to the store at node0:29500",
    "torch.distributed: [Rank 0] Process group watchdog thread terminated with exception: NCCL error",
    "torch.distributed: worker 3 failed with Timeout after 600 s",
    "torch.distributed: the rank 3 tensor was aborted... no, it is 3 ranks",
    "torch.distributed: ranking 3 exited the top ten",
])
def test_words_that_are_no_members_end_are_not_read(line):
    assert not parse_torch_log(line + "\n").member_ends


# ---------------------------------------------------------------- the judgement


def test_one_launchers_report_of_some_trainers_names_them(tmp_path):
    text = _RUN + ("INFO 2023-01-02 10:11:12,345 launch_utils.py:300] terminate all the procs\n"
                   "ERROR 2023-01-02 10:11:12,346 launch_utils.py:600] ABORT!!! Out of all 8 trainers, the trainer "
                   "process with rank=[2, 6] was aborted. Please check its log.\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2, 6], v.summary


def test_a_report_of_every_trainer_names_none(tmp_path):
    text = _RUN + ("ERROR 2023-01-02 10:11:12,346 launch_utils.py:600] ABORT!!! Out of all 4 trainers, the trainer "
                   "process with rank=[0, 1, 2, 3] was aborted. Please check its log.\n")
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


def test_an_mpt_fault_beside_the_others_sigterm_names_the_fault(tmp_path):
    text = _RUN + ("MPT ERROR: Rank 1(g:1) received signal SIGTERM(15).\n"
                   "MPT ERROR: Rank 3(g:3) received signal SIGBUS(7).\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_clean_up_words_alone_name_none(tmp_path):
    text = _RUN + "launcher: rank 3 was killed\nlauncher: rank 5 died from signal 15\n"
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


def test_a_member_end_after_a_timeout_names_none(tmp_path):
    text = (_RUN + "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
            "milliseconds before timing out.\n"
            "supervisor: worker 1 exited with code 6\n")
    v = diagnose_paste(tmp_path, text)  # rank 1 never timing out is the stuck rule's to judge
    assert v.cls != "dead-rank", v.summary


def test_a_process_index_without_a_world_is_no_rank(tmp_path):
    """`process N` is how a pid is printed too: bounded only by a known world."""
    text = _RUN + "supervisor: process 7 exited with code 1\n"
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


def test_an_index_past_the_stated_world_is_no_rank(tmp_path):
    text = _RUN + "supervisor: rank 9 of 4 exited with code 1\n"
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


def test_stamped_ends_name_the_first_seconds(tmp_path):
    text = _RUN + ("2024-03-01T10:00:05Z supervisor: replica 2 crashed with exit code 1\n"
                   "2024-03-01T10:00:09Z supervisor: replica 0 crashed with exit code 1\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_several_bare_failed_workers_name_none_and_one_names_it(tmp_path):
    several = _RUN + "driver: worker 1 failed.\ndriver: worker 3 failed.\n"
    assert named_ranks(diagnose_paste(tmp_path / "a", several)) == []
    v = diagnose_paste(tmp_path / "b", _RUN + "driver: worker 3 failed.\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_mpich_aborts_of_some_processes_name_them(tmp_path):
    """Each process that called MPI_Abort ended by its own call; ranks 0 and 3 are not shown ending."""
    text = ("ERROR: cudaMalloc failed: out of memory\n"
            "Abort(2) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2) - process 1\n"
            "Abort(2) on node 2 (rank 2 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2) - process 2\n"
            "Abort(2) on node 4 (rank 4 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 2) - process 4\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [1, 2, 4], v.summary


@pytest.mark.parametrize(("ranks", "code"), [((0, 1, 2), 3), ((1, 2, 4), 0)])
def test_mpich_aborts_of_every_process_or_with_code_0_name_none(tmp_path, ranks, code):
    text = "".join(f"application called MPI_Abort(MPI_COMM_WORLD, {code}) - process {r}\n" for r in ranks)
    assert named_ranks(diagnose_paste(tmp_path, text)) == []


# ---------------------------------------------------------------- an abort after another rank's fault


def test_an_abort_printed_after_anothers_segfault_is_its_victim(tmp_path):
    text = ("[gpu12:mpi_rank_2][error_sighandler] Caught error: Segmentation fault (signal 11)\n"
            "[cli_6]: aborting job:\nFatal error in MPI_Waitall:\nOther MPI error\n"
            "[gpu13:mpi_rank_6][error_sighandler] Caught error: Aborted (signal 6)\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_an_abort_printed_before_the_fault_stays_named(tmp_path):
    """The text's order is the only order: an abort shown first is no victim of a later fault."""
    text = ("[gpu13:mpi_rank_6][error_sighandler] Caught error: Aborted (signal 6)\n"
            "[gpu12:mpi_rank_2][error_sighandler] Caught error: Bus error (signal 7)\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [2, 6], v.summary


# ---------------------------------------------------------------- set-up read from a cut traceback

_VLLM = "(VllmWorker TP{r} pid=7{r}) ERROR 11-02 08:15:03 [multiproc_executor.py:540] "
_SITE = "/usr/local/lib/python3.12/dist-packages"


def _cut_worker_traceback(rank: int, call: str, error: str) -> str:
    """A worker's traceback as vLLM v1 logs it, the paste cut inside it: the source line of
    the cut frame first, then the innermost frame (written, in vLLM's prefix and Python's shape)."""
    p = _VLLM.format(r=rank)
    return (f"{p}    self.comm = {call}(\n"
            f'{p}  File "{_SITE}/vllm/distributed/device_communicators/pynccl_wrapper.py", line 261, in '
            "NCCL_CHECK\n"
            f'{p}    raise RuntimeError(f"NCCL error: {{error_str}}")\n'
            f"{p}RuntimeError: {error}\n")


def test_vllm_v1_worker_lines_are_read_through_their_prefixes():
    log = parse_torch_log(_cut_worker_traceback(1, "self.nccl.ncclCommInitRank", "NCCL error: unhandled system error"))
    assert [e.type for e in log.exceptions] == ["RuntimeError"]


def test_a_cut_tracebacks_source_line_calling_a_setup_call_is_set_up():
    log = parse_torch_log(_cut_worker_traceback(1, "self.nccl.ncclCommInitRank", "NCCL error: unhandled system error"))
    assert log.exceptions[0].setup == "ncclCommInitRank"
    other = parse_torch_log(_cut_worker_traceback(1, "self.nccl.ncclAllReduce", "NCCL error: unhandled system error"))
    assert other.exceptions[0].setup == ""


def test_two_workers_failing_in_comm_init_are_init_failure(tmp_path):
    text = (_cut_worker_traceback(2, 'self._funcs["ncclCommInitRank"]', "NCCL error: unhandled cuda error")
            + _cut_worker_traceback(5, 'self._funcs["ncclCommInitRank"]', "NCCL error: unhandled cuda error"))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- a lone odd rank in Horovod's stall report

_STALL = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
          "are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
          "trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause "
          "deadlock. Stalled ops: ")


def test_one_rank_alone_on_other_tensors_than_all_the_others_is_named(tmp_path):
    text = _STALL + ("HorovodAllreduce_accuracy_0 [ready ranks: 1], HorovodAllreduce_grad_w1_0 [ready ranks: 4, 0, 2, 3], "
                     "HorovodAllreduce_grad_b1_0 [ready ranks: 0, 3, 2, 4]\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "collective-mismatch" and named_ranks(v) == [1], v.summary


def test_the_lone_odd_rank_in_the_per_op_lines_shape_is_named(tmp_path):
    head = "[2019-03-01 10:00:00.000000: W horovod/common/operations.cc:588] "
    text = (head + _STALL.removesuffix(" Stalled ops: ") + "\n"
            + head + "HorovodAllreduce_eval_loss_0 [ready ranks: 2], [missing ranks: 0, 1, 3]\n"
            + head + "HorovodAllreduce_grads_0 [ready ranks: 0, 1, 3], [missing ranks: 2]\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [2], v.summary


@pytest.mark.parametrize("ops", [
    "HorovodAllreduce_a_0 [ready ranks: 1], HorovodAllreduce_b_0 [ready ranks: 0]",  # two ranks: one and one
    "HorovodAllreduce_a_0 [ready ranks: 1], HorovodAllreduce_b_0 [ready ranks: 2], "
    "HorovodAllreduce_c_0 [ready ranks: 0, 3]",  # two ranks each alone: no one side of all the others
])
def test_no_lone_odd_rank_names_none(tmp_path, ops):
    assert named_ranks(diagnose_paste(tmp_path, _STALL + ops + "\n")) == []


# ---------------------------------------------------------------- SeqNums of different groups


def _watchdog(rank: int, seq: int, group: str = "") -> str:
    return (f"[E ProcessGroupNCCL.cpp:828] [{group}Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600100 milliseconds before "
            "timing out.\n")


def test_unlabelled_seqnums_of_a_rank_in_several_groups_are_not_compared(tmp_path):
    """Rank 0 timing out at two SeqNums at once runs several groups: rank 1's other SeqNum may be another group's."""
    text = "iteration 12 loss 3.1\n" + _watchdog(1, 12) + _watchdog(0, 88) + _watchdog(0, 410)
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "collective-mismatch" and named_ranks(v) == [], v.summary


def test_one_seqnum_per_rank_is_still_compared(tmp_path):
    text = "iteration 12 loss 3.1\n" + _watchdog(1, 12) + _watchdog(0, 13) + _watchdog(2, 13)
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "collective-mismatch", v.summary


@pytest.mark.parametrize("line", [
    "torch.distributed: NCCL WARN Proxy Call to rank 3 failed (Connect)",
    "torch.distributed: rank 3 failed (Connect)",
    "torch.distributed: send from rank 2 failed, retrying",
    "torch.distributed: the connection with worker 4 was terminated by the peer",
])
def test_a_member_that_is_an_object_or_whose_operation_failed_is_not_read(line):
    """Written after hc took NCCL's `Proxy Call to rank 1 failed (Connect)` (issues-18) for rank 1's end."""
    assert not parse_torch_log(line + "\n").member_ends
