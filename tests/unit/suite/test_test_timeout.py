"""The suite's per-test timeout (pyproject's [tool.pytest.ini_options] `timeout`,
pytest-timeout): a hung test fails with its stack and the run goes on, instead of holding
CI until CI's own limit kills everything without saying which test hung (issue 21, 5)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def test_the_suite_sets_a_per_test_timeout_well_above_its_slowest_test():
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    # CI's slowest test takes ~35 s on two cores: a timeout near that fails healthy tests on
    # a loaded machine; one near CI's own limit no longer says which test hung
    assert 120 <= int(options["timeout"]) <= 600


def test_a_hung_test_fails_with_its_stack_and_the_next_test_still_runs(tmp_path):
    pytest.importorskip("pytest_timeout")
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n"
        "def test_hangs():\n    time.sleep(600)\n\n"
        "def test_after():\n    pass\n"
    )
    # the repository's own pytest configuration (its addopts and plugins), with a timeout of
    # two seconds in place of the configured one, so the hang is found in this test's time
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-n0", "-o", "timeout=2", str(tmp_path / "test_hang.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "Timeout" in out and "time.sleep(600)" in out, out  # which test hung, and where
    assert "1 failed, 1 passed" in out, out
    assert time.monotonic() - start < 100
