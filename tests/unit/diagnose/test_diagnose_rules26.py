"""Round 26 of issue 19's rules (branch i19-r26), on the mechanisms field-18 and field-19
missed. A job that never got past its set-up is an init failure naming no rank, whatever
launcher or library says so (diagnose/setupphase.py over parsers/torch_log/setupfail.py).
Texts are built here in the shapes the tools print: Slurm's srun errors, Hydra's proxy
(MPICH/MVAPICH2/Intel MPI), Open MPI's MPI_INIT help text, NCCL's WARN lines (bootstrap,
enqueue.cc), torch's NCCL error, Lightning's `GLOBAL_RANK: R, MEMBER: m/N` lines."""

from __future__ import annotations

import pytest
from support import diagnose_paste, named_ranks

# ---------------------------------------------------------------- set-up failures, any launcher

_SETUP_TEXTS = {
    "srun-create-step": (
        "srun: error: Unable to create step for job 4242: Requested node configuration is not available\n"),
    "srun-task-launch": (
        "srun: error: Task launch for StepId=77.0 failed on node gpu3: Invalid job credential\n"
        "srun: error: Application launch failed: Invalid job credential\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"),
    "hydra-execvp": (
        "[proxy:0:1@node02] HYDU_create_process (../../utils/launch/launch.c:74): execvp error on file python3 "
        "(No such file or directory)\n"
        "[proxy:0:1@node02] launch_procs (../../pm/pmiserv/pmip_cb.c:640): create process returned error\n"),
    "ompi-mpi-init": (
        "--------------------------------------------------------------------------\n"
        "It looks like MPI_INIT failed for some reason; your parallel process is\n"
        "likely to abort.  There are many reasons that a parallel process can\n"
        "fail during MPI_INIT; some of which are due to configuration or environment\n"
        "problems.\n"
        "--------------------------------------------------------------------------\n"),
    "mpich-init": ("Fatal error in PMPI_Init_thread: Other MPI error, error stack:\n"
                   "MPIR_Init_thread(474)..............:\n"),
    "nccl-bootstrap-warn": (
        "[rank0]: gpu1:5120:5120 [0] NCCL WARN Bootstrap : no socket interface found\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "NCCLUtils.cpp:77, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5\n"),
    "nccl-no-algorithm-newer": (
        "3: gpu4:811:811 [3] enqueue.cc:1556 NCCL WARN Error : no algorithm/protocol available for function "
        "AllReduce with datatype ncclBfloat16. NCCL_ALGO was set to NVLS.\n"
        "1: gpu4:809:809 [1] enqueue.cc:1556 NCCL WARN Error : no algorithm/protocol available for function "
        "AllReduce with datatype ncclBfloat16. NCCL_ALGO was set to NVLS.\n"),
    "nccl-invalid-argument": (
        "Traceback (most recent call last):\n"
        "  File \"train.py\", line 40, in <module>\n"
        "    dist.init_process_group(\"nccl\")\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, invalid argument, "
        "NCCL version 2.10.3\n"),
    "lightning2-claims-then-nothing": (
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4\n"
        "Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/4\n"
        "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4\n"
        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/4\n"),
}


@pytest.mark.parametrize("name", sorted(_SETUP_TEXTS))
def test_a_job_that_never_got_past_its_setup_is_init_failure_naming_none(tmp_path, name):
    v = diagnose_paste(tmp_path, _SETUP_TEXTS[name])
    assert v.cls == "init-failure" and named_ranks(v) == [], (name, v.cls, v.summary)


_STEPS = "".join(f"[rank0]: Epoch 0: step {i} loss 2.{i}\n[rank1]: Epoch 0: step {i} loss 2.{i}\n" for i in range(1, 6))
_TIMEOUT = ("[rank1]:[E1102 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=118, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=600000) ran for 600011 milliseconds before timing out.\n")


@pytest.mark.parametrize("after", ["steps", "timeout"])
def test_past_setup_the_same_reports_are_not_read_as_setup(tmp_path, after):
    """A step logged or a collective's timeout shows the job ran: no init-failure of this rule."""
    text = _SETUP_TEXTS["lightning2-claims-then-nothing"] + (_STEPS if after == "steps" else _TIMEOUT)
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "init-failure", v.summary


# ---------------------------------------------------------------- NCCL's error trail through init.cc

def _trail(host: str, pid: int, first: str) -> str:
    """An NCCL WARN and its INFO return trail up through init.cc, as NCCL 2.18+ prints it."""
    p = f"{host}:{pid}:{pid + 7} [0]"
    return (f"{p} {first}\n{p} NCCL INFO transport/p2p.cc:419 -> 6\n{p} NCCL INFO transport.cc:165 -> 6\n"
            f"{p} NCCL INFO init.cc:1222 -> 6\n{p} NCCL INFO init.cc:1501 -> 6\n"
            f"{p} NCCL INFO group.cc:64 -> 6 [Async thread]\n")


def test_nccl_error_unwinding_through_init_is_setup_naming_none(tmp_path):
    """Not quoted, another peer, another transport: the trail through init.cc is the phase."""
    text = _trail("gpu2", 3301, "proxy.cc:1496 NCCL WARN [Proxy Service 0] Failed to execute operation Setup "
                  "from rank 0, retcode 6")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_nccl_init_trail_after_collectives_ran_is_not_setup(tmp_path):
    """A later communicator (a new group mid-run) failing in init.cc, after collectives ran."""
    p = "gpu2:3301:3301 [0]"
    ran = "".join(f"{p} NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 recvbuff 0x7f00 count 1024 datatype 7 "
                  f"op 0 root 0 comm 0x55d0 [nranks=2] stream 0x5600\n" for i in range(3))
    text = (f"{p} NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0xabc - Init COMPLETE\n" + ran
            + _trail("gpu2", 3301, "proxy.cc:1496 NCCL WARN [Proxy Service 0] Failed to execute operation Setup "
                     "from rank 0, retcode 6"))
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "init-failure" or "init.cc" not in v.summary, v.summary


# ---------------------------------------------------------------- Open MPI's launcher under a renamed binary

_OMPI_BAR = "-" * 74 + "\n"


@pytest.mark.parametrize(("name", "rank"), [("mpirun.openmpi", 3), ("mpiexec.real", 0), ("mpirun.real", 6)])
def test_open_mpi_report_under_a_renamed_launcher_names_its_rank(tmp_path, name, rank):
    """Open MPI words the report with its own basename: a suffixed binary still says it."""
    text = (_OMPI_BAR + "Primary job  terminated normally, but 1 process returned\n"
            "a non-zero exit code. Per user-direction, the job has been aborted.\n" + _OMPI_BAR + _OMPI_BAR
            + f"{name} noticed that process rank {rank} with PID 4411 on node gpu-b exited on signal 11 "
              "(Segmentation fault).\n" + _OMPI_BAR)
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [rank], v.summary


def test_open_mpi_improper_exit_under_a_renamed_launcher_names_its_rank(tmp_path):
    text = (_OMPI_BAR + "mpirun.openmpi has exited due to process rank 2 with PID 0 on node n1 exiting improperly. "
            "There are three reasons this could occur:\n" + _OMPI_BAR)
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- a rank whose communicator aborted is no quiet rank

def _timeout(rank: int) -> str:
    return (f"[rank{rank}]:[E1102 10:30:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
            f"Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, "
            "NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.\n")


def _abort(rank: int) -> str:
    return (f"gpu9:{7000 + rank}:{7100 + rank} [{rank}] NCCL INFO comm 0x55{rank}0 rank {rank} nranks 4 cudaDev "
            f"{rank} busId {rank + 1}000 - Abort COMPLETE\n")


def test_a_rank_seen_only_aborting_its_communicator_is_not_named_stuck(tmp_path):
    """An excerpt: ranks 1 and 3 time out, rank 2's communicator aborts too; nothing says 2 never entered."""
    v = diagnose_paste(tmp_path, _timeout(1) + _abort(1) + _abort(2) + _timeout(3) + _abort(3))
    assert 2 not in named_ranks(v), v.summary


def test_a_heard_rank_without_timeout_or_abort_is_still_named(tmp_path):
    """The quiet rank with its own lines and no teardown stays the one that never entered."""
    text = (_timeout(1) + _abort(1) + "[rank2]: loading shard 7 of 9\n" + _timeout(3) + _abort(3)
            + "[rank0]: loading shard 7 of 9\n" + _timeout(0) + _abort(0))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "stuck-rank" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- mpirun's first exit beside victims only

_FIRST_EXIT = ("-" * 74 + "\nPrimary job  terminated normally, but 1 process returned\na non-zero exit code. "
               "Per user-direction, the job has been aborted.\n" + "-" * 74 + "\n" + "-" * 74 + "\n"
               "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
               "the job to be terminated. The first process to do so was:\n\n"
               "  Process name: [[4021,1],{rank}]\n  Exit code:    1\n" + "-" * 74 + "\n")


def test_first_exit_beside_horovod_victims_names_the_first_exit(tmp_path):
    """Horovod's older wording on two tagged ranks; mpirun names rank 3, whose output is cut."""
    victim = ("[1,{r}]<stderr>:RuntimeError: Horovod has been shut down. This has been caused by an exception on "
              "one of the rank or an attempted allreduce, allgather or broadcast on a tensor after one of the "
              "ranks has finished execution.\n")
    v = diagnose_paste(tmp_path, victim.format(r=1) + victim.format(r=2) + _FIRST_EXIT.format(rank=3))
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_first_exit_beside_gloo_victims_names_the_first_exit(tmp_path):
    victim = ("[1,{r}]<stderr>:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection "
              "closed by peer [10.0.0.{r}]:4121\n")
    v = diagnose_paste(tmp_path, victim.format(r=0) + victim.format(r=2) + _FIRST_EXIT.format(rank=1))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_horovod_shut_down_is_a_victims_error(tmp_path):
    """A rank whose only error is Horovod's shut-down is never the dead rank."""
    v = diagnose_paste(tmp_path, "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an "
                         "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a "
                         "tensor after one of the ranks finished execution.\n")
    assert 1 not in named_ranks(v), v.summary


# ---------------------------------------------------------------- a writer's caption before a labelled line

_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a total capacity "
        "of 79.15 GiB of which 1.06 GiB is free.\n")


@pytest.mark.parametrize("caption", ["Error log: ", "エラー：", "stderr:"])
def test_a_labelled_error_behind_a_caption_names_its_rank(tmp_path, caption):
    text = ("torchrun --nproc_per_node=8 train.py\n" + caption + "[rank2]: " + _OOM.format(r=2))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- JAX's coordination service losing a task

def _lost(task: int, job: str = "jax_worker", prefix: str = "") -> str:
    return (f"E0302 09:14:{task:02d}.000000 1234 coordination_service.cc:1017] {prefix}Task /job:{job}/replica:0/"
            f"task:{task} heartbeat timeout. This indicates that the remote task has failed, got preempted, or "
            "crashed unexpectedly. Check the task logs for an earlier error to debug further.\n")


def test_coordination_service_losing_a_task_names_it_dead(tmp_path):
    text = ("I0302 09:10:00.000000 1234 train.py:88] step 4000 loss 1.92\n"
            + _lost(5, job="trainer", prefix="UNAVAILABLE: "))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [5], v.summary


def test_coordination_service_losing_two_tasks_names_both(tmp_path):
    v = diagnose_paste(tmp_path, _lost(3) + _lost(11))
    assert v.cls == "dead-rank" and named_ranks(v) == [3, 11], v.summary


# ---------------------------------------------------------------- MVAPICH2's signal handler's report

def test_mvapich2_caught_error_names_its_rank(tmp_path):
    text = ("[node-3:mpi_rank_3][error_sighandler] Caught error: Bus error (signal 7)\n"
            "[proxy:0:1@node-3] HYD_pmcd_pmip_control_cmd_cb (pm/pmiserv/pmip_cb.c:912): assert (!closed) failed\n"
            "[mpiexec@node-1] HYDT_bscu_wait_for_completion (tools/bootstrap/utils/bscu_wait.c:76): one of the "
            "processes terminated badly; aborting\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_mvapich2_two_ranks_caught_errors_name_both(tmp_path):
    text = ("[gpu-a:mpi_rank_9][error_sighandler] Caught error: Floating point exception (signal 8)\n"
            "[gpu-b:mpi_rank_2][error_sighandler] Caught error: Floating point exception (signal 8)\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2, 9], v.summary


def test_start_claims_then_the_job_cancelled_is_not_setup(tmp_path):
    """A cancel from outside after the claims ends the job; it does not show set-up failed."""
    text = (_SETUP_TEXTS["lightning2-claims-then-nothing"]
            + "slurmstepd: error: *** JOB 4242 ON gpu01 CANCELLED AT 2024-05-01T10:00:00 ***\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "init-failure" and named_ranks(v) == [], v.summary
