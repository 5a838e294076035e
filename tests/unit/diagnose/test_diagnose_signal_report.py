"""Open MPI's signal report read as the death of the rank whose label it carries (issue 19).

The pastes are field-7's (tests/fixtures/diagnose-field/issues-7, sources in truths.yaml):
Open MPI `--tag-output` jobs whose rank 3 died of a segmentation fault, one with the
report's header and one with only the middle of its backtrace, and two reports with no
rank label, from which nobody may be named."""

from __future__ import annotations

import shutil
from pathlib import Path

from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.parsers.torch_log.reader import parse_torch_log

FIELD7 = Path(__file__).resolve().parents[2] / "fixtures" / "diagnose-field" / "issues-7" / "saved"
HEADED = FIELD7 / "mpirun-tag-output-rank-3-segfault-in-horovod-mpi-lib" / "paste.log"
FRAMES_ONLY = FIELD7 / "mpirun-tag-output-rank-3-backtrace-middle-wrapped" / "paste.log"
UNLABELLED = FIELD7 / "six-local-processes-segfault-invalid-permissions-no-ranks" / "paste.log"


def _verdict(tmp_path: Path, paste: Path):
    folder = tmp_path / "case"
    folder.mkdir()
    shutil.copy(paste, folder / "paste.log")
    return build(collect([str(folder)]))


def _named(v) -> list[int]:
    return sorted(o.rank for o in v.odd_ranks if o.rank is not None)


def test_a_tagged_report_is_one_death_of_its_rank_with_its_signal():
    log = parse_torch_log(HEADED.read_text())
    deaths = [e for e in log.exceptions if e.native]
    assert [(e.rank, e.type, e.pid) for e in deaths] == [(3, "SIGSEGV", 194928)]
    assert "Segmentation fault (11)" in deaths[0].message


def test_the_middle_of_a_report_is_still_its_ranks_death():
    log = parse_torch_log(FRAMES_ONLY.read_text())
    deaths = [e for e in log.exceptions if e.native]
    assert [(e.rank, e.type) for e in deaths] == [(3, "signal")]


def test_two_ranks_reports_interleaved_are_two_deaths():
    text = ("[1,3]<stderr>:[n1:11] *** Process received signal ***\n"
            "[1,1]<stderr>:[n1:12] *** Process received signal ***\n"
            "[1,3]<stderr>:[n1:11] Signal: Segmentation fault (11)\n"
            "[1,1]<stderr>:[n1:12] Signal: Bus error (7)\n"
            "[1,3]<stderr>:[n1:11] [ 0] /lib64/libc.so.6(+0x1)[0x1]\n"
            "[1,1]<stderr>:[n1:12] *** End of error message ***\n")
    deaths = sorted((e.rank, e.type) for e in parse_torch_log(text).exceptions if e.native)
    assert deaths == [(1, "SIGBUS"), (3, "SIGSEGV")]


def test_a_bracketed_line_that_is_no_report_is_not_a_death():
    text = "[n1:11] loading shard 3 of 8\n[1,2]<stdout>:[host:9] step 10 loss 0.3\n"
    assert not [e for e in parse_torch_log(text).exceptions if e.native]


def test_the_tagged_rank_that_died_of_a_signal_is_named(tmp_path: Path):
    v = _verdict(tmp_path, HEADED)
    assert v.cls == "dead-rank" and _named(v) == [3]


def test_the_cut_report_names_its_rank_too(tmp_path: Path):
    v = _verdict(tmp_path, FRAMES_ONLY)
    assert v.cls == "dead-rank" and _named(v) == [3]


def test_reports_without_rank_labels_name_nobody(tmp_path: Path):
    v = _verdict(tmp_path, UNLABELLED)
    assert _named(v) == []
