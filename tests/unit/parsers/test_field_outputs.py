"""hc's parsers on real outputs harvested from the field (issue 20; tests/field/facts.py).

Every harvested file has a source, no parser crashes on any of them, every file hc reads
today keeps being read, and every recorded gap is still a gap (so the list only shrinks:
fixing a parser means deleting the file's `gap:` line, with `tests/field/facts.py
--mark-gaps`).
"""

from __future__ import annotations

import re

import pytest
from field import facts as field

from healthcheck.parsers import TOOLS

FILES = field.load()
IDS = [ff.name for ff in FILES]


def test_the_field_collections_hold_files():
    assert len(FILES) >= 40, "the harvested field outputs are gone"
    assert {ff.split for ff in FILES} == set(field.SPLITS)


@pytest.mark.parametrize("ff", FILES, ids=IDS)
def test_every_field_file_exists_names_a_tool_and_has_its_source(ff):
    assert ff.path.is_file(), ff.path
    assert ff.tool in TOOLS, ff.tool
    assert ff.facts or ff.refused, f"{ff.name}: no facts to check"
    sources = (ff.path.parents[1] / "SOURCES.md").read_text()
    row = next((ln for ln in sources.splitlines() if f"`{ff.path.parent.name}/{ff.path.name}`" in ln), "")
    cells = [c.strip() for c in row.split("|")]
    assert len(cells) > 3 and len(cells[2]) > 20, f"{ff.name}: no source row in SOURCES.md"
    assert re.search(r"https?://|github\.com/|captured by this project", cells[2]), f"{ff.name}: {cells[2]}"


@pytest.mark.parametrize("ff", FILES, ids=IDS)
def test_a_field_file_is_read_or_its_gap_is_still_a_gap(ff):
    reading = field.read(ff)
    assert not reading.crashed, f"{ff.name}: {reading.crashed}"
    if ff.gap:
        assert not reading.read, f"{ff.name} is read now: delete its gap ({ff.gap})"
    else:
        assert reading.read, f"{ff.name}: {reading.refused or 'misses ' + ', '.join(map(str, reading.facts_missed))}"


def test_a_bus_id_fact_matches_the_device_in_either_form():
    # nvidia-smi prints `00000000:CC:00.0` (field/issues-8's elided table); hc surfaces the
    # same device as `0000:cc:00.0`: a fact written either way names one device
    fact = field.Fact("pci_bus_id", "00000000:CC:00.0")
    assert fact.matches("pci_bus_id", "0000:cc:00.0")
    assert not fact.matches("pci_bus_id", "0000:c9:00.0")
    assert not field.Fact("pci_bus_id", "0000:cc:00").matches("pci_bus_id", "0000:cc:00.0")  # not full: exact
    assert not field.Fact("name", "00000000:CC:00.0").matches("pci_bus_id", "0000:cc:00.0")
