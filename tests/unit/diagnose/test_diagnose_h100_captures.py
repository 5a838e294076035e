"""Diagnosis of real NCCL/CUDA jobs captured on a lent H100 (torch 2.11.0+cu130, NCCL 2.28.9;
tests/gpu/device-check.sh made them; tests/fixtures/h100-captures/SOURCES.md says how)."""

from __future__ import annotations

import json

from support import FIXTURES, run_hc

CAPTURES = FIXTURES / "h100-captures"


def test_a_rank_that_raised_under_hc_run_around_torchrun_is_the_dead_rank_not_its_victims():
    """torchrun --nproc-per-node 3 under hc run; rank 1 raised ValueError at step 3, ranks
    0 and 2 then failed in all_reduce: from the log directory hc run printed."""
    r = run_hc("diagnose", "logs", str(CAPTURES / "hc-run-torchrun-rank1-raises"), "--format", "json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["class"] == "dead-rank" and [o["rank"] for o in v["odd_ranks"]] == [1]
    assert "ValueError" in v["summary"] and "rank_exception.py:17" in v["summary"]


def test_a_lone_ranks_watchdog_timeout_is_not_called_an_absence_of_timeouts():
    """One NCCL rank's collective timed out behind a GPU kernel (world size 1: no peer to
    blame): no rank is named, and the reason says the logs hold timeouts."""
    r = run_hc("diagnose", "logs", str(CAPTURES / "nccl-watchdog-timeout-1rank"), "--format", "json")
    assert r.returncode == 3, r.stderr
    v = json.loads(r.stdout)
    assert v["class"] == "unknown" and not v.get("odd_ranks")
    assert "timeout" in v["summary"] and "no error, timeout" not in v["summary"]
