"""Reports as JSON: encode, decode and write atomically (never a half-written report).

hc writes hc.report/2 and reads hc.report/1 too: a /1 report is the /2 model without
run-level groups, so it decodes into the same structs and is upgraded in memory.
`write_atomic` lives in healthcheck.core.atomic (every writer of a file uses it); it is
re-exported here for the callers that import it from this module.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from healthcheck.core import typed
from healthcheck.core.atomic import write_atomic
from healthcheck.core.errors import HcError
from healthcheck.core.model import READABLE_SCHEMAS, REPORT_SCHEMA, Report

__all__ = ["SCHEMA_FILE", "SCHEMA_FILES", "decode", "encode", "read_report", "write_atomic"]

_SCHEMA_DIR = Path(__file__).parent / "schema"
# each readable version's JSON Schema (/2 is generated: python -m healthcheck.report.schema_gen)
SCHEMA_FILES = {name: _SCHEMA_DIR / f"{name.replace('/', '-')}.schema.json" for name in READABLE_SCHEMAS}
SCHEMA_FILE = SCHEMA_FILES[REPORT_SCHEMA]


class _Head(msgspec.Struct):
    """Only the schema name, to say which version a report that did not decode claims to be."""

    schema: str = ""


def encode(report: Report, *, indent: int = 2) -> bytes:
    data = msgspec.json.encode(report)
    return msgspec.json.format(data, indent=indent) + b"\n" if indent else data + b"\n"


def _unsupported(source: str, schema: str) -> HcError:
    return HcError(f"{source}: unsupported report schema {schema!r} (this hc reads {' and '.join(READABLE_SCHEMAS)})")


def decode(data: bytes, source: str = "report") -> Report:
    """A report of any readable version, as the current model (an older one upgraded in memory)."""
    try:
        report = typed.decode_json(data, Report)
    except msgspec.DecodeError as exc:
        try:  # a newer hc's report may not fit this model: name its version, not the mismatch
            head = typed.decode_json(data, _Head)
        except msgspec.DecodeError:
            head = None
        if head is not None and head.schema.startswith("hc.report/") and head.schema not in READABLE_SCHEMAS:
            raise _unsupported(source, head.schema) from None
        raise HcError(f"{source}: not a valid hc report: {exc}") from None
    if report.schema not in READABLE_SCHEMAS:
        raise _unsupported(source, report.schema)
    if report.schema != REPORT_SCHEMA:
        # /1 -> /2 only adds fields with defaults (groups, members), so the decoded report is whole
        report.schema = REPORT_SCHEMA
    return report


def read_report(path: Path) -> Report:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode(data, str(path))
