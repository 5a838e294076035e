"""`hc run`'s copy of one rank's output (or its launcher's): the format, written and read.

The tee that `hc run` puts between the command and its stdout/stderr writes every line
to the console unchanged and to `<log dir>/hc-run.rank<R>.<host>.<pid>.log` (a launcher
it wraps: `hc-run.launcher.<host>.<pid>.log`) with the time it arrived and its stream:

    # hc run output (hc.run-output/1): rank=1 world=2 local_rank=1 host=gpu017 pid=4242 launcher=torchrun
    2026-11-27T13:13:47.338Z err Traceback (most recent call last):
    2026-11-27T13:13:47.338Z out step 10 loss 0.31
    2026-11-27T13:13:48.102Z end exit=-9

The `end` line is the tee's own, once the output ended: how the process exited (negative:
the signal that killed it), or `exit=unknown` where the tee could not see it (its parent
reaped it first, on a kernel without pidfd exit information).

The time is what a per-rank file otherwise lacks: which rank's traceback came first.
`parse_run_output` gives the text back as the console showed it (each line without its
stamp, the header an empty line, so line numbers are the file's) with the rank from the
header, never from the file name (a host may be called `rank7`).
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field

SCHEMA = "hc.run-output/1"
# the shell script through which torchrun starts each rank under `hc run -- torchrun` (jobwrap/launcher.py):
# in the log directory, read by no one
SHIM_MARK = "# hc run: torchrun starts each rank through this file"
HEADER_START = "# hc run output ("
STREAMS = ("out", "err")
END = "end"
STAMP_LEN = len("2026-11-27T13:13:47.338Z")
PREFIX_LEN = STAMP_LEN + len(" out ")
MAX_HEADER = 1024

_HEADER_FIELD = re.compile(r"\b(rank|world|local_rank|host|pid|launcher)=([^\s=]{1,255})")
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z (out|err|end) ")
_EXIT = re.compile(r"exit=(-?\d{1,4})$")
_UNSAFE = re.compile(r"[\s=]")


def stamp(now: float) -> str:
    """UTC, milliseconds: `2026-11-27T13:13:47.338Z` (always STAMP_LEN characters)."""
    whole = int(now)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((now - whole) * 1000):03d}Z"


def header(*, rank: int | None, world: int | None, local_rank: int | None, host: str, pid: int,
           launcher: str) -> str:
    """The first line of the file (no newline). `rank=-`: the output of a launcher, not of one rank."""
    def shown(value: object) -> str:
        return "-" if value is None else (_UNSAFE.sub("_", str(value))[:255] or "-")

    return (f"{HEADER_START}{SCHEMA}): rank={shown(rank)} world={shown(world)} local_rank={shown(local_rank)} "
            f"host={shown(host)} pid={pid} launcher={shown(launcher)}")


def line(now: float, stream: str, body: bytes) -> bytes:
    """One line of the file: stamp, stream, the line as the command wrote it (newline added)."""
    return f"{stamp(now)} {stream} ".encode() + body + b"\n"


def end_line(now: float, exit_code: int | None) -> bytes:
    """The tee's last line: the process's exit code (negative: killed by that signal), or unknown."""
    return line(now, END, f"exit={'unknown' if exit_code is None else exit_code}".encode())


@dataclass
class RunOutput:
    """One file read back: the console's text, whose rank it is, and when each line came."""

    text: str
    rank: int | None
    world_size: int | None
    host: str
    pid: int | None
    launcher: str
    stamps: list[tuple[int, float]] = field(default_factory=list)  # (line number, epoch seconds), changes only
    exit_code: int | None = None  # from the `end` line: negative, killed by that signal
    ended_at: float | None = None


def _number(fields: dict[str, str], name: str) -> int | None:
    value = fields.get(name, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def is_run_output(text: str) -> bool:
    return text.startswith(HEADER_START) and SCHEMA in text[:MAX_HEADER]


def parse_run_output(text: str) -> RunOutput | None:
    """The file's text -> RunOutput; None when it is not `hc run`'s output. Linear, never raises."""
    if not is_run_output(text):
        return None
    first, _, rest = text.partition("\n")
    fields = dict(_HEADER_FIELD.findall(first[:MAX_HEADER]))
    host = fields.get("host", "-")
    out = RunOutput(text="", rank=_number(fields, "rank"), world_size=_number(fields, "world"),
                    host="" if host == "-" else host, pid=_number(fields, "pid"),
                    launcher=fields.get("launcher", ""))
    bodies = [""]
    last: float | None = None
    seconds = _Seconds()
    for number, raw in enumerate(rest.split("\n"), 2):
        m = _STAMP.match(raw, 0, PREFIX_LEN)
        if m is None:  # a line longer than the tee's chunk, cut in the middle: as it is
            bodies.append(raw)
            continue
        whole = seconds.epoch(m.group(1))
        when = None if whole is None else whole + int(m.group(2)) / 1000
        if m.group(3) == END:  # the tee's, not the job's: an empty line in the text
            bodies.append("")
            code = _EXIT.search(raw, PREFIX_LEN)
            out.exit_code = int(code.group(1)) if code else None
            out.ended_at = when
            continue
        bodies.append(raw[PREFIX_LEN:])
        if when is not None and when != last:
            out.stamps.append((number, when))
            last = when
    if bodies[-1] == "":
        bodies.pop()  # the newline that ends the file
    out.text = "\n".join(bodies) + "\n"
    return out


class _Seconds:
    """`2026-11-27T13:13:47` -> epoch seconds, remembering the last one (a file's lines share seconds)."""

    def __init__(self) -> None:
        self.clock = ""
        self.value: int | None = None

    def epoch(self, clock: str) -> int | None:
        if clock != self.clock:
            self.clock = clock
            try:
                self.value = calendar.timegm(time.strptime(clock, "%Y-%m-%dT%H:%M:%S"))
            except ValueError:
                self.value = None
        return self.value
