"""Message families the parsers left unread in real outputs (issue 20's audit of unread lines,
tests/field/unread.py): each test reads a real tuning or corpus file and asserts the fact its
once-unread lines carry, and that the line is no longer counted unread. The audit itself:
`lines.collecting_unread` hands over every unread line, not only the sample, and the audit
never opens a held-out file.
"""

from __future__ import annotations

from pathlib import Path

from field import unread as audit

from healthcheck.parsers.lines import SAMPLE_MAX, collecting_unread
from healthcheck.parsers.nccl_log import parse_nccl_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "corpus"
FIELD = FIXTURES / "field"


def unread_texts(facts) -> list[str]:
    return [s.text for s in facts.unrecognized.sample]


# ---------------------------------------------------------------- the audit's mechanism


def test_collecting_unread_hands_over_every_unread_line_not_only_the_sample():
    # a real EFA job's output: NCCL's lines among libfabric's and PMIx's, far more unread than sampled
    text = (FIELD / "repos/nccl-log/p4d-2node-srun-label-nccl-2.18.3-aws-ofi-efa-full-job-out.txt").read_text()
    with collecting_unread() as every:
        log = parse_nccl_log(text)
    assert log.unrecognized.count > SAMPLE_MAX
    assert len(every) == log.unrecognized.count
    assert [line.number for line in every[:SAMPLE_MAX]] == [s.line for s in log.unrecognized.sample]
    parse_nccl_log(text)  # outside the block nothing is collected
    assert len(every) == log.unrecognized.count


def test_the_audit_reads_only_tuning_files_of_the_field_collections():
    tuning = {path for _, path in audit.tuning_files()}
    held_out = {ff.path for ff in audit.field_facts.load() if ff.split != "tuning"}
    assert tuning and held_out and not tuning & held_out


def test_the_audit_marks_health_tokens_and_folds_values():
    assert audit.relevant("NVRM: GPU Board Serial Number: 0322716036227")  # NVRM: the driver speaking
    assert audit.relevant("NCCL INFO Connected all rings") is False
    assert audit.relevant("misc/socket.cc:503 NCCL WARN socketProgress: Connection closed by remote peer")
    assert audit.relevant("pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:00:03.1")
    assert audit.relevant("NCCL INFO Using network Socket") is False
    assert audit.relevant("peer 10.1.2.3<54862>")
    assert audit.normalised("busId 4c000 commId 0x1f2e - Init START") == audit.normalised(
        "busId 5d000 commId 0xabc - Init START")
