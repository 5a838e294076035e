"""nccl-tests (and rccl-tests) output -> NcclTestsRun: bandwidth samples, the rank map,
the footer's verdicts, failures and launcher errors.

Every format since nccl-tests 2.x (read in NVIDIA/nccl-tests src/common.cu, util.cu at
the tags v2.9.0 ... v2.19.6):

* text, newest (>= 2.13): `size count type redop root` then out-of-place and in-place
  `time algbw busbw #wrong` (`N/A` with `-c 0`); `-I 1` adds `i_min i_max i_p99 i_cv%`
  to each, `-S 1` a timestamp at the end, `-C 1` says `cputime`. Numbers are fixed
  width and become `%e` when large (`1e+06`).
* text, old (<= 2.11): a header per collective (all_gather has neither redop nor root,
  alltoall prints a blank redop), and the last column is `error`: the maximum deviation
  (`%5.0le`), not a count. A deviation of 0 means nothing was wrong (wrong=0); any other
  is judged by nccl-tests' tolerance, which only `Out of bounds values` reports
  (wrong=None).
* JSON written with `-J FILE` (>= 2.17.3): `parse_nccl_tests_json`. Its `env` (the whole
  environment of the run) is never kept. Its `devices` hold one entry per process (the
  first rank of each), so `rank_count` is processes x threads x GPUs.
* rccl-tests' `--output_file` JSON lines (one record per size and placement).

Launcher prefixes (`srun -l`'s `0: `, `mpirun --tag-output`'s `[1,0]<stdout>:`, and MPICH
/ Intel MPI `-prepend-rank`'s `[0] ` before nccl-tests' own lines) are stripped; the rank
map is read with or without its `#` (a paste that lost it, a build that prints none),
and the oldest failure line, `NCCL failure common.cu:921 'unhandled system error'` (no
host, no `Test`), is a failure like the newer ones, as is a newer one quoted without its
host (`Test CUDA failure common.cu:1007`); a failure's quoted message on the next line (a
paste broke the line, or wrapped it inside the quote) is joined to it; a markdown link a
paste put around a FILE:LINE (`[common.cu:334](https://github.com/...#L334)`, also one a
newline tore) is read as its text, and a stack frame without its ` .. HOST pid P: ` is a
frame still; and whatever is not nccl-tests' own
(NCCL INFO/WARN lines, MPI banners, X11 noise) is skipped, except launcher failures (Open
MPI's "not enough slots", mpirun's "exited on signal", srun's task errors), which are
facts of their own.

A text is garbage (ParseError) only when it holds no fact about a run: no row, no
failure, no launcher error, no rank (device) line and no run banner (version, `nThread`
or `Collective test starting` line). A column header alone is garbage. A banner with no
row is a run that never measured (a hang or crash at init): it parses, with
`samples == ()` and `completed` False, so a check must never read "no sample below the
threshold" as a pass.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.bandwidth_common import COLLECTIVES, BandwidthSample
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Handler,
    Line,
    Unrecognized,
    UnrecognizedLines,
    dispatch,
    read_lines,
    relabelled,
    without_cut_end,
)
from healthcheck.parsers.nccl_log import NcclWarn, warn_of

UNKNOWN = "unknown"  # NcclTestsRun.collective when neither the output nor the caller names it
MAX_LISTED = 1000  # failures and `# error:` lines kept (a hostile input could print millions)
_MESSAGE_MAX = 300

FailureKind = Literal["nccl", "cuda", "timeout", "test", "setup", "signal", "task"]
Format = Literal["text", "json", "rccl-json-lines"]


class RankDevice(msgspec.Struct, frozen=True, omit_defaults=True):
    """One `#  Rank N Group G Pid P on HOST device D [bus] MODEL` line (JSON: `devices`);
    nccl-tests built on NCCL 1.0 (one process) print `#   Rank N on HOST device D [0x00] MODEL`."""

    rank: int
    host: str
    device: int  # CUDA device index on the host
    pid: int | None = None  # None in NCCL 1.0's format, which has no Pid
    group: int | None = None  # None in the old format (<= 2.13.3), which has no Group
    bus_id: str = ""  # as printed: "0000:04:00" (>= 2.14) or "0x04" (older)
    model: str = ""  # cudaDeviceProp.name, e.g. "NVIDIA H100 80GB HBM3"


class NcclTestsFailure(msgspec.Struct, frozen=True, omit_defaults=True):
    """One failure line.

    kind: nccl / cuda (`HOST: Test NCCL|CUDA failure FILE:LINE 'message'`), timeout
    (`HOST: Test timeout (Ns) FILE:LINE`, `-T`), test (` .. HOST pid P: Test failure
    FILE:LINE`, one per stack frame under a root failure), setup (`Invalid number of
    GPUs ...`), signal (mpirun: `process rank R with PID P on node HOST exited on signal
    S`), task (srun: `srun: error: HOST: task N: ...`).
    """

    kind: FailureKind
    host: str = ""
    file: str = ""
    line: int | None = None
    message: str = ""
    pid: int | None = None


class TestAverage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One footer's `# Avg bus bandwidth`, with the collective whose rows it closed: a
    text holding several tests (`all_reduce_perf` then `sendrecv_perf`) prints one each."""

    avg_busbw_gbytes_per_s: float
    collective: str | None = None  # None: no `Collective test starting` named it


class NcclTestsRun(msgspec.Struct, frozen=True):
    """What one nccl-tests run printed.

    `samples` holds one BandwidthSample per row and placement, in the order printed
    (a size repeats with `-N`, `-o all`, `-d all`). Each sample's `ranks` is
    `rank_count`: the distinct ranks of the rank map (JSON: processes x threads x GPUs);
    without a rank map, NCCL's own `rank R nranks N` (an NCCL_DEBUG=INFO line), then
    nThread x nGpus of the banner (exact for one process, a lower bound for an MPI run,
    which always prints its rank map unless the capture was cut); else 0: unknown.
    `wrong` is None where nothing was counted (`N/A`, `-c 0`, or an old-format
    deviation other than 0).
    """

    collective: str  # one of bandwidth_common.COLLECTIVES, or UNKNOWN
    format: Format = "text"
    program: str | None = None  # as printed: "all_reduce_perf_mpi", JSON args[0]'s name
    version: str | None = None  # nccl-tests' own version (>= 2.17.4 text)
    nccl_headers: int | None = None  # NCCL_VERSION_CODE it was built with, e.g. 22907
    nccl_library: int | None = None  # the libnccl it ran with (a mismatch: nccl-tests#255)
    nccl_version: str | None = None  # NCCL's banner "NCCL version 2.19.3+cuda12.2"
    threads: int | None = None  # nThread (-t)
    gpus_per_thread: int | None = None  # nGpus (-g)
    min_bytes: int | None = None
    max_bytes: int | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    validation: bool | None = None  # -c: False means #wrong is N/A
    ranks: tuple[RankDevice, ...] = ()  # every rank line, duplicates kept (see lone_ranks)
    rank_count: int = 0  # what each sample's `ranks` holds; 0: unknown
    headers: int = 0  # run banners printed (nThread lines); more than one: see lone_ranks
    tables: int = 0  # column headers printed
    samples: tuple[BandwidthSample, ...] = ()
    bad_rows: int = 0  # lines shaped like a row (two integers first) that did not parse
    last_size_bytes: int | None = None  # the last row's size: where a hung run stopped
    # the size of the row the text ends inside, its times not printed (nccl-tests prints a row's
    # size, count, type, redop and root before it runs that size): the size a hung run was in
    cut_row_bytes: int | None = None
    out_of_bounds: int | None = None  # "# Out of bounds values : N OK|FAILED"
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbytes_per_s: float | None = None  # mean over every size and placement (several footers: the worst)
    averages: tuple[TestAverage, ...] = ()  # every footer's average, in the order printed
    avg_ok: bool | None = None  # None unless NCCL_TESTS_MIN_BW was set
    completed: bool = False  # the footer (Avg bus bandwidth) was printed
    failures: tuple[NcclTestsFailure, ...] = ()
    errors: tuple[str, ...] = ()  # "# error: ..." (ncclGetLastError), JSON "errors"
    # NCCL's WARN lines among the output (NCCL_DEBUG=WARN or INFO), classified as nccl-log's are: a
    # failure's cause, with the peer it names (`socketProgress: Connection closed by remote peer A<P>`)
    nccl_warns: tuple[NcclWarn, ...] = ()
    launcher_error: str | None = None  # the launcher never started the test
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no handler read (text): how many, the first few
    # why what was read is partial: a paste of the footer alone (`# Out of bounds values`,
    # `# Avg bus bandwidth`), no banner, rank map or row above it; None when nothing was missing
    incomplete: str | None = None

    @property
    def hosts(self) -> tuple[str, ...]:
        """The rank map's hosts, in rank order of first appearance."""
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    @property
    def lone_ranks(self) -> bool:
        """Several processes each ran the test alone: a binary built without MPI=1 launched
        by mpirun or srun (nccl-tests#182). Each prints its own banner and its own rank 0,
        and a one-rank collective's busbw is 0. (Logs of several runs appended to one
        file look the same; hc runs one test per capture.)"""
        numbers = [r.rank for r in self.ranks]
        return self.headers > 1 and len(numbers) > len(set(numbers))

    @property
    def root_failures(self) -> tuple[NcclTestsFailure, ...]:
        """The failures less the ` .. Test failure` stack frames under them."""
        return tuple(f for f in self.failures if f.kind != "test")


# ---------------------------------------------------------------- names

_BY_KEY = {c.replace("_", ""): c for c in COLLECTIVES}


def collective_name(name: str) -> str | None:
    """"all_reduce_perf", "/x/all_reduce_perf_mpi", "AllReduce", "all_reduce" -> "all_reduce";
    None for a name that is no known collective."""
    base = name.strip().rsplit("/", 1)[-1].lower()
    cut = base.find("_perf")
    if cut > 0:
        base = base[:cut]
    return _BY_KEY.get(base.replace("_", "").replace("-", ""))


# ---------------------------------------------------------------- text patterns
# Anchored, bounded and possessive where two parts could share characters, so a long
# hostile line costs its length (see tests/unit/contracts/test_parsers_hostile.py).

_VERSION = re.compile(r"#\s*+nccl-tests version (\S{1,64})(?: nccl-headers=(\d{1,9}))?(?: nccl-library=(\d{1,9}))?")
_STARTING = re.compile(r"#\s*+Collective test (starting|concluded): (\S{1,256})")
_BANNER = re.compile(
    r"#?\s*+nThread\s++(\d{1,9})\s++nGpus\s++(\d{1,9})\s++minBytes\s++(\d{1,20})\s++maxBytes\s++(\d{1,20})"
)
_WARMUP = re.compile(r"warmup iters:\s*+(\d{1,9})\s++iters:\s*+(\d{1,9})")
_VALIDATION = re.compile(r"validation:\s*+(\d{1,9})")
_RANK = re.compile(
    r"#?\s*+Rank\s++(\d{1,9})\s++(?:Group\s++(\d{1,9})\s++)?(?:Pid\s++(\d{1,10})\s++)?on\s++(\S{1,1024})\s++"
    r"device\s++(\d{1,9})\s++\[([^\]]{0,128})\]\s*+(.{0,1024})"
)
_OOB = re.compile(r"#\s*+Out of bounds values\s*+:\s*+(\d{1,12})(?:\s++(OK|FAILED))?")
_AVG = re.compile(r"#\s*+Avg bus bandwidth\s*+:\s*+(\S{1,40})(?:\s++(OK|FAILED))?")
_ERROR = re.compile(r"#\s*+error:\s*+(.*)")
_NCCL_NRANKS = re.compile(r"\brank (\d{1,9}) nranks (\d{1,9})\b")  # NCCL INFO "comm 0x.. rank 0 nranks 16 ..."
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4}\S{0,64})")
# `HOST: Test NCCL|CUDA failure FILE:LINE 'message'`; the host gone where a paste quoted the line alone
_FAILURE = re.compile(r"(?:([^\s:]{1,256}): )?Test (NCCL|CUDA) failure ([^\s:]{1,512}):(\d{1,9})(?: (.*))?")
# nccl-tests <= 1.x (and any without the host): `NCCL failure common.cu:921 'unhandled system error'`
_BARE_FAILURE = re.compile(r"(NCCL|Cuda|CUDA) failure ([^\s:']{1,512}):(\d{1,9})(?: (.*))?")
# what follows MPICH / Intel MPI's `-prepend-rank` `[0] ` on a line of nccl-tests' own (`#`, a row,
# nThread, Rank): there only is a bare `[N]` the launcher's (lines.relabelled)
_OWN_LINE = re.compile(r"\s{0,32}(?:#|\d|nThread |Rank )", re.ASCII)
_TIMEOUT = re.compile(r"([^\s:]{1,256}): Test timeout \((\d{1,9})s\) ([^\s:]{1,512}):(\d{1,9})")
# ` .. HOST pid P: Test failure FILE:LINE`; a paste that kept only `Test failure FILE:LINE`
_TRACE = re.compile(r"(?:\.\. (\S{1,256}) pid (\d{1,10}): )?Test failure ([^\s:]{1,512}):(\d{1,9})")
# markdown's link around a source line, `[common.cu:334](https://github.com/.../common.cu#L334)`
# (a paste that linked each FILE:LINE to the source): the link's text is what nccl-tests printed
_MD_LINK = re.compile(r"\[([^\[\]\n]{1,512})\]\(https?://[^\s()]{1,2048}\)")
_MD_LINK_HEAD = re.compile(r"\[([^\[\]\s]{1,512})$")  # a link torn by a newline in its text: `[common.cu:494`
_MD_LINK_TAIL = re.compile(r"\]\(https?://[^\s()]{1,2048}\)")  # ... and its rest on the next line
_SIGNAL = re.compile(
    r"mpirun noticed that process rank (\d{1,9}) with PID (\d{1,10}) on node (\S{1,256}) exited on signal (\d{1,3})"
    r"(?: \(([^)]{0,100})\))?"
)
_SRUN_TASK = re.compile(r"srun: error: ([^\s:]{1,256}): tasks? ([0-9,\-]{1,64}): (.{1,300})")
_SLOTS = re.compile(r"There are not enough slots available in the system to satisfy the (\d{1,9})")
_LAUNCHER_LINES = (
    "mpirun was unable to launch the specified application",
    "mpirun was unable to find the specified executable",
    "mpirun could not find anything to do",
    "ORTE was unable to reliably start one or more daemons",
    "PRTE was unable to reliably start one or more daemons",
    "srun: error: Unable to allocate resources",
    "srun: error: Unable to create step",
    "srun: error: Unable to create job step",
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_TIME_COLUMNS = ("time", "cputime")
_WRONG_COLUMNS = ("#wrong", "error")


class _Table:
    """Where the columns of a row are, from a column header (or guessed without one)."""

    def __init__(self, left: list[str], groups: list[list[str]]) -> None:
        self.has_redop = "redop" in left
        self.has_root = "root" in left
        self.width = sum(len(g) for g in groups)
        placements = ("out-of-place", "in-place") if len(groups) == 2 else ("out-of-place",)
        self.slots = self._slots(zip(placements, groups, strict=False))
        # trace replay prints no out-of-place body: the in-place columns alone
        self.in_place_only = self._slots([("in-place", groups[1])]) if len(groups) == 2 else None
        self.in_place_width = len(groups[1]) if len(groups) == 2 else -1

    @staticmethod
    def _slots(groups) -> list[tuple[str, int, int, int, int, bool]]:
        """(placement, index of time, algbw, busbw, #wrong or -1, wrong is a deviation)."""
        slots, offset = [], 0
        for placement, names in groups:
            wrong = next((i for i, n in enumerate(names) if n in _WRONG_COLUMNS), -1)
            slots.append((placement, offset + 0, offset + names.index("algbw"), offset + names.index("busbw"),
                          -1 if wrong < 0 else offset + wrong, wrong >= 0 and names[wrong] == "error"))
            offset += len(names)
        return slots


# No header seen: the newest layout, redop and root told apart by their look.
_GUESS = _Table([], [["time", "algbw", "busbw", "#wrong"], ["time", "algbw", "busbw", "#wrong"]])
_INF = math.inf


def _header(body: str) -> _Table | None:
    """A `#  size count type [redop] [root] time algbw busbw #wrong|error ...` line."""
    tokens = body.lstrip("#").split()
    if len(tokens) > 64 or tokens[:3] != ["size", "count", "type"]:
        return None
    cut = next((i for i, t in enumerate(tokens) if t in _TIME_COLUMNS), None)
    if cut is None:
        return None
    left, perf = tokens[3:cut], tokens[cut:]
    if any(t not in ("redop", "root") for t in left):
        return None
    second = next((i for i, t in enumerate(perf) if i and t in _TIME_COLUMNS), len(perf))
    groups = [perf[:second], [t for t in perf[second:] if t != "timestamp"]]
    groups = [g for g in groups if g]
    if not all("busbw" in g and "algbw" in g for g in groups):
        return None
    return _Table(left, groups)


def _number(token: str) -> float | None:
    if not token.isascii():  # float() reads other scripts' digits too
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    return value if 0 <= value < _INF else None  # NaN fails both


def _natural(token: str) -> int | None:
    if not (token.isascii() and token.isdigit()) or len(token) > 20:  # "²".isdigit()
        return None
    return int(token)


def _integer(token: str) -> int | None:
    body = token.removeprefix("-")
    if not (body.isascii() and body.isdigit()) or len(body) > 12:
        return None
    return int(token)


def _row(tokens: list[str], table: _Table | None) -> tuple[int, str, str | None, list] | None:
    """(size, type, redop, [(placement, time, algbw, busbw, wrong)]) of a table row, None
    when the tokens are not one. Called for every row: kept to plain indexing."""
    n = len(tokens)
    if n < 7 or n > 64:
        return None
    size, count = _natural(tokens[0]), _natural(tokens[1])
    dtype = tokens[2]
    if size is None or count is None or not _WORD.fullmatch(dtype):
        return None
    redop, i = None, 3
    layout = table or _GUESS
    # (old alltoall prints its redop column blank)
    if (layout.has_redop or table is None) and _WORD.fullmatch(tokens[3]):
        redop, i = tokens[3], 4
    if table is not None:
        if table.has_root:
            if i >= n or _integer(tokens[i]) is None:
                return None
            i += 1
    elif n - i == layout.width + 1 and _integer(tokens[i]) is not None:
        i += 1  # the root column of the newest layout
    left = n - i
    slots = layout.slots
    if left < layout.width or (table is None and left != layout.width):
        if left != layout.in_place_width or layout.in_place_only is None:
            return None
        slots = layout.in_place_only
    measured = _measured(tokens, i, slots)
    if measured is None:
        return None
    return size, dtype, (None if redop in (None, "none") else redop), measured


def _measured(tokens: list[str], i: int, slots: list) -> list | None:
    """[(placement, time, algbw, busbw, wrong)] of a row's columns from `i`; None when one
    is no number."""
    measured = []
    for placement, t, a, b, w, deviation in slots:
        try:
            time_us, algbw, busbw = float(tokens[i + t]), float(tokens[i + a]), float(tokens[i + b])
        except ValueError:
            return None
        if not (0 <= time_us < _INF and 0 <= algbw < _INF and 0 <= busbw < _INF):
            return None
        wrong: int | None = None
        if w >= 0:
            token = tokens[i + w]
            if token != "N/A":
                value = _number(token)
                if value is None:
                    return None
                if deviation or value != int(value):  # a deviation: 0 is "none wrong", else unknown
                    wrong = 0 if value == 0 else None
                else:
                    wrong = int(value)
        measured.append((placement, time_us, algbw, busbw, wrong))
    return measured


def _message(text: str) -> str:
    """A failure's quoted message: `'unhandled system error / last'` -> its text."""
    text = text.strip()
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        text = text[1:-1]
    elif text[:1] == "'":
        text = text[1:]
    text = text.strip()
    if text.endswith(" /"):  # "<error> / <ncclGetLastError>" with no last error
        text = text[:-2].rstrip()
    return clip(text, _MESSAGE_MAX)


# ---------------------------------------------------------------- the text parser


def parse_nccl_tests(text: str, collective: str | None = None) -> NcclTestsRun:
    """nccl-tests' stdout (any 2.x), its `-J` JSON, or rccl-tests' JSON lines -> facts.

    `collective` ("all_reduce", "all_reduce_perf") names the test where the output does
    not (a table without its banner); a name the output prints takes precedence. A name
    that is no collective is a ValueError (the caller's mistake, not the output's).
    """
    fallback = _caller_collective(collective)
    if text.lstrip()[:1] == "{":
        return _parse_json(text.strip(), fallback)
    return _parse_text(text, fallback)


def _caller_collective(collective: str | None) -> str | None:
    if collective is None:
        return None
    name = collective_name(collective)
    if name is None:
        raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    return name


class _Banner:
    """The run's banner lines as they are read (the first of each kind counts)."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.nccl_headers: int | None = None
        self.nccl_library: int | None = None
        self.nccl_version: str | None = None
        self.threads: int | None = None
        self.gpus: int | None = None
        self.min_bytes: int | None = None
        self.max_bytes: int | None = None
        self.warmup_iters: int | None = None
        self.iters: int | None = None
        self.validation: bool | None = None
        self.nccl_nranks: int | None = None  # NCCL's own "nranks N" (NCCL_DEBUG=INFO)
        self.headers = 0  # nThread lines: one per process that started the test alone or as rank 0
        self.started = False  # any line of the banner or the rank map


class _Text:
    """What the text parser has read so far (its handlers' state)."""

    def __init__(self) -> None:
        self.table: _Table | None = None
        self.rows: list[tuple[int, str, str | None, list, str | None]] = []
        self.ranks: list[RankDevice] = []
        self.failures: list[NcclTestsFailure] = []
        self.errors: list[str] = []
        self.nccl_warns: list[NcclWarn] = []
        self.banner = _Banner()
        self.program: str | None = None
        self.current: str | None = None  # the collective of the rows that follow
        self.tables = self.bad_rows = 0
        self.out_of_bounds: int | None = None
        self.oob_ok: bool | None = None
        self.avg: float | None = None
        self.averages: list[TestAverage] = []
        self.avg_ok: bool | None = None
        self.completed = False
        self.launcher_error: str | None = None
        self.expect_application = False
        self.unfinished: int | None = None  # the failure (index) whose message the next line may hold
        self.unrecognized = UnrecognizedLines()
        self.cut_at = 0  # the number of the line the text ends inside (`without_cut_end`); 0: none
        self.cut_row: int | None = None  # the size of the row the text ends inside (begun, not measured)


# ---- line handlers: each reads one kind of line into _Text; False: not its line after all


def _read_application(s: _Text, line: Line) -> bool:
    """The line after Open MPI's "...requested by the application:": the program's path."""
    s.expect_application = False
    body = line.text.strip()
    if " " not in body and "/" in body:
        s.program = s.program or clip(body.rsplit("/", 1)[-1], 256)
        return True
    return False


def _read_row(s: _Text, line: Line) -> bool:
    tokens = line.text.split()
    parsed = _row(tokens, s.table)
    if parsed is not None:
        s.rows.append((*parsed, s.current))
        return True
    if len(tokens) > 1 and tokens[0].isdigit() and tokens[1].isdigit() or _begun_at_cut(s, line, tokens):
        s.bad_rows += 1
        if line.number == s.cut_at and len(tokens[0]) <= 20:
            s.cut_row = int(tokens[0])
        return True
    return False


def _begun_at_cut(s: _Text, line: Line, tokens: list[str]) -> bool:
    """The line the text ends inside holds only a whole size under a column header: a row
    nccl-tests began (it prints size, count, type, redop and root before it runs the size,
    the times after) and the text stopped in (a hung run, a cut paste)."""
    return line.number == s.cut_at and s.table is not None and len(tokens) == 1 and tokens[0].isdigit()


def _read_banner(s: _Text, line: Line) -> bool:
    return _banner_line(line.text.strip(), s.banner, s.ranks, s.errors)


def _read_starting(s: _Text, line: Line) -> bool:
    m = _STARTING.match(line.text.strip())
    if not m:
        return False
    s.banner.started = True
    s.program = s.program or clip(m.group(2), 256)
    s.current = collective_name(m.group(2)) or s.current
    return True


def _read_header(s: _Text, line: Line) -> bool:
    found = _header(line.text.strip())
    if found is not None:
        s.table, s.tables = found, s.tables + 1
    return True  # a `#` line naming `size` is the header's, read or not


def _read_out_of_bounds(s: _Text, line: Line) -> bool:
    m = _OOB.match(line.text.strip())
    if not m:
        return False
    count = int(m.group(1))
    s.out_of_bounds = count if s.out_of_bounds is None else max(s.out_of_bounds, count)
    s.oob_ok = (s.oob_ok is not False) and count == 0 and m.group(2) != "FAILED"
    return True


def _read_average(s: _Text, line: Line) -> bool:
    m = _AVG.match(line.text.strip())
    if not m:
        return False
    value = _number(m.group(1))  # several footers (lone ranks): the worst of them
    s.completed = True
    if value is not None:
        s.avg = value if s.avg is None else min(s.avg, value)
        s.averages.append(TestAverage(avg_busbw_gbytes_per_s=value, collective=s.current))
    if m.group(2):
        s.avg_ok = (s.avg_ok is not False) and m.group(2) == "OK"
    return True


def _read_comment(s: _Text, line: Line) -> bool:
    return True  # the banner's other `#` lines ("# Using devices", "#")


def _read_failure(s: _Text, line: Line) -> bool:
    failure = _failure(line.text.strip())
    if failure is None:
        return False
    if len(s.failures) < MAX_LISTED:
        s.failures.append(failure)
        s.unfinished = len(s.failures) - 1 if _message_unfinished(line.text, failure) else None
    return True


def _message_unfinished(text: str, failure: NcclTestsFailure) -> bool:
    """A CUDA or NCCL failure whose quoted message is still to come: none on its line (a
    paste broke the line before it), or a quote opened and not closed (a wrap inside it)."""
    if failure.kind not in ("nccl", "cuda"):
        return False
    tail = text.rstrip()
    return not failure.message or (tail.count("'") == 1 and not tail.endswith("'"))


def _read_failure_message(s: _Text, line: Line) -> bool:
    """The quoted message of the failure on the line before, which a paste or a wrap moved
    onto this line: `Test CUDA failure common.cu:1007` / `'CUDA-capable device(s) is/are
    busy or unavailable'` (real); joined to that failure."""
    at, text = s.unfinished, line.text.strip()
    if at is None:
        return False
    failure = s.failures[at]
    opened = bool(failure.message)  # its quote opened on the failure's own line: this line closes it
    if (text[-1:] != "'" if opened else text[:1] != "'") or _failure(text) is not None:
        return False
    s.unfinished = None
    joined = f"'{failure.message} {text}" if opened else text
    s.failures[at] = msgspec.structs.replace(failure, message=_message(joined))
    return True


def _read_nccl_version(s: _Text, line: Line) -> bool:
    m = _NCCL_VERSION.search(line.text)
    if m and s.banner.nccl_version is None:
        s.banner.nccl_version = m.group(1)
    return True


def _read_nccl_nranks(s: _Text, line: Line) -> bool:
    if s.banner.nccl_nranks is not None or "NCCL INFO" not in line.text[:300]:
        return False
    m = _NCCL_NRANKS.search(line.text)
    if m:
        s.banner.nccl_nranks = int(m.group(2))
    return True


def _read_launcher_error(s: _Text, line: Line) -> bool:
    if s.launcher_error is not None:
        return False
    body = line.text.strip()
    m = _SLOTS.match(body)
    if m:
        s.launcher_error = f"Open MPI: not enough slots available for the {m.group(1)} slots requested"
        return True
    if body.startswith(_LAUNCHER_LINES):
        s.launcher_error = clip(body, _MESSAGE_MAX)
        return True
    return False


def _read_slots_request(s: _Text, line: Line) -> bool:
    s.expect_application = True
    return True


def _read_nccl_warn(s: _Text, line: Line) -> bool:
    """An NCCL WARN line (nccl_log.warn_of): kept, the first MAX_LISTED."""
    warn = warn_of(line)
    if warn is None:
        return False
    if len(s.nccl_warns) < MAX_LISTED:
        s.nccl_warns.append(warn)
    return True


def _hash_or_nthread(text: str) -> bool:
    body = text.lstrip()
    return body[:1] == "#" or body.startswith(("nThread", "Rank ", "Using devices"))


def _is_row(text: str) -> bool:
    body = text.lstrip()
    return body[:1].isdigit() and body.isascii()


_HANDLERS: tuple[Handler[_Text], ...] = (
    Handler("row", _is_row, _read_row),
    Handler("banner", _hash_or_nthread, _read_banner),
    Handler("starting", _hash_or_nthread, _read_starting),
    Handler("header", lambda t: t.lstrip()[:1] == "#" and "size" in t.lstrip()[:40], _read_header),
    Handler("out-of-bounds", _hash_or_nthread, _read_out_of_bounds),
    Handler("average", _hash_or_nthread, _read_average),
    Handler("comment", _hash_or_nthread, _read_comment),
    Handler("failure-message", lambda t: t.lstrip()[:1] == "'" or t.rstrip()[-1:] == "'", _read_failure_message),
    Handler("failure", lambda t: True, _read_failure),
    Handler("nccl-warn", lambda t: "NCCL WARN" in t, _read_nccl_warn),
    Handler("nccl-version", lambda t: "NCCL version" in t, _read_nccl_version),
    Handler("nccl-nranks", lambda t: " nranks " in t, _read_nccl_nranks),
    Handler("launcher-error", lambda t: True, _read_launcher_error),
    Handler("slots-request", lambda t: t.lstrip().startswith("slots that were requested by the application:"),
            _read_slots_request),
)


def _unlinked(line: Line) -> Line:
    """The line without markdown's links around its FILE:LINEs (the link's text kept)."""
    if "](" not in line.text:
        return line
    return msgspec.structs.replace(line, text=_MD_LINK.sub(r"\1", line.text))


def _links_mended(lines: Iterator[Line]) -> Iterator[Line]:
    """Lines with markdown's links taken off, also a link a newline tore (`Test failure
    [common.cu:494` / `](https://...)  Test failure ...`: its `[` and its `](URL)` dropped)."""
    held: tuple[Line, re.Match[str]] | None = None  # a line ending in a link's `[TEXT`, and where
    for line in lines:
        if held is not None:
            before, head = held
            tail = _MD_LINK_TAIL.match(line.text)
            if tail:
                before = msgspec.structs.replace(before, text=before.text[:head.start()] + head.group(1))
                line = msgspec.structs.replace(line, text=line.text[tail.end():])
            yield before
            held = None
        line = _unlinked(line)
        torn = _MD_LINK_HEAD.search(line.text, max(0, len(line.text) - 513)) if "[" in line.text[-513:] else None
        if torn is not None:
            held = (line, torn)
        else:
            yield line
    if held is not None:
        yield held[0]


def _parse_text(text: str, fallback: str | None) -> NcclTestsRun:
    s = _Text()
    text, cut = without_cut_end(text)  # a text that ends mid-line: its last word may be cut short
    s.cut_at = text.count("\n") + 1 if cut else 0
    for read in _links_mended(read_lines(text)):
        if not read.text.strip() or read.noise:
            s.unfinished = None
            continue
        line = relabelled(read, rank_before=_OWN_LINE)  # behind an indent, MPICH's `[0] `
        if s.expect_application and _read_application(s, line):
            continue
        name = dispatch(_HANDLERS, s, line)
        if name is None:
            s.unrecognized.note(line)
        if name != "failure":
            s.unfinished = None  # a failure's message is on its line or the very next one
    return _run_of(s, text, fallback)


CUT_END = "the text ends mid-line: its last word may be cut short, not read"
FOOTER_ONLY = ("the footer alone: no banner, rank map or result row above it (which test, sizes and ranks "
               "are not known)")


def _run_of(s: _Text, text: str, fallback: str | None) -> NcclTestsRun:
    rows, ranks, failures, banner = s.rows, s.ranks, s.failures, s.banner
    program, launcher_error, tables = s.program, s.launcher_error, s.tables
    incomplete = None
    if not (rows or failures or launcher_error or banner.started):
        if s.averages:
            # the footer's average is the run's summary (an out-of-bounds line alone says too
            # little to stand for a run): read, and said to be alone
            incomplete = FOOTER_ONLY
        else:
            what = "a column header with no row" if tables else "no nccl-tests banner, row, failure or launcher error"
            raise ParseError(f"nccl-tests: {what} (starts with {clip(text.strip(), 60)!r})")
    if s.cut_at and incomplete is None:
        incomplete = CUT_END
    if ranks:
        rank_count = len({r.rank for r in ranks})
    elif banner.nccl_nranks is not None:
        rank_count = banner.nccl_nranks
    elif banner.threads is not None and banner.gpus is not None:
        rank_count = banner.threads * banner.gpus
    else:
        rank_count = 0
    collective = (collective_name(program) if program else None) or fallback or UNKNOWN
    samples = tuple(
        BandwidthSample(
            collective=name or collective, size_bytes=size, busbw_gbytes_per_s=busbw, algbw_gbytes_per_s=algbw,
            time_us=time_us, ranks=rank_count, placement=placement, wrong=wrong, dtype=dtype, redop=redop,
        )
        for size, dtype, redop, measured, name in rows
        for placement, time_us, algbw, busbw, wrong in measured
    )
    return NcclTestsRun(
        collective=collective,
        format="text",
        program=program,
        version=banner.version,
        nccl_headers=banner.nccl_headers,
        nccl_library=banner.nccl_library,
        nccl_version=banner.nccl_version,
        threads=banner.threads,
        gpus_per_thread=banner.gpus,
        min_bytes=banner.min_bytes,
        max_bytes=banner.max_bytes,
        warmup_iters=banner.warmup_iters,
        iters=banner.iters,
        validation=banner.validation,
        ranks=tuple(ranks),
        rank_count=rank_count,
        headers=banner.headers,
        tables=tables,
        samples=samples,
        bad_rows=s.bad_rows,
        last_size_bytes=rows[-1][0] if rows else None,
        cut_row_bytes=s.cut_row,
        out_of_bounds=s.out_of_bounds,
        out_of_bounds_ok=s.oob_ok,
        avg_busbw_gbytes_per_s=s.avg,
        averages=tuple(s.averages),
        avg_ok=s.avg_ok,
        completed=s.completed,
        failures=tuple(failures),
        errors=tuple(s.errors),
        nccl_warns=tuple(s.nccl_warns),
        launcher_error=launcher_error,
        unrecognized=s.unrecognized.freeze(),
        incomplete=incomplete,
    )


def _banner_line(body: str, banner: _Banner, ranks: list[RankDevice], errors: list[str]) -> bool:
    """The banner's lines (version, nThread, rank map) and `# error:`; True when one matched."""
    m = _RANK.match(body)
    if m:
        rank, group, pid, host, device, bus, model = m.groups()
        ranks.append(RankDevice(rank=int(rank), host=host, device=int(device), pid=None if pid is None else int(pid),
                                group=None if group is None else int(group), bus_id=bus.strip(),
                                model=model.strip()))
        banner.started = True
        return True
    m = _BANNER.match(body)
    if m:
        banner.headers += 1
        banner.started = True
        if banner.threads is None:
            banner.threads, banner.gpus = int(m.group(1)), int(m.group(2))
            banner.min_bytes, banner.max_bytes = int(m.group(3)), int(m.group(4))
            tail = body[m.end():m.end() + 400]
            w = _WARMUP.search(tail)
            if w:
                banner.warmup_iters, banner.iters = int(w.group(1)), int(w.group(2))
            v = _VALIDATION.search(tail)
            if v:
                banner.validation = int(v.group(1)) != 0
        return True
    m = _VERSION.match(body)
    if m:
        banner.started = True
        if banner.version is None:
            banner.version = m.group(1)
            banner.nccl_headers = int(m.group(2)) if m.group(2) else None
            banner.nccl_library = int(m.group(3)) if m.group(3) else None
        return True
    m = _ERROR.match(body)
    if m:
        if len(errors) < MAX_LISTED:
            errors.append(clip(m.group(1).strip(), _MESSAGE_MAX))
        return True
    return False


def _failure(body: str) -> NcclTestsFailure | None:
    if ": Test " in body[:300] or body.startswith("Test "):
        m = _FAILURE.match(body)
        if m:
            host, kind, file, line, message = m.groups()
            return NcclTestsFailure(kind="nccl" if kind == "NCCL" else "cuda", host=host or "", file=file,
                                    line=int(line), message=_message(message or ""))
        m = _TIMEOUT.match(body)
        if m:
            host, seconds, file, line = m.groups()
            return NcclTestsFailure(kind="timeout", host=host, file=file, line=int(line),
                                    message=f"no completion within {seconds} s (-T)")
        m = _TRACE.match(body)
        if m:
            host, pid, file, line = m.groups()
            return NcclTestsFailure(kind="test", host=host or "", file=file, line=int(line),
                                    pid=int(pid) if pid else None)
    if body.startswith(("NCCL failure ", "Cuda failure ", "CUDA failure ")):
        m = _BARE_FAILURE.match(body)
        if m:
            kind, file, line, message = m.groups()
            return NcclTestsFailure(kind="nccl" if kind == "NCCL" else "cuda", file=file, line=int(line),
                                    message=_message(message or ""))
    if body.startswith("Invalid number of GPUs"):
        return NcclTestsFailure(kind="setup", message=clip(body, _MESSAGE_MAX))
    if body.startswith("mpirun noticed"):
        m = _SIGNAL.match(body)
        if m:
            rank, pid, host, signal, name = m.groups()
            what = f"rank {rank} exited on signal {signal}" + (f" ({name})" if name else "")
            return NcclTestsFailure(kind="signal", host=host, pid=int(pid), message=what)
    if body.startswith("srun: error: "):
        m = _SRUN_TASK.match(body)
        if m:
            host, tasks, what = m.groups()
            return NcclTestsFailure(kind="task", host=host, message=clip(f"task {tasks}: {what.strip()}", _MESSAGE_MAX))
    return None


# ---------------------------------------------------------------- JSON


class _JsonPlacement(msgspec.Struct):
    time: float | str | None = None
    cpu_time: float | str | None = None
    alg_bw: float | str | None = None
    bus_bw: float | str | None = None
    nwrong: float | str | None = None


class _JsonResult(msgspec.Struct):
    size: int
    count: int | None = None
    type: str = ""
    redop: str = ""
    root: str | int | None = None
    out_of_place: _JsonPlacement | None = None
    in_place: _JsonPlacement | None = None


class _JsonDevice(msgspec.Struct):
    rank: int
    hostname: str = ""
    device: int = 0
    pid: int | None = None
    group: int | None = None
    device_hex: str = ""
    device_info: str = ""


class _JsonConfig(msgspec.Struct):
    nthreads: int | None = None
    ngpus: int | None = None
    minimum_bytes: int | None = None
    maximum_bytes: int | None = None
    warmup_iters: int | None = None
    iterations: int | None = None
    validation: int | None = None
    devices: list[_JsonDevice] = []


class _JsonVerdict(msgspec.Struct):
    count: int | None = None
    bandwidth: float | str | None = None
    okay: bool | str | None = None  # nccl-tests writes booleans as "true"/"false"


class _JsonDoc(msgspec.Struct):
    # no `env`: it is the run's whole environment, skipped unread into any fact
    version: int | None = None
    args: list[str] = []
    nccl_version: int | None = None
    config: _JsonConfig | None = None
    results: list[_JsonResult] | None = None
    out_of_bounds: _JsonVerdict | None = None
    average_bus_bandwidth: _JsonVerdict | None = None
    errors: list[str] = []


class _RcclRecord(msgspec.Struct):
    size: int
    time: float | str
    algBw: float | str
    busBw: float | str
    name: str = ""
    type: str = "float"
    redop: str | None = None
    inPlace: int = 0
    gpus: int | None = None
    wrong: str | float | None = msgspec.field(default=None, name="#wrong")


_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, ValueError, UnicodeError)


def parse_nccl_tests_json(text: str, collective: str | None = None) -> NcclTestsRun:
    """The file nccl-tests >= 2.17.3 writes with `-J FILE` (or rccl-tests' JSON lines)."""
    return _parse_json(text.strip(), _caller_collective(collective))


def _parse_json(text: str, fallback: str | None) -> NcclTestsRun:
    first = text.split("\n", 1)[0]
    if '"busBw"' in first[:4096]:
        return _parse_rccl_lines(text, fallback)
    try:
        doc = typed.decode_json(text, _JsonDoc)
    except _DECODE_ERRORS as exc:
        raise ParseError(f"nccl-tests JSON: {clip(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}"
                         " (a run that did not finish leaves it cut)") from None
    if doc.results is None and doc.config is None:
        raise ParseError(f"nccl-tests JSON: no \"results\" or \"config\" (starts with {clip(text, 60)!r})")
    config = doc.config or _JsonConfig()
    program = clip(doc.args[0].rsplit("/", 1)[-1], 256) if doc.args else None
    name = (collective_name(program) if program else None) or fallback or UNKNOWN
    ranks = tuple(RankDevice(rank=d.rank, host=d.hostname, device=d.device, pid=d.pid, group=d.group,
                             bus_id=d.device_hex, model=d.device_info.strip()) for d in config.devices)
    per_process = (config.nthreads or 0) * (config.ngpus or 0)
    processes = len({d.rank for d in config.devices}) or (1 if per_process else 0)
    rank_count = processes * per_process
    samples = []
    bad_rows = 0
    for result in doc.results or ():
        measured: list[BandwidthSample] = []
        for placement, p in (("out-of-place", result.out_of_place), ("in-place", result.in_place)):
            if p is None:
                continue
            time_us = _json_number(p.time if p.time is not None else p.cpu_time)
            algbw, busbw = _json_number(p.alg_bw), _json_number(p.bus_bw)
            wrong_value = _json_number(p.nwrong) if p.nwrong is not None else None
            if time_us is None or algbw is None or busbw is None or (p.nwrong is not None and wrong_value is None):
                measured = []
                break
            measured.append(BandwidthSample(
                collective=name, size_bytes=result.size, busbw_gbytes_per_s=busbw, algbw_gbytes_per_s=algbw,
                time_us=time_us, ranks=rank_count, placement=placement,  # type: ignore[arg-type]
                wrong=None if wrong_value is None else int(wrong_value), dtype=result.type or "float",
                redop=None if result.redop in ("", "none") else result.redop,
            ))
        if measured and result.size >= 0:
            samples.extend(measured)
        else:
            bad_rows += 1
    oob = doc.out_of_bounds
    avg = doc.average_bus_bandwidth
    return NcclTestsRun(
        collective=name,
        format="json",
        program=program,
        nccl_library=doc.nccl_version,
        threads=config.nthreads,
        gpus_per_thread=config.ngpus,
        min_bytes=config.minimum_bytes,
        max_bytes=config.maximum_bytes,
        warmup_iters=config.warmup_iters,
        iters=config.iterations,
        validation=None if config.validation is None else config.validation != 0,
        ranks=ranks,
        rank_count=rank_count,
        headers=1,
        tables=0 if doc.results is None else 1,
        samples=tuple(samples),
        bad_rows=bad_rows,
        last_size_bytes=samples[-1].size_bytes if samples else None,
        out_of_bounds=oob.count if oob else None,
        out_of_bounds_ok=_json_bool(oob.okay) if oob else None,
        avg_busbw_gbytes_per_s=_json_number(avg.bandwidth) if avg else None,
        avg_ok=_json_bool(avg.okay) if avg else None,
        completed=avg is not None,
        # nccl-tests 2.19 writes `"errors": [""]` for a clean run
        errors=tuple(clip(e, _MESSAGE_MAX) for e in doc.errors if e.strip())[:MAX_LISTED],
    )


def _json_number(value: float | str | None) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = float(value)
        return value if math.isfinite(value) and value >= 0 else None
    return None  # "nan", null


def _json_bool(value: bool | str | None) -> bool | None:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value) if isinstance(value, str) else None  # "unchecked"


def _parse_rccl_lines(text: str, fallback: str | None) -> NcclTestsRun:
    """rccl-tests `--output_file`: one JSON record per line (size, placement)."""
    decoder = typed.decoder(_RcclRecord)
    lines = [line for line in text.splitlines() if line.strip()]
    samples = []
    bad_rows = 0
    names: list[str] = []
    stray: list[str] = []  # lines among the records that are none (another program's, a torn one)
    for i, line in enumerate(lines):
        try:
            r = decoder.decode(line)
        except _DECODE_ERRORS as exc:
            bad_rows += 1  # the last record, cut by a run that died; or a line that is no record
            if not (i == len(lines) - 1 and i > 0):
                stray.append(f"line {i + 1}: {clip(str(exc) or type(exc).__name__, 80)}")
            continue
        time_us, algbw, busbw = _json_number(r.time), _json_number(r.algBw), _json_number(r.busBw)
        wrong: int | None = None
        if isinstance(r.wrong, str):
            wrong = _natural(r.wrong.strip())
        elif isinstance(r.wrong, (int, float)) and math.isfinite(r.wrong) and r.wrong >= 0:
            wrong = int(r.wrong)
        if time_us is None or algbw is None or busbw is None or r.size < 0:
            bad_rows += 1
            continue
        name = collective_name(r.name) if r.name else None
        if r.name and not names:
            names.append(r.name)
        samples.append(BandwidthSample(
            collective=name or fallback or UNKNOWN, size_bytes=r.size, busbw_gbytes_per_s=busbw,
            algbw_gbytes_per_s=algbw, time_us=time_us, ranks=r.gpus if r.gpus and r.gpus > 0 else 0,
            placement="in-place" if r.inPlace else "out-of-place", wrong=wrong, dtype=r.type or "float",
            redop=None if r.redop in (None, "", "none") else r.redop,
        ))
    if not samples:
        why = f" ({stray[0]})" if stray else ""
        raise ParseError(f"rccl-tests JSON lines: no record with size, time, algBw and busBw{why}")
    return NcclTestsRun(
        collective=(collective_name(names[0]) if names else None) or fallback or UNKNOWN,
        format="rccl-json-lines",
        program=clip(names[0], 256) if names else None,
        rank_count=samples[0].ranks,
        tables=1,
        samples=tuple(samples),
        bad_rows=bad_rows,
        last_size_bytes=samples[-1].size_bytes,
        incomplete=(f"{len(stray)} line(s) among the JSON records are no record, not read: {stray[0]}"
                    if stray else None),
    )
