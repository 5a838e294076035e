"""Round 27 of issue 19's rules (branch i19-r27): the job's phase read from structure, not words.

A traceback whose frames run through a set-up step (init_process_group and its rendezvous
handlers, torchrun's agent joining its rendezvous, DeepSpeed's runner checking its hosts, an
NCCL communicator's creation, JAX's initialisation) in a text showing no step is the job
failing to form, whatever its exception says (parsers/torch_log/setupframes.py,
diagnose/setupframes.py); a driver's one `Worker N has failed.` names N (launchreports.py);
a SIGKILL beside other ranks' own faults is the launcher's clean-up (diagnose/cleanupkill.py);
JAX's barrier the program waits at after the start-up names the tasks that never came stuck
(diagnose/programbarrier.py). Texts are built here in the shapes the tools print (Python's
`File "PATH", line N, in FUNC` frames; vLLM's logger prefix; Ray's, srun's and mpd's lines),
none of them a field case's text."""

from __future__ import annotations

import pytest
from support import diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log

SITE = "/usr/lib/python3.11/site-packages"


def _traceback(frames: list[tuple[str, str]], exception: str, prefix: str = "") -> str:
    """A Python traceback: (path, function) frames outermost first, then the exception line."""
    lines = ["Traceback (most recent call last):"]
    for n, (path, func) in enumerate(frames):
        lines += [f'  File "{path}", line {10 + n}, in {func}', "    call()"]
    return "".join(f"{prefix}{line}\n" for line in [*lines, exception])


_AGENT = [("/usr/bin/torchrun", "<module>"), (f"{SITE}/torch/distributed/run.py", "main"),
          (f"{SITE}/torch/distributed/launcher/api.py", "launch_agent"),
          (f"{SITE}/torch/distributed/elastic/agent/server/api.py", "run"),
          (f"{SITE}/torch/distributed/elastic/agent/server/api.py", "_initialize_workers"),
          (f"{SITE}/torch/distributed/elastic/agent/server/api.py", "_rendezvous"),
          (f"{SITE}/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", "next_rendezvous")]
_ENV_INIT = [("train.py", "<module>"), ("train.py", "setup"),
             (f"{SITE}/torch/distributed/c10d_logger.py", "wrapper"),
             (f"{SITE}/torch/distributed/distributed_c10d.py", "init_process_group"),
             (f"{SITE}/torch/distributed/rendezvous.py", "_env_rendezvous_handler"),
             (f"{SITE}/torch/distributed/rendezvous.py", "_create_c10d_store")]

_SETUP_TRACES = {
    # torchrun's agent could not join its rendezvous: another wording than any field case's
    "agent-rendezvous": "[W socket.cpp:601] [c10d] The IPv6 network addresses of (node0, 29400) cannot be retrieved\n"
                        + _traceback(_AGENT, "RuntimeError: Broken pipe"),
    # env:// rendezvous, the store's host name does not resolve
    "env-store-host": _traceback(_ENV_INIT, "socket.gaierror: [Errno -2] Name or service not known"),
    # DeepSpeed's runner refusing its resource filter before it starts any rank
    "deepspeed-runner": _traceback(
        [("/opt/venv/bin/deepspeed", "<module>"), (f"{SITE}/deepspeed/launcher/runner.py", "main"),
         (f"{SITE}/deepspeed/launcher/runner.py", "parse_inclusion_exclusion"),
         (f"{SITE}/deepspeed/launcher/runner.py", "parse_resource_filter")],
        "ValueError: No slot '7' specified on host 'worker-1'"),
    # JAX's client could not reach its coordinator
    "jax-connect": _traceback(
        [("main.py", "<module>"), (f"{SITE}/jax/_src/distributed.py", "initialize"),
         (f"{SITE}/jax/_src/distributed.py", "initialize")],
        "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: failed to connect to all addresses"),
    # a binding's own report of the NCCL call that failed (no Python frame of it)
    "binding-message": ("Epoch 0 starting\n"
                        + _traceback([("bench.py", "<module>"), ("bench.py", "make_comm")],
                                     "RuntimeError: ncclCommInitRankConfig failed: remote process exited or there "
                                     "was a network error")),
    # vLLM's logger prefix before every line of a traceback through its parallel state's set-up
    "vllm-logged": _traceback(
        [(f"{SITE}/vllm/worker/worker.py", "init_device"),
         (f"{SITE}/vllm/distributed/parallel_state.py", "init_distributed_environment"),
         (f"{SITE}/torch/distributed/c10d_logger.py", "wrapper")],
        "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
        prefix="ERROR 11-04 17:02:11 worker_base.py:467] "),
}


@pytest.mark.parametrize("name", sorted(_SETUP_TRACES))
def test_an_exception_raised_in_a_setup_step_is_init_failure_naming_none(tmp_path, name):
    v = diagnose_paste(tmp_path, _SETUP_TRACES[name])
    assert v.cls == "init-failure" and named_ranks(v) == [], (name, v.cls, v.summary)


_STEPS = "".join(f"[rank0]: epoch 0 step {i} loss 2.{i}\n[rank1]: epoch 0 step {i} loss 2.{i}\n" for i in range(1, 5))


@pytest.mark.parametrize("name", ["env-store-host", "agent-rendezvous"])
def test_setup_frames_after_steps_are_not_setup(tmp_path, name):
    """The phase must be shown: a step logged before the exception withdraws it."""
    v = diagnose_paste(tmp_path, _STEPS + _SETUP_TRACES[name])
    assert v.cls != "init-failure", v.summary


def test_agent_rendezvous_frames_after_the_workers_ran_are_not_setup(tmp_path):
    """torchrun's agent talks to its rendezvous store while the workers run: the same frames
    after a worker's labelled output are no set-up."""
    text = "[rank1]: loading shards\n" + _SETUP_TRACES["agent-rendezvous"]
    v = diagnose_paste(tmp_path, text)
    assert v.cls != "init-failure", v.summary


def test_an_interrupt_in_setup_is_not_a_setup_failure(tmp_path):
    v = diagnose_paste(tmp_path, _traceback(_AGENT, "KeyboardInterrupt"))
    assert v.cls != "init-failure", v.summary


def test_frames_and_message_name_the_setup_step():
    log = parse_torch_log(_SETUP_TRACES["agent-rendezvous"] + _SETUP_TRACES["binding-message"]
                          + _traceback([("C:\\work\\train.py", "run"),
                                        ("C:\\Python311\\Lib\\site-packages\\torch\\distributed\\distributed_c10d.py",
                                         "init_process_group")], "RuntimeError: boom"))
    assert [e.setup for e in log.exceptions] == ["agent-rendezvous", "ncclCommInitRankConfig", "init_process_group"]
    assert log.exceptions[-1].collective == "init_process_group"  # a Windows path read with slashes


# ---------------------------------------------------------------- a CUDA error in set-up

_BARRIER = [("tools/train.py", "main"), (f"{SITE}/torch/distributed/distributed_c10d.py", "init_process_group"),
            (f"{SITE}/torch/distributed/distributed_c10d.py", "barrier")]


def test_cuda_errors_of_two_ranks_in_init_are_init_failure_not_gpu(tmp_path):
    """Both ranks hit the same CUDA error at init's barrier, no Xid: the job never formed and
    no GPU stands out."""
    text = "".join(_traceback(_BARRIER, "RuntimeError: CUDA error: initialization error", prefix=f"[rank{r}]: ")
                   for r in (0, 1))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_one_ranks_cuda_error_in_init_stays_its_gpus(tmp_path):
    """One rank alone with a CUDA error where its peer shows no error: its GPU stands out."""
    text = ("[rank0]: waiting for peers\n"
            + _traceback(_BARRIER, "RuntimeError: CUDA error: initialization error", prefix="[rank1]: "))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "gpu-failure" and named_ranks(v) == [1], v.summary


# ---------------------------------------------------------------- the build lacks the backend

def _spawned(process: int, frames: list[tuple[str, str]], exception: str) -> str:
    body = _traceback([(f"{SITE}/torch/multiprocessing/spawn.py", "_wrap"), *frames], exception)
    return ("torch.multiprocessing.spawn.ProcessRaisedException:\n\n"
            f"-- Process {process} terminated with the following error:\n" + body)


_INIT = [("/home/u/ddp.py", "worker"), (f"{SITE}/torch/distributed/distributed_c10d.py", "init_process_group"),
         (f"{SITE}/torch/distributed/distributed_c10d.py", "_new_process_group_helper")]


def test_a_backend_missing_from_the_build_names_no_process(tmp_path):
    v = diagnose_paste(tmp_path, _spawned(1, _INIT, "RuntimeError: Distributed package doesn't have MPI built in. "
                                                    "MPI is only included if you build PyTorch from source"))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_a_windows_traceback_in_init_is_the_ranks_setup(tmp_path):
    """A Windows path's frames are torch's: the process failed in its own set-up (setupdeath.py)."""
    frames = [("C:\\Users\\u\\ddp.py", "worker"),
              ("C:\\Python38\\lib\\site-packages\\torch\\distributed\\distributed_c10d.py", "init_process_group"),
              ("C:\\Python38\\lib\\site-packages\\torch\\distributed\\rendezvous.py", "_env_rendezvous_handler")]
    v = diagnose_paste(tmp_path, _spawned(2, frames, "ValueError: Error initializing torch.distributed using env:// "
                                                     "rendezvous: environment variable RANK expected, but not set"))
    assert v.cls == "init-failure" and named_ranks(v) == [2], v.summary


# ---------------------------------------------------------------- a driver's `Worker N has failed.`

_RAY_DIED = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker PID: "
             "4411 Worker exit type: SYSTEM_ERROR\n")


def test_a_drivers_one_worker_failed_report_names_it(tmp_path):
    text = _RAY_DIED + "2024-05-02 10:11:12,345\tINFO utils.py:97 -- Worker 3 has failed.\n"
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_a_driver_reporting_several_failed_workers_names_none(tmp_path):
    """Newer Ray Train logs every failed worker of a batch: several reports say no first."""
    text = _RAY_DIED + "(TorchTrainer pid=8) Worker 1 has failed.\n(TorchTrainer pid=8) Worker 2 has failed.\n"
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


def test_has_failed_inside_a_sentence_is_no_report():
    log = parse_torch_log("[rank0]: the health check of worker 2 has failed twice today\n")
    assert not log.worker_failures


# ---------------------------------------------------------------- the launcher's clean-up SIGKILL

def test_srun_sigkill_beside_segfaults_is_the_cleanup(tmp_path):
    text = ("step 10 loss 1.2\n"
            "srun: error: gpu7: task 2: Segmentation fault (core dumped)\n"
            "srun: error: gpu7: task 0: Bus error\n"
            "srun: error: gpu8: task 5: Killed\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [0, 2], v.summary


def test_mpd_sigkill_beside_a_bus_error_is_the_cleanup(tmp_path):
    text = ("rank 1 in job 7  host_4001   caused collective abort of all ranks\n"
            "  exit status of rank 1: killed by signal 9 \n"
            "rank 0 in job 7  host_4001   caused collective abort of all ranks\n"
            "  exit status of rank 0: killed by signal 7 \n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_an_out_of_memory_task_beside_a_segfault_stays_named(tmp_path):
    text = ("srun: error: gpu7: task 1: Segmentation fault\n"
            "srun: error: gpu8: task 3: Out Of Memory\n")
    v = diagnose_paste(tmp_path, text)
    assert 3 in named_ranks(v), v.summary


# ---------------------------------------------------------------- JAX's barrier after the start-up

def _barrier(barrier: str, tasks: list[int], frames: list[tuple[str, str]]) -> str:
    body = _traceback(frames, "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
                              f"Barrier_id: {barrier}. Timed out task names:")
    return body + "".join(f"/job:jax_worker/replica:0/task:{t}\n" for t in tasks)


def test_the_programs_barrier_names_the_absent_tasks_stuck(tmp_path):
    frames = [("train.py", "main"), (f"{SITE}/jax/experimental/multihost_utils.py", "sync_global_devices"),
              (f"{SITE}/jax/experimental/multihost_utils.py", "_sync_global_devices")]
    v = diagnose_paste(tmp_path, _barrier("sync_global_devices_checkpoint", [1], frames))
    assert v.cls == "stuck-rank" and named_ranks(v) == [1], v.summary


def test_the_start_up_barrier_stays_init_failure(tmp_path):
    frames = [("train.py", "main"), (f"{SITE}/jax/_src/distributed.py", "initialize"),
              (f"{SITE}/jax/_src/distributed.py", "initialize")]
    v = diagnose_paste(tmp_path, _barrier("jax_connect_all", [2, 5], frames))
    assert v.cls == "init-failure" and named_ranks(v) == [2, 5], v.summary
