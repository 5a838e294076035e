"""Round 32 of issue 19's rules (branch x/r32): families of field-25's misses.

* C++'s `terminate called after throwing an instance of 'T'` ends its process (std::terminate
  aborts it): under a launcher's rank tag (Open MPI's `[1,R]<stderr>:`, horovodrun's
  `[R]<stderr>:`) it is that rank's death, as an uncaught Python exception is;
* a shell's report of the fault that killed its command (`Segmentation fault (core dumped)`)
  under a rank's tag is that rank's death; unlabelled it is no rank's;
* vLLM's one-word worker names (`(Worker_TP3 pid=N)`) give the TP rank, not with a PP part;
* a traceback fragment that opens at the process's outermost frame (multiprocessing's
  `_bootstrap`, a script's `<module>`) shows the traceback from its top: a cut one is its rank's end;
* an untimed abort (Cray MPICH's fatal error in PMPI_Recv) printed after a launcher's report of
  another task's fault signal (srun's `task 1: Segmentation fault`) is that fault's victim;
* an NCCL WARN beside a cut traceback is a failure of its own: the cut traceback is not all.

The field pastes are read as they are (tests/fixtures/diagnose-field/issues-25, read by this
round); the other texts were WRITTEN here in the shapes those tools print.
"""

from __future__ import annotations

from support import FIXTURES, diagnose_paste, named_ranks

_F25 = FIXTURES / "diagnose-field" / "issues-25" / "saved"


def _paste(case: str) -> str:
    return (_F25 / case / "paste.log").read_text()


# ---------------------------------------------------------------- launcher-tagged native deaths


def test_open_mpi_tagged_terminate_is_its_ranks_death(tmp_path):
    v = diagnose_paste(tmp_path, _paste("horovod-openmpi-tagged-ranks-0-and-2-cudaeventquery-illegal-memory-access"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0, 2], v.summary


def test_horovodrun_tagged_terminate_of_one_rank(tmp_path):
    text = ("[3]<stdout>:Epoch 1/10\n"
            "[3]<stderr>:terminate called after throwing an instance of 'std::runtime_error'\n"
            "[3]<stderr>:  what():  CUDA error: an illegal memory access was encountered\n"
            "[1]<stdout>:Epoch 1/10\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_tagged_shell_segfault_is_its_ranks_death(tmp_path):
    v = diagnose_paste(tmp_path, _paste("horovod-elastic-gloo-ranks-2-0-read-error-then-rank1-segfault"))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_mpirun_tagged_shell_bus_error(tmp_path):
    text = ("[1,0]<stdout>:step 10 loss 2.31\n"
            "[1,2]<stdout>:step 10 loss 2.30\n"
            "[1,2]<stderr>:Bus error (core dumped)\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_unlabelled_shell_segfault_names_no_rank(tmp_path):
    text = "step 10 loss 2.31\nstep 11 loss 2.29\nSegmentation fault (core dumped)\n"
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- a worker's own cut traceback


def test_vllm_worker_tp_name_gives_its_rank(tmp_path):
    v = diagnose_paste(tmp_path, _paste("vllm-ascend-worker-tp3-workerproc-hit-exception-triton-compile"))
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_vllm_worker_pp_tp_name_gives_no_rank(tmp_path):
    text = ("(Worker_PP1_TP3 pid=1526) ERROR 09-26 15:32:25 [multiproc_executor.py:654] WorkerProc hit an exception.\n"
            "(Worker_PP1_TP3 pid=1526) ERROR 09-26 15:32:25 [multiproc_executor.py:654] Traceback (most recent call"
            " last):\n"
            "(Worker_PP1_TP3 pid=1526) ERROR 09-26 15:32:25 [multiproc_executor.py:654]   File \"/x/compiler.py\","
            " line 288, in compile\n")
    v = diagnose_paste(tmp_path, text)
    assert 3 not in named_ranks(v), v.summary


def test_frames_from_bootstrap_are_the_workers_traceback(tmp_path):
    v = diagnose_paste(tmp_path, _paste("vllm-v1-worker-rank5-traceback-in-load-model-excerpt"))
    assert v.cls == "dead-rank" and named_ranks(v) == [5], v.summary


def test_frames_from_mid_stack_stay_a_fragment(tmp_path):
    text = ("(VllmWorker rank=2 pid=77)   File \"/v/lib/python3.12/site-packages/torch/nn/modules/module.py\","
            " line 1736, in _wrapped_call_impl\n"
            "(VllmWorker rank=2 pid=77)     return self._call_impl(*args, **kwargs)\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- victims beside the culprit


def test_mpich_recv_abort_after_srun_fault_is_its_victim(tmp_path):
    v = diagnose_paste(tmp_path, _paste("cray-mpich-srun-task1-segfault-then-rank0-recv-abort"))
    assert v.cls == "dead-rank" and named_ranks(v) == [1], v.summary


def test_mpich_wait_abort_after_srun_bus_error(tmp_path):
    text = ("srun: error: nid001: task 3: Bus error\n"
            "srun: launch/slurm: _step_signal: Terminating StepId=11.0\n"
            "Abort(806995471) (rank 1 in comm 0): Fatal error in PMPI_Wait: Other MPI error, error stack:\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


# ---------------------------------------------------------------- set-up failures


def test_nccl_connect_warn_before_cut_scheduler_traceback_is_setup(tmp_path):
    v = diagnose_paste(tmp_path, _paste("sglang-h100-15-nccl-socketstartconnect-abort-then-tp0-scheduler-init-exception"))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary
