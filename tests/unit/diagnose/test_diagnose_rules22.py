"""Round 22 of issue 19's rules (branch i19-r22), on the mechanisms field-13 missed (read in
this round, tests/fixtures/diagnose-field/issues-13): two torchrun boxes read across for the
earliest failure, srun's task-end report quoted inside a sentence, torch's distributed test
harness catching a rank's exception, and Lightning's start lines of two processes claiming
one global rank. Texts are built here in the shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_saved, named_ranks

from healthcheck.core.errors import ParseError
from healthcheck.parsers.torch_log import parse_torch_log


def _paste(tmp_path, text: str):
    """The verdict on one pasted text, read from a folder whose name says nothing."""
    job = tmp_path / "job"
    job.mkdir(parents=True)
    (job / "paste.log").write_text(text)
    return diagnose_saved(job)

# ---------------------------------------------------------------- srun's report inside a sentence

_QUESTION = ("I get the error slurmstepd: error: Detected 1 oom_kill event in StepId=113.0. Some of the step tasks "
             "have been OOM Killed. srun: error: cn17: task 3: Out Of Memory, how do I fix this?\n")


def test_srun_task_end_quoted_inside_a_sentence_is_read_as_its_task():
    (t,) = parse_torch_log(_QUESTION).task_exits
    assert t.tasks == (3,) and t.oom and t.host == "cn17"


def test_srun_task_end_quoted_inside_a_sentence_names_the_task(tmp_path):
    v = _paste(tmp_path, _QUESTION)
    assert v.cls == "dead-rank" and named_ranks(v) == [3], v.summary


def _task_exits(text: str) -> tuple:
    try:
        return parse_torch_log(text).task_exits
    except ParseError:  # nothing of torch's or a launcher's read at all
        return ()


def test_task_words_that_are_not_srun_own_are_not_read():
    for text in ("my srun: error: cn17: task 3: launch failed, why?\n",
                 "the mysrun: error: cn17: task 3: Killed here\n",
                 "note srun: error: cn17: task 3: Out Of Memoryless\n",
                 "I ran task 3: Out Of Memory on cn17\n"):
        assert _task_exits(text) == (), text
