"""held-out-10's table (tests/fixtures/diagnose-jobs/held-out-10/scenarios.py) loads, is as varied
as issue 19 asks of a held-out set, every logs-mode job has its saved output, and every fault a
job names is one its script documents. No job runs here: bin/bench scores the set."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diagnose_jobs import harness


def test_held_out_10_is_a_set_of_the_harness_and_loads() -> None:
    assert "held-out-10" in harness.HELD_OUT_SETS
    table = harness.held_out("held-out-10")
    assert len({sc.name for sc in table}) == len(table)
    assert len({sc.slug for sc in table}) == len(table)
    truths = Counter(sc.truth for sc in table)
    assert sum(k for t, k in truths.items() if t != "none") >= 30
    assert truths["none"] >= 6
    assert set(truths) <= set(harness.CLASSES)
    assert sum(sc.world <= 3 for sc in table) >= 8
    assert {sc.launcher for sc in table} >= {"plain", "torchrun", "mpirun", "srun", "spawn"}
    assert any(sc.hcrun for sc in table) and any(not sc.hcrun for sc in table)
    assert {sc.mode for sc in table} == {"live", "logs"}
    culprit_ranks = [r for sc in table if sc.truth != "none" for r in sc.expected_ranks]
    assert 0 in culprit_ranks
    assert any(sc.world - 1 in sc.expected_ranks for sc in table)
    assert any(len(sc.expected_ranks) > 1 for sc in table)


def test_every_logs_mode_job_has_its_saved_output() -> None:
    saved = harness.SAVED["held-out-10"]
    for sc in harness.held_out("held-out-10"):
        if sc.mode == "logs":
            assert (saved / sc.slug).is_dir(), sc.name


def test_every_fault_is_one_its_script_documents() -> None:
    for sc in harness.held_out("held-out-10"):
        doc = (harness.REPO / sc.script).read_text().split('"""')[1]
        fault = sc.fault if sc.fault != "none" else None
        assert fault is None or f"  {fault} " in doc, (sc.name, sc.fault)
