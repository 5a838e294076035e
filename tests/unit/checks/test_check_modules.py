"""A run imports only the check families it can select (checks.TIER_MODULES,
FAMILY_MODULES): the tables agree with what the modules register, and a quick run or a
--checks run of two families imports neither the bandwidth checks (with perftest's
parser) nor DCGM's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support import REPO

from healthcheck import checks
from healthcheck.core.errors import UsageError
from healthcheck.core.registry import DEFAULT
from healthcheck.core.tiers import ALL


def _module(spec) -> str:
    return spec.fn.__module__.removeprefix("healthcheck.checks.")


def test_the_tier_table_names_every_module_with_a_check_of_the_tier():
    specs = DEFAULT.all_checks().values()
    for tier in ALL:
        assert set(checks.TIER_MODULES[tier]) == {_module(s) for s in specs if tier in s.tiers}, tier


def test_the_family_table_names_every_module_holding_a_check_of_the_family():
    specs = DEFAULT.all_checks().values()
    assert set(checks.FAMILY_MODULES) == {s.family for s in specs}
    for family, modules in checks.FAMILY_MODULES.items():
        assert set(modules) == {_module(s) for s in specs if s.family == family}, family


def test_modules_for_names_the_families_asked_or_says_it_cannot():
    assert checks.modules_for("quick") == ("net", "ib", "sys", "gpu")
    assert checks.modules_for("quick", ["sys.memory", "net"]) == ("net", "sys")
    assert checks.modules_for("quick", ["gpu.ecc"]) == ("gpu", "dcgm")
    assert checks.modules_for("quick", ["nosuch"]) is None
    assert checks.modules_for("nosuch") is None


def test_select_still_judges_names_known_or_unknown():
    assert [s.name for s in DEFAULT.select("quick", ["bw"])] == []  # known family, no quick check
    with pytest.raises(UsageError, match="sys.nosuch"):
        DEFAULT.select("quick", ["sys.nosuch"])
    with pytest.raises(UsageError, match="nosuch"):
        DEFAULT.select("quick", ["nosuch"])


SELECT = """
import sys
from healthcheck.core.registry import select
names = [n for n in sys.argv[2:]]
chosen = [s.name for s in select(sys.argv[1], names)]
loaded = [m for m in ("healthcheck.checks.bw", "healthcheck.checks.dcgm", "healthcheck.parsers.perftest",
                      "healthcheck.checks.gpu", "healthcheck.checks.ib") if m in sys.modules]
print(" ".join(chosen) + "|" + " ".join(loaded))
"""


def _select(*args: str) -> tuple[list[str], list[str]]:
    done = subprocess.run([sys.executable, "-c", SELECT, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen, loaded = done.stdout.strip().split("|")
    return chosen.split(), loaded.split()


def test_a_quick_select_imports_neither_bandwidth_nor_dcgm_checks():
    chosen, loaded = _select("quick")
    assert "sys.memory" in chosen and "gpu.xid" in chosen
    assert loaded == ["healthcheck.checks.gpu", "healthcheck.checks.ib"]


def test_a_select_of_two_families_imports_only_them():
    chosen, loaded = _select("quick", "sys.memory", "net.mtu")
    assert chosen == ["net.mtu", "sys.memory"]
    assert loaded == []
