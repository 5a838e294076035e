"""Round 24 of issue 19's rules (branch i19-r24), on the mechanisms field-15 and field-16 missed
(read in this round): MPI runtimes' own reports of a rank (Open MPI's `exiting improperly`,
MPICH's fatal error handler in its Cray and Intel forms, MPICH's `application called
MPI_Abort`, Open MPI's signal report in a world of one), srun's task states and its lines
under another program's name, srun's task lists of one width on several nodes, PETSc's
signal handler, torch 2.x's wording of the NCCL unique-id wait timing out, and JAX's
coordination barrier. Texts are built here in the shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.parsers.lines import read_lines, terminal_width
from healthcheck.parsers.torch_log import parse_torch_log

# ---------------------------------------------------------------- Open MPI: exiting improperly

_BORDER = "-" * 74 + "\n"


def _improper(rank: int, pid: int, node: str, launcher: str = "mpirun") -> str:
    """Open MPI's help text (orterun's proc-exit-no-sync), broken after `on` as it prints it."""
    return (_BORDER + f"{launcher} has exited due to process rank {rank} with PID {pid} on\n"
            f"node {node} exiting improperly. There are three reasons this could occur:\n\n"
            '1. this process did not call "init" before exiting, but others in\n'
            "the job did. This can cause a job to hang indefinitely while it waits\n\n"
            "This may have caused other processes in the application to be\n"
            f"terminated by signals sent by {launcher} (as reported here).\n" + _BORDER)


def test_open_mpi_improper_exit_names_its_rank(tmp_path):
    v = diagnose_paste(tmp_path, "mpirun -np 4 ./solver input.dat\n" + _improper(2, 4017, "cn12"))
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_open_mpi_improper_exit_behind_ci_clock_stamps(tmp_path):
    text = "".join(f"09:14:07   {line}\n" for line in ("Ran 3 tests in 12.0s", "", "OK",
                                                        *_improper(1, 0, "runner-7", "mpiexec").splitlines()))
    (t,) = parse_torch_log(text).task_exits
    assert t.tasks == (1,) and t.host == "runner-7"
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_open_mpi_improper_exit_without_finalize_wording():
    text = ("mpirun has exited due to process rank 0 with PID 16119 on\n"
            'node gpu3 exiting without calling "finalize". This may\n'
            "have caused other processes in the application to be\n")
    (t,) = parse_torch_log(text).task_exits
    assert t.tasks == (0,) and t.pid == 16119


def test_open_mpi_improper_exit_beside_a_rank_own_error_names_that_rank_only(tmp_path):
    # mpirun names whichever exit it saw first: a rank's own error in the text decides
    text = ("[rank3]: Traceback (most recent call last):\n[rank3]:   File \"train.py\", line 9, in <module>\n"
            "[rank3]:     step()\n[rank3]: ValueError: bad batch\n" + _improper(1, 4017, "cn12"))
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [3], v.summary


# ---------------------------------------------------------------- MPICH's fatal error handler

def test_cray_mpich_error_names_the_aborting_rank(tmp_path):
    text = ("MPICH ERROR [Rank 37] [job id 123456.0] [Mon Jan  6 10:00:00 2025] [nid001234] - Abort(1091215) "
            "(rank 37 in comm 0): Fatal error in PMPI_Bcast: Other MPI error, error stack:\n"
            "PMPI_Bcast(454)..........: MPI_Bcast(buf=0x1, count=1, MPI_INT, root=0, MPI_COMM_WORLD) failed\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [37], v.summary


def test_mpich_fatal_error_in_another_communicator_names_no_world_rank():
    text = "Abort(1) (rank 3 in comm 496): Fatal error in PMPI_Allreduce: Other MPI error\n"
    assert not parse_torch_log(text + "torch.distributed words\n").exceptions


def test_intel_mpi_abort_in_mpi_init_is_that_rank_init_failure(tmp_path):
    text = ("Abort(1615247) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: Other MPI error, error stack:\n"
            "MPIR_Init_thread(176)........:\nMPID_Init(1546)..............:\n\nmpirun -np 1 ./model\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- MPICH's application called MPI_Abort

def test_one_process_calling_mpi_abort_is_named(tmp_path):
    text = ("application called MPI_Abort(MPI_COMM_WORLD, 1) - process 6\n"
            "rank 2 still running on iteration 0.\nrank 2 finished.\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [6], v.summary


def test_every_process_calling_mpi_abort_names_none(tmp_path):
    text = "".join(f"application called MPI_Abort(MPI_COMM_WORLD, 0) - process {p}\n" for p in (3, 1, 2, 4))
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [] and "MPI_Abort call" in v.summary, v.summary


# ---------------------------------------------------------------- Open MPI's signal report, a world of one

def _signal_box(host: str, pid: int) -> str:
    return "".join(f"[{host}:{pid}] {body}\n" for body in (
        "*** Process received signal ***", "Signal: Segmentation fault (11)", "Signal code: Address not mapped (1)",
        "[ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f00]", "*** End of error message ***"))


def test_signal_report_in_a_world_of_one_is_rank_0(tmp_path):
    v = diagnose_paste(tmp_path, "mpirun -n 1 ./hello\n" + _signal_box("laptop", 5482))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_signal_report_in_a_world_of_two_names_none(tmp_path):
    v = diagnose_paste(tmp_path, "mpirun -n 2 ./hello\n" + _signal_box("laptop", 5482))
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- srun: task states, another name, wide lists

_STATES = ("yhrun: First task exited 60s ago\nyhrun: StepId=77.0 tasks 0,2-3: running\n"
           "yhrun: StepId=77.0 task 1: exited abnormally\nyhrun: Terminating StepId=77.0\n"
           "slurmstepd: error: *** STEP 77.0 ON cn5 CANCELLED AT 2025-07-10T15:58:32 ***\n"
           "yhrun: error: cn5: tasks 0,2-3: Killed\n")


def test_srun_task_states_under_another_name_name_the_abnormal_task(tmp_path):
    log = parse_torch_log(_STATES)
    assert [(s.tasks, s.state) for s in log.task_states] == [((0, 2, 3), "running"), ((1,), "exited abnormally")]
    (t,) = log.task_exits
    assert t.after_abort and t.tasks == (0, 2, 3)  # srun's own kill after it ended the step
    v = diagnose_paste(tmp_path, _STATES)
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_srun_task_states_beside_a_timeout_name_none(tmp_path):
    timeout = ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
               "milliseconds before timing out.\n")
    v = diagnose_paste(tmp_path, timeout + _STATES)
    assert 1 not in named_ranks(v), v.summary


def _wide(host: str, first: int) -> str:
    return f"srun: error: {host}: tasks {','.join(str(first + 8 * i) for i in range(40))}: Segmentation fault\n"


def test_srun_task_lists_of_one_width_are_no_hard_wrap(tmp_path):
    text = _wide("node1", 501) + _wide("node2", 502) + _wide("node3", 503)
    lines = list(read_lines(text))
    assert terminal_width(lines) == 0
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and len(named_ranks(v)) == 120 and 501 in named_ranks(v), v.summary


# ---------------------------------------------------------------- PETSc

def test_petsc_caught_signal_is_that_rank_death(tmp_path):
    text = ("[3]PETSC ERROR: " + "-" * 72 + "\n"
            "[3]PETSC ERROR: Caught signal number 11 SEGV: Segmentation Violation, probably memory access out "
            "of range\n[3]PETSC ERROR: Try option -start_in_debugger or -on_error_attach_debugger\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


# ---------------------------------------------------------------- the NCCL unique id's wait timing out

def test_unique_id_wait_timeout_names_the_root_alive_and_behind(tmp_path):
    # behind a job runner's prefix no label reader takes off, the line is read as the store's
    # wait timeout alone (no exception of a rank): that fact keeps the fetch's sentence
    text = ("job-7/0 [default1]:[rank1]: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and "
            "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: "
            "wait timeout after 600000ms, keys: /default_pg/0//cuda//0\n")
    (z,) = parse_torch_log(text).rendezvous
    assert z.kind == "wait-timeout" and z.message.startswith("[1] is setting up NCCL communicator")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- JAX's coordination barrier

def test_jax_connect_barrier_names_the_tasks_that_never_arrived(tmp_path):
    text = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
            "PjRT_Client_Connect. Timed out task names:\n/job:jax_worker/replica:0/task:3\n"
            "/job:jax_worker/replica:0/task:1\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [1, 3], v.summary


def test_jax_registration_barrier_is_an_init_failure_naming_none(tmp_path):
    text = ("Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. "
            "This usually happens because a task triggered the barrier too early or too slowly.\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_mpich_fatal_errors_of_several_ranks_name_none(tmp_path):
    # a peer's death fails every rank's call that talked to it: each reports alike
    text = "".join(f"Abort(409615) (rank {r} in comm 0): Fatal error in PMPI_Allreduce: Other MPI error, "
                   "error stack:\n" for r in (2, 5))
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary
