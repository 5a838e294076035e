"""Round 20 of issue 19's rules (branch i19-r20), on the mechanisms field-11 missed (read in
this round, tests/fixtures/diagnose-field/issues-11): Horovod's `[ready ranks: ...]` lists
without a stated world, c10d's NCCL unique-id fetch that timed out (the rank that publishes
the id alive and behind), and every signal wording srun prints for a task. Texts are built
here in the shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.torch_log.agent import launched_np

# ---------------------------------------------------------------- srun's signal words


def test_srun_task_signal_with_core_dumped_is_that_signal():
    log = parse_torch_log("srun: error: gpu07: task 3: Segmentation fault (core dumped)\n"
                          "srun: error: gpu07: task 5: Illegal instruction\n"
                          "srun: error: gpu08: tasks 8-9: Floating point exception (core dumped)\n")
    assert [(t.tasks, t.signal) for t in log.task_exits] == [((3,), "SIGSEGV"), ((5,), "SIGILL"),
                                                               ((8, 9), "SIGFPE")]


def test_srun_task_core_dumped_is_its_death(tmp_path):
    v = diagnose_paste(tmp_path, "srun -n 8 python train.py\n"
                         "srun: error: gpu07: task 3: Bus error (core dumped)\n"
                         "srun: error: gpu07: tasks 0-2,4-7: Terminated\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_srun_task_range_with_a_signal_is_each_task_dead(tmp_path):
    v = diagnose_paste(tmp_path, "srun: error: gpu07: tasks 4-5,7: Floating point exception\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [4, 5, 7], v.summary


# ---------------------------------------------------------------- Horovod's ready lists

_STALL = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
          "and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks "
          "are trying to submit different tensors or that only subset of ranks is submitting tensors, which will "
          "cause deadlock. \nStalled ops: \n")


def _ready(*lists: str) -> str:
    return "".join(f"allreduce.layer{i}.weight [ready ranks: {ranks}], \n" for i, ranks in enumerate(lists))


def test_ready_lists_without_a_world_name_the_ranks_below_the_highest_ready(tmp_path):
    v = diagnose_paste(tmp_path, _STALL + _ready("0, 6, 3, 2", "3, 0, 2, 6", "6, 2, 0, 3"))
    assert v.cls == "stuck-rank" and named_ranks(v) == [1, 4, 5], v.summary


def test_ready_lists_without_a_world_never_name_a_rank_above_the_highest_ready(tmp_path):
    # ranks past 4 may exist and be missing too, but nothing says they exist
    v = diagnose_paste(tmp_path, _STALL + _ready("0, 1, 4, 2", "4, 2, 1, 0"))
    assert v.cls == "stuck-rank" and named_ranks(v) == [3], v.summary


def test_ready_lists_most_ranks_missing_below_the_highest_names_none(tmp_path):
    v = diagnose_paste(tmp_path, _STALL + _ready("3", "3"))
    assert named_ranks(v) == [], v.summary


def test_ready_lists_take_the_world_from_an_mpirun_command(tmp_path):
    # rank 1 is above every rank seen ready: only the launch line's -np 2 says it exists
    v = diagnose_paste(tmp_path, "$ mpirun -np 2 -H a:1,b:1 python train.py\n" + _STALL + _ready("0", "0"))
    assert v.cls == "stuck-rank" and named_ranks(v) == [1], v.summary


def test_ready_lists_take_the_world_from_an_srun_command_in_prose(tmp_path):
    v = diagnose_paste(tmp_path, "I launch it with `srun --ntasks=4 python train.py` and it hangs:\n"
                         + _STALL + _ready("0, 2, 1", "1, 0, 2"))
    assert v.cls == "stuck-rank" and named_ranks(v) == [3], v.summary


def test_launch_command_process_counts():
    assert launched_np("horovodrun -np 16 -H h1:8,h2:8 python train.py -n 3") == 16
    assert launched_np("srun -p gpu -n 4 -w node12 python train.py") == 4
    assert launched_np("srun python train.py -n 3") is None  # the program's own option
    both = parse_torch_log("mpirun -np 4 python a.py\nmpirun -np 8 python a.py\n" + _STALL + _ready("0"))
    assert both.launched_np is None  # two commands that disagree say no world
    one = parse_torch_log("mpirun -np 4 python a.py\n" + _STALL + _ready("0"))
    assert one.launched_np == 4


# ---------------------------------------------------------------- the NCCL unique id never published

_FETCH = ("torch.distributed.DistBackendError: [{r}] is setting up NCCL communicator and retrieving ncclUniqueId from "
          "[{s}] via c10d key-value store by key '0', but store->get('0') got error: {err}")


def _fetch_traceback(r: int, s: int = 0, err: str = "Socket Timeout") -> str:
    lines = ["Traceback (most recent call last):",
             '  File "/work/train.py", line 40, in <module>',
             "    dist.all_reduce(t)",
             '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, '
             "in all_reduce",
             "    work = group.allreduce([tensor], opts)",
             _FETCH.format(r=r, s=s, err=err),
             "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:670 (most recent call first):"]
    return "".join(f"[rank{r}]: {line}\n" for line in lines)


def test_unique_id_get_timed_out_names_the_root_stuck(tmp_path):
    v = diagnose_paste(tmp_path, "".join(_fetch_traceback(r) for r in (1, 2, 3)))
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_store_wait_timeout_under_torchrun_names_the_root_stuck(tmp_path):
    err = "wait timeout after 1800000ms, keys: /default_pg/0//nccl/0"
    v = diagnose_paste(tmp_path, "$ torchrun --nproc_per_node 2 train.py\n" + _fetch_traceback(1, err=err))
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_timeout_in_one_line_names_the_root_stuck(tmp_path):
    v = diagnose_paste(tmp_path, _FETCH.format(r=6, s=0, err="Timeout waiting for key: 0 after 600000 ms") + "\n")
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_timeout_with_the_roots_own_error_names_it_not_stuck(tmp_path):
    # rank 0 printed an error of its own (here a collective of its own timed out): it was
    # not merely behind, so the fetch's timeout does not make it the stuck one
    own = ("[rank0]: Traceback (most recent call last):\n"
           '[rank0]:   File "/work/train.py", line 31, in <module>\n'
           "[rank0]:     dist.barrier(group=g)\n"
           '[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
           "line 4159, in barrier\n"
           "[rank0]:     work.wait()\n"
           "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
           "1800000ms for recv operation to complete\n")
    v = diagnose_paste(tmp_path, own + _fetch_traceback(1))
    assert not any(f.cls == "stuck-rank" and 0 in f.ranks for f in v.findings), v.summary
