"""Round 14 of issue 19's rules (branch i19-r14), logs mode: the false culprits and misses of
field-2 (tests/fixtures/diagnose-field/issues-2: real pasted logs) and held-out-11
(tests/fixtures/diagnose-jobs/held-out-11: replayed gloo jobs), each by its mechanism.

Where a field case's folder name holds a rank (`...-rank0`), the paste is copied into a folder
named in no rank's words first, so that a test reads what the paste alone says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from support import FIXTURES, diagnose_saved, named_ranks

from healthcheck.parsers.torch_log import parse_torch_log

FIELD2 = FIXTURES / "diagnose-field" / "issues-2" / "saved"
H11 = FIXTURES / "diagnose-jobs" / "held-out-11" / "saved"


def _neutral(tmp_path: Path, case: str) -> Path:
    """The field case's files in a folder whose name says nothing of a rank."""
    folder = tmp_path / "case"
    shutil.copytree(FIELD2 / case, folder)
    return folder


# ---------------------------------------------------------------- a traceback cut short


OFI = "ofi-rank3-verify-params-remote-exited-then-rank2-traceback-start"


def test_the_parser_keeps_a_traceback_the_text_ends_inside():
    log = parse_torch_log((FIELD2 / OFI / "paste.log").read_text())
    assert [c.rank for c in log.cut_tracebacks] == [2]
    assert [e.rank for e in log.exceptions] == [3]  # rank 3's traceback ended with its exception


def test_a_traceback_cut_before_its_exception_is_not_a_quiet_leaver(tmp_path):
    # rank 2's traceback opens at the paste's end beside rank 3's "remote process exited":
    # hc named rank 2 "left the job early: no error in its output"; its output is cut, not quiet
    verdict = diagnose_saved(_neutral(tmp_path, OFI))
    assert named_ranks(verdict) == [], verdict.summary
