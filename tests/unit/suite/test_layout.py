"""tests/unit mirrors the package (issue 21, 5): a folder per healthcheck package it tests,
plus contracts/ and suite/, with unique test file names (pytest's default import mode
imports a test module by its bare name, and tests/unit/conftest.py puts every folder on
sys.path so one module can reuse another's helpers by that name)."""

from __future__ import annotations

from collections import Counter

from support import REPO

UNIT = REPO / "tests" / "unit"
CROSS_CUTTING = {"contracts", "suite"}


def test_every_unit_test_is_in_a_folder_named_for_a_package_or_cross_cutting():
    packages = {p.name for p in (REPO / "healthcheck").iterdir() if (p / "__init__.py").exists()}
    assert not sorted(p.name for p in UNIT.glob("test_*.py")), "a test file directly in tests/unit"
    folders = {p.parent.name for p in UNIT.rglob("test_*.py")}
    assert folders - packages - CROSS_CUTTING == set()


def test_unit_test_file_names_are_unique():
    names = Counter(p.name for p in UNIT.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
