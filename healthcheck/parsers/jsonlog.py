"""One structured log record per line (Python logging to JSON, structlog, loguru's
`serialize=True`, a container runtime's json-file): the record read into the plain lines a
rank would have printed, so that every parser reads them as it reads text.

A job that logs through a JSON formatter prints `{"ts": "...", "level": "ERROR", "rank": 1,
"msg": "rank failed", "exc_info": "Traceback (most recent call last):\\n  File ..."}`: the
traceback, a collective's timeout, the rank, are all inside JSON strings, where no line
reader sees them. `record_lines` gives the record as lines: its message, with its time
first (`STAMP MESSAGE`, the stamp as printed, an epoch number written as ISO UTC) and the
level's word where it is WARNING or above (`ERROR: rank failed`); then each line of a
message that holds several (loguru's `text` carries the traceback) and of each traceback
field (`exc_info`, `exc_text`, `exception`, `stack_info`, `stack_trace`, `traceback`, ECS's
`error.stack_trace`) of a record logged at ERROR or above or at no level (one logged lower
was caught: a retry's warning); and the rank the record names, for the caller to label every
line with (`[rankR]:`, as torch labels a rank's lines).

The key names are those the common formatters use; a rank, a level or a time may sit one or
two objects down (loguru's `record.extra.rank`, `record.level.name`, `record.time.timestamp`).
Bounded and linear: a line over MAX_RECORD characters is not decoded, at most OBJECTS_MAX
nested objects are looked into, LINES_MAX lines are given for one record. Nothing here
raises on bad input: what is no record gives None.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import NamedTuple

MAX_RECORD = 64 * 1024  # characters of a line decoded as a record; a longer one stays text
OBJECTS_MAX = 32  # nested objects looked into for a key
DEPTH_MAX = 2  # levels below the record's top
LINES_MAX = 400  # lines one record gives (a traceback of a deep recursion is cut)
PREFIX_MAX = 256  # characters before the record's `{` (a launcher's label, a runtime's stamp)

MESSAGE_KEYS = ("msg", "message", "text", "event", "log")
RANK_KEYS = ("rank", "global_rank", "RANK", "proc_rank", "process_rank", "worker_rank")
LEVEL_KEYS = ("level", "levelname", "severity", "log.level", "lvl", "loglevel")
TIME_KEYS = ("ts", "timestamp", "time", "@timestamp", "asctime", "datetime", "created")
TRACE_KEYS = ("exc_info", "exc_text", "exception", "stack_info", "stack_trace", "stacktrace", "traceback",
              "error.stack_trace", "stack")
# where formatters nest fields: logging's `extra`, loguru's `record` (and its `extra`), ECS's
# `log` and `error`, structlog's or a shipper's context
CONTAINERS = frozenset(("extra", "record", "context", "fields", "labels", "tags", "meta", "metadata", "log", "error"))
# a traceback logged below ERROR (`log.warning("retrying", exc_info=True)`) is one the program
# caught and went on from: not read as the rank's exception
_BELOW_ERROR = frozenset(("TRACE", "DEBUG", "INFO", "NOTICE", "WARNING", "WARN"))
_LOUD = frozenset(("WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "ALERT", "EMERGENCY"))
_EPOCH_MIN, _EPOCH_MAX = 1e8, 1e11  # seconds since 1970 a log's time can be (1973..5138)


class Record(NamedTuple):
    """One decoded record: where its object starts in the line, the lines it stands for
    (the first its message, with the time before it where it has one), and its rank."""

    start: int
    lines: tuple[str, ...]
    rank: int | None
    stamp: str  # the time as the first line carries it ("" where it has none)


def record_start(line: str) -> int:
    """Where a JSON record may start in `line` (-1: it holds none): the first `{` within
    PREFIX_MAX characters, the line ending in `}`. Cheap: for every line a reader sees."""
    end = line.rstrip()
    if not end.endswith("}") or len(end) > MAX_RECORD:
        return -1
    return line.find("{", 0, PREFIX_MAX + 1)


def _objects(top: dict) -> list[dict]:
    """The record and the objects a formatter nests its fields in (CONTAINERS), breadth
    first, DEPTH_MAX levels, OBJECTS_MAX at most: not any object (a logged config's
    `{"lora": {"rank": 16}}` is no process's rank)."""
    out, level = [top], [top]
    for _ in range(DEPTH_MAX):
        level = [v for obj in level for k, v in obj.items() if k in CONTAINERS and isinstance(v, dict)]
        level = level[:OBJECTS_MAX - len(out)]
        out += level
        if not level:
            break
    return out


def _first(objects: list[dict], keys: tuple[str, ...]) -> object:
    for obj in objects:
        for k in keys:
            if k in obj and obj[k] is not None:
                return obj[k]
    return None


def _rank(value: object) -> int | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 7:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10_000_000:
        return value
    return None


def _level(value: object) -> str:
    if isinstance(value, dict):  # loguru: {"name": "ERROR", "no": 40, "icon": ...}
        value = value.get("name")
    return value.upper() if isinstance(value, str) and len(value) <= 16 else ""


def _stamp(value: object) -> str:
    """The record's time as a line's stamp: an ISO text as printed (asctime's `2026-11-28
    14:05:02,123` with a `T` and a dot), an epoch number (seconds or milliseconds) as ISO UTC."""
    if isinstance(value, dict):  # loguru: {"repr": "...", "timestamp": 1795829810.6}
        value = value.get("timestamp")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 40 or not (text[:4].isdigit() and text[4:5] == "-"):
            return ""
        text = text.replace(",", ".", 1).replace(" ", "T", 1)
        return "" if " " in text else text
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000 if value > _EPOCH_MAX else value
        if _EPOCH_MIN <= seconds <= _EPOCH_MAX:
            return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return ""


def _traces(objects: list[dict]) -> list[str]:
    """The traceback texts a record carries (each field once, strings only)."""
    out = []
    for obj in objects:
        for k in TRACE_KEYS:
            v = obj.get(k)
            if isinstance(v, str) and ("\n" in v.strip() or v.startswith("Traceback")):
                out.append(v)
    return out


def decode(line: str) -> Record | None:
    """The JSON record `line` holds (after a prefix of at most PREFIX_MAX characters), read
    into lines; None where it holds none that carries a message."""
    start = record_start(line)
    if start < 0:
        return None
    try:
        obj = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    objects = _objects(obj)
    message = next((obj[k] for k in MESSAGE_KEYS if isinstance(obj.get(k), str)), None)
    if message is None:
        return None
    level = _level(_first(objects, LEVEL_KEYS))
    stamp = _stamp(_first(objects, TIME_KEYS))
    head, *rest = message.rstrip("\n").split("\n") or [""]
    first = f"{level}: {head}" if level in _LOUD and not head.startswith(level) else head
    lines = [f"{stamp} {first}" if stamp else first, *rest]
    for trace in _traces(objects) if level not in _BELOW_ERROR else ():
        if trace.strip() and trace.strip() not in message:  # loguru's text holds its traceback already
            lines += trace.rstrip("\n").split("\n")
    return Record(start=start, lines=tuple(x.rstrip("\r") for x in lines[:LINES_MAX]),
                  rank=_rank(_first(objects, RANK_KEYS)), stamp=stamp)


__all__ = ["MAX_RECORD", "Record", "decode", "record_start"]
