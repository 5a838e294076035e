"""Kernel log lines, whatever source they came from: their framing and their timestamps.

The shared kernel-log framing: parsers/xid.py reads NVIDIA Xid/SXid events through it,
and hang diagnosis will use it to align watchdog timeouts with Xids by time. Nothing
here knows what a message means; it says where a line's message starts, when the line
was logged, and which lines are the kernel's at all.

Sources and the shapes their lines take:

- `/dev/kmsg`: one record a read, `prio,seq,usec,flags;message` and key=value
  continuation lines; `kmsg_line` makes it the `[uptime] message` dmesg prints
- `dmesg --time-format iso`       2024-11-15T12:02:03,470068+00:00 message
- `dmesg --decode` (-x)           kern  :warn  : 2025-01-21T02:21:33,498559+00:00 message
- `dmesg -T` / `--time-format ctime`  [Sun Feb 23 16:24:18 2025] message
- `dmesg` (raw, seconds since boot)   [6781741.548768] message      (`dmesg -r`: <4>[...] ...)
- `journalctl -k` (short)         Nov 22 13:00:01 gpu017 kernel: message
- `journalctl -o short-iso`       2024-01-22T11:22:33+0000 gpu017 kernel: message
  (and short-iso-precise, short-monotonic, rsyslog RFC 3339, classic syslog with
  "kernel: [123.456]"); a kernel log file holds any of these
- bare messages with no timestamp

`split_prefix` peels those prefixes off a line, in whatever order the tool stacked
them, and returns the `Stamp` they give. `kernel_lines` counts the lines of a source's
text that are the kernel's own, not a tool's notes about the log (journalctl's
"-- No entries --" and hints).

Times: an explicit UTC offset is honoured. `dmesg -T` and syslog/journal "short"
timestamps are printed in the node's local time without a zone; they are taken as
UTC (health-check nodes run in UTC; a node that does not will shift by its offset).
Raw `[uptime]` stamps become a wall-clock time only when the caller gives `boot_time`.
A timestamp that cannot be a real date leaves `time` unset; nothing here raises on
any text.
"""

from __future__ import annotations

import calendar
import math
import re
import time as _time
from collections.abc import Sequence

import msgspec

from healthcheck.core.lazyre import lazy_compile

# --- /dev/kmsg records and a tool's notes about the log ------------------------------

_KMSG = lazy_compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")
# what tools print about the log rather than from it (journalctl's "-- No entries --",
# "-- Boot ... --", its hints to users outside the journal's groups): never kernel lines
_NOT_KERNEL_LINES = ("-- ", "Hint: ", "Users in groups", "Pass -q to turn off", "No journal files were found",
                     "No entries")


def kmsg_line(record: str) -> str | None:
    """One /dev/kmsg record -> "[uptime] message" (its key=value continuation lines dropped).

    The kernel escapes a newline inside a message as "\\x0a"; it becomes a continuation
    line, as dmesg prints it, so the driver's multi-line messages read the same from
    every source.
    """
    m = _KMSG.match(record.split("\n", 1)[0])
    if not m:
        return None
    message = m.group("msg").replace("\\x0a", "\n" + " " * 15)
    return f"[{int(m.group('usec')) / 1e6:.6f}] {message}"


# a record's head as bytes (`_KMSG` up to its `;`): what `kmsg_line` reads, checked without decoding
_KMSG_HEAD = lazy_compile(rb"[0-9]++,[0-9]++,[0-9]++,[^;\n]*+;")
# a record, after the NUL kmsg_lines joins them with, that does not begin with such a head
_ODD_RECORD = lazy_compile(rb"\x00(?![0-9]++,[0-9]++,[0-9]++,[^;\n\x00]*+;)")
_ESCAPED_NEWLINE = b"\\x0a"
_TEXT_OVER = 65536  # kernel_lines' bound: the count of a longer text is its newline count
_SHORTEST_LINE = len("[0.000000] ")  # the shortest line kmsg_line makes, empty messages included


def kmsg_lines(records: Sequence[bytes], keep: tuple[bytes, ...]) -> tuple[str, int]:
    """(the kmsg_line lines of the records that hold a word of `keep`, joined by newlines;
    kernel_lines() of the text every record would make), decoding only the records that need it.

    What reading every record's text would say, at a cost the ring buffer's 10^4-10^5 records
    allow on every job start: the records are joined once with NULs (the kernel escapes a NUL
    in a record), their heads checked by one search, the words and the escaped newlines (a
    line more each) found by bytes.find, and only the records that hold one become text. A
    record holds an ASCII word exactly when its text does: decoding with "replace" never
    swallows an ASCII byte. Records no kernel writes (a NUL or a head `_KMSG_HEAD` does not
    read) are read the slow way, each made text, with the same result.
    """
    if not records:
        return "", 0
    blob = b"\x00".join(records)
    if blob.count(b"\x00") != len(records) - 1 or not _KMSG_HEAD.match(records[0]) or _ODD_RECORD.search(blob):
        return _kmsg_lines_each(records, keep)
    kept = _holding(blob, keep)
    special = kept | _escaping(blob)
    lines, total, notes = [], len(records) - len(special), 0
    for start, end in sorted(special):
        line = kmsg_line(blob[start:end].decode(errors="replace"))
        if line is None:  # never: a head _KMSG_HEAD reads is one _KMSG reads
            return _kmsg_lines_each(records, keep)
        parts = line.split("\n")
        total += len(parts)
        notes += sum(1 for part in parts[1:] if _is_note(part))
        if (start, end) in kept:
            lines.append(line)
    if notes and _SHORTEST_LINE * len(records) + len(records) - 1 <= _TEXT_OVER:
        # a continuation line that is blank or looks like a tool's note is not counted in
        # a text of 64 KiB or less: whether this one is, only its length says (rare: read each)
        return _kmsg_lines_each(records, keep)
    return "\n".join(lines), total


def _holding(blob: bytes, words: tuple[bytes, ...]) -> set[tuple[int, int]]:
    """(start, end) in blob of the records (joined by NULs, none in them) that hold one of words."""
    found: set[tuple[int, int]] = set()
    for word in words:
        at = blob.find(word)
        while at >= 0:
            start = blob.rfind(b"\x00", 0, at) + 1
            end = blob.find(b"\x00", at)
            end = len(blob) if end < 0 else end
            found.add((start, end))
            at = blob.find(word, end)
    return found


def _escaping(blob: bytes) -> set[tuple[int, int]]:
    """_holding(blob, (b"\\x0a",)) by the backslashes: the kernel escapes a backslash too, so in
    its records every one starts an escape, and those are few; memchr finds them at memory speed,
    where a search for the four bytes costs as much as the words' (a record no kernel writes may
    hold many: a loop a backslash, still linear)."""
    found: set[tuple[int, int]] = set()
    at = blob.find(b"\\")
    while at >= 0:
        if not blob.startswith(_ESCAPED_NEWLINE, at):
            at = blob.find(b"\\", at + 1)
            continue
        start = blob.rfind(b"\x00", 0, at) + 1
        end = blob.find(b"\x00", at)
        end = len(blob) if end < 0 else end
        found.add((start, end))
        at = blob.find(b"\\", end)
    return found


def _kmsg_lines_each(records: Sequence[bytes], keep: tuple[bytes, ...]) -> tuple[str, int]:
    """kmsg_lines the slow way: every record made text (records no kernel writes)."""
    lines, kept = [], []
    for record in records:
        line = kmsg_line(record.decode(errors="replace"))
        if line is not None:
            lines.append(line)
            if any(word in record for word in keep):
                kept.append(line)
    return "\n".join(kept), kernel_lines("\n".join(lines))


# --- line prefixes: priority, facility:level, timestamps, "host kernel:" -------------

# English abbreviations, whatever the locale: dmesg and journald print them in C locale
# on the nodes we read (calendar.month_abbr would follow this process's locale).
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}

# Every repetition below is bounded or anchored, so a hostile multi-megabyte line costs
# linear time; digit runs are bounded so int() never meets Python's 4300-digit limit.
_PRIORITY = lazy_compile(r"<\d{1,3}>", re.ASCII)  # dmesg -r: "<4>"
_DECODE = lazy_compile(r"[a-z]{2,8} *:[a-z]{2,8} *: ")  # dmesg -x: "kern  :warn  : "
_ISO = lazy_compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d{2}:?\d{2})?(?:\s+|$)",
    re.ASCII,
)
_MONTH = "(?P<mon>" + "|".join(_MONTHS) + ")"
_CTIME = lazy_compile(  # dmesg -T: "[Sun Feb 23 16:24:18 2025]", weekday ignored
    r"\[\s*(?:[A-Z][a-z]{2}\s+)?" + _MONTH + r"\s+(?P<d>\d{1,2})\s+"
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\s+(?P<y>\d{4})\]\s*",
    re.ASCII,
)
_SYSLOG = lazy_compile(  # journalctl short / syslog: "Nov 22 13:00:01" (short-precise adds .123456)
    _MONTH + r"\s+(?P<d>\d{1,2})\s+(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<frac>\d{1,9}))?\s+",
    re.ASCII,
)
_UPTIME = lazy_compile(r"\[\s*(?P<up>\d{1,12}\.\d{1,9})\]\s*", re.ASCII)
_KERNEL_TAG = lazy_compile(r"(?:[^\s\[\]]{1,255}\s+)?kernel(?:\[\d{1,10}\])?:\s*")  # "gpu017 kernel: "


# --- a line's prefixes -> its Stamp ---------------------------------------------------


class Stamp(msgspec.Struct):
    """What the prefix of one line says about when it was logged."""

    time: float | None = None
    uptime_s: float | None = None
    prefixed: bool = False  # some known log prefix was found: this is a log line


def split_prefix(line: str, boot_time: float | None, year: int | None) -> tuple[Stamp, str]:
    """Peel the known prefixes off a line, in whatever order the tool stacked them.

    A journal line can carry a wall-clock stamp, a host and "kernel:", then the kernel's
    own "[uptime]"; `journalctl -o short-monotonic` puts the uptime first. A bounded
    loop takes each prefix once, so the order does not matter.
    """
    stamp = Stamp()
    body = line.lstrip()
    for _ in range(6):
        rest = _strip_one(body, stamp, year)
        if rest is None:
            break
        stamp.prefixed = True
        body = rest
    if stamp.time is None and stamp.uptime_s is not None and boot_time is not None:
        stamp.time = _finite(boot_time + stamp.uptime_s)
    return stamp, body


def _strip_one(body: str, stamp: Stamp, year: int | None) -> str | None:
    """Remove one known prefix from body and note what it said; None if none is there."""
    for pattern in (_PRIORITY, _DECODE):
        m = pattern.match(body)
        if m:
            return body[m.end():]
    if stamp.time is None:
        m = _ISO.match(body)
        if m:
            stamp.time = iso_time(m)
            return body[m.end():]
        m = _CTIME.match(body)
        if m:
            stamp.time = ctime_time(m)
            return body[m.end():]
        m = _SYSLOG.match(body)
        if m:
            stamp.time = syslog_time(m, year)
            return body[m.end():]
    if stamp.uptime_s is None:
        m = _UPTIME.match(body)
        if m:
            stamp.uptime_s = _finite(float(m.group("up")))
            return body[m.end():]
    m = _KERNEL_TAG.match(body)
    if m:
        return body[m.end():]
    return None


def _epoch(
    y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None = None
) -> float | None:
    """UTC calendar fields -> epoch seconds; None when they are not a real time."""
    try:
        return _checked_epoch(y, mo, d, h, mi, s, frac)
    except (ValueError, OverflowError):  # a caller's absurd `year`: no time, not a crash
        return None


def _checked_epoch(
    y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None
) -> float | None:
    if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]):
        return None
    if not (h < 24 and mi < 60 and s < 61):  # 60: a leap second
        return None
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    return seconds + (int(frac) / 10 ** len(frac) if frac else 0.0)


def iso_time(m: re.Match[str]) -> float | None:
    """`2024-11-15T12:02:03,470068+00:00` (dmesg iso), `...+0000` (journal short-iso)."""
    y = int(m.group("y"))
    if y < 1970:
        return None
    t = _epoch(y, int(m.group("mo")), int(m.group("d")), int(m.group("h")), int(m.group("mi")),
               int(m.group("s")), m.group("frac"))
    tz = m.group("tz")
    if t is None or not tz or tz == "Z":
        return t  # no offset: taken as UTC (see the module docstring)
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return t - sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)


def ctime_time(m: re.Match[str]) -> float | None:
    """`[Sun Feb 23 16:24:18 2025]` (dmesg -T): local time without a zone, taken as UTC."""
    mon = _MONTHS.get(m.group("mon"))
    y = int(m.group("y"))
    if mon is None or y < 1970:
        return None
    return _epoch(y, mon, int(m.group("d")), int(m.group("h")), int(m.group("mi")), int(m.group("s")))


def syslog_time(m: re.Match[str], year: int | None, now: float | None = None) -> float | None:
    """`Nov 22 13:00:01` (journal/syslog short): no year and no zone, taken as UTC.

    Without a given year, a log read in January holds December's lines: a time more
    than a day in the future belongs to the year before.
    """
    mon = _MONTHS.get(m.group("mon"))
    if mon is None:
        return None
    fields = (mon, int(m.group("d")), int(m.group("h")), int(m.group("mi")), int(m.group("s")))
    if year is not None:
        return _epoch(year, *fields, m.group("frac"))
    now = _time.time() if now is None else now
    this_year = _time.gmtime(now).tm_year
    t = _epoch(this_year, *fields, m.group("frac"))
    if t is not None and t > now + 86400:
        return _epoch(this_year - 1, *fields, m.group("frac"))
    if t is None:  # Feb 29 of a leap year, read in a common year
        return _epoch(this_year - 1, *fields, m.group("frac"))
    return t


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


# --- which lines are the kernel's ------------------------------------------------------


def _is_note(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith(_NOT_KERNEL_LINES)


def kernel_lines(text: str) -> int:
    """How many lines of `text` are the kernel's own (not blank, not a tool's notes about the log).

    Whether there is any kernel line at all is decided exactly, line by line, stopping
    at the first (usually the first line). A tool's notes are a few short journalctl
    lines, so past 64 KiB the count is the newline count: a ring buffer of 100k lines
    costs the prologue ~2 ms instead of the ~60 ms of splitting it into line objects.
    """
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        end = size if end < 0 else end
        if not _is_note(text[start:end]):
            break
        start = end + 1
    else:
        return 0
    if size > 65536:
        return text.count("\n") + (not text.endswith("\n"))
    return sum(1 for line in text.split("\n") if not _is_note(line))
