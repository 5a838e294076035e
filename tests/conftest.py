"""Pytest fixtures shared by all tests (helpers live in support.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

# the real-component rig (network namespaces, sshd, Slurm): tests/rigfixtures.py; the xdist
# workers, the rig's tests all in one of them: tests/riggroup.py
pytest_plugins = ["rigfixtures", "riggroup"]


@pytest.fixture(autouse=True)
def own_home(request, tmp_path_factory, monkeypatch):
    """A home of its own for each unit test (rig tests keep the machine's): what hc keeps under
    ~ by default, the run history (~/.local/state/hc) that `hc node --local`, `hc node NODES`
    and `hc health` judge against and record into, is then the test's alone, never the
    machine's nor an earlier test's or session's (whose readings would be judged as rates)."""
    if request.node.get_closest_marker("rig") is None and "unit" in request.node.path.parts:
        monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


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
