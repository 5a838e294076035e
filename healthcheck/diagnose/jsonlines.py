"""Per-rank logs of JSON lines (a log shipper's formatter: one object per line, e.g.
`{"ts": 1795829810.6, "level": "INFO", "rank": 3, "msg": "step 1 ..."}`), read as text.

A file whose first byte is `{` was taken for one JSON document (a Flight Recorder dump, a
torchrun error file) and, being none, was not read at all, though a crashing rank's
traceback (`[rank3]: Traceback ...`, printed by Python, not the formatter) sits between
its JSON lines. Such a file is read as text: the line layer (parsers/lines.json_pieces,
parsers/jsonlog.py) reads each record into the lines the rank would have printed, its
message, its time, its rank and the traceback inside it, on the record's own line number;
here only the sniff that keeps the file from the JSON readers, and each record's rank and
time for the index of stamped lines (sources.TextStamps).
"""

from __future__ import annotations

from healthcheck.parsers.lines import json_pieces, json_record, labels_of

_SNIFF_LINES = 20


def is_json_lines(text: str) -> bool:
    """Several lines among the first ones are JSON records that carry a message."""
    lines = text.splitlines()[:_SNIFF_LINES]
    seen = sum(1 for line in lines if json_record(line) is not None)
    return seen >= 2 or (seen == 1 and len(lines) == 1)


def record_head(line: str) -> tuple[int | None, str, bool] | None:
    """A JSON record's line as the stamp index reads a line: (the rank its labels or the
    record name, the record's time as printed, whether it is labelled); None for any other."""
    found = json_record(line)
    if found is None:
        return None
    prefix, record = found
    labels = labels_of(prefix)
    rank = record.rank if record.rank is not None else labels.global_rank
    return rank, record.stamp, record.rank is not None or labels.labelled


def as_text_line(line: str) -> str:
    """One JSON line as the lines it stands for (`[rankR]: MESSAGE`, then its traceback's),
    joined by line ends; any other line unchanged."""
    return "\n".join(json_pieces(line)) or line


__all__ = ["as_text_line", "is_json_lines", "record_head"]
