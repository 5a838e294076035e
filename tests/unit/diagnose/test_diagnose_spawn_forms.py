"""mp.spawn's other reports of the process that failed (field set field-6, measured before this
was written): the process that raised (`-- Process N terminated with the following error:`),
and torch 1.x's plain `Exception: process N terminated with signal S`. Lines are quoted from
the field set's real pastes (tests/fixtures/diagnose-field/issues-6, sources in truths.yaml)."""

from __future__ import annotations

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build


def _verdict(tmp_path, text: str):
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "paste.log").write_text(text)
    return build(collect([str(folder)]))


def _named(v) -> list[int]:
    return sorted(o.rank for o in v.odd_ranks if o.rank is not None)


def test_the_process_mp_spawn_says_raised_is_named_though_its_traceback_is_cut(tmp_path):
    text = ("torch.multiprocessing.spawn.ProcessRaisedException: \n\n"
            "-- Process 0 terminated with the following error:\n"
            "Traceback (most recent call last):\n"
            '  File "/home/user/miniconda/lib/python3.9/site-packages/torch/multiprocessing/spawn.py",'
            " line 68, in _wrap\n    fn(i, *args)\n"
            '  File "/home/user/app/DDP-script.py", line 128, in main\n')
    v = _verdict(tmp_path, text)
    assert v.cls == "dead-rank" and _named(v) == [0]


def test_torch_1_plain_exception_names_the_killed_process(tmp_path):
    text = ('  File "/home/ubuntu/anaconda3/envs/3D/lib/python3.6/site-packages/torch/multiprocessing/spawn.py",'
            " line 107, in join\n    (error_index, name)\n"
            "Exception: process 3 terminated with signal SIGKILL\n")
    v = _verdict(tmp_path, text)
    assert v.cls == "dead-rank" and _named(v) == [3]


def test_a_plain_exception_of_other_words_names_nobody(tmp_path):
    v = _verdict(tmp_path, "Exception: process pool terminated unexpectedly\n")
    assert _named(v) == []
