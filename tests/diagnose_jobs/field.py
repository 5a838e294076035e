"""The field sets of the diagnosis (issue 19): real pasted logs, scored like the held-out jobs.

A field set is a folder tests/fixtures/diagnose-field/<set>/ with `truths.yaml` (per case: its
source, what it shows, the truth class of harness.CLASSES and the culprit ranks) and
`saved/<case>/paste.log` (the text as the thread shows it). Nothing runs but hc: each case is
`hc diagnose logs` on a copy of `saved/<case>` under a neutral folder name (`c00`, `c01`, ...),
scored by harness.Score, so the tables and the bench rows read as the held-out sets' replays do.
The copy matters: hc takes a rank from a path's last parts (`rank7.log`, `rank_3/`), and a case
folder named for what it shows (`...-rank7-at-seq0-...`) would hand hc the truth.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import yaml

from diagnose_jobs import harness

ROOT = harness.REPO / "tests" / "fixtures" / "diagnose-field"
# set name (as bin/bench names it) -> folder under ROOT
FIELD_SETS = {"field-1": "issues-1", "field-2": "issues-2", "field-3": "issues-3", "field-4": "issues-4", "field-5": "issues-5", "field-6": "issues-6", "field-7": "issues-7", "field-8": "issues-8", "field-9": "issues-9", "field-10": "issues-10", "field-11": "issues-11", "field-12": "issues-12", "field-13": "issues-13", "field-14": "issues-14", "field-15": "issues-15", "field-16": "issues-16", "field-17": "issues-17", "field-18": "issues-18", "field-19": "issues-19", "field-20": "issues-20", "field-21": "issues-21", "field-22": "issues-22", "field-23": "issues-23", "field-24": "issues-24", "field-25": "issues-25", "field-26": "issues-26"}


def folder(name: str) -> Path:
    if name not in FIELD_SETS:
        raise ValueError(f"no field set {name!r}: one of {', '.join(FIELD_SETS)}")
    return ROOT / FIELD_SETS[name]


def scenarios(name: str) -> list[harness.Scenario]:
    """The set's cases as logs-mode scenarios named by their folders (slug == name)."""
    truths = yaml.safe_load((folder(name) / "truths.yaml").read_text())
    return [harness.Scenario(case, "field", 0, t["truth"], truth_ranks=tuple(t["ranks"]), note=t["why"])
            for case, t in truths.items()]


def neutral_copies(name: str, into: Path) -> list[tuple[harness.Scenario, Path]]:
    """Each case's saved folder copied to into/field/cNN: a name that says nothing of its truth."""
    out = []
    for i, sc in enumerate(scenarios(name)):
        copy = into / "field" / f"c{i:02d}"
        shutil.copytree(folder(name) / "saved" / sc.slug, copy)
        out.append((sc, copy))
    return out


def replay(name: str) -> harness.Score:
    """hc's answer on every case of the set, each read from its neutral copy."""
    with tempfile.TemporaryDirectory(prefix="hc-field-") as tmp:
        outcomes = []
        for sc, copy in neutral_copies(name, Path(tmp)):
            verdict, seconds, rc, error = harness.ask_hc(["logs", str(copy)], harness.clean_env())
            outcomes.append(harness.outcome_of(sc, verdict, seconds, rc, error))
    return harness.Score(outcomes)
