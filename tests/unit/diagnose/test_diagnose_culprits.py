"""Issue 19, the four mechanisms that failed on unseen jobs, on real gloo jobs of the tuning
set (tests/diagnose_jobs/scenarios.py, saved by `harness.py --keep` in
tests/fixtures/diagnose-jobs/tuning/, torch 2.13 on CPU):

* several culprits at once: every rank whose own exception came before its peers'
  collective errors is named (torchrun with and without @record, srun -l labels, plain
  per-rank files), and a rank that raised after the peers' errors still is not;
* gloo's size check read per rank: one report gives two ranks' sizes, which is no
  majority: the two are said and neither is named (a tensor that grew and one that shrank
  give the same single report, both captured); a strict minority of the reported sizes is
  named;
* an op mismatch from saved logs where a peer's exit cut the odd rank's wait short
  (Connection closed inside all_gather): its traceback still says where it waited;
* `hc run` around torchrun: a manifest of the launcher (an older hc run recorded the
  agent as rank 0 of world 1) is not a rank's, and the rank's death is named.
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from healthcheck.diagnose.evidence import JobEvidence
from healthcheck.diagnose.ringsize import SizeReport, chunk_sizes, ring_parties
from healthcheck.diagnose.runmanifest import starts_ranks
from healthcheck.diagnose.sources import Collected, collect
from healthcheck.diagnose.verdict import build

TUNING = FIXTURES / "diagnose-jobs" / "tuning"


def verdict(slug: str):
    return build(collect([TUNING / slug]))


def named(v) -> list[int]:
    return [o.rank for o in v.odd_ranks]


@pytest.mark.parametrize(("slug", "culprits"), [
    ("two-raise-torchrun-record-w5-r0-r3", [0, 3]),
    ("two-raise-torchrun-w4-r1-r2", [1, 2]),
    ("two-raise-srun-labelled-w6-r2-r5", [2, 5]),
    ("three-raise-plain-w5-r1-r2-r4", [1, 2, 4]),
])
def test_every_rank_that_raised_before_its_peers_errors_is_named(slug, culprits):
    v = verdict(slug)
    assert v.cls == "dead-rank" and named(v) == culprits, v.summary
    assert "ValueError" in v.summary and "forward_backward" in v.summary
    assert "raised together" in v.summary and "after them" in v.summary, v.summary


def test_a_rank_that_raised_after_the_first_is_still_not_named():
    """exc-order (tests/fixtures/diagnose): the peers' own exceptions (wrapped `from None`)
    come half a second after rank 2's, past the step in which it raised."""
    v = build(collect([FIXTURES / "diagnose" / "exc-order"]))
    assert named(v) == [2] and "after it" in v.summary, v.summary


@pytest.mark.parametrize("slug", [
    "size-mismatch-plain-r3", "size-mismatch-torchrun-w3-r1", "dtype-mismatch-plain-w3-r0",
    "dtype-mismatch-srun-labelled-w5-r4", "small-size-plain-w4-r1", "small-size-torchrun-w3-r2",
    "size-mismatch-plain-w2-r0", "dtype-mismatch-plain-w2-r1",
])
def test_one_size_report_names_its_two_ranks_and_neither_as_the_culprit(slug):
    """The reporter and the rank it receives from in gloo's ring are both said; with one
    report (a tensor that grew on the sender, or shrank on the reporter: `small-*`) no
    majority says which is odd, so none is named (before: gloo's aborted rank was named,
    the wrong one in three of these)."""
    v = verdict(slug)
    assert v.cls == "shape-mismatch" and named(v) == [], v.summary
    assert "disagree on a tensor size" in v.summary and "no majority" in v.summary, v.summary
    reporter = int(v.summary.split(" received ")[0].rsplit("rank ", 1)[1])
    sender = int(v.summary.split(" per chunk from rank ")[1].split(" ")[0])
    assert f"ranks {min(reporter, sender)} and {max(reporter, sender)} disagree" in v.summary


def test_the_minority_of_the_reported_sizes_is_named():
    """Two reports that give three ranks' chunk sizes: the one size held by one rank is odd."""
    col = Collected(evidence=JobEvidence(job="logs"))
    for r in range(4):
        col.evidence.rank(r)
    reports = [SizeReport(rank=0, received=12, expected=8), SizeReport(rank=2, received=8, expected=8)]
    assert chunk_sizes(reports, 4) == {0: "8 bytes", 1: "12 bytes", 2: "8 bytes", 3: "8 bytes"}
    odd, text = ring_parties(col, reports)
    assert odd == (1,) and "12 bytes" in text


def test_the_broadcast_source_is_still_named():
    v = verdict("broadcast-source-plain-r0")
    assert v.cls == "shape-mismatch" and named(v) == [0], v.summary


@pytest.mark.parametrize(("slug", "odd"), [
    ("op-mismatch-torchrun-w5-r1-logs", 1),
    ("op-mismatch-torchrun-w4-r2-logs", 2),
    ("op-mismatch-torchrun-w6-r3-logs", 3),
    ("op-mismatch-mpirun-w3-r0-logs", 0),
])
def test_the_rank_in_another_collective_is_named_from_saved_logs(slug, odd):
    """w5: rank 1's all_gather was cut short by a peer that timed out and exited
    (Connection closed) before its own timeout fired; the others timed out in all_reduce."""
    v = verdict(slug)
    assert v.cls == "collective-mismatch" and named(v) == [odd], v.summary
    assert "all_gather" in v.summary and "all_reduce" in v.summary


@pytest.mark.parametrize(("slug", "dead"), [
    ("raise-hc-run-torchrun-r3", 3),  # the older hc run's manifest: the agent as rank 0 of world 1
    ("kill-hc-run-torchrun-w3-r1", 1),
    ("kill-hc-run-torchrun-unlabelled-w4-r3", 3),
    ("kill-torchrun-hc-run-inside-w5-r4", 4),
    ("kill-torchrun-hc-run-inside-unlabelled-w4-r1", 1),
    ("kill-hc-run-both-torchrun-w4-r0", 0),
])
def test_a_rank_that_died_under_hc_run_and_torchrun_is_named(slug, dead):
    v = verdict(slug)
    assert v.cls == "dead-rank" and named(v) == [dead], v.summary


def test_the_hc_run_directory_alone_names_the_killed_rank():
    """The tee'd per-rank files (`end exit=-9`) and the rank manifests, without the console."""
    for slug, dead in (("kill-hc-run-torchrun-w3-r1", 1), ("kill-torchrun-hc-run-inside-w5-r4", 4)):
        v = build(collect([TUNING / slug / "hc-run"]))
        assert v.cls == "dead-rank" and named(v) == [dead], v.summary
        assert "SIGKILL" in v.summary


@pytest.mark.parametrize(("command", "launcher"), [
    (["/venv/bin/torchrun", "--nproc-per-node=4", "train.py"], True),
    (["python3", "-u", "-m", "torch.distributed.run", "train.py"], True),
    (["mpirun", "-np", "4", "python", "train.py"], True),
    (["srun", "-l", "python", "train.py"], True),
    (["python", "train.py", "-m", "torch.distributed.run"], False),
    (["python", "-m", "train"], False),
    (["/usr/bin/python3", "job.py"], False),
    ([], False),
    ([3, None], False),
])
def test_a_manifest_of_a_launcher_is_told_from_a_ranks(command, launcher):
    assert starts_ranks(command) is launcher
