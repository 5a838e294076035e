"""torchrun's box lists the failures other than the first under `Failures:` and the first under
`Root Cause`: an entry read under `Failures:` is never taken for the first failure, also when
the text ends before the Root Cause (field-14: a paste cut there named the other failure)."""

from __future__ import annotations

from support import diagnose_paste, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log


def _entry(rank: int, code: int, pid: int, time: str) -> str:
    return (f"[{rank}]:\n  time      : {time}\n  host      : node1\n  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")


_HEAD = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 + "\ntrain.py FAILED\n"
         + "-" * 60 + "\nFailures:\n")
_ROOT = "-" * 60 + "\nRoot Cause (first observed failure):\n"


def test_an_entry_under_failures_is_read_as_another_failure_not_the_root_cause():
    log = parse_torch_log(_HEAD + _entry(1, 2, 37881, "2023-03-16_22:39:06"))
    (block,) = log.child_failed
    (entry,) = block.failures
    assert entry.other_failure and not entry.root_cause and block.root_cause_cut


def test_a_box_cut_before_its_root_cause_names_no_rank(tmp_path):
    v = diagnose_paste(tmp_path, _HEAD + _entry(1, 2, 37881, "2023-03-16_22:39:06"))
    assert named_ranks(v) == [], v.summary


def test_the_same_box_with_its_root_cause_names_the_root_cause(tmp_path):
    text = _HEAD + _entry(1, 2, 37881, "2023-03-16_22:39:07") + _ROOT + _entry(0, 1, 37880, "2023-03-16_22:39:06")
    log = parse_torch_log(text)
    (block,) = log.child_failed
    assert not block.root_cause_cut and block.root_cause is not None and block.root_cause.rank == 0
    v = diagnose_paste(tmp_path, text)
    assert 1 not in named_ranks(v), v.summary


def test_two_boxes_one_cut_before_its_root_cause_name_no_rank(tmp_path):
    whole = (_HEAD + "  <NO_OTHER_FAILURES>\n" + _ROOT + _entry(4, 1, 19401, "2023-06-03_22:45:01") + "=" * 60 + "\n")
    cut = _HEAD + _entry(3, 1, 19418, "2023-06-03_22:44:00")
    v = diagnose_paste(tmp_path, cut + whole)
    assert named_ranks(v) == [], v.summary
