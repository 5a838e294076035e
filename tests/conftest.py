"""Pytest fixtures shared by all tests (helpers live in support.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

# the real-component rig (network namespaces, sshd, Slurm): tests/rigfixtures.py
pytest_plugins = ["rigfixtures"]

# pyproject's addopts run the suite under pytest-xdist (`-n auto --dist loadgroup`). The rig is
# one per machine: every test that uses it runs in one xdist group, so in one worker, one at a
# time and in file order; the other tests spread over the other workers.
RIG_GROUP = "rig"
RIG_FIXTURES = frozenset({"netns_rig", "slurm_rig", "fresh_netns_rig", "fresh_slurm_rig"})
# below this many test files a run stays in one process: starting workers (each imports hc and
# the plugins, ~2 s) costs more than it saves for a file or two
XDIST_MIN_FILES = 8
INTEGRATION = Path(__file__).parent / "integration"


def uses_rig(item: pytest.Item) -> bool:
    """Marked `rig`, using a rig fixture (directly or through another fixture), or anywhere in
    tests/integration: a test there is taken to touch the rig's hosts, Slurm or the sandbox
    unless its module says `USES_RIG = False` (the browser, pipx and node_exporter tests)."""
    if item.get_closest_marker("rig") is not None or RIG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return INTEGRATION in item.path.parents and getattr(getattr(item, "module", None), "USES_RIG", True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if uses_rig(item):
            item.add_marker(pytest.mark.xdist_group(RIG_GROUP))


def _test_files(args: list[str]) -> int:
    """How many test files the command line names (a directory: the test files under it)."""
    count = 0
    for arg in args:
        path = Path(arg.split("::", 1)[0])
        if path.is_dir():
            count += sum(1 for _ in path.rglob("test_*.py"))
        elif path.exists():
            count += 1
    return count


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: no error where it is not installed
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: no workers for a few files; else one per CPU plus one for the rig's group,
    whose tests mostly wait (on Slurm, sshd, timeouts). PYTEST_XDIST_AUTO_NUM_WORKERS wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if _test_files(config.args) < XDIST_MIN_FILES:
        return 0
    return len(os.sched_getaffinity(0)) + 1

@pytest.fixture(scope="session")
def report_schema() -> dict[str, Any]:
    """The JSON Schema of the report version hc writes now."""
    from healthcheck.report.jsonio import SCHEMA_FILE

    return json.loads(SCHEMA_FILE.read_text())


@pytest.fixture(scope="session")
def validate_report():
    """Validate a report (bytes, str or dict) against the shipped JSON Schema of its own version."""
    import jsonschema

    from healthcheck.report.jsonio import SCHEMA_FILES

    validators = {name: jsonschema.Draft202012Validator(json.loads(path.read_text()))
                  for name, path in SCHEMA_FILES.items()}

    def check(report: Any) -> dict[str, Any]:
        if isinstance(report, (bytes, str)):
            report = json.loads(report)
        version = report.get("schema") if isinstance(report, dict) else None
        assert version in validators, f"report schema {version!r} is none of {sorted(validators)}"
        errors = sorted(validators[version].iter_errors(report), key=lambda e: list(e.absolute_path))
        assert not errors, f"report does not match {version}: " + "; ".join(
            f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]
        )
        return report

    return check
