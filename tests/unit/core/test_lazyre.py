"""Patterns compiled on first use (core/lazyre.py): they answer as compiled ones do,
every one in the package compiles (a typo still fails here, not on a node), and
importing the prologue's parsers compiles none of them."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest
from support import REPO

from healthcheck.core import lazyre
from healthcheck.core.lazyre import lazy_compile


def test_a_lazy_pattern_answers_as_the_compiled_one():
    lazy = lazy_compile(r"(?P<word>[a-z]+) (\d+)", re.ASCII)
    assert lazy.pattern == r"(?P<word>[a-z]+) (\d+)"
    assert lazy.groups == 2 and set(lazy.groupindex) == {"word"}
    m = lazy.search("x abc 42")
    assert m is not None and m.group("word") == "abc" and m.group(2) == "42"
    assert lazy.sub("<\\g<word>>", "abc 1 def 2") == "<abc> <def>"
    assert [m.group(1) for m in lazy.finditer("a 1 b 2")] == ["a", "b"]
    assert lazy_compile(rb"\d+").fullmatch(b"123") is not None


def test_the_pattern_is_compiled_on_first_use_only():
    lazy = lazy_compile(r"[unbalanced")
    try:
        assert lazy.pattern == "[unbalanced"  # reading what it was made of compiles nothing
        with pytest.raises(re.error):
            lazy.match("x")
    finally:
        lazyre.PATTERNS.remove(lazy)  # not one of the package's


def _modules_using_lazy_compile() -> list[str]:
    return sorted(".".join(path.relative_to(REPO).with_suffix("").parts)
                  for path in (REPO / "healthcheck").rglob("*.py")
                  if "lazy_compile(" in path.read_text() and path.name != "lazyre.py")


def test_every_lazy_pattern_in_the_package_compiles():
    modules = _modules_using_lazy_compile()
    assert "healthcheck.parsers.lines" in modules and "healthcheck.parsers.xid" in modules
    for module in modules:
        importlib.import_module(module)
    assert len(lazyre.PATTERNS) > 100
    for pattern in lazyre.PATTERNS:
        pattern.compiled()  # raises re.error on a bad one


IMPORTS = """
import sys
from healthcheck.core import lazyre
import healthcheck.parsers.lines, healthcheck.parsers.xid, healthcheck.parsers.kernlog, healthcheck.core.nodes
print(len(lazyre.PATTERNS), sum(p._compiled is not None for p in lazyre.PATTERNS))
"""


def test_importing_the_prologues_parsers_compiles_none_of_their_patterns():
    done = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    made, compiled = map(int, done.stdout.split())
    assert made > 50
    assert compiled == 0
