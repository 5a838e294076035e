"""The diagnosis field sets (tests/fixtures/diagnose-field/) load: every case has its paste,
a truth of the harness' classes, culprit ranks where the truth names a culprit (a desync or a
shape between two ranks may name none), and a source. No hc runs here: bin/bench scores the sets (diagnose detector: field-N)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from diagnose_jobs import field, harness


@pytest.mark.parametrize("name", list(field.FIELD_SETS))
def test_every_case_has_its_paste_a_truth_and_a_source(name: str) -> None:
    root = field.folder(name)
    truths = yaml.safe_load((root / "truths.yaml").read_text())
    assert truths, name
    for case, t in truths.items():
        assert (root / "saved" / case / "paste.log").is_file(), case
        assert t["truth"] in harness.CLASSES, case
        # a pair that disagrees (a desync, a shape) may leave the odd one unnamed, and a job that
        # could not start may have no rank at fault (a port in use); a death or a hang without its
        # rank is `none`: nothing an operator could act on is in the paste
        assert not t["ranks"] if t["truth"] == "none" else (t["ranks"] or t["truth"] in ("desync", "shape", "init")), case
        assert t["source"].startswith("https://"), case
    assert sorted(p.name for p in (root / "saved").iterdir()) == sorted(truths)


@pytest.mark.parametrize("name", list(field.FIELD_SETS))
def test_the_scenarios_keep_each_cases_folder_as_their_slug(name: str) -> None:
    table = field.scenarios(name)
    assert [sc.slug for sc in table] == [sc.name for sc in table]
    assert {sc.truth for sc in table} >= {"dead", "none"}
    assert all(sc.mode == "logs" for sc in table)


def test_an_unknown_set_is_refused() -> None:
    with pytest.raises(ValueError, match="no field set"):
        field.folder("field-0")


@pytest.mark.parametrize("name", list(field.FIELD_SETS))
def test_hc_reads_each_case_under_a_name_that_hides_its_truth(name: str, tmp_path: Path) -> None:
    # round 15 found the case folders' names (`...-rank7-at-seq0-...`) handed hc the rank through
    # sources.rank_from_name; the replay now reads neutral copies, every file of the case in them
    from healthcheck.diagnose.sources import rank_from_name

    copies = field.neutral_copies(name, tmp_path)
    assert len(copies) == len(field.scenarios(name))
    for sc, copy in copies:
        original = field.folder(name) / "saved" / sc.slug
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in original.iterdir())
        assert all(rank_from_name(str(p)) is None for p in copy.iterdir()), sc.slug
