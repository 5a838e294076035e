"""Reports as JSON: encode, decode and write atomically (never a half-written report)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import msgspec

from healthcheck.core.errors import HcError
from healthcheck.core.model import Report

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


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` via a temporary file in the same directory and a rename."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise HcError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise HcError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:  # make the rename itself durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
