"""Round 25 of issue 19's rules (branch i19-r25), on the mechanisms field-17 missed: torchrun
boxes where every worker died of one signal in one second (a cause common to the host, no
rank stands out), and gloo's full-mesh connect failing while a process group is set up (an
init failure naming no rank). Texts are built here in the shapes the tools' sources print
(torch/distributed/elastic/multiprocessing/errors' box, ProcessGroupGloo's glog line)."""

from __future__ import annotations

from support import diagnose_saved, named_ranks


def _paste(tmp_path, text: str):
    """The verdict on one pasted text, read from a folder whose name says nothing."""
    job = tmp_path / "job"
    job.mkdir(parents=True)
    (job / "paste.log").write_text(text)
    return diagnose_saved(job)


# ---------------------------------------------------------------- a common death in torchrun's box

_BAR = "=" * 54 + "\n"
_RULE = "-" * 54 + "\n"


def _entry(index: int, rank: int, time: str, exitcode: int, pid: int, host: str = "gpu07") -> str:
    signal = {-7: "SIGBUS", -11: "SIGSEGV", -9: "SIGKILL", -15: "SIGTERM"}.get(exitcode)
    trace = (f"Signal {-exitcode} ({signal}) received by PID {pid}" if signal
             else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    return (f"[{index}]:\n  time      : {time}\n  host      : {host}\n  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {exitcode} (pid: {pid})\n  error_file: <N/A>\n  traceback : {trace}\n")


def _box(root: str, others: list[str]) -> str:
    """torchrun's ChildFailedError box: the Root Cause and the other failures, as printed."""
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + _BAR
            + "train.py FAILED\n" + _RULE + "Failures:\n" + "".join(others) + _RULE
            + "Root Cause (first observed failure):\n" + root + _BAR)


def test_every_worker_dead_of_one_signal_in_one_second_names_none(tmp_path):
    t = "2025-03-02_11:20:07"
    v = _paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -7, 5101), _entry(2, 2, t, -7, 5102),
                                                            _entry(3, 3, t, -7, 5103)]))
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert "SIGBUS" in v.summary and "gpu07" in v.summary and "same second" in v.summary, v.summary


def test_world_of_two_both_segfaulted_in_one_second_names_none(tmp_path):
    t = "2025-03-02_11:20:07"
    v = _paste(tmp_path, _box(_entry(0, 1, t, -11, 5101), [_entry(1, 0, t, -11, 5100)]))
    assert v.cls == "unknown" and named_ranks(v) == [], v.summary
    assert "SIGSEGV" in v.summary, v.summary


def test_one_signal_and_one_exit_code_names_the_signalled(tmp_path):
    t = "2025-03-02_11:20:07"
    v = _paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, 1, 5101)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_two_signals_in_one_second_are_no_common_death(tmp_path):
    t = "2025-03-02_11:20:07"
    v = _paste(tmp_path, _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -11, 5101)]))
    assert v.cls == "dead-rank" and 0 in named_ranks(v), v.summary


def test_one_signal_a_second_apart_is_no_common_death(tmp_path):
    v = _paste(tmp_path, _box(_entry(0, 0, "2025-03-02_11:20:07", -7, 5100),
                              [_entry(1, 1, "2025-03-02_11:20:08", -7, 5101)]))
    assert v.cls == "dead-rank" and 0 in named_ranks(v), v.summary


def test_signal_beside_the_agents_sigterms_is_no_common_death(tmp_path):
    t = "2025-03-02_11:20:07"
    v = _paste(tmp_path, _box(_entry(0, 2, t, -7, 5102), [_entry(1, 0, t, -15, 5100), _entry(2, 1, t, -15, 5101),
                                                            _entry(3, 3, t, -7, 5103)]))
    assert v.cls == "dead-rank" and named_ranks(v) == [2, 3], v.summary


def test_a_rank_that_raised_first_is_still_named(tmp_path):
    t = "2025-03-02_11:20:07"
    own = ("[rank1]: Traceback (most recent call last):\n"
           '[rank1]:   File "/job/train.py", line 40, in <module>\n'
           "[rank1]:     step(batch)\n"
           '[rank1]:   File "/job/train.py", line 22, in step\n'
           "[rank1]:     raise ValueError('bad batch')\n"
           "[rank1]: ValueError: bad batch\n")
    v = _paste(tmp_path, own + _box(_entry(0, 0, t, -7, 5100), [_entry(1, 1, t, -7, 5101)]))
    assert v.cls == "dead-rank" and 1 in named_ranks(v), v.summary

