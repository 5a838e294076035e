"""Per-rank logs of JSON lines (a log shipper's formatter: one object per line, e.g.
`{"ts": 1795829810.6, "level": "INFO", "rank": 3, "msg": "step 1 ..."}`), read as text.

A file whose first byte is `{` was taken for one JSON document (a Flight Recorder dump, a
torchrun error file) and, being none, was not read at all, though a crashing rank's
traceback (`[rank3]: Traceback ...`, printed by Python, not the formatter) sits between
its JSON lines. Here each JSON-object line that carries a message becomes the plain line
`[rankR]: MESSAGE` (`rankR: ` where there is no rank field), so the text reader reads the
record as that rank's line; every other line is kept as it is, one line for one, so line
numbers stay those of the file. Linear: each line is cut at MAX_JSON_LINE before it is
decoded, and a line longer than that is kept as text.
"""

from __future__ import annotations

import json

MAX_JSON_LINE = 64 * 1024
MESSAGE_KEYS = ("msg", "message", "text", "event", "log")
RANK_KEYS = ("rank", "global_rank", "RANK", "proc_rank")
_SNIFF_LINES = 20


def _record(line: str) -> dict | None:
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}")) or len(s) > MAX_JSON_LINE:
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _field(obj: dict, keys: tuple[str, ...]) -> object:
    return next((obj[k] for k in keys if k in obj), None)


def is_json_lines(text: str) -> bool:
    """Several lines among the first ones are JSON objects that carry a message."""
    seen = 0
    for line in text.splitlines()[:_SNIFF_LINES]:
        obj = _record(line)
        if obj is not None and isinstance(_field(obj, MESSAGE_KEYS), str):
            seen += 1
    return seen >= 2 or (seen == 1 and text.count("\n") <= 1)


def as_text_line(line: str) -> str:
    """One JSON line as `[rankR]: MESSAGE`; any other line unchanged."""
    obj = _record(line)
    if obj is None:
        return line
    msg = _field(obj, MESSAGE_KEYS)
    if not isinstance(msg, str):
        return line
    rank = _field(obj, RANK_KEYS)
    if isinstance(rank, str) and rank.isdigit():
        rank = int(rank)
    level = obj.get("level") or obj.get("levelname")
    text = f"{level}: {msg}" if isinstance(level, str) and level.upper() in ("WARNING", "ERROR", "CRITICAL") else msg
    text = text.replace("\n", " | ")  # one line for one: the traceback a formatter folded in stays on its line
    return f"[rank{rank}]: {text}" if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else text


def as_text_log(text: str) -> str:
    """The file with each JSON line as text (see the module's docstring)."""
    return "\n".join(as_text_line(line) for line in text.split("\n"))
