"""Each newer held-out set's table (tests/fixtures/diagnose-jobs/held-out-N/scenarios.py) loads,
is as varied as issue 19 asks of a held-out set, every logs-mode job has its saved output, and
every fault a job names is one its script documents. No job runs here: bin/bench scores the
sets. (The older sets' tables are checked in tests/unit/diagnose/test_diagnose_jobs.py.)"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from diagnose_jobs import harness

# the sets built as their own scripts and launchers (issue 19's held-out-8 on): one table each
SETS = ("held-out-8", "held-out-9", "held-out-10", "held-out-11", "held-out-12")


@pytest.mark.parametrize("name", SETS)
def test_the_set_is_one_of_the_harness_and_loads(name: str) -> None:
    assert name in harness.HELD_OUT_SETS
    table = harness.held_out(name)
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


@pytest.mark.parametrize("name", SETS)
def test_every_logs_mode_job_has_its_saved_output(name: str) -> None:
    saved = harness.SAVED[name]
    for sc in harness.held_out(name):
        if sc.mode == "logs":
            assert (saved / sc.slug).is_dir(), sc.name


@pytest.mark.parametrize("name", SETS)
def test_every_fault_is_one_its_script_documents(name: str) -> None:
    for sc in harness.held_out(name):
        doc = (harness.REPO / sc.script).read_text().split('"""')[1]
        fault = sc.fault if sc.fault != "none" else None
        assert fault is None or f"  {fault} " in doc, (sc.name, sc.fault)
