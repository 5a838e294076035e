"""Round 20 of issue 19's rules (branch i19-r20), on the mechanisms field-11 missed (read in
this round, tests/fixtures/diagnose-field/issues-11): Horovod's `[ready ranks: ...]` lists
without a stated world, c10d's NCCL unique-id fetch that timed out (the rank that publishes
the id alive and behind), and every signal wording srun prints for a task. Texts are built
here in the shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_saved, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log


def _paste(tmp_path, text: str):
    """The verdict on one pasted text, read from a folder whose name says nothing."""
    job = tmp_path / "job"
    job.mkdir(parents=True)
    (job / "paste.log").write_text(text)
    return diagnose_saved(job)


# ---------------------------------------------------------------- srun's signal words


def test_srun_task_signal_with_core_dumped_is_that_signal():
    log = parse_torch_log("srun: error: gpu07: task 3: Segmentation fault (core dumped)\n"
                          "srun: error: gpu07: task 5: Illegal instruction\n"
                          "srun: error: gpu08: tasks 8-9: Floating point exception (core dumped)\n")
    assert [(t.tasks, t.signal) for t in log.task_exits] == [((3,), "SIGSEGV"), ((5,), "SIGILL"),
                                                               ((8, 9), "SIGFPE")]


def test_srun_task_core_dumped_is_its_death(tmp_path):
    v = _paste(tmp_path, "srun -n 8 python train.py\n"
                         "srun: error: gpu07: task 3: Bus error (core dumped)\n"
                         "srun: error: gpu07: tasks 0-2,4-7: Terminated\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def test_srun_task_range_with_a_signal_is_each_task_dead(tmp_path):
    v = _paste(tmp_path, "srun: error: gpu07: tasks 4-5,7: Floating point exception\n")
    assert v.cls == "dead-rank" and named_ranks(v) == [4, 5, 7], v.summary
