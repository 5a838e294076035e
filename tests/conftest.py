"""Pytest fixtures shared by all tests (helpers live in support.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

# the real-component rig (network namespaces, sshd, Slurm): tests/rigfixtures.py
pytest_plugins = ["rigfixtures"]

@pytest.fixture(scope="session")
def report_schema() -> dict[str, Any]:
    from healthcheck.report.jsonio import SCHEMA_FILE

    return json.loads(SCHEMA_FILE.read_text())


@pytest.fixture(scope="session")
def validate_report(report_schema):
    """Validate a report (bytes, str or dict) against the shipped JSON Schema."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(report_schema)

    def check(report: Any) -> dict[str, Any]:
        if isinstance(report, (bytes, str)):
            report = json.loads(report)
        errors = sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
        assert not errors, "report does not match hc.report/1: " + "; ".join(
            f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]
        )
        return report

    return check
