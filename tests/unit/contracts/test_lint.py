"""The import-layer contract (pyproject.toml [tool.importlinter]) holds, so a module that
imports from a layer above its own fails the test suite, not only .ci/run's lint step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO


def lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")  # the venv's, as .ci/run runs it
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (bin/install --dev installs the lint extra)")
    return found


def run_lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))  # the healthcheck package under `root`, not the install
    return subprocess.run([lint_imports(), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_import_layers_contract_is_kept():
    r = run_lint_imports(REPO)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_a_kernel_module_importing_the_cli_breaks_the_contract(tmp_path):
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copytree(REPO / "healthcheck", tmp_path / "healthcheck",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "configs", "schema"))
    status = tmp_path / "healthcheck" / "core" / "status.py"
    status.write_text(status.read_text() + "\nimport healthcheck.cli.app  # a layer violation\n")
    r = run_lint_imports(tmp_path)
    assert r.returncode != 0 and "BROKEN" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
    assert "healthcheck.core.status -> healthcheck.cli.app" in r.stdout
