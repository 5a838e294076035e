"""Round 21 of issue 19's rules (branch i19-r21), on the mechanisms field-12 missed (read in
this round, tests/fixtures/diagnose-field/issues-12): Open MPI's `--tag-output` tags between
the pieces one process wrote of one line (Horovod's stall inspector behind a log viewer's
column), torchrun's box naming one failed rank and nothing of its own output, a rich-drawn
traceback, and an unknown verdict that says what it lists. Texts are built here in the
shapes the tools' sources print."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.torch_log import parse_torch_log

# ---------------------------------------------------------------- tags between a line's pieces

_WARNING = ("One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
            "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
            "trying to submit different tensors or that only subset of ranks is submitting tensors, which will "
            "cause deadlock.")


def _tagged(tag: str, *pieces: str) -> str:
    """One line a process wrote in pieces, each forwarded by mpirun behind its tag."""
    return "".join(tag + p for p in pieces)


def _stall(tag: str, column: str, stalled: int) -> str:
    """Horovod 0.16+'s stall report (glog's line written in pieces), each line behind `column`."""
    head = _tagged(tag, "[", "2024-05-02 10:14:03", ".", "214399", ": ", "W", " ",
                   "horovod/common/stall_inspector.cc", ":", "105", "] ", _WARNING)
    return "".join(f"{column}{line}\n\n" for line in
                   (head, f"{tag}Stalled ranks:", f"{tag}{stalled}: [HorovodAllreduce_grad_0, HorovodAllreduce_"
                                                   f"grad_1]{tag}"))


def test_one_process_pieces_behind_the_same_tag_read_as_its_line():
    tag = "[1,3]<stderr>:"
    text = _tagged(tag, "[", "2024-05-02 10:14:03", ".", "214399", ": W ", "stall_inspector.cc:105] done")
    (line,) = list(read_lines(text, interleaved=True))
    assert line.task == 3 and line.text == "[2024-05-02 10:14:03.214399: W stall_inspector.cc:105] done"
    assert "retagged" in line.repairs


def test_two_processes_torn_into_one_line_stay_apart_when_peeled():
    text = "[1,0]<stdout>:step 4 loss[1,1]<stdout>:step 4 loss 0.5[1,0]<stdout>: 0.7"
    assert [(x.task, x.text) for x in read_lines(text, interleaved=True)] == [
        (0, "step 4 loss"), (1, "step 4 loss 0.5"), (0, " 0.7")]


def test_a_stamped_viewer_column_before_the_first_tag_is_taken_off():
    (line,) = list(read_lines("2024-05-02 10:14:03 UTC worker.0 -- [1,2]<stderr>:0: [allreduce.w]\n",
                              interleaved=True))
    assert line.task == 2 and line.text == "0: [allreduce.w]" and line.stamp == "2024-05-02 10:14:03"
    # a process's own words before a tag are no column: they stay a fragment of their own
    words = list(read_lines("the loss went up at step 12 and then [1,2]<stderr>:x\n", interleaved=True))
    assert [x.task for x in words] == [None, 2]


def test_stall_report_in_tagged_pieces_behind_a_viewer_column_names_the_stalled_rank(tmp_path):
    v = diagnose_paste(tmp_path, _stall("[1,0]<stderr>:", "2024-05-02 10:14:03 UTC master.0 -- ", 2))
    assert v.cls == "stuck-rank" and named_ranks(v) == [2], v.summary


def test_stall_report_naming_its_own_coordinator_names_it_for_the_report(tmp_path):
    # the stalled rank is the block's `0:`, not the `[1,0]` tag the coordinator's lines carry
    v = diagnose_paste(tmp_path, _stall("[1,0]<stderr>:", "2024-05-02 10:14:03 UTC master.0 -- ", 0))
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- torchrun's box, one failure

def _box(*entries: tuple[int, int, int, str], other: bool = False) -> str:
    """torchrun's ChildFailedError box; entries (rank, exitcode, pid, time), the first the root cause."""
    def entry(rank: int, code: int, pid: int, time: str) -> str:
        return (f"[{rank}]:\n  time      : {time}\n  host      : node1\n  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")
    root, *rest = entries
    failures = "".join(entry(*e) for e in rest) if rest else "  <NO_OTHER_FAILURES>\n"
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
            + "-" * 60 + "\nFailures:\n" + failures + "-" * 60 + "\nRoot Cause (first observed failure):\n"
            + entry(*root) + "=" * 60 + "\n")


_RICH = ("│   248 │   │   │   # @record will copy the first error (root cause)                       │\n"
         "│ ❱ 250 │   │   │   raise ChildFailedError(                                                │\n"
         "│   251 │   │   │   │   name=entrypoint_name,                                              │\n"
         "│   252 │   │   │   │   failures=result.failures,                                          │\n"
         "│   253 │   │   │   )                                                                      │\n"
         "╰──────────────────────────────────────────────────────────────────────────────────────────╯\n"
         "ChildFailedError:\n")


def test_box_naming_one_failed_rank_and_nothing_of_its_own_is_its_death(tmp_path):
    v = diagnose_paste(tmp_path, _box((2, 1, 4242, "2024-03-01_10:00:05")))
    assert v.cls == "dead-rank" and named_ranks(v) == [2] and v.confidence == "medium", v.summary


def test_box_after_a_rich_traceback_names_its_one_failed_rank(tmp_path):
    v = diagnose_paste(tmp_path, _RICH + _box((0, 1, 15724, "2023-07-27_14:15:41"))[len("torch.distributed.elastic."
                                                                               "multiprocessing.errors."
                                                                               "ChildFailedError: \n"):])
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_box_one_failure_beside_a_timeout_names_none(tmp_path):
    # a rank that timed out waited for another: the box's one exit may be that victim's
    v = diagnose_paste(tmp_path, "[rank1]:[E ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed\n"
                         "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                         "Timed out waiting 1800000ms for recv operation to complete\n"
                         + _box((1, 1, 4243, "2024-03-01_10:30:05")))
    assert named_ranks(v) != [1] or v.cls != "dead-rank", v.summary


def test_box_of_two_failures_names_none_and_says_what_it_lists(tmp_path):
    v = diagnose_paste(tmp_path, _box((0, 1, 1234, "2024-03-01_10:00:05"), (1, 1, 1235, "2024-03-01_10:00:05")))
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert v.first_failure is not None
    assert "no failure" not in v.why_unknown and "2 launcher-reported failures" in v.why_unknown, v.why_unknown


def test_unknown_never_says_it_saw_no_failure_beside_the_one_it_lists(tmp_path):
    v = diagnose_paste(tmp_path, "torchrun --nproc_per_node 2 train.py\n"
                         "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.\n")
    assert v.cls == "unknown" and v.first_failure is not None, v.summary
    assert "no failure" not in v.why_unknown and "CUDA driver initialization failed" in v.why_unknown, v.why_unknown


# ---------------------------------------------------------------- rich's traceback

_RICH_WHOLE = (
    "╭──────────────────── Traceback (most recent call last) ─────────────────────╮\n"
    "│ /home/u/train_db.py:412 in train                                            │\n"
    "│                                                                             │\n"
    "│   411 │   for step, batch in enumerate(loader):                             │\n"
    "│ ❱ 412 │   │   loss = model(batch[\"pixels\"])                                  │\n"
    "│   413 │   │   loss.backward()                                               │\n"
    "╰─────────────────────────────────────────────────────────────────────────────╯\n"
    "KeyError: 'pixels'\n")


def test_rich_traceback_is_read_as_a_traceback_with_its_frame():
    (e,) = parse_torch_log(_RICH_WHOLE).exceptions
    assert e.type == "KeyError" and e.framed and e.frame == "train_db.py:412 in train"


def test_rich_traceback_rows_are_never_joined_as_a_hard_wrap():
    # every row of a drawn box is the box's width: no terminal wrapped them
    log = parse_torch_log(_RICH + _RICH)
    assert [e.type for e in log.exceptions] == ["ChildFailedError", "ChildFailedError"]
    assert all(e.framed for e in log.exceptions)


# ---------------------------------------------------------------- a pipeline's stages a step apart

_SITE = "/usr/lib/python3.11/site-packages/torch/distributed"


def _traceback(rank: int, own: list[tuple[int, str, str]], c10d: str, error: str, label: str = "") -> str:
    """A rank's uncaught traceback as torch's excepthook prints it: its own frames (line,
    function, source), then the c10d function `c10d` (none: the wait is its own code's)."""
    pre = label or f"{rank}: [rank{rank}]: "
    lines = ["Traceback (most recent call last):"]
    for number, func, source in own:
        lines += [f'  File "/home/u/job.py", line {number}, in {func}', f"    {source}"]
    if c10d:
        lines += [f'  File "{_SITE}/c10d_logger.py", line 83, in wrapper', "    return func(*args, **kwargs)",
                  f'  File "{_SITE}/distributed_c10d.py", line 2799, in {c10d}', "    work.wait()"]
    lines.append(error)
    return "".join(f"{pre}{x}\n" for x in lines)


def _pipelinediagnose_paste(steps: dict[int, int]) -> str:
    """Two pipelines of two stages (ranks 0-1, 2-3) logging their steps; rank 1 receives a
    larger activation than it expects and gloo aborts it; its neighbours fail in their
    point-to-point waits."""
    out = []
    for rank, last in sorted(steps.items()):
        out += [f"{rank}: 2026-01-05 10:00:0{s},{100 + rank} stage{rank % 2}: INFO step {s} done in 0.01 s\n"
                for s in range(last + 1)]
    out.append("1: terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
               "1:   what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
               "op.preamble.length <= op.nbytes. 1280 vs 1024. Received data size doesn't match expected size. "
               "Is there a distributed collective mismatch in your code?\n")
    closed = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
              "[127.0.0.1]:27348")
    out.append(_traceback(0, [(134, "step", "dist.recv(grad, src=self.rank + 1)")], "recv", closed))
    out.append(_traceback(2, [(91, "receive_input", "dist.irecv(x, src=self.prev_rank(step)).wait()")], "",
                          closed))
    out.append(_traceback(3, [(144, "step", "dist.all_reduce(wgrad, group=self.dp_group)")], "all_reduce",
                          closed))
    return "".join(out)


def test_a_point_to_point_size_report_never_names_a_stage_a_step_ahead(tmp_path):
    # rank 3's pipeline is another one: it logged step 3 before the abort reached it
    v = diagnose_paste(tmp_path, _pipelinediagnose_paste({0: 2, 1: 2, 2: 2, 3: 3}))
    assert 3 not in named_ranks(v), v.summary
    assert v.cls == "shape-mismatch" and named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- every waiter on a send

_SEND = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting " \
        "6000ms for send operation to complete"
_RECV = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting " \
        "6000ms for recv operation to complete"


def _aheaddiagnose_paste(second: str) -> str:
    """Three ranks: rank 0 timed out in a later all_gather (its final save), ranks 1 and 2 in
    the end-of-job all_reduce before it, rank 1 on a send, rank 2 on `second`."""
    save = [(105, "end_of_job", "save(model)"), (81, "save", "dist.all_gather(sizes, size)")]
    metrics = [(99, "end_of_job", "dist.all_reduce(metrics)")]
    return (_traceback(1, metrics, "all_reduce", _SEND, "[rank1]: ")
            + _traceback(2, metrics, "all_reduce", second, "[rank2]: ")
            + _traceback(0, save, "all_gather", _SEND, "[rank0]: "))


def test_others_all_waiting_on_sends_in_the_collective_a_rank_went_past_name_none(tmp_path):
    v = diagnose_paste(tmp_path, _aheaddiagnose_paste(_SEND))
    assert v.cls == "collective-mismatch" and named_ranks(v) == [], v.summary


def test_a_waiter_on_a_receive_still_names_the_rank_in_another_collective(tmp_path):
    # rank 2 waits to receive: a rank that stayed out of the all_reduce leaves one so
    v = diagnose_paste(tmp_path, _aheaddiagnose_paste(_RECV))
    assert v.cls == "collective-mismatch" and named_ranks(v) == [0], v.summary


def test_box_one_failure_of_a_larger_launched_world_names_none(tmp_path):
    # two nodes of one worker each: the box is one node's, and its rank may have died of the other's
    v = diagnose_paste(tmp_path, "$ torchrun --nnodes 2 --nproc_per_node 1 --rdzv-endpoint n0:29500 train.py\n"
                         + _box((1, 1, 4242, "2024-03-01_10:00:05")))
    assert named_ranks(v) == [], v.summary
