"""Reports as JSON: encode, decode and write atomically (never a half-written report).

hc writes hc.report/2 and reads hc.report/1 too: a /1 report is the /2 model without
run-level groups, so it decodes into the same structs and is upgraded in memory.
`write_atomic` lives in healthcheck.core.atomic (every writer of a file uses it); it is
re-exported here for the callers that import it from this module.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from healthcheck.core import typed
from healthcheck.core.atomic import write_atomic
from healthcheck.core.errors import HcError
from healthcheck.core.inputs import REPORT_MAX_BYTES, clip, read_bounded, read_stream_bounded
from healthcheck.core.model import READABLE_SCHEMAS, REPORT_SCHEMA, Report

__all__ = ["SCHEMA_FILE", "SCHEMA_FILES", "check_started", "decode", "decode_as", "encode", "parse_time", "read_report",
           "read_bytes", "read_stdin_bytes", "read_stdin_report", "schema_of", "write_atomic"]

# RFC 3339 as hc writes it ("2026-11-22T03:00:00.000Z"), any offset, seconds and fraction
# optional; no zone is UTC. Parsed here, not by datetime.fromisoformat, whose forms differ
# between the Pythons hc runs on.
_TIME_RE = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?"
                      r"([Zz]|[+-]\d\d:?\d\d)?", re.ASCII)

_SCHEMA_DIR = Path(__file__).parent / "schema"
# each readable version's JSON Schema (/2 is generated: python -m healthcheck.report.schema_gen)
SCHEMA_FILES = {name: _SCHEMA_DIR / f"{name.replace('/', '-')}.schema.json" for name in READABLE_SCHEMAS}
SCHEMA_FILE = SCHEMA_FILES[REPORT_SCHEMA]


class _Head(msgspec.Struct):
    """Only the schema name, to say which version a report that did not decode claims to be."""

    schema: str = ""


def schema_of(data: bytes) -> str:
    """The `schema` a JSON document names ("" where it names none or is not a JSON object):
    which reader to hand it to (an hc.report, an hc.diagnosis)."""
    try:
        return typed.decode_json(data, _Head).schema
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


def parse_time(text: str) -> _dt.datetime | None:
    """A report's timestamp as an aware datetime (UTC where it names no zone); None where it
    is not one."""
    m = _TIME_RE.fullmatch(text) if isinstance(text, str) and len(text) <= 40 else None
    if m is None:
        return None
    year, month, day, hour, minute = (int(m.group(i)) for i in range(1, 6))
    second, fraction, zone = int(m.group(6) or 0), (m.group(7) or "").ljust(6, "0")[:6], m.group(8)
    tz = _dt.timezone.utc
    if zone and zone not in "Zz":
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        if hours > 23 or minutes > 59:
            return None
        sign = -1 if zone[0] == "-" else 1
        tz = _dt.timezone(sign * _dt.timedelta(hours=hours, minutes=minutes))
    try:
        return _dt.datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=tz)
    except ValueError:  # month 13, February 30, second 60
        return None


def check_started(started_at: str, source: str) -> None:
    """HcError (exit 4) where `started_at` is not a timestamp: runs are ordered by it."""
    if parse_time(started_at) is None:
        raise HcError(f"{source}: not a valid hc report: started_at {clip(ascii(started_at), 60)} is not a "
                      "timestamp (e.g. 2026-11-22T03:00:00Z)")


def encode(report: Report, *, indent: int = 2) -> bytes:
    data = msgspec.json.encode(report)
    return msgspec.json.format(data, indent=indent) + b"\n" if indent else data + b"\n"


def _unsupported(source: str, schema: str) -> HcError:
    return HcError(f"{source}: unsupported report schema {schema!r} (this hc reads {' and '.join(READABLE_SCHEMAS)})")


def decode(data: bytes, source: str = "report") -> Report:
    """A report of any readable version, as the current model (an older one upgraded in memory)."""
    report: Report = decode_as(data, source, Report)
    return report


def decode_as(data: bytes, source: str, as_type: Any) -> Any:
    """`decode` into `as_type`: a struct with Report's run-level fields and another type of
    node (report/fleetread.py: the fields a summary reads, or each node's raw JSON), checked
    and upgraded the same way."""
    try:
        report = typed.decode_json(data, as_type)
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
    check_started(report.started_at, source)
    if report.schema != REPORT_SCHEMA:
        # /1 -> /2 only adds fields with defaults (groups, members), so the decoded report is whole
        report.schema = REPORT_SCHEMA
    return report


def read_bytes(path: Path, max_bytes: int = REPORT_MAX_BYTES) -> bytes:
    """A saved document's bytes, up to `max_bytes` (a pipe such as <(...) too, never a device)."""

    return read_bounded(path, max_bytes, what="report", allow_fifo=True)


def read_stdin_bytes(stream: BinaryIO, max_bytes: int = REPORT_MAX_BYTES) -> bytes:
    """A document piped in ('-'), up to `max_bytes`."""

    return read_stream_bounded(stream, max_bytes, what="report")


def read_report(path: Path) -> Report:
    """A saved report, read up to REPORT_MAX_BYTES (a pipe such as <(...) too, never a device)."""
    return decode(read_bytes(path), str(path))


def read_stdin_report(stream: BinaryIO) -> Report:
    """A report piped in ('-'), read up to REPORT_MAX_BYTES."""
    return decode(read_stdin_bytes(stream), "stdin")
