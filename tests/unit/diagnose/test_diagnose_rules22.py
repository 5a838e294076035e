"""Round 22 of issue 19's rules (branch i19-r22), on the mechanisms field-13 missed (read in
this round, tests/fixtures/diagnose-field/issues-13): two torchrun boxes read across for the
earliest failure, srun's task-end report quoted inside a sentence, torch's distributed test
harness catching a rank's exception, and Lightning's start lines of two processes claiming
one global rank. Texts are built here in the shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.core.errors import ParseError
from healthcheck.diagnose.firstchild import earliest_box_failure
from healthcheck.diagnose.leavers import own_output
from healthcheck.diagnose.logfacts import first_errors
from healthcheck.diagnose.sources import collect
from healthcheck.parsers.torch_log import parse_torch_log

# ---------------------------------------------------------------- two torchrun boxes

def _entry(index: int, rank: int, local: int, code: int, pid: int, time: str, host: str = "node1") -> str:
    return (f"[{index}]:\n  time      : {time}\n  host      : {host}\n  rank      : {rank} (local_rank: {local})\n"
            f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")


def _box(root: str, *others: str) -> str:
    """torchrun's ChildFailedError box: the root cause entry, the other failures."""
    failures = "".join(others) if others else "  <NO_OTHER_FAILURES>\n"
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
            + "-" * 60 + "\nFailures:\n" + failures + "-" * 60 + "\nRoot Cause (first observed failure):\n"
            + root + "=" * 60 + "\n")


def _two_boxes(first_node_time: str, second_node_time: str) -> str:
    """Node A's box (ranks 0 and 1 at one time), node B's (rank 2, local rank 0, at another)."""
    a = _box(_entry(0, 0, 0, 1, 1000, first_node_time, "nodeA"), _entry(1, 1, 1, 1, 1001, first_node_time, "nodeA"))
    b = _box(_entry(0, 2, 0, 1, 2000, second_node_time, "nodeB"))
    return a + b


def test_two_boxes_name_the_entry_strictly_earliest_across_them(tmp_path):
    v = diagnose_paste(tmp_path, _two_boxes("2024-03-01_10:00:52", "2024-03-01_10:00:01"))
    assert v.cls == "dead-rank" and named_ranks(v) == [2] and v.confidence == "medium", v.summary


def test_two_boxes_whose_earliest_times_tie_name_none(tmp_path):
    v = diagnose_paste(tmp_path, _two_boxes("2024-03-01_10:00:01", "2024-03-01_10:00:01"))
    assert named_ranks(v) == [], v.summary


def _earliest(tmp_path, text: str):
    (tmp_path / "paste.log").write_text(text)
    col = collect([tmp_path / "paste.log"])
    return earliest_box_failure(col, first_errors(col), own_output(col))


def test_two_boxes_beside_a_timeout_name_none(tmp_path):
    # a rank that timed out waited on a hung one: the first to exit may be a victim
    boxes = _two_boxes("2024-03-01_10:00:52", "2024-03-01_10:00:01")
    assert _earliest(tmp_path, boxes) is not None
    text = ("[rank7]:[E ProcessGroupNCCL.cpp:563] [Rank 7] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
            "milliseconds before timing out.\n" + boxes)
    assert _earliest(tmp_path, text) is None


def test_two_boxes_after_an_untimed_error_of_another_rank_name_none(tmp_path):
    text = ("[rank5]: Traceback (most recent call last):\n[rank5]:   File \"train.py\", line 9, in <module>\n"
            "[rank5]:     step()\n[rank5]: ValueError: bad batch\n"
            + _two_boxes("2024-03-01_10:00:52", "2024-03-01_10:00:01"))
    assert 2 not in named_ranks(v := diagnose_paste(tmp_path, text)), v.summary


# ---------------------------------------------------------------- srun's report inside a sentence

_QUESTION = ("I get the error slurmstepd: error: Detected 1 oom_kill event in StepId=113.0. Some of the step tasks "
             "have been OOM Killed. srun: error: cn17: task 3: Out Of Memory, how do I fix this?\n")


def test_srun_task_end_quoted_inside_a_sentence_is_read_as_its_task():
    (t,) = parse_torch_log(_QUESTION).task_exits
    assert t.tasks == (3,) and t.oom and t.host == "cn17"


def test_srun_task_end_quoted_inside_a_sentence_names_the_task(tmp_path):
    v = diagnose_paste(tmp_path, _QUESTION)
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


# ---------------------------------------------------------------- the test harness's caught exception

def _harness(rank: int, pid: int) -> str:
    head = f"[rank{rank}]:E0207 07:54:31.862000 {pid} torch/testing/_internal/common_distributed.py:939] "
    return "".join(head + body + "\n" for body in (
        "Caught exception: ", "Traceback (most recent call last):",
        '  File "torch/testing/_internal/common_distributed.py", line 929, in run_test',
        "    getattr(self, test_name)()"))


def test_harness_caught_exception_of_one_rank_is_its_death(tmp_path):
    v = diagnose_paste(tmp_path, _harness(1, 4712))
    assert v.cls == "dead-rank" and named_ranks(v) == [1] and v.confidence == "medium", v.summary


def test_harness_words_from_another_source_are_not_the_harness():
    text = "[rank1]:E0207 07:54:31.862000 4712 mytool/runner.py:12] Caught exception: \n"
    assert parse_torch_log(text).harness_caught == ()


def test_harness_caught_on_two_ranks_names_none(tmp_path):
    v = diagnose_paste(tmp_path, _harness(1, 4712) + _harness(0, 4711))
    assert named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- Lightning's global-rank claims

def _claims(*ranks: int, world: int, old: bool = True, local: bool = True) -> str:
    words = "initializing ddp" if old else "Initializing distributed"
    out = ["GPU available: True, used: True"]
    for r in ranks:
        if local:
            out.append(f"LOCAL_RANK: {r % 4} - CUDA_VISIBLE_DEVICES: [0,1,2,3]")
        out.append(f"{words}: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{world}")
    return "\n".join(out) + "\n"


def test_two_processes_claiming_one_global_rank_are_an_init_failure_naming_none(tmp_path):
    v = diagnose_paste(tmp_path, _claims(1, 1, 2, 2, 3, 3, 0, 0, world=8))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_new_lightning_words_are_read_alike(tmp_path):
    v = diagnose_paste(tmp_path, _claims(0, 0, 1, 1, world=4, old=False))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


# Round 26 (setupphase.py): a text that ends at the start claims, with nothing after them, is
# a job that stopped in its process group's set-up (field-18's two Lightning ranks stuck after
# `initializing ddp`: truth init): init-failure naming none, low. These are not duplicate
# claims (ddpclaims.py's wrong assignment, medium): what they still must not do is name a rank
# or say two processes claimed one rank.


def test_every_member_claimed_once_then_nothing_is_no_init_failure(tmp_path):
    v = diagnose_paste(tmp_path, _claims(0, 1, 2, 3, world=4))
    assert named_ranks(v) == [] and "claim" not in v.summary, v.summary
    v = diagnose_paste(tmp_path / "alone", _claims(0, world=5, old=False))
    assert named_ranks(v) == [] and "claim" not in v.summary, v.summary


def test_a_logger_printing_each_line_twice_is_no_duplicate_claim(tmp_path):
    text = "".join(line + "\n" + line + "\n" for line in _claims(0, 1, world=8, local=False).splitlines())
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [] and "claim" not in v.summary, v.summary


def test_a_whole_world_claimed_again_is_a_rerun_not_a_duplicate(tmp_path):
    for where, world in (("now", 4), ("next", 8)):
        v = diagnose_paste(tmp_path / where, _claims(0, 1, 2, 3, 0, 1, 2, 3, world=world))
        assert named_ranks(v) == [] and "claim" not in v.summary, v.summary


def test_duplicate_claims_before_a_logged_step_are_no_init_failure(tmp_path):
    text = _claims(1, 1, 0, 0, world=8) + "Epoch 0: 100%|##########| 10/10 [00:01<00:00, loss=0.5]\n" \
        + "epoch 1 step 20 loss 0.41\n"
    assert diagnose_paste(tmp_path, text).cls != "init-failure"
