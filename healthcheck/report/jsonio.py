"""Reports as JSON: encode, decode and write atomically (never a half-written report).

`write_atomic` lives in healthcheck.core.atomic (every writer of a file uses it); it is
re-exported here for the callers that import it from this module.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from healthcheck.core.atomic import write_atomic
from healthcheck.core.errors import HcError
from healthcheck.core.model import Report

__all__ = ["SCHEMA_FILE", "decode", "encode", "read_report", "write_atomic"]

SCHEMA_FILE = Path(__file__).parent / "schema" / "hc.report-1.schema.json"


def encode(report: Report, *, indent: int = 2) -> bytes:
    data = msgspec.json.encode(report)
    return msgspec.json.format(data, indent=indent) + b"\n" if indent else data + b"\n"


def decode(data: bytes, source: str = "report") -> Report:
    try:
        report = msgspec.json.decode(data, type=Report)
    except msgspec.DecodeError as exc:
        raise HcError(f"{source}: not a valid hc report: {exc}") from None
    if report.schema != "hc.report/1":
        raise HcError(f"{source}: unsupported report schema {report.schema!r} (this hc reads hc.report/1)")
    return report


def read_report(path: Path) -> Report:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HcError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return decode(data, str(path))
