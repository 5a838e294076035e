"""The README's promises: exactly two quickstart commands, and CI runs the second."""

from __future__ import annotations

import re

from support import REPO


def quickstart_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_quickstart_has_exactly_two_one_line_commands():
    commands = quickstart_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    assert "hc node --local" in commands[0]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci/run").read_text().strip().splitlines()
    assert ci[-1] == quickstart_commands()[1]


def test_every_test_the_hostile_inputs_table_names_exists():
    text = (REPO / "tests" / "HOSTILE.md").read_text()
    named = re.findall(r"((?:unit/\w+|integration)/\w+\.py)((?:(?:::|, ::)\w+)+)", text)
    assert len(named) > 40
    missing = [f"{file}::{name}" for file, names in named for name in re.findall(r"::(\w+)", names)
               if f"def {name}(" not in (REPO / "tests" / file).read_text()]
    assert missing == []


def test_the_first_quickstart_command_installs_hc_where_debians_python_refuses_pip(tmp_path):
    """PEP 668: Debian 12's python3 refuses `pip install`; bin/install makes a venv instead."""
    import glob
    import os
    import shutil
    import subprocess

    debian_python = "/usr/bin/python3"
    if os.geteuid() != 0 or not glob.glob("/usr/lib/python3*/EXTERNALLY-MANAGED") or not shutil.which(debian_python):
        import pytest

        pytest.skip("needs root and Debian's externally-managed python3")
    refused = subprocess.run([debian_python, "-m", "pip", "install", "--dry-run", str(REPO)], capture_output=True)
    said = refused.stderr + refused.stdout
    assert refused.returncode != 0 and (b"externally-managed-environment" in said or b"No module named pip" in said)
    prefix = tmp_path / "hc"
    r = subprocess.run([str(REPO / "bin" / "install"), "--prefix", str(prefix)], capture_output=True,
                       env=dict(os.environ, PYTHON=debian_python), timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert f"HC_BIN={prefix}/bin/hc" in r.stdout.decode()
    node = subprocess.run([str(prefix / "bin" / "hc"), "node", "--local", "--format", "json"], capture_output=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("HC_")})
    assert node.returncode == 0, node.stderr
