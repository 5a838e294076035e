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
