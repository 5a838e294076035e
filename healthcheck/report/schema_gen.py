"""The JSON Schema of the current report version, generated from the model (core/model.py).

Regenerate after changing the model:  python -m healthcheck.report.schema_gen
(`--check` exits 1 when the shipped file is stale; a unit test does the same.)

msgspec writes the types, the enums and what is optional; what the types cannot say
(identifier patterns, timestamps, the closed sets of words) is laid over it from
CONSTRAINTS, each keyed by the struct and field it constrains, so a renamed or removed
field fails generation instead of leaving a stale rule behind. Never imported at run time.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from healthcheck.core import model
from healthcheck.core.model import REPORT_SCHEMA, Report

SCHEMA_DIR = Path(__file__).parent / "schema"
SCHEMA_PATH = SCHEMA_DIR / f"{REPORT_SCHEMA.replace('/', '-')}.schema.json"

TIMESTAMP = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"}
FINDING_ID = {"type": "string", "pattern": r"^[a-z][a-z0-9]*\.[EW][0-9]{3}$"}
NAME = {"minLength": 1}
NOT_NEGATIVE = {"minimum": 0}

# "Struct.field" -> JSON Schema keywords merged into that property (carried over from hc.report/1)
CONSTRAINTS: dict[str, dict[str, Any]] = {
    "Report.schema": {"const": REPORT_SCHEMA},
    "Report.run_id": {"pattern": r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$"},
    "Report.hc_version": NAME,
    "Report.config_digest": {"pattern": r"^sha256:[0-9a-f]{64}$"},
    "Report.started_at": TIMESTAMP,
    "Report.finished_at": TIMESTAMP,
    "Report.duration_s": NOT_NEGATIVE,
    "Report.summary": {"propertyNames": {"$ref": "#/$defs/Status"},
                       "additionalProperties": {"type": "integer", "minimum": 0}},
    "Finding.id": FINDING_ID,
    "Finding.message": NAME,
    "Finding.check": NAME,
    "Finding.subject": NAME,
    "Finding.fingerprint": {"pattern": r"^[0-9a-f]{16}$"},
    "Limit.op": {"enum": ["==", "!=", ">=", "<=", ">", "<", "in", "present", "absent"]},
    "Limit.key": NAME,
    "Metric.name": NAME,
    "CheckResult.name": {"pattern": r"^[a-z][a-z0-9_]*\.[a-z0-9_]+$"},
    "CheckResult.duration_s": NOT_NEGATIVE,
    "Action.kind": {"enum": ["none", "drain", "resume", "guarded", "keep", "rollback"]},
    "NodeResult.node": NAME,
    "NodeResult.mode": {"enum": ["local", "agent", "agentless", "slurm"]},
    "ActionRecord.time": TIMESTAMP,
    "ActionRecord.nodes": NAME,
    "ActionRecord.action": {"enum": ["drain", "resume", "rollback"]},
    "ActionRecord.command": NAME,
    "ActionRecord.attempts": NOT_NEGATIVE,
    "FindingGroup.status": {"$ref": "#/$defs/Status"},
    "FindingGroup.id": FINDING_ID,
    "FindingGroup.count": {"minimum": 1},
    "GroupResult.name": NAME,
    "GroupResult.members": {"minItems": 1},
}


def _always_written(name: str) -> list[str] | None:
    """The fields every encoded instance carries (a Struct without omit_defaults), else None."""
    cls = getattr(model, name, None)
    if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)) or cls.__struct_config__.omit_defaults:
        return None
    return [f.encode_name for f in msgspec.structs.fields(cls)]


def generate() -> dict[str, Any]:
    """The report's JSON Schema, as a dict."""
    raw = msgspec.json.schema(Report)
    defs: dict[str, Any] = raw["$defs"]
    for name, schema in defs.items():
        if "description" in schema:
            schema["description"] = inspect.cleandoc(schema["description"])
        if schema.get("type") != "object":
            continue
        # hc writes nothing else; an unknown key means the schema file is stale
        schema["additionalProperties"] = False
        required = _always_written(name)
        if required is not None:  # written whole, so a consumer may rely on every key
            schema["required"] = required
    for key, extra in CONSTRAINTS.items():
        struct, field = key.split(".")
        try:
            defs[struct]["properties"][field].update(extra)
        except KeyError:
            raise KeyError(f"schema constraint {key}: no such field in the model") from None
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://hc.invalid/schema/{SCHEMA_PATH.name}",
        "title": f"hc report, schema {REPORT_SCHEMA}",
        "description": "One run of hc over one or more nodes. Generated from healthcheck/core/model.py "
                       "by `python -m healthcheck.report.schema_gen`; do not edit by hand.",
        "$ref": raw["$ref"],
        "$defs": defs,
    }


def render() -> str:
    """The schema as the shipped file's text."""
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the schema file; with --check, only say whether it is current (exit 1 if not)."""
    text = render()
    if "--check" in argv:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is stale: run python -m healthcheck.report.schema_gen", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(SCHEMA_PATH)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
