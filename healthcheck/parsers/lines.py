"""One way to read a tool's text, line by line, for every text parser.

Operators paste what their machines printed through whatever ran it: a launcher's label
before each line, a logger's timestamp, colour codes, Windows line ends, a ` \\` at the
end of every line of a quoted paste, their shell prompt first. `read_lines` takes all
that off in one place and hands each parser `Line`s: the text as the tool printed it,
what was taken off (the launcher's rank or task, the timestamp, the runner's tag), the
line number and the raw line.

Prefixes, peeled in whatever order they were stacked (each kind at most once a line):

- launchers (core/launcher_labels.py): srun `--label` `3: `, mpirun `--tag-output`
  `[1,3]<stdout>:`, torchrun `--tee` `[default3]:`, torch's own `[rank3]:`; a process
  manager's `NAME-N | ` (a launcher's `worker-3 | `) only where the text says N is the rank
  (`worker_labelled`)
- a grep over several files, before all the rest: `FILE:` (`FILE-` on a context line,
  `FILE:N:` with -n) where FILE is named as a log (`.log`, `.out`, `.err`, `.txt`), kept
  as the line's `file`; tail's `==> FILE <==` header line is `noise` ("file-header") and
  names the `file` of the lines after it
- runners: Ray `(pid=N) ` (and its `[repeated Nx across cluster]` after the line),
  `(RayTrainWorker pid=N, ip=10.0.0.1) `, vLLM v1's `(VllmWorker rank=3 pid=N) `, Determined
  `[2024-03-01T10:00:00.1Z] abc123 || `, kubectl logs --prefix `[pod/NAME/CONTAINER] `,
  a job runner's stream label `NAME [stderr] ` / `[stdout] ` (milabench's
  `dinov2-giant-nodes.cn-d004 [stderr] `)
- a container runtime's stamp: `kubectl logs --timestamps` (`docker logs -t`, the CRI log
  files) `2025-11-24T03:20:21.001125857Z `, RFC 3339 with a `.` fraction and a zone: taken
  off even with `stamps=False` (it is no tool's own; NCCL's `[%F %T]` follows it), kept as
  the line's `stamp` (kind `runtime`) where no stamp of the tool's follows
- timestamps: ISO `2024-11-15T12:02:03,470068+00:00 ` (dmesg --time-format iso,
  journalctl -o short-iso), journal/syslog `Nov 22 13:00:01 ` with `host kernel: `,
  dmesg `[ 123.456789] `, dmesg -T `[Sun Feb 23 16:24:18 2025] `, glog `E0318
  17:25:16.769000 2606 api.py:833] ` and c10's `[E1218 20:27:21.426415540
  ProcessGroupNCCL.cpp:629] ` (the last prefix before a message: its level and source
  are kept); a Python logging prefix where most lines carry one (a test framework's
  `2019-07-16 03:43:24,132 process   L0458 DEBUG| [stdout] `, logging's `asctime - name -
  LEVEL - `: `logger_prefixed`), kept as a `pylog` stamp with the logger's name and level

Shapes mended, each by a small function of its own: CRLF and a stray CR (a progress bar
redrawn: the text after the last CR), ANSI colour codes (also with their ESC lost in a
paste, or cut at the end of a line), a whole line in markdown's inline code
(`` `...` ``: `uncoded`), the ` \\` continuation on every line of a paste
and markdown's `> ` before every line of a quoted reply (each only when most lines carry
it; the quote also when most lines of a block from the first `>` line to the last carry it, the
writer's prose around the block: `quoted_reply`; and inside a code block), a log viewer's
line number `[1745] ` before every line (only where most lines carry one and the numbers
count up line by line: `line_numbered`; never `[0]`), or its bare gutter `451 ` (the same, the
number first on the line and counting up or skipping one: `gutter_numbered`), a table's or a
log viewer's columns before the message on most lines (`        | `, `  | 2024-08-23T22:22:58.879Z | `:
`viewer_columned`; a stamp cell kept, a row that ends at its own border left alone), an editor's
markdown auto-link around a file name or an address (`[net_ib.cc:101](http://net_ib.cc:101/)`:
the link's text where its target is that text, `unlinked`; also for the GPU tools),
markdown's indented code block (lines indented 4 columns or more that a blank line opens
after prose and a blank line closes: the blanks common to the block taken off, the tool's own
indentation kept relative; `code_block_indents`, also for the GPU tools and the kernel log), a
shell prompt or wrapper line before the output, and the bare echo of the command before
it (`scontrol show node x`, no prompt: `is_command_echo`) (marked `noise`, left for no
parser to read), two processes' lines torn into one (an mpirun tag or a torch `[rankN]:[`
mid-line, any `[rankN]:` right after a tqdm bar's `s/it]`: split into fragments on the same line
number, never glued into one fact). Tabs are kept: parsers split on any whitespace.

Hard wraps (a message split at the terminal's width) are NOT joined by `read_lines`:
whether the next line continues this one is the parser's knowledge. A handler asks
`Cursor.wrapped`; a parser whose messages a terminal wraps anywhere (torch_log) asks
`terminal_width` (the width its lines were wrapped at, where lines show one) and reads
through `hard_unwrapped` (each message's pieces joined back onto its first line).

What only a parser can decide is still done here, by a function the parser calls (the
end of this module): `unpasted`/`pasted_lines` (a quote, markdown's `**` around a cell
(`unemphasized`) and a ` \\` off every line, no majority deciding, for tools no line of
which starts with `>`); `untabbed` (a table's
tabified blanks expanded to their columns again); `flat_field` (a tree's
`key: value` line a paste put at the left margin, read where its key is the tool's);
`relabelled` (a label
behind a whole paste's indent, torchx's `trainer/0 [0]:`, MPICH's `[N] ` before what the
parser names); `continues_indented`, `join_continuation`, `unquoted` (a kernel message's
continuation lines, a message another tool quoted; `continues_bare`: one pasted without
stamps over bare lines); `uncollapsed` (a message's lines a terminal put side by side
on one line, each break become a run of blanks: split before each run the parser's next
line follows); `word_wrapped` (a next line a word
wrap moved where the head's grammar expects more); `wrapped_word`/`rewrapped` (a table
cell a terminal hard-wrapped); `is_elision` (a paste's `...`); `unindented` (a whole
paste's indent); `python_logging` (`WARNING:torch...:`, `[INFO] date name: `: too
common a shape to take off every tool's lines) and `without_ray_repeat` (Ray's
`[repeated Nx across cluster]`, also taken off every Ray-prefixed line here).

A parser reads through a table of small `Handler`s (a cheap guard on the text, and a
function that reads it); `dispatch` tries them in order and names the one that read the
line, and `Unrecognized` counts and samples the lines no handler read: evidence to show,
never a reason to refuse a file whose known facts are there (`NOTHING_UNREAD` the shared
empty one, which omit_defaults leaves out). `starts(*words)` is a handler's prefix
guard; `chained` makes a table whose first handler to read a line lets every later
matching one read it too (`read_every`). `dispatch` tells what read
each line to a recorder (passed to it, or set by `recording` for a parse: what `hc parse
--explain` shows); a parser with a table of its own tells `recorded` (building the
`Line` only while `recording_now()`). `collecting_unread` hands every line an
`UnrecognizedLines` counts (not only its sample) to a list for the parse: the audit of
what the parsers leave unread (tests/field/unread.py).

Everything is linear: each pattern is anchored, bounded and tried at most once per
prefix; a line is cut at `max_line` characters before it is looked at.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Generic, NamedTuple, TypeVar

import msgspec

from healthcheck.core.launcher_labels import (
    MPICH_RANK,
    MPIRUN_TAG,
    SRUN_LABEL,
    TORCH_RANK,
    TORCHRUN_ROLE,
    TORCHX_LABEL,
)
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.jsonlog import Record, decode, record_start

MAX_LINE = 65_536  # characters of one line that are looked at; the rest is cut (`cut`)
SAMPLE_MAX = 20  # unrecognized lines kept as a sample
SAMPLE_TEXT = 200  # characters of each
QUOTED_SAMPLE = 256  # lines that decide whether a paste is quoted
CONTINUATION_SHARE = 0.8  # of non-blank lines ending in `\` for the paste to be a quoted one
QUOTE_BLOCK_MIN = 2  # `>` lines that make a quoted block with prose around it: one is the text's

# ---------------------------------------------------------------- the line


class Line(msgspec.Struct, frozen=True):
    """One line of a tool's text with what was taken off it.

    `text` is what the tool printed; `raw` the line as read (cut at `max_line`), both
    without the line end. A torn line gives several Lines with the same `number`.
    """

    number: int  # 1-based, lines split on "\n" as `sed -n Np` counts them
    raw: str
    text: str
    task: int | None = None  # the launcher's task/rank: srun `N: `, mpirun `[job,N]<stream>:`
    stream: str = ""  # mpirun's stdout | stderr | stddiag
    role: str = ""  # torchrun --tee's role ("default")
    local_rank: int | None = None  # torchrun --tee's `[roleN]:`
    rank: int | None = None  # torch's `[rankN]:`, a global rank
    runner: str = ""  # Ray's or Determined's tag as printed ("(WorkerDict pid=3943529)")
    stamp: str = ""  # the timestamp as printed
    stamp_kind: str = ""  # iso | journal | dmesg | dmesg-T | glog
    level: str = ""  # glog's severity letter: F E W I V
    logger: str = ""  # whose log prefix that was: c10 (`[E1218 ... file.cpp:629] `) | glog (`E0318 ... file.py:833] `)
    source: str = ""  # glog's `file.py:833`
    host: str = ""  # the journal's host before `kernel:`
    file: str = ""  # the file a grep over several files (`FILE:`) or a tail's `==> FILE <==` header named
    labels: str = ""  # everything taken off the front, as printed
    repairs: tuple[str, ...] = ()  # crlf, cr, ansi, continuation, quote, torn, cut
    noise: str = ""  # "prompt": a shell prompt or wrapper line; "command": a bare command echo before the output;
    # "file-header": tail's `==> FILE <==`

    @property
    def global_rank(self) -> int | None:
        return rank_named(self.rank, self.task, self.local_rank)



# ---------------------------------------------------------------- shape repairs

_ANSI = lazy_compile(
    r"\x1b(?:\[[0-9;?:]{0,32}[ -/]{0,4}[@-~]|\][^\x07\x1b]{0,256}(?:\x07|\x1b\\)?|[@-Z\\-_]|$)"
    r"|\[\d{1,3}(?:;\d{1,3}){0,15}m"  # SGR whose ESC a paste dropped: "[0;31m"
)
_ANSI_CUT = lazy_compile(r"\x1b\[[0-9;?]{0,32}$")  # a code cut at the end of the line


def drop_line_end(text: str) -> tuple[str, bool]:
    """CRLF's CR; (text, True) when there was one."""
    return (text[:-1], True) if text.endswith("\r") else (text, False)


_FENCES = ("```", "~~~")
_CLOSERS = frozenset(")]}>'\"")  # what closes a value: the word it ends is whole (a `:` or `,` may be inside one)


def ends_in_a_row(text: str) -> bool:
    """The text's last line has no line end and is not blank: a row the text stopped in, its
    last word whole (a blank after it) or not (`ends_mid_line`); either way cells may be missing."""
    tail = text[text.rfind("\n") + 1:]
    return bool(tail.strip()) and not tail.endswith("\r") and not tail.lstrip().startswith(_FENCES)


def ends_mid_line(text: str) -> bool:
    """The text stops inside its last line: no line end after it, and no blank either (a paste
    or a capture cut mid-line, a hung tool's last row; a real output ends in a line end)."""
    return bool(text) and not text[-1].isspace()


def without_cut_end(text: str) -> tuple[str, str]:
    """(`text` without the word its end may have cut, that word): where the text ends mid-line
    (`ends_mid_line`), its last word may be a longer one cut short (`400` printed as `40`, `NV18`
    as `NV`), never to be read as whole; the rest of the line stays (the words before it are
    whole: a blank follows each), and so does a last word a closing bracket or quote ends.
    ("", word) for a text that is only that word; (text, "") where nothing was cut."""
    if not ends_mid_line(text) or text[-1] in _CLOSERS or text[text.rfind("\n") + 1:].lstrip().startswith(_FENCES):
        return text, ""  # a word its closing bracket or quote ends (`(pid: 2630)`), a markdown fence: whole
    start = len(text)
    while start and not text[start - 1].isspace():  # linear: one step back per character
        start -= 1
    return text[:start], text[start:]


def cut_end_note(word: str) -> str:
    """What a parser's `incomplete` says of the word `without_cut_end` set apart."""
    return f"the text ends mid-line: its last word {word[:24]!r} may be cut short, not read"


def redrawn(text: str) -> str:
    """A line redrawn in place (a progress bar, then the text that overwrote it): what
    the terminal showed last, the text after the last CR (the whole line if that is empty)."""
    if "\r" not in text:
        return text
    return text.rsplit("\r", 1)[-1] or text.replace("\r", "")


def strip_ansi(text: str) -> str:
    """ANSI escape codes (colour, cursor), also a code cut at the line's end and a colour
    code whose ESC was lost (`[0;31m`)."""
    if "\x1b" not in text and ("m" not in text or "[" not in text):
        return text
    text = _ANSI_CUT.sub("", text)
    return _ANSI.sub("", text)


def uncoded(text: str) -> str:
    """A line a writer put whole in markdown's inline code (`` `(RayWorkerWrapper pid=933, ...)
    ... no error` ``, field/issues-9; `` `torchrun --nproc-per-node 1 ...` ``, issues-4):
    the text inside, the indent kept. One backtick each end, none inside (a tool's own
    quoting, `` `x` `` in a message, and a ``` fence stay)."""
    body = text.strip()
    if len(body) < 3 or body[0] != "`" or body[-1] != "`" or body[1] == "`" or body[-2] == "`":
        return text
    if "`" in body[1:-1]:
        return text
    return text[:len(text) - len(text.lstrip())] + body[1:-1]


def quoted_paste(lines: Sequence[str]) -> bool:
    """Most non-blank lines end in a ` \\` continuation: a paste quoted as one shell string.
    The first QUOTED_SAMPLE lines decide (a quoted paste is quoted throughout), so a
    100,000-line ring buffer costs no extra pass."""
    blank = ending = 0
    lines = lines[:QUOTED_SAMPLE]
    for line in lines:
        body = line.rstrip("\r").rstrip(" ")
        if not body:
            blank += 1
        elif body.endswith("\\"):
            ending += 1
    filled = len(lines) - blank
    return filled >= 1 and ending >= CONTINUATION_SHARE * filled


# markdown's `> `, `> > ` (quoted again); a `>` glued to the next is the text's (`>>> STATUS`)
_QUOTE = lazy_compile(r"[ \t]{0,3}+(?:>(?:[ \t]|$)){1,8}")


def _quote_marks(lines: Sequence[str]) -> list[bool | None]:
    """Per line: None blank, True opened by markdown's `>`, False any other."""
    marks: list[bool | None] = []
    for line in lines:
        body = line.lstrip(" \t")
        if not body.strip():
            marks.append(None)
        else:  # python's prompt is no quote
            marks.append(body[:1] == ">" and not body.startswith(">>> "))
    return marks


def quoted_reply(lines: Sequence[str]) -> bool:
    """Most non-blank lines start with markdown's `>`, or most of those from the first such
    line to the last and at least QUOTE_BLOCK_MIN of them: a paste quoted in a reply (an issue,
    a ticket, chat), the writer's unquoted prose around the quoted block or not (`Here is what
    I get:` / `$ sudo dmesg -T` / `> [Fri Aug 30 11:43:09 2024] NVRM: Xid ...`). Decided for
    the whole text, so one `>>> ` prompt, or one line of the text's own that starts with `> `,
    is no quote."""
    marks = _quote_marks(lines[:QUOTED_SAMPLE])
    filled = [mark for mark in marks if mark is not None]
    quoted = filled.count(True)
    if filled and quoted >= CONTINUATION_SHARE * len(filled):
        return True
    if quoted < QUOTE_BLOCK_MIN:
        return False
    first, last = marks.index(True), len(marks) - marks[::-1].index(True)
    block = [mark for mark in marks[first:last] if mark is not None]
    return quoted >= CONTINUATION_SHARE * len(block)


def drop_quote(text: str) -> str:
    """A line's markdown quote (`> `, `> > `)."""
    m = _QUOTE.match(text)
    return text[m.end():] if m else text


# pytest's failure report: `E` and seven blanks before each line of the exception it explains
# (`E       torch.multiprocessing.spawn.ProcessRaisedException:`), a bare `E` for its blank lines
PYTEST_MARK = "E       "
PYTEST_RUN = 2  # marked lines in a row that make a pytest report (one `E       x` line is anyone's)


def _pytest_candidate(line: str) -> bool:
    body = line.rstrip("\r")
    return body.startswith(PYTEST_MARK) or body.rstrip(" ") == "E"


def pytest_marked(lines: Sequence[str]) -> list[bool]:
    """Per line: whether it carries pytest's `E       ` mark, in a run of PYTEST_RUN or more
    such lines (field-6: a paste of mp.spawn's report out of a failed test, every line
    marked). Linear: one pass to find the runs."""
    candidates = [_pytest_candidate(line) for line in lines]
    marks = [False] * len(lines)
    start = 0
    for i in range(len(candidates) + 1):
        if i < len(candidates) and candidates[i]:
            continue
        if i - start >= PYTEST_RUN:
            marks[start:i] = [True] * (i - start)
        start = i + 1
    return marks


def drop_pytest_mark(text: str) -> str:
    """A line's pytest `E       ` mark (a bare `E`: the report's blank line)."""
    return text[len(PYTEST_MARK):] if text.startswith(PYTEST_MARK) else "" if text.rstrip(" ") == "E" else text


def drop_continuation(text: str) -> str:
    """A line's trailing ` \\` (blanks after it too); the blanks before it are the line's."""
    body = text.rstrip(" \t")
    if body.endswith(" \\"):
        return body[:-2]
    return body[:-1] if body.endswith("\\") else text



# markdown's indented code block: lines indented 4 columns or more (a tab is 4), after a blank
# line that follows the writer's text, ended by a blank line (or the text's end) before any line
# of that text again (field/issues-12: a sentence, then `    [root@node045 ~]# ibstatus` /
# `    Infiniband device ...`)
CODE_INDENT = 4  # columns
_TAB = 4


def _indent_of(line: str) -> str:
    """The blanks before a line's text."""
    return line[:len(line) - len(line.lstrip(" \t"))]


def _columns(indent: str) -> int:
    """How many columns `indent` takes (a tab to the next multiple of 4)."""
    column = 0
    for char in indent:
        column = column + _TAB - column % _TAB if char == "\t" else column + 1
    return column


def _common_indent(lines: Sequence[str]) -> str:
    """The blanks every non-blank line of `lines` starts with, character for character."""
    common: str | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = _indent_of(line)
        if common is None:
            common = indent
        else:
            size = 0
            while size < len(common) and size < len(indent) and common[size] == indent[size]:
                size += 1
            common = common[:size]
    return common or ""


def _is_code_line(line: str) -> bool:
    """A line markdown keeps in an indented code block: blank, or indented 4 columns or more."""
    return not line.strip() or _columns(_indent_of(line[:64])) >= CODE_INDENT


def code_block_indents(lines: Sequence[str]) -> list[str]:
    """Per line, the indentation of the markdown indented code block it is in ("" outside
    one): a run of lines each blank or indented 4 columns or more, opened by a blank line
    after a line of the writer's (indented less than 4 columns: prose, a heading, a prompt)
    and closed by a blank line (or the text's end), its indentation the blanks common to its
    non-blank lines (at least 4 columns). A tool's own indentation is no block: an indented
    part right after a line of the tool's (ibstat's ports, `-q`'s sections, ibv_devinfo's port
    after a blank line and an indented one), followed by one with no blank line between
    (topo's tab before its header row), or a text indented from its first line (a grep of
    `-q`'s tree keeps its depth) is left as it is. Linear: each line is looked at twice."""
    indents = [""] * len(lines)
    start = 0
    while start < len(lines):
        if not _is_code_line(lines[start]):
            start += 1
            continue
        end = start
        while end < len(lines) and _is_code_line(lines[end]):
            end += 1
        opened = start > 0 and not lines[start].strip()  # the line before the run is the writer's
        closed = end == len(lines) or not lines[end - 1].strip()
        common = _common_indent(lines[start:end]) if opened and closed else ""
        if _columns(common) >= CODE_INDENT:
            for index in range(start, end):
                indents[index] = common if lines[index].strip() else ""
        start = end
    return indents


def outdented(text: str, indent: str) -> str:
    """`text` without its code block's `indent` (`code_block_indents`) where it starts with it."""
    return text[len(indent):] if indent and text.startswith(indent) else text

# an editor's auto-link around text that looks like an address (GitHub's markdown turns a
# `file.cc:N` and an IP address into one: `[net_ib.cc:101](http://net_ib.cc:101/)`,
# `[10.1.3.201](http://10.1.3.201/)`, field/issues-8's NCCL WARNs): the link's target is the
# text itself, give or take a scheme and a trailing slash; a link whose target says more
# (`[docs](https://...)`) is the writer's and stays. Bounded each side, no nesting.
_AUTOLINK = lazy_compile(r"\[([^\[\]()\s]{1,256})\]\(([^()\s]{1,512})\)")
_SCHEME = lazy_compile(r"[a-zA-Z][a-zA-Z+.\-]{0,15}://")


def _link_target(text: str) -> str:
    """A link's text or target without its scheme and trailing slash, lower case."""
    m = _SCHEME.match(text)
    return (text[m.end():] if m else text).rstrip("/").lower()


def _unlinked(m: re.Match[str]) -> str:
    text = m.group(1)
    return text if _link_target(text) == _link_target(m.group(2)) and _link_target(text) else m.group(0)


def unlinked(text: str) -> str:
    """`text` with every markdown auto-link whose target is its own text (`_AUTOLINK`) back
    to that text: what the tool printed before an editor linked it."""
    if "](" not in text:
        return text
    return _AUTOLINK.sub(_unlinked, text)


# a log viewer's (or `cat -n`-like paste's) line number before every line: `[1745] ` (a CI
# log page, field/issues-8's LlamaFactory paste); never 0 (viewers count from 1; MPICH's
# `-prepend-rank` `[0] ` starts at rank 0), at most 9 digits
_LINE_NUMBER = lazy_compile(r"\[([1-9]\d{0,8})\](?: |$)", re.ASCII)
LINE_NUMBERS_MIN = 4  # numbered lines for a text to be one a viewer numbered


def line_numbered(lines: Sequence[str]) -> bool:
    """Most lines start with `[N] ` and N counts up by one from line to line: a paste out
    of a log viewer that numbered its lines (blank ones too). The first QUOTED_SAMPLE
    lines decide; a run of ranks (`[1] ... [2] ...`, MPICH's labels) counts up only by
    chance and never over most of the lines of a text that several ranks print into, and
    a text with a `[0] ` line is a rank-labelled one."""
    lines = lines[:QUOTED_SAMPLE]
    if any(line.startswith(("[0] ", "[0]\t")) or line == "[0]" for line in lines):
        return False  # rank 0's label: MPICH's ranks, never a viewer's count
    return _counts_up(lines, lambda line: _LINE_NUMBER.match(line) if line[:1] == "[" else None, 1)


def _counts_up(lines: Sequence[str], number_of: Callable[[str], re.Match[str] | None], max_step: int) -> bool:
    """LINE_NUMBERS_MIN lines or more, and most, carry a number (`number_of`'s group 1) that
    rises from the line before by 1 to `max_step` over most of them."""
    numbered = counted = 0
    before = -max_step - 1
    for line in lines:
        m = number_of(line)
        number = int(m.group(1)) if m else -max_step - 1
        numbered += m is not None
        counted += m is not None and 0 < number - before <= max_step
        before = number
    return (numbered >= LINE_NUMBERS_MIN and numbered >= CONTINUATION_SHARE * len(lines)
            and counted >= CONTINUATION_SHARE * (numbered - 1))


def drop_line_number(text: str) -> str:
    """A line's `[N] ` a log viewer put before it (see `line_numbered`)."""
    m = _LINE_NUMBER.match(text) if text[:1] == "[" else None
    return text[m.end():] if m else text


# a viewer's or an editor's gutter without brackets: `451 host:41449:41449 [6] NCCL INFO ...`,
# `455 NCCL version 2.4.8+cuda10.0` (field/issues-17's NCCL 2.4.8 paste), a blank line its bare
# number; at the very start of the line (a `ps` listing's PIDs and a table's numbers come padded)
_GUTTER = lazy_compile(r"([1-9]\d{0,8})(?: |$)", re.ASCII)
GUTTER_SKIP = 2  # a step up to this counts as a gutter's: one line cut out of the paste


def gutter_numbered(lines: Sequence[str]) -> bool:
    """Most lines start with a bare `N ` (no brackets, nothing before it) and N counts up line
    by line, or skips one where a line was cut: a paste out of a viewer or an editor that
    showed its line numbers. The first QUOTED_SAMPLE lines decide, as for `line_numbered`. A
    table whose rows start with a number is no gutter: nccl-tests' and perftest's sizes double
    and come padded, a `ps` listing's PIDs are right-aligned under its header, none counts up
    one by one over most of the lines."""
    return _counts_up(lines[:QUOTED_SAMPLE], lambda line: _GUTTER.match(line) if line[:1].isdigit() else None,
                      GUTTER_SKIP)


def drop_gutter(text: str) -> str:
    """A line's bare `N ` a viewer's gutter put before it (see `gutter_numbered`)."""
    m = _GUTTER.match(text) if text[:1].isdigit() else None
    return text[m.end():] if m else text


# a CI runner's timestamper before every line (Jenkins' `15:50:32   `, field-16's Open MPI CI log):
# a clock time, then two blanks or more (a program's own logger puts one: `12:01:02 INFO ...`),
# or nothing on a blank line
_CLOCK = lazy_compile(r"\d\d:\d\d:\d\d(?:\.\d{1,9})?(?: {2,16}|\t{1,4}| ?$)", re.ASCII)


def clock_stamped(lines: Sequence[str]) -> bool:
    """Most lines (LINE_NUMBERS_MIN or more) start with a CI runner's clock time and blanks
    (`_CLOCK`): a paste out of a CI log whose runner stamped every line. The first
    QUOTED_SAMPLE lines decide."""
    lines = lines[:QUOTED_SAMPLE]
    stamped = sum(1 for line in lines if line[:1].isdigit() and _CLOCK.match(line))
    return stamped >= LINE_NUMBERS_MIN and stamped >= CONTINUATION_SHARE * len(lines)


def drop_clock(text: str) -> str:
    """A line's CI clock stamp (see `clock_stamped`)."""
    m = _CLOCK.match(text) if text[:1].isdigit() else None
    return text[m.end():] if m else text


# a table's or a log viewer's columns before the message: a runner's `        | ` pipe column
# (milabench's error summary), CloudWatch's `  | 2024-08-23T22:22:58.879Z | ` (field-8): a
# border `|` after at most 16 blanks, then cells of one word each closed by ` | `; never a
# table row, which ends at its own border (nvidia-smi's `| ... |`)
_COLUMN_BORDER = lazy_compile(r"[ \t]{0,16}\|[ \t]{1,4}")
_COLUMN_CELL = lazy_compile(r"([^\s|]{1,64})[ \t]{1,4}\|[ \t]{1,4}")
_CELL_STAMP = lazy_compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d", re.ASCII)
COLUMN_CELLS_MAX = 4  # one-word cells before the message a viewer may show


def _columned(line: str) -> bool:
    """`line` starts with a column's border and does not end at a table's (a shell-quoted
    paste's ` \\` aside)."""
    end = line.rstrip().removesuffix("\\").rstrip()
    return _COLUMN_BORDER.match(line) is not None and not end.endswith("|") and len(end) > 2


def viewer_columned(lines: Sequence[str]) -> bool:
    """Most non-blank lines (of the first QUOTED_SAMPLE, at least LINE_NUMBERS_MIN of them)
    start with a viewer's or a runner's columns (`_COLUMN_BORDER`) and do not end in a
    table's border: the message is the last column of each, its labels behind the columns."""
    lines = [x for x in lines[:QUOTED_SAMPLE] if x.strip() and not x.lstrip().startswith("```")]
    columned = sum(1 for x in lines if _columned(x))
    return columned >= LINE_NUMBERS_MIN and columned >= CONTINUATION_SHARE * len(lines)


def drop_columns(text: str) -> str:
    """A line without the columns a viewer or a runner put before its message (see
    `viewer_columned`): the border and up to COLUMN_CELLS_MAX one-word cells; a cell that is
    a time stamp is kept before the message, where the stamp readers take it."""
    if not _columned(text):
        return text
    m = _COLUMN_BORDER.match(text)
    assert m is not None
    at, stamp = m.end(), ""
    for _ in range(COLUMN_CELLS_MAX):
        cell = _COLUMN_CELL.match(text, at)
        if cell is None:
            break
        if _CELL_STAMP.match(cell.group(1)):
            stamp = cell.group(1) + " "
        at = cell.end()
    return stamp + text[at:]


# any run of `>` (a space after each or not) after up to 3 blanks: for tools no line of
# which starts with `>` (the GPU tables and trees, perftest), where a reply's `>text` is a quote too
_LOOSE_QUOTE = lazy_compile(r"[ \t]{0,3}+(?:>[ \t]?){1,8}")


def unpasted(line: str) -> str:
    """`line` without a markdown quote before it and a shell continuation (` \\`) after it,
    wherever they are, with no majority of lines deciding: for a tool none of whose lines
    starts with `>` or ends in ` \\` (nvidia-smi's table, `-q` tree, topo and nvlink,
    perftest), so a paste quoted only around its interesting lines reads too; markdown's
    `**` around a cell too (`unemphasized`). A line without them is returned as it is
    (indentation kept: `-q` is a tree by its indent)."""
    quote = _LOOSE_QUOTE.match(line)
    if quote:
        line = line[quote.end():]
    line = unlinked(unemphasized(line))
    end = line.rstrip()
    if end.endswith("\\") and end[-2:-1] in (" ", "\t"):
        return end[:-1].rstrip()
    return line


def pasted_lines(text: str) -> list[str]:
    """`text`'s lines (str.splitlines), each without colour codes, a grep's `FILE:` and a
    container runtime's stamp (`without_runtime_stamp`), `unpasted`, and without a Python
    logging prefix where most lines carry one (`logger_prefixed`): the GPU and perftest
    parsers' reading."""
    lines = [strip_ansi(line) for line in text.splitlines()]
    lines = [outdented(line, indent) for line, indent in zip(lines, code_block_indents(lines), strict=True)]
    if line_numbered(lines):
        lines = [drop_line_number(line) for line in lines]
    elif gutter_numbered(lines):
        lines = [drop_gutter(line) for line in lines]
    lines = [without_runtime_stamp(without_grep_file(line, numbered=True)) for line in lines]
    for label in (SRUN_LABEL, _KUBECTL):
        lines = one_source_unlabelled(lines, label)
    lines = [without_runtime_stamp(line) for line in lines]  # kubectl --prefix --timestamps: the pod, then the stamp
    if logger_prefixed(lines):
        lines = [drop_logger(line) for line in lines]
    return [unpasted(line) for line in lines]


def without_grep_file(line: str, *, numbered: bool = False) -> str:
    """`line` without a grep's `FILE:` before it (`_grep_file`: FILE named as a log).
    `numbered`: grep -n's line number after it is taken too wherever it is followed by
    the same separator (`FILE:12:` / `FILE-12-`), also before a blank (a table's or a
    tree's indent: no srun label is read on those tools' lines)."""
    return line[grep_file_prefix(line, numbered)[0]:]


def without_runtime_stamp(line: str) -> str:
    """`line` without a container runtime's stamp before it (`_RUNTIME`: kubectl logs
    --timestamps, `docker logs -t`): never a table's or a tree's own first column."""
    m = _RUNTIME.match(line) if line[:1].isdigit() else None
    return line[m.end():] if m else line


def one_source_unlabelled(lines: list[str], label: re.Pattern[str]) -> list[str]:
    """`lines` without `label` (srun's `N: `, kubectl's `[pod/NAME/C] `) where every non-blank
    line of the first QUOTED_SAMPLE carries the same one: one task's or one pod's output,
    whose lines are the tool's in order. Several tasks' lines interleaved are left as they
    are (a table or a tree of two nodes mixed line by line is no one's)."""
    seen = ""
    for line in lines[:QUOTED_SAMPLE]:
        if not line.strip():
            continue
        m = label.match(line)
        if m is None or (seen and m.group(0) != seen):
            return lines
        seen = m.group(0)
    if not seen:
        return lines
    return [line[len(seen):] if line.startswith(seen) else line for line in lines]


# markdown's strong emphasis around a cell (`**5544.28**`): a reporter marking the number
# that matters; never across a `*` or a blank at either end, at most 64 characters inside
_EMPHASIS = lazy_compile(r"\*\*([^*\s](?:[^*]{0,62}[^*\s])?)\*\*")


def unemphasized(line: str) -> str:
    """`line` without markdown's `**` around any word or cell of it."""
    return _EMPHASIS.sub(r"\1", line) if "**" in line else line


_PROMPT = lazy_compile(
    r"(?:\([\w.\-]{1,64}\) )?"  # a conda/venv name
    r"(?:[\w.\-]{1,64}@[\w.\-]{1,64}(?::[^\s$#]{0,256})?\s?[$#%]"  # user@host:~$
    r"|\[[\w.\-]{1,64}@[\w.\-]{1,64}[^\]\n]{0,256}\][$#%]"  # [user@host dir]$
    r"|\[[\w.\-]{1,64} [^\]\n]{0,256}\][$#%]"  # [host dir]# with no user (field/issues' `[gpu6000 ~]# `)
    r"|\$|>>>|\+{1,3}"  # $ cmd, python's >>>, bash -x's + cmd
    # oh-my-zsh's default theme: `➜  dir git:(branch) ✗ cmd`, `➜ nvidia-smi -a` (field/issues-9,
    # issues' perfquery, issues-6's torch-log); the arrow alone starts it, never a tool's line
    r"|\u279c)"
    r"(?: |$)",
    re.ASCII,
)


def is_prompt(text: str) -> bool:
    """A shell prompt with the command typed after it, or a `set -x` trace line: what a
    paste carries before the tool's output, never the tool's."""
    if text[:1] not in "$>+([\u279c" and "@" not in text[:140]:
        return False
    return _PROMPT.match(text) is not None


# the bare echo of a command whose output hc reads, typed or logged before that output with no
# prompt: the tool's own name as run (the field fixtures' first lines: `scontrol show node
# localhost`, `nvidia-smi`, `nvidia-smi.exe -q -i 0`, `sinfo`, `dcgmi diag -r 2`, `nvidia-smi
# nvlink -s`, `./build/all_reduce_perf -b 8 ...`; `ibstat mlx5_7`, `ip link` after a prompt),
# sudo'd or by a path, then its arguments (never a `:` right after the name: `dmesg: read
# kernel buffer failed` is the tool's output); a launcher only with an option after it
# (`mpirun -np 8 all_reduce_perf`: `mpirun noticed that process rank 0 ...` is Open MPI's output)
_COMMAND_ECHO = lazy_compile(
    r"(?:sudo {1,4})?(?:[\w.~\-]{0,64}/){0,16}"
    r"(?:(?:nvidia-smi(?:\.exe)?|scontrol|sinfo|ibstat|ibstatus|ibv_devinfo|ip|perfquery|dcgmi|dmesg|journalctl"
    r"|ib_(?:write|read|send)_(?:bw|lat)|[a-z_]{1,32}_perf|py-spy|ldconfig|ncclras)(?:[ \t].*)?"
    r"|(?:mpirun|mpiexec|srun|torchrun)[ \t]{1,8}-.*)",
    re.ASCII,
)


def is_command_echo(text: str) -> bool:
    """`text` is the bare command line of a tool hc reads (`_COMMAND_ECHO`): what a paste
    carries before that tool's output, never the output."""
    if not (text[:1].isalpha() or text[:1] in ("/", ".", "~")):
        return False  # the common case, kept cheap
    return _COMMAND_ECHO.fullmatch(text.rstrip()) is not None


# a second process's line starting mid-line: an mpirun tag, torch's `[rankN]:[E...` (its c10
# prefix after it), or any `[rankN]:` right after a tqdm progress bar that ended without a
# line end (`... 2.88s/it][rank5]:...`, `... 1.20it/s][rank5]:...`; field/issues-8)
_TORN = lazy_compile(r"(?:\[(?:\d{1,9},)?\d{1,9}\]<(?:stdout|stderr|stddiag)>:|\[rank\d{1,7}\]:\[[FEWIV]"
                   r"|(?<=s/it\]|it/s\])\[rank\d{1,7}\]:)", re.ASCII)


# the cells a log viewer's column before a launcher's tag may hold beside its stamp
# (`2020-01-15 22:44:33 UTC master.0 -- [1,0]<stderr>:`): a few short words, as a table's
_TAG_COLUMN_MAX = 64


def _tag_column(head: str, taken: _Taken) -> bool:
    """The part of a line before its first launcher tag is a viewer's column, not a line of
    its own: a stamp the layer took off, then at most COLUMN_CELLS_MAX short words (a zone, a
    replica's name, a separator). An untagged head under `--tag-output` is no rank's output."""
    return ("stamp" in taken.kinds and len(head) <= _TAG_COLUMN_MAX
            and len(head.split()) <= COLUMN_CELLS_MAX and MPIRUN_TAG.search(head) is None)


class _Column(NamedTuple):
    """A viewer's column taken off before a line's first launcher tag: as printed, and the
    fields its stamp gave."""

    parts: str
    fields: dict[str, object]


def _column_taken(pieces: list[str], **peel_options: bool) -> _Column | None:
    """The head of `pieces` where it is a viewer's column before the first launcher tag
    (`_tag_column`), taken out of `pieces`; else None, `pieces` as they were."""
    if len(pieces) < 2 or MPIRUN_TAG.match(pieces[1]) is None:
        return None
    rest, taken = peel(pieces[0], **peel_options)
    if not _tag_column(rest, taken):
        return None
    return _Column(pieces.pop(0), dict(taken.fields))


def retagged(pieces: list[str]) -> list[str]:
    """Open MPI's `--tag-output` puts its tag before every chunk it forwards, and a process
    that writes one line in pieces (Horovod's logger) gets a tag between every piece, mid-word
    (`[1,0]<stderr>:[[1,0]<stderr>:2020-01-15 22:44:33[1,0]<stderr>:.`): a piece whose tag names
    the same process (job, rank, stream) as the piece before it is the rest of that process's
    line, glued back without its tag; a piece another process's tag opens stays its own."""
    out: list[str] = []
    opened = ""  # the tag that opens out[-1]
    for piece in pieces:
        m = MPIRUN_TAG.match(piece)
        tag = m.group(0) if m is not None else ""
        if out and tag and tag == opened:
            out[-1] += piece[len(tag):]
            continue
        out.append(piece)
        opened = tag
    return out


def torn_pieces(text: str) -> list[str]:
    """Two processes' lines written into one: split where a second launcher tag or torch
    rank prefix starts mid-line. Each piece stays its own; none is glued to another."""
    if "]<std" not in text and "]:[" not in text and "][rank" not in text:
        return [text]
    cuts = [m.start() for m in _TORN.finditer(text, 1)]
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b]]


# ---------------------------------------------------------------- prefixes

# `(pid=N) `, `(NAME pid=N, ip=A) `, and a name with a few words of its own before the pid
# (vLLM v1's `(VllmWorker rank=3 pid=406) `, `(VllmWorker TP3 pid=406) `, `(EngineCore_0 pid=9) `)
_RAY = lazy_compile(r"\((?:[\w.\-]{1,64} )?(?:[\w.\-]{1,32}(?:=[\w.\-]{1,32})? ){0,3}pid=\d{1,10}"
                    r"(?:, ip=[\w.:\-]{1,64})?\) ", re.ASCII)
# the rank such a name states (vLLM v1's `rank=3` or `TP3`, its tensor-parallel rank; later
# vLLM's one-word `(Worker_TP3 pid=N) `, `Worker_TP3_EP3`: with a PP or DP part before it,
# `Worker_PP1_TP3`, the TP rank is not the job's rank, and none is taken)
_RAY_RANK = lazy_compile(r"(?: |\(Worker_)(?:rank=|TP)(\d{1,7})(?:_EP\d{1,7})? ", re.ASCII)
# SGLang's scheduler prefix: `[2025-04-21 04:13:43 TP3] ` (its tensor-parallel rank, the
# job's rank where no DP/PP rank is shown; `EP3` may follow)
_SGLANG_TP = lazy_compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP(\d{1,5})(?: EP\d{1,5})?\] ", re.ASCII)
# kubectl logs --prefix: `[pod/<pod>/<container>] ` (`[pod/web-f4c54c7fc-r5d9h/nginx] `)
# PyTorch Lightning's rank_prefixed_message (`[rank: 1] message`): the global rank, as `[rank1]:`
_LIGHTNING_RANK = lazy_compile(r"\[rank: (\d{1,7})\] ", re.ASCII)
_KUBECTL = lazy_compile(r"\[pod/[\w.\-]{1,253}/[\w.\-]{1,63}\] ", re.ASCII)
# grep over several files (-r, -H): `FILE:` before each line, `FILE-` before a context
# line, with -n the line number after it (`rank_604.s12gn3064.4031852.log:[0604/1024]...`);
# only a file named as a log or an output is one (a `host:pid:tid` is no file name)
_GREP_FILE = lazy_compile(
    r"((?:\.{0,2}/)?(?:[\w.\-]{1,128}/){0,16}+[\w.\-]{0,127}\w\.(?:log|out|err|txt))"
    r"(?:[:\-]\d{1,9}(?=[:\-]\S))?[:\-]",
    re.ASCII,
)
_GREP_NUMBER = lazy_compile(r"\d{1,9}")  # grep -n's line number after the file's name
# tail's (and head's) header before each file's lines when given several: `==> FILE <==`
_TAIL_HEADER = lazy_compile(r"==> (\S.{0,1023}?) <==[ \t]*$")
# a job runner's label before each line of the output it relays: `<job or host> [stderr] `
# (milabench's `dinov2-giant-nodes.cn-d004 [stderr] `, field/issues-8), or the stream alone
# (`[stdout] `); the name is one word (host names, dots, dashes, a `:` or `@`), at most 128
_STREAM_TAG = lazy_compile(r"(?:[\w.@:/\-]{1,128} )?\[(?:stdout|stderr)\](?: |$)", re.ASCII)
_STREAM_AT = 140  # characters before a runner's `[stderr]` it may be found in
_DETERMINED = lazy_compile(r"\[\d{4}-\d\d-\d\dT[\d:.]{1,32}Z?\] [\w\-]{1,64} \|\| ", re.ASCII)
# a container runtime's stamp before each line: `kubectl logs --timestamps` prints Go's RFC 3339
# with nanoseconds in UTC (`2025-11-24T03:20:21.001125857Z `, field/issues-6's Kubernetes NCCL
# log), `docker logs -t` and the CRI log files (containerd, CRI-O) the same shape, maybe with a
# zone offset: a `.` fraction (never dmesg --time-format iso's `,`) and a zone, always
_RUNTIME = lazy_compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}(?:Z|[+-]\d\d:\d\d) ", re.ASCII)
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_JOURNAL = lazy_compile(
    _MONTH + r" [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,9})? (?:([^\s\[\]]{1,255}) kernel(?:\[\d{1,10}\])?: ?)?", re.ASCII
)
_ISO = lazy_compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? "
    r"(?:([^\s\[\]]{1,255}) kernel(?:\[\d{1,10}\])?: ?)?",
    re.ASCII,
)
_UPTIME = lazy_compile(r"\[ {0,12}\d{1,12}\.\d{1,9}\] ?", re.ASCII)
_CTIME = lazy_compile(r"\[(?:[A-Z][a-z]{2} )?" + _MONTH + r" {1,2}\d{1,2} \d\d:\d\d:\d\d \d{4}\] ?", re.ASCII)
_GLOG_C10 = lazy_compile(
    r"\[([FEWIV])(\d{3,4} \d\d:\d\d:\d\d(?:\.\d{1,9})?)? {0,4}(?:\d{1,10} )?([\w\-]{1,128}\.\w{1,8}:\d{1,7})\] ?",
    re.ASCII,
)
# glog >= 0.6 puts the year before the month by default (`log_year_in_prefix`: `F20221031
# 10:52:42.193126 106986 file.cpp:75] `); glog_stamp keeps its MMDD
_GLOG = lazy_compile(
    r"([FEWIV])((?:\d{4})?\d{4} \d\d:\d\d:\d\d(?:\.\d{1,9})?|\d{3} \d\d:\d\d:\d\d(?:\.\d{1,9})?) {1,8}\d{1,10} "
    r"([^\s\]]{1,512}:\d{1,7})\] ?")


# a test framework's or a program's Python logging prefix before every line: avocado's
# `%(asctime)s %(name)-16s L%(lineno)04d %(levelname)-5.5s| ` (and its `[stdout] ` after
# it), the logging cookbook's `%(asctime)s - %(name)s - %(levelname)s - `: a stamp, a
# logger name, an optional line number, a level and a separator
_PYLOG = lazy_compile(
    r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?) {1,8}(?:- {1,8})?"
    r"([\w.\-]{1,64}) {1,32}(?:- {1,8})?(?:L\d{1,6} {1,8})?"
    r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) {0,8}(?:\||-|:) ?"
    r"(?:\[(?:stdout|stderr)\] ?)?",
    re.ASCII,
)
LOGGED_SHARE = 0.5  # of non-blank lines carrying a logger prefix for the text to be logged through one
_PYLOG_LEVEL = {"DEBUG": "V", "INFO": "I", "WARNING": "W", "WARN": "W", "ERROR": "E", "CRITICAL": "F", "FATAL": "F"}


def logger_prefixed(lines: Sequence[str]) -> bool:
    """Most non-blank lines start with a Python logging prefix (a stamp, a logger's name,
    a level, a separator: `_PYLOG`): the tool's output as a test framework or a wrapper
    logged it. The first QUOTED_SAMPLE lines decide, as for a quoted paste."""
    blank = logged = 0
    lines = lines[:QUOTED_SAMPLE]
    for line in lines:
        body = line.lstrip(" \t")
        if not body.strip():
            blank += 1
        elif body[:1].isdigit() and _PYLOG.match(body) is not None:
            logged += 1
    filled = len(lines) - blank
    return filled >= 1 and logged >= LOGGED_SHARE * filled


# a process manager's label before each worker's line: `worker-3 | ` (a launcher of its own),
# docker compose's `trainer-1  | `, honcho's `web.1 | `: a name, its index, a bar
_WORKER_LABEL = lazy_compile(r"[A-Za-z][\w\-]{0,63}?[-.](\d{1,7}) {1,16}\| ", re.ASCII)


def worker_labelled(lines: Sequence[str]) -> bool:
    """Whether the index of a `NAME-N | ` label (`_WORKER_LABEL`) before most lines is the
    rank: every line that carries torch's own `[rankM]:` right after it says M == N, at
    least one does, and one NAME labels them all. A compose service's replica number or a
    host's (`node-042 | `, a pdsh collation) is no rank and no torch line agrees with it."""
    labelled = filled = agreeing = 0
    names: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        filled += 1
        m = _WORKER_LABEL.match(line) if line[:1].isalpha() else None
        if m is None:
            continue
        labelled += 1
        names.add(line[:m.start(1) - 1])
        rank = TORCH_RANK.match(line, m.end())
        if rank is not None:
            if rank.group(1) != m.group(1) or len(names) > 1:
                return False
            agreeing += 1
    return agreeing > 0 and len(names) == 1 and labelled >= LOGGED_SHARE * filled


def _worker(body: str, taken: _Taken) -> int:
    """A worker label (`worker_labelled` said its index is the rank): the launcher's task."""
    if "launcher" in taken.kinds or not body[:1].isalpha():
        return 0
    m = _WORKER_LABEL.match(body)
    if m is None:
        return 0
    taken.take("launcher", m.group(0), task=int(m.group(1)))
    return m.end()


# a parallel shell's label before each line of a host's output: pdsh's (and clush's, dsh's)
# `gpu004: `: a host name (a letter first, a digit in it: a cluster's node), a colon, a blank
_HOST_LABEL = re.compile(r"([A-Za-z][A-Za-z0-9\-.]{0,62}): ", re.ASCII)
# a training loop's own counters and a rank's word are no host (`Epoch3: loss ...`, `rank0: `)
_NOT_HOSTS = re.compile(r"(?i:rank|epoch|step|iter|iteration|batch|loss|stage|phase|round|layer)\d|"
                        r".*(?:Error|Exception|Warning|Exit)\d*$", re.ASCII)
HOSTS_MAX = 64  # distinct hosts a parallel shell's text may label
HOST_SAMPLE = QUOTED_SAMPLE * 16  # lines that decide whether a text is a parallel shell's


# HPE PALS's own `HOST: rank N died from signal S` (torch_log/rankends.py): the host is its word
_LAUNCHER_RANK_WORDS = re.compile(r" {0,8}rank {1,8}\d", re.ASCII)


def _host_label(line: str) -> str:
    m = _HOST_LABEL.match(line) if line[:1].isalpha() else None
    if m is None or not any(ch.isdigit() for ch in m.group(1)) or _NOT_HOSTS.match(m.group(1)):
        return ""
    return "" if _LAUNCHER_RANK_WORDS.match(line, m.end()) else m.group(1)


def host_labelled(lines: Sequence[str]) -> bool:
    """Whether most lines carry a parallel shell's `HOST: ` label (`_HOST_LABEL`): at least
    LOGGED_SHARE of the non-blank lines, by at most HOSTS_MAX hosts. Asked only by the
    readers of a program's own output (torch_log): a kernel log's `nvidia-nvswitch3: ` is
    the driver's own word, never a host's."""
    labelled = filled = 0
    hosts: set[str] = set()
    for line in lines[:HOST_SAMPLE]:
        if not line.strip():
            continue
        filled += 1
        host = _host_label(line)
        if host:
            labelled += 1
            hosts.add(host)
            if len(hosts) > HOSTS_MAX:
                return False
    return filled >= 2 and labelled >= LOGGED_SHARE * filled


def _host(body: str, taken: _Taken) -> int:
    """A parallel shell's `HOST: ` label (host_labelled said the text carries them): the host."""
    if "host" in taken.kinds or taken.parts:
        return 0
    host = _host_label(body)
    if not host:
        return 0
    taken.take("host", body[:len(host) + 2], host=host)
    return len(host) + 2


def drop_logger(text: str) -> str:
    """A line's Python logging prefix (see `logger_prefixed`), its indent kept out."""
    body = text.lstrip(" \t")
    m = _PYLOG.match(body) if body[:1].isdigit() else None
    return body[m.end():] if m else text


class _Taken:
    """What has been taken off one line so far."""

    __slots__ = ("fields", "kinds", "parts")

    def __init__(self) -> None:
        self.fields: dict[str, object] = {}
        self.kinds: set[str] = set()
        self.parts: list[str] = []

    def take(self, kind: str, text: str, **fields: object) -> None:
        self.kinds.add(kind)
        self.parts.append(text)
        self.fields.update(fields)


def _label(body: str, taken: _Taken) -> int:
    """A launcher's label at the start of body: its length (0: none)."""
    first = body[:1]
    if "launcher" not in taken.kinds and "no-srun" not in taken.kinds and (first == " " or first.isdigit()):
        m = SRUN_LABEL.match(body)
        if m:
            taken.take("launcher", m.group(0), task=int(m.group(1)))
            return m.end()
    if first != "[":
        return 0
    if "launcher" not in taken.kinds:
        m = MPIRUN_TAG.match(body)
        if m:
            taken.take("launcher", m.group(0), task=int(m.group(1)), stream=m.group(2))
            return m.end()
    if "rank" not in taken.kinds and body.startswith("[rank"):
        m = TORCH_RANK.match(body)
        if m:
            end = m.end() + (body[m.end():m.end() + 1] == " ")
            taken.take("rank", body[:end], rank=int(m.group(1)))
            return end
    if "rank" not in taken.kinds and body.startswith("[2"):
        m = _SGLANG_TP.match(body)
        if m:
            taken.take("rank", m.group(0), rank=int(m.group(1)))
            return m.end()
    if "rank" not in taken.kinds and body.startswith("[rank: "):
        m = _LIGHTNING_RANK.match(body)
        if m:
            taken.take("rank", m.group(0), rank=int(m.group(1)))
            return m.end()
    if "role" not in taken.kinds and "rank" not in taken.kinds:
        m = TORCHRUN_ROLE.match(body)
        if m:
            end = m.end() + (body[m.end():m.end() + 1] == " ")
            taken.take("role", body[:end], role=m.group(1), local_rank=int(m.group(2)))
            return end
    return 0


def _runner(body: str, taken: _Taken) -> int:
    if "runner" in taken.kinds:
        return 0
    first = body[:2]
    m = (_RAY.match(body) if first[:1] == "(" else _DETERMINED.match(body) if first == "[2"
         else _KUBECTL.match(body) if first == "[p" else None)
    if m is None and "[std" in body[:_STREAM_AT]:
        m = _STREAM_TAG.match(body)
    if m:
        taken.take("runner", m.group(0), runner=m.group(0).rstrip())
        r = _RAY_RANK.search(m.group(0)) if first[:1] == "(" and "rank" not in taken.kinds else None
        if r is not None:
            taken.take("rank", "", rank=int(r.group(1)))
        return m.end()
    return 0


def _runtime(body: str, taken: _Taken) -> int:
    """A container runtime's stamp (`_RUNTIME`): taken off even where a parser reads its
    tool's own stamps (`stamps=False`: NCCL's `[%F %T]` after it), since it is no tool's.
    A journal's `host kernel:` after the same shape makes it the journal's (short-iso-precise):
    left to `_stamp`, which reads the host."""
    if "runtime" in taken.kinds or not body[:1].isdigit():
        return 0
    m = _RUNTIME.match(body)
    journal = _ISO.match(body) if m else None
    if m is None or (journal is not None and journal.group(1)):
        return 0
    fields = {} if "stamp" in taken.kinds else {"stamp": m.group(0).strip(), "stamp_kind": "runtime"}
    taken.take("runtime", m.group(0), **fields)
    return m.end()


def _stamp(body: str, taken: _Taken) -> int:
    if "stamp" in taken.kinds:
        return 0
    first = body[:1]
    if first.isdigit():
        m, kind = _ISO.match(body), "iso"
    elif first == "[":
        m, kind = _UPTIME.match(body), "dmesg"
        if m is None:
            m, kind = _CTIME.match(body), "dmesg-T"
    elif first in "JFMASOND":
        m, kind = _JOURNAL.match(body), "journal"
    else:
        return 0
    if m is None:
        return 0
    host = m.group(1) if kind in ("iso", "journal") else None
    text = m.group(0)
    stamp = text[: m.start(1) - m.start()].strip() if host else text.strip().strip("[]").strip()
    taken.take("stamp", text, stamp=stamp, stamp_kind=kind, host=host or "")
    return m.end()


def _pylog(body: str, taken: _Taken) -> int:
    """A Python logging prefix (a text `logger_prefixed` said is logged through one): its
    stamp kept as a `pylog` stamp, its logger's name as `source`, its level as a letter."""
    if "stamp" in taken.kinds or not body[:1].isdigit():
        return 0
    m = _PYLOG.match(body)
    if m is None:
        return 0
    taken.take("stamp", m.group(0), stamp=m.group(1), stamp_kind="pylog", logger="pylog", source=m.group(2),
               level=_PYLOG_LEVEL[m.group(3)])
    return m.end()


def glog_stamp(stamp: str) -> str:
    """A glog stamp's `MMDD hh:mm:ss.frac` with its month in two digits: c10's own logger
    (torch 2.4+, no glog) prints the date as the number `month * 100 + day`, unpadded, so
    January 8 is `108` (`[E108 20:04:34.467642512 socket.cpp:957]`, field/issues-10) where
    glog writes `0108`; the day always has two digits, so three digits are M DD; glog >= 0.6
    writes the year first (`20221031`), left out here."""
    if stamp[8:9] == " ":  # glog's year first: `20221031 10:52:42`
        return stamp[4:]
    return "0" + stamp if stamp[3:4] == " " else stamp


def _glog(body: str, taken: _Taken) -> int:
    first = body[:1]
    if first == "[":
        m = _GLOG_C10.match(body)
    elif first in "FEWIV":
        m = _GLOG.match(body)
    else:
        return 0
    if m is None:
        return 0
    fields: dict[str, object] = {"level": m.group(1), "source": m.group(3), "logger": "c10" if first == "[" else "glog"}
    if m.group(2) and "stamp" not in taken.kinds:
        fields.update(stamp=glog_stamp(m.group(2)), stamp_kind="glog")
    taken.take("glog", m.group(0), **fields)
    return m.end()


_FILE_MAX = 2300  # characters a grep's file name (16 directories and a name) can take
_LOG_NAME = lazy_compile(r"\.(?:log|out|err|txt)[:\-]", re.ASCII)  # where a grep's FILE: can end


def _names_a_log(head: str) -> bool:
    """A cheap guard before _GREP_FILE: the head of a line holds a log's name and a separator."""
    return _LOG_NAME.search(head) is not None


def grep_file_prefix(body: str, numbered: bool = False) -> tuple[int, str]:
    """A grep's `FILE:` (or a context line's `FILE-`, with -n its line number) at the very
    start of a line: (its length, FILE); (0, "") without one. grep -n's number before a
    blank (`FILE:12: text`) reads as srun's `12: ` label unless `numbered` (a text no srun
    label is read on): then it is grep's."""
    if not body[:1].isascii() or body[:1] in " \t[(" or not _names_a_log(body[:_FILE_MAX]):
        return 0, ""
    m = _GREP_FILE.match(body)
    if m is None:
        return 0, ""
    end = m.end()
    if numbered:
        number = _GREP_NUMBER.match(body, end)
        if number and body[number.end():number.end() + 1] == body[end - 1]:
            end = number.end() + 1
    return end, m.group(1)


def _grep_file(body: str, taken: _Taken, numbered: bool = False) -> int:
    """`grep_file_prefix` taken: the outermost prefix, before any the file's own lines carry."""
    end, name = grep_file_prefix(body, numbered)
    if end:
        taken.take("file", body[:end], file=name)
    return end


def peel(body: str, stamps: bool = True, srun: bool = True, runners: bool = True,
         logged: bool = False, workers: bool = False, hosts: bool = False) -> tuple[str, _Taken]:
    """The prefixes taken off the front of one line, in whatever order they were stacked;
    each kind once; a glog prefix is the last before the message; a grep's file name
    first of all. `logged`: the text is logged through a Python logging prefix
    (`logger_prefixed`), taken off stamps or not; `workers`: its `NAME-N | ` labels name
    ranks (`worker_labelled`)."""
    taken = _Taken()
    body = body[_grep_file(body, taken, numbered=not srun):]
    if not srun:
        taken.kinds.add("no-srun")
    steps: tuple[Callable[[str, _Taken], int], ...] = (_runner, _runtime, _label) if runners else (_label,)
    if workers:
        steps = (_worker, *steps)
    if hosts:
        steps = (_host, *steps)
    if logged:
        steps = (_pylog, *steps)
    if stamps:
        steps += (_stamp,)
    for _ in range(8):
        step = 0
        for peel_one in steps:
            step = peel_one(body, taken)
            if step:
                break
        if not step and stamps and "glog" not in taken.kinds:
            step = _glog(body, taken)
            if step:
                body = body[step:]
                break
        if not step:
            break
        body = body[step:]
    return body, taken


def rank_named(rank: int | None, task: int | None, local_rank: int | None) -> int | None:
    """The global rank a line's labels name: `[rankN]:`; else a launcher's label, or
    torchrun's local rank alone (under srun, a node's label and then torchrun's, no label
    says the rank)."""
    if rank is not None:
        return rank
    return task if local_rank is None else local_rank if task is None else None


class Labels(NamedTuple):
    """A line's launcher labels taken off (nothing mended, no stamp or runner read)."""

    rest: str
    task: int | None  # srun's or mpirun's
    rank: int | None  # torch's `[rankN]:`
    local_rank: int | None  # torchrun's `[roleN]:`
    labelled: bool  # something was taken off

    @property
    def global_rank(self) -> int | None:
        return rank_named(self.rank, self.task, self.local_rank)


def labels_of(text: str, *, workers: bool = False) -> Labels:
    """The launcher labels at the start of one line, cheaply (for indexing many lines);
    a runner's tag is left on (Determined's carries the line's time). `workers`: the
    text's `NAME-N | ` labels name ranks (`worker_labelled`)."""
    rest, taken = peel(text, stamps=False, runners=False, workers=workers)
    f = taken.fields
    return Labels(rest, f.get("task"), f.get("rank"), f.get("local_rank"), bool(taken.parts))  # type: ignore[arg-type]


# ---------------------------------------------------------------- reading


READ_TEXTS_MAX = 4096  # distinct raw lines whose reading one read_lines keeps (LinesByRaw)


class LinesByRaw:
    """`read_line` with the text's fixed shapes (`read`: read_line with every keyword but the
    line's own indent and pytest mark given), each distinct raw line (with its indent and
    mark) read once: a line that comes again word for word (a communicator's NCCL init
    lines, again for each communicator: most of a big log's kept lines once hc diagnose
    logs condensed it) is the first reading with its own number, up to READ_TEXTS_MAX
    lines. Exact: read_line is a pure function of those, and its number is only each
    Line's `number` (tests/unit/parsers/test_lines_by_raw.py reads every fixture both ways)."""

    def __init__(self, read: Callable[..., list[Line]]) -> None:
        self.read = read
        self.holding: dict[tuple[str, str, bool], list[Line]] = {}

    def __call__(self, number: int, raw: str, indent: str, pytest: bool) -> list[Line]:
        key = (raw, indent, pytest)
        found = self.holding.get(key)
        if found is None:
            found = self.read(number, raw, indent=indent, pytest=pytest)
            if len(self.holding) < READ_TEXTS_MAX:
                self.holding[key] = found
            return list(found)
        if found[0].number == number:
            return list(found)
        return [msgspec.structs.replace(line, number=number) for line in found]


class TextShapes(NamedTuple):
    """A text's raw lines and the shapes `read_lines` decides over them before it reads one:
    (quoted, reply, logged, workers), (numbered, gutter, clocked, columns), each raw line's
    code block indent and pytest mark; `host_labelled` apart, asked only by a parser that
    takes hosts off (`hosts_of`)."""

    raw_lines: list[str]
    flags: tuple[bool, bool, bool, bool]
    sample_flags: tuple[bool, bool, bool, bool]
    indents: list[str]
    pytest: list[bool]


def text_shapes(text: str) -> TextShapes:
    """The raw lines of `text` and its shapes."""
    raw_lines = text.split("\n") if "\n" in text or "\r" not in text else text.split("\r")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()
    quoted, reply, logged = quoted_paste(raw_lines), quoted_reply(raw_lines), logger_prefixed(raw_lines)
    workers = worker_labelled(raw_lines)
    sample = [drop_quote(x) for x in raw_lines[:QUOTED_SAMPLE]] if reply else raw_lines
    numbered = line_numbered(sample)
    gutter = not numbered and gutter_numbered(sample)
    clocked = not (numbered or gutter) and clock_stamped(sample)
    columns = viewer_columned(sample)
    indents = code_block_indents([drop_quote(x) for x in raw_lines] if reply else raw_lines)
    return TextShapes(raw_lines, (quoted, reply, logged, workers), (numbered, gutter, clocked, columns),
                      indents, pytest_marked(raw_lines))


T = TypeVar("T")

# while `shapes_kept` runs: per text (by its id, the text held so the id stays its), what
# `_kept` worked out of it, for the next parser of the same text
_KEPT_SHAPES: ContextVar[dict[tuple[int, str], tuple[str, object]] | None] = ContextVar("hc_kept_shapes", default=None)


@contextmanager
def shapes_kept() -> Iterator[None]:
    """While the block runs, `read_lines` decides a text's shapes once for every parser that
    reads that same text (hc diagnose logs reads one text with the torch and the NCCL
    parser): they are a pure function of the text. The texts are held until the block ends."""
    token = _KEPT_SHAPES.set({})
    try:
        yield
    finally:
        _KEPT_SHAPES.reset(token)


def _kept(text: str, what: str, work: Callable[[], T]) -> T:
    """`work()` (a pure function of `text`), kept for the text while `shapes_kept` runs."""
    kept = _KEPT_SHAPES.get()
    if kept is None:
        return work()
    found = kept.get((id(text), what))
    if found is not None and found[0] is text:
        return found[1]  # type: ignore[return-value]
    done = work()
    kept[(id(text), what)] = (text, done)
    return done


def read_lines(text: str, *, stamps: bool = True, srun: bool = True, max_line: int = MAX_LINE,
               cut_end: bool = False, records: bool = False, hosts: bool = False,
               interleaved: bool = False, marks: re.Pattern[str] | None = None) -> Iterator[Line]:
    """Every line of `text`, mended and with its prefixes taken off (see the module doc).

    `stamps=False` leaves timestamps and glog prefixes on the text, for a parser that
    reads them itself (NCCL's own `[%F %T]` stamp before its prefix); `srun=False`
    leaves `N: ` on, for a text whose own lines start so (anyhow's `Caused by:` list).
    `cut_end`: where the text ends mid-line (`ends_mid_line`), the last line's text loses
    the word it ends inside (`without_cut_end`, repair "cut-end"): never read as whole.
    `records`: a structured log's JSON record is read into the lines it stands for
    (`json_pieces`): for the readers of a program's own log (torch_log); a tool whose lines
    a log shipper wraps keeps the record whole (gpud's `{"msg": "known sxid", "line": "...
    SXid ..."}`: the kernel's line is in another field than the message).
    `hosts`: where most lines carry a parallel shell's `HOST: ` (pdsh, `host_labelled`), it
    is taken off as the line's `host`: for the readers of a program's own output (torch_log).
    `interleaved`: Open MPI's `--tag-output` tags inside a line that name the process its
    first tag names are peeled, the pieces glued back into that process's line, the first tag
    its label (`retagged`; a viewer's stamped column before that tag taken off too): for the
    readers of a program's own output (torch_log), whose lines a process may write in pieces.
    `marks`: a parser's fast path (`marked_lines`): only the lines it finds something in
    are read (and the line after each), every shape decided over all lines as ever.
    """
    shapes = _kept(text, "shapes", lambda: text_shapes(text))
    raw_lines, (quoted, reply, logged, workers) = shapes.raw_lines, shapes.flags
    numbered, gutter, clocked, columns = shapes.sample_flags
    indents, pytest = shapes.indents, shapes.pytest
    hosts = hosts and _kept(text, "hosts", lambda: host_labelled(raw_lines))
    opened = False  # a line of the tool's output seen: a bare command echo comes only before one
    following = ""  # the file a tail's `==> FILE <==` header named, for the lines after it
    cut_at = len(raw_lines) if cut_end and ends_mid_line(text) else 0
    wanted = marked_lines(text, raw_lines, marks) if marks is not None and not records else None
    original = _ORIGINAL_NUMBERS.get()  # a condensed text's lines keep their numbers in the whole one
    read = LinesByRaw(functools.partial(read_line, stamps=stamps, srun=srun, max_line=max_line, quoted=quoted,
                                        reply=reply, logged=logged, numbered=numbered, gutter=gutter,
                                        workers=workers, records=records, columns=columns, hosts=hosts,
                                        interleaved=interleaved, clocked=clocked))
    for index, raw in enumerate(raw_lines, 1):
        if opened and wanted is not None and index not in wanted:
            continue  # no mark: nothing the parser could read (marked_lines)
        number = original[index - 1] if original is not None and index <= len(original) else index
        lines = read(number, raw, indents[index - 1], pytest[index - 1])
        if index == cut_at:
            lines[-1] = _cut_ended(lines[-1])
        if lines[0].noise == "file-header":
            following = lines[0].file
        elif following:
            lines = [line if line.file else msgspec.structs.replace(line, file=following) for line in lines]
        for line in lines:
            if not opened:
                line, opened = before_output(line)
            yield line


# a tail header names the file of the lines after it: the layer reads it, marked or not
_TAIL_HEADER_MARK = re.compile(r"==> ")
# the layer's mends that take text out of a line's middle, which could join words its raw
# text holds apart: a redraw's CR, colour codes (also an SGR whose ESC was lost:
# strip_ansi), an editor's auto-link (unlinked), markdown's `**` (unemphasized)
_MID_LINE_MENDS = re.compile(r"[\r\x1b]|\]\(|\*\*|\[\d{1,3}(?:;\d{1,3}){0,15}m")


def marked_lines(text: str, raw_lines: Sequence[str], marks: re.Pattern[str]) -> frozenset[int] | None:
    """A parser's fast path: the numbers of the raw lines to read, those `marks` finds
    something in (searched over the whole text at once, in C), each with the line after it
    (a wrapped message's rest), the tail headers and the last line (a text cut mid-line);
    None (read every line) where a mend could take text out of a line's middle
    (`_MID_LINE_MENDS`). Safe where `marks` finds, in a line's raw text, something of every
    line the parser reads (and matches no newline): the layer otherwise only takes text
    off a line's ends (labels, stamps, quotes, indents, columns) and splits torn lines, so
    what a read line holds, its raw one holds too. `read_lines` reads every line until the
    output opens (`before_output`) and decides every shape over all lines, whichever lines
    it reads; a JSON record's message (`records`) is no substring of its line: not here."""
    if _MID_LINE_MENDS.search(text) is not None:
        return None
    wanted = {len(raw_lines)}
    for pattern in (marks, _TAIL_HEADER_MARK):
        line, at = 1, 0
        m = pattern.search(text)
        while m is not None:
            line += text.count("\n", at, m.start())
            wanted.update((line, line + 1))
            at = text.find("\n", m.start())  # the line is wanted: the next search starts after it
            if at < 0:
                break
            line, at = line + 1, at + 1
            m = pattern.search(text, at)
    return frozenset(wanted)


def _cut_ended(line: Line) -> Line:
    """The text's last line, which it ends inside: without the word it may have cut short."""
    text, cut = without_cut_end(line.text)
    return msgspec.structs.replace(line, text=text, repairs=(*line.repairs, "cut-end")) if cut else line


def before_output(line: Line) -> tuple[Line, bool]:
    """A line read before any of the tool's output -> (it, whether it opens the output): the
    bare echo of the command (`is_command_echo`) is noise ("command"), as a prompt is."""
    if line.noise or not line.text.strip():
        return line, False
    if not line.labels and is_command_echo(unindented(line.text)):
        return msgspec.structs.replace(line, noise="command"), False
    return line, True


def mend(raw: str, repairs: list[str], *, quoted: bool = False, reply: bool = False,
         numbered: bool = False, gutter: bool = False, indent: str = "", pytest: bool = False,
         columns: bool = False, clocked: bool = False) -> str:
    """A line's shapes mended (line end, redraw, colour codes, a quoted paste's ` \\` or
    `> `, markdown's code block `indent`, a log viewer's line number, bracketed or its bare
    gutter's, a CI runner's clock stamp where `clocked` (clock_stamped), a viewer's or runner's
    columns where `columns` (viewer_columned), an editor's auto-links, pytest's `E       `
    where `pytest`: pytest_marked), each repair named in `repairs`."""
    steps: list[tuple[str, Callable[[str], str]]] = [("cr", redrawn), ("ansi", strip_ansi), ("code", uncoded)]
    if pytest:
        steps.append(("pytest", drop_pytest_mark))
    if quoted:
        steps.append(("continuation", drop_continuation))
    if reply:
        steps.append(("quote", drop_quote))
    if indent:
        steps.append(("code-block", lambda text: outdented(text, indent)))
        if reply:  # a quoted paste put in a code block (`    > [Fri Aug 30 ...] NVRM: Xid`): its quote
            steps.append(("quote", drop_quote))
    if numbered or gutter:
        steps.append(("line-number", drop_line_number if numbered else drop_gutter))
    if clocked:
        steps.append(("clock", drop_clock))
    if columns:
        steps.append(("columns", drop_columns))
    steps.append(("autolink", unlinked))
    body, crlf = drop_line_end(raw)
    if crlf:
        repairs.append("crlf")
    for name, step in steps:
        mended = step(body)
        if mended != body:
            body = mended
            repairs.append(name)
    return body


def read_line(number: int, raw: str, *, stamps: bool = True, srun: bool = True, max_line: int = MAX_LINE,
              quoted: bool = False, reply: bool = False, logged: bool = False, numbered: bool = False,
              gutter: bool = False, indent: str = "", workers: bool = False, pytest: bool = False,
              records: bool = False, columns: bool = False, hosts: bool = False,
              interleaved: bool = False, clocked: bool = False) -> list[Line]:
    """One raw line -> its Line (several when two processes' lines were torn into it).
    `quoted`: the text is a shell-quoted paste (` \\` after every line); `reply`: a
    markdown-quoted one (`> ` before every line); `logged`: logged through a Python
    logging prefix (`logger_prefixed`); `numbered`: out of a log viewer that numbered its
    lines (`line_numbered`); `gutter`: out of one that showed them bare (`gutter_numbered`);
    `indent`: the line's markdown code block's (`code_block_indents`); `workers`: its
    `NAME-N | ` labels name ranks (`worker_labelled`); `pytest`: it carries pytest's `E`
    mark (`pytest_marked`); `records`: a JSON log record is read into its lines (`json_pieces`);
    `columns`: a viewer's or runner's columns come before the message (`viewer_columned`);
    `hosts`: a parallel shell's `HOST: ` labels it (`host_labelled`); `interleaved`: Open MPI's
    tags inside the line are one process's pieces glued back (`retagged`), a viewer's column
    before the first tag taken off with it (`_tag_column`); `clocked`: a CI runner's clock
    stamp before it (`clock_stamped`)."""
    if len(raw) > max_line:
        raw, repairs = raw[:max_line], ["cut"]
    else:
        repairs = []
    body = mend(raw, repairs, quoted=quoted, reply=reply, numbered=numbered, gutter=gutter, indent=indent,
                pytest=pytest, columns=columns, clocked=clocked)
    pieces = json_pieces(body, srun) if records else []
    column: _Column | None = None
    if pieces:
        repairs.append("json")
    else:
        pieces = torn_pieces(body)
        while len(pieces) > 1 and not peel(pieces[0], stamps, srun, logged=logged, workers=workers,
                                           hosts=hosts)[0].strip():
            pieces[:2] = [pieces[0] + pieces[1]]  # only prefixes before the cut: one line, prefixed twice
        if interleaved and len(pieces) > 1:
            glued = retagged(pieces)
            if len(glued) < len(pieces):
                repairs.append("retagged")
            pieces = glued
            column = _column_taken(pieces, stamps=stamps, srun=srun, logged=logged, workers=workers, hosts=hosts)
            if column is not None:
                repairs.append("column")
        if len(pieces) > 1:
            repairs.append("torn")
    out: list[Line] = []
    launcher: dict[str, object] = {}
    for piece in pieces:
        rest, taken = peel(piece, stamps, srun, logged=logged, workers=workers, hosts=hosts)
        if column is not None and not out:  # the viewer's column before the first tag: its labels' front
            taken.parts.insert(0, column.parts)
            for key, value in column.fields.items():
                taken.fields.setdefault(key, value)
        if "launcher" in taken.kinds:
            launcher = {k: taken.fields[k] for k in ("task", "stream") if k in taken.fields}
        elif launcher:  # a piece glued on by the process the line's launcher label names
            taken.fields.update(launcher)
        line = Line(number=number, raw=raw, text=rest, labels="".join(taken.parts), repairs=tuple(repairs),
                    **taken.fields)  # type: ignore[arg-type]
        if "runner" in taken.kinds:
            line = without_ray_repeat(line)  # Ray's dedup suffix comes with its `(pid=N)` prefix
        if not taken.parts:
            line = _noise(line, unindented(rest))
        out.append(line)
    return out


def json_record(body: str, srun: bool = True) -> tuple[str, Record] | None:
    """A structured log record on one line (parsers/jsonlog.py) behind nothing but a
    launcher's labels or a stamp (`[default0]:{"rank": 0, ...}`, srun's `0: {...}`, a
    runtime's stamp): (that prefix, the record). None for any other line, also for JSON
    after words (`config: {"lr": 0.1}`: a program's message, not its logger's record)."""
    start = record_start(body)
    if start < 0 or (start and peel(body[:start], srun=srun)[0].strip()):
        return None
    record = decode(body)
    return (body[:start], record) if record is not None else None


def json_pieces(body: str, srun: bool = True) -> list[str]:
    """A structured log record's lines (jsonlog.decode) as the process would have printed
    them: each behind the line's own prefix and the rank the record names as torch labels
    it (`[rank1]:`), so every parser reads the message, the time and the traceback inside
    the JSON as that rank's lines, all with the record's line number. [] for any other line."""
    found = json_record(body, srun)
    if found is None:
        return []
    prefix, record = found
    label = f"[rank{record.rank}]: " if record.rank is not None else ""
    return [prefix + label + x for x in record.lines]


def _noise(line: Line, text: str) -> Line:
    """`line` marked as no tool's output where it is a shell prompt (also `    $ cat x |
    grep y`, indented with the paste) or the header tail prints before each file."""
    if is_prompt(text):
        return msgspec.structs.replace(line, noise="prompt")
    if text[:4] == "==> ":
        m = _TAIL_HEADER.match(text)
        if m:
            return msgspec.structs.replace(line, noise="file-header", file=m.group(1))
    return line


def mended_lines(text: str, *, one_task: bool = True) -> list[str]:
    """A tool's lines mended (line ends, colours, a quoted paste or reply), its prompt lines
    left out and no stamp or srun label taken from a single line: for the table and tree
    parsers, whose first column may look like either (a node name `12: `, a sinfo
    timestamp). With `one_task`, srun's `N: ` (or kubectl's `[pod/..] `) is taken off
    where every line carries the same one (`one_source_unlabelled`: one task's output);
    `ip link`, whose own lines start `2: eth0:`, reads without."""
    lines = [line.text for line in read_lines(text, stamps=False, srun=False) if not line.noise]
    if one_task:
        for label in (SRUN_LABEL, _KUBECTL):
            lines = one_source_unlabelled(lines, label)
    return lines


# ---------------------------------------------------------------- what no handler read


class SampleLine(msgspec.Struct, frozen=True):
    line: int
    text: str


class Unrecognized(msgspec.Struct, frozen=True):
    """Lines no handler of a parser read: how many, and the first few as evidence."""

    count: int = 0
    sample: tuple[SampleLine, ...] = ()


# the empty `Unrecognized`, shared: a struct with omit_defaults leaves out only this very
# object (msgspec compares a default by identity), so a parser whose facts omit an empty
# count makes it its field's default and `UnrecognizedLines.frozen_or_nothing()` its value
NOTHING_UNREAD = Unrecognized()


class UnrecognizedLines(msgspec.Struct):
    """The collector a parser fills while it reads; `freeze()` for its result."""

    count: int = 0
    sample: list[SampleLine] = msgspec.field(default_factory=list)

    def note(self, line: Line) -> None:
        if line.noise or not line.text.strip() or is_elision(line.text):
            return  # a prompt, a blank or a paste's `...`: no line of the tool's left unread
        self.count += 1
        if (every := _UNREAD_SINK.get()) is not None:
            every.append(line)
        if len(self.sample) < SAMPLE_MAX:
            self.sample.append(SampleLine(line=line.number, text=line.text.strip()[:SAMPLE_TEXT]))

    def freeze(self) -> Unrecognized:
        return Unrecognized(count=self.count, sample=tuple(self.sample))

    def frozen_or_nothing(self) -> Unrecognized:
        """`freeze()`, or NOTHING_UNREAD when every line was read (omitted under omit_defaults)."""
        return self.freeze() if self.count else NOTHING_UNREAD


# every line any `UnrecognizedLines` counts while `collecting_unread` runs (None: no one asks)
_UNREAD_SINK: ContextVar[list[Line] | None] = ContextVar("hc_lines_unread", default=None)


@contextmanager
def collecting_unread() -> Iterator[list[Line]]:
    """Every line a parser counts unread while the block runs, all of them (its
    `Unrecognized` keeps only SAMPLE_MAX): the audit of unread lines reads them. A parser
    that tries two readings of a text counts the lines each left unread."""
    every: list[Line] = []
    token = _UNREAD_SINK.set(every)
    try:
        yield every
    finally:
        _UNREAD_SINK.reset(token)


# ---------------------------------------------------------------- handler tables

S = TypeVar("S")


class Handler(msgspec.Struct, Generic[S], frozen=True):
    """One kind of line a parser reads: `when` is a cheap test of the text (a compiled
    pattern's `.match`, a prefix test) and `read` reads it into the parser's state,
    returning False where the line was not its after all."""

    name: str
    when: Callable[[str], object]
    read: Callable[[S, Line], bool]


def starts(*words: str) -> Callable[[str], bool]:
    """A handler's `when`: the text starts with one of `words` (a prefix guard)."""
    return lambda text: text.startswith(words)


def read_every(handlers: Sequence[Handler[S]], state: S, line: Line) -> bool:
    """Every handler whose `when` holds reads the line (not only the first); True when one did:
    for a line that can hold several messages (torch's timeout, its abort and the NCCL error)."""
    text = line.text
    found = False
    for handler in handlers:
        if handler.when(text) and handler.read(state, line):
            found = True
    return found


class ChainedRead(Generic[S]):
    """A chained handler's `read` (`chained`): its own read, then, where that read the line,
    every later handler of its chain (`rest`) whose test holds reads it too. `HandlersByText`
    knows it by its type, to read the rest from the tests it already made."""

    __slots__ = ("read", "rest")

    def __init__(self, read: Callable[[S, Line], bool], rest: Sequence[Handler[S]]) -> None:
        self.read = read
        self.rest = tuple(rest)

    def __call__(self, state: S, line: Line) -> bool:
        if not self.read(state, line):
            return False
        read_every(self.rest, state, line)
        return True


def chained(handlers: Sequence[Handler[S]]) -> tuple[Handler[S], ...]:
    """The handlers as a first-match table (for `dispatch`, which names the first that reads
    a line) in which that first one lets every later one read the line too (`read_every`):
    each reads a line once."""
    return tuple(Handler(h.name, h.when, ChainedRead(h.read, handlers[i + 1:])) for i, h in enumerate(handlers))


def _then(read: Callable[[S, Line], bool], rest: tuple[Callable[[S, Line], bool], ...]) -> Callable[[S, Line], bool]:
    """`read`, then, where it read the line, each of `rest` reads it too."""
    def read_and_rest(state: S, line: Line) -> bool:
        if not read(state, line):
            return False
        for then in rest:
            then(state, line)
        return True
    return read_and_rest


def tested_reads(found: Sequence[Handler[S]], text: str) -> tuple[tuple[str, Callable[[S, Line], bool]], ...]:
    """Each handler of `text`'s tested table (`found`: those whose test holds for it, in
    order) as (name, read), to be called with no test again (`HandlersByText.dispatch`); a
    chained handler's read then lets the later handlers of its chain whose tests hold for
    `text` read the line, tested here once rather than by `read_every` on every line."""
    reads: list[tuple[str, Callable[[S, Line], bool]]] = []
    for handler in found:
        read = handler.read
        if isinstance(read, ChainedRead):
            rest = tuple(h.read for h in read.rest if h.when(text))
            read = _then(read.read, rest) if rest else read.read
        reads.append((handler.name, read))
    return tuple(reads)


TESTED_TEXTS_MAX = 4096  # distinct texts whose handlers' tests one parse keeps (HandlersByText)
# every ASCII digit made a 0: texts that differ only in their digits' values share it (digit_blind)
_ZEROED = str.maketrans("123456789", "000000000")


class HandlersByText(Generic[S]):
    """Per text, the handlers of a table whose test (`when`: a test of the text alone) holds,
    in order: a text that comes again in one parse (a communicator's NCCL init lines, word for
    word again for each communicator, are most of a big log's kept lines once hc diagnose
    logs condensed it) is tested once, up to TESTED_TEXTS_MAX texts. `dispatch` over them
    reads a line exactly as over the whole table: each handler left out would have said no.
    `digit_blind`: every test gives one answer for texts that differ only in which ASCII
    digits they hold (no digit in any word a test looks for; `\\d`, `\\w` and lengths are
    blind to the digits' values), so the texts share one entry keyed by the text with every
    digit a 0: a training loop's step lines, each with its own numbers, are tested once.
    tests/unit/parsers/test_{torch,nccl}_log_tested.py read every fixture both ways and
    hold the torch table's tests digit-blind."""

    def __init__(self, handlers: Sequence[Handler[S]], *, digit_blind: bool = False) -> None:
        self.handlers = tuple(handlers)
        self.digit_blind = digit_blind
        self.holding: dict[str, _Tested[S]] = {}

    def tested(self, text: str) -> _Tested[S]:
        """The handlers whose test holds for `text`, kept for the next text with its key."""
        found = self.holding.get(text)
        if found is None:
            key = text.translate(_ZEROED) if self.digit_blind else text
            found = self.holding.get(key) if key is not text else None
            if found is None:
                found = _Tested(tuple(h for h in self.handlers if h.when(text)), text)
            if len(self.holding) >= TESTED_TEXTS_MAX - 1:
                self.holding.clear()  # bounded: a table kept for every parse of a process starts again
            self.holding[key] = found
            if key is not text:
                self.holding[text] = found
        return found

    def table(self, text: str) -> tuple[Handler[S], ...]:
        """The handlers of the table whose test holds for `text`, in order."""
        return self.tested(text).handlers

    def dispatch(self, state: S, line: Line) -> str | None:
        """`dispatch(self.table(line.text), state, line)` with no test made again: each
        handler's test held, and a chained handler's rest is the rest of its chain in the
        tested table (`tested_reads`)."""
        name = None
        for name_, read in self.tested(line.text).reads():
            if read(state, line):
                name = name_
                break
        recorded(line, name)
        return name


class _Tested(Generic[S]):
    """A text's tested table (HandlersByText): its handlers, and their reads made once."""

    __slots__ = ("handlers", "text", "made")

    def __init__(self, handlers: tuple[Handler[S], ...], text: str) -> None:
        self.handlers = handlers
        self.text = text  # the text the tests were made on (one of the texts that share them)
        self.made: tuple[tuple[str, Callable[[S, Line], bool]], ...] | None = None

    def reads(self) -> tuple[tuple[str, Callable[[S, Line], bool]], ...]:
        if self.made is None:
            self.made = tested_reads(self.handlers, self.text)
        return self.made


Recorder = Callable[[Line, "str | None"], None]  # (the line, the handler that read it or None)
_RECORDER: ContextVar[Recorder | None] = ContextVar("hc_lines_recorder", default=None)


def dispatch(handlers: Sequence[Handler[S]], state: S, line: Line, record: Recorder | None = None) -> str | None:
    """The name of the first handler that read the line; None when none did.

    What read the line is told to `record`, else to the recorder `recording` set (what
    `hc parse --explain` shows), else to no one: every parser that dispatches explains
    itself with no change of its own."""
    name = None
    text = line.text
    for handler in handlers:
        if handler.when(text) and handler.read(state, line):
            name = handler.name
            break
    recorded(line, name, record)
    return name


def recorded(line: Line, name: str | None, record: Recorder | None = None) -> None:
    """Tell the recorder (`record`, else `recording`'s) which handler read `line` (None:
    none): for a parser that reads through a table of its own rather than `dispatch`."""
    hook = record if record is not None else _RECORDER.get()
    if hook is not None:
        hook(line, name)


def recording_now() -> bool:
    """Whether a recorder is listening (`recording`): a parser that builds a `Line` only to
    tell `recorded` builds it only then."""
    return _RECORDER.get() is not None


# the line numbers, in the whole text, of a condensed text's lines (diagnose/condense.py):
# read_lines numbers each line it reads by them while `numbered_as` holds them
_ORIGINAL_NUMBERS: ContextVar[Sequence[int] | None] = ContextVar("hc_original_numbers", default=None)


@contextmanager
def numbered_as(numbers: Sequence[int] | None) -> Iterator[None]:
    """While the block runs, `read_lines` gives the text's Nth line the number `numbers[N-1]`:
    a text made of some of a bigger one's lines (diagnose/condense.py) read with the numbers
    those lines have in the whole, so every fact's line is the whole file's (this thread and
    context only). Everything else (shapes, marks, the cut end) is of the text as given.
    None: each line its own number, as outside any such block."""
    token = _ORIGINAL_NUMBERS.set(numbers)
    try:
        yield
    finally:
        _ORIGINAL_NUMBERS.reset(token)


@contextmanager
def recording(record: Recorder) -> Iterator[None]:
    """Every line a parser dispatches while the block runs, told to `record` (this thread
    and context only: two parses in two threads record apart)."""
    token = _RECORDER.set(record)
    try:
        yield
    finally:
        _RECORDER.reset(token)


class Cursor:
    """Lines with a look ahead, for handlers that ask whether the next line continues one."""

    def __init__(self, lines: Sequence[Line]) -> None:
        self.lines = lines
        self.index = 0

    def __iter__(self) -> Iterator[Line]:
        while self.index < len(self.lines):
            line = self.lines[self.index]
            self.index += 1
            yield line

    def wrapped(self, line: Line, starts_record: Callable[[Line], bool], *, min_width: int = 40,
                most: int = 8) -> str:
        """`line`'s text with the lines a terminal hard-wrapped it onto joined back.

        A line was wrapped when its raw length is at least `min_width` and the lines after
        it carry the same launcher labels and start no record of their own; every wrapped
        piece but the last is exactly as wide as the first. Joined lines are consumed.
        """
        width = len(line.raw.rstrip("\r"))
        if width < min_width:
            return line.text
        parts = [line.text]
        for _ in range(most):
            if self.index >= len(self.lines):
                break
            nxt = self.lines[self.index]
            if nxt.number == line.number or starts_record(nxt) or not nxt.text.strip() or nxt.noise:
                break
            if nxt.labels and (nxt.task, nxt.rank, nxt.local_rank) != (line.task, line.rank, line.local_rank):
                break  # another process's line: a terminal's wrap carries no label, a rank's own its own
            parts.append(nxt.text)
            self.index += 1
            if len(nxt.raw.rstrip("\r")) != width:
                break
        return "".join(parts)


# ---------------------------------------------------------------- labels a parser asks for

INDENT_MAX = 16  # blanks before a label of a paste indented as a whole (a markdown list's code block)


def unindented(text: str) -> str:
    """`text` without a whole paste's indent (a markdown code block, a grep in a list): up to
    INDENT_MAX blanks; a deeper indent is the text's own and is kept."""
    stripped = text.lstrip(" \t")
    return stripped if len(text) - len(stripped) <= INDENT_MAX else text
# a tree's `key: value` line at the left margin: the key letters, blanks and `_`, bounded
_FLAT_FIELD = lazy_compile(r"(?P<key>[A-Za-z][A-Za-z_ ]{0,63}):(?P<value>.*)")


def flat_field(text: str, keys: frozenset[str]) -> tuple[str, str] | None:
    """(key, value) of a tool's indented `key: value` line that a paste put at the left
    margin (a web page or a chat client renders the leading blanks away: field/issues-15's
    knowledge-base ibstat), where its key is one of the tool's `keys` (the key as printed,
    stripped): at the margin, any other `word: text` is the writer's prose; None otherwise."""
    m = _FLAT_FIELD.match(text)
    if m is None or (key := m.group("key").strip()) not in keys:
        return None
    return key, m.group("value").strip()


TAB_STOP = 8  # columns between tab stops: a terminal's, `expand`'s and `unexpand`'s


def untabbed(text: str, max_line: int = MAX_LINE) -> str:
    """A column-aligned line (a table drawn in `|` and `+`) whose blanks an editor's tabify
    (`unexpand -a`) turned into tabs, with each tab expanded to its stop again: the cells back
    at the columns the tool printed them in. Cut at `max_line` before and after (a line of
    tabs grows 8-fold)."""
    return text[:max_line].expandtabs(TAB_STOP)[:max_line] if "\t" in text else text


_INDENTED_LABEL = "[(EWIF"  # what a label or a glog prefix behind an indent starts with


def relabelled(line: Line, *, torchx: bool = False, rank_before: re.Pattern[str] | None = None) -> Line:
    """`line` with the labels `read_lines` leaves on taken off, where the parser knows they
    are labels: any label behind a whole paste's indent (`    [rank3]:[E1206 ...]`: the
    layer reads labels at a line's start only); with `torchx`, torchx's `trainer/0 [0]:`
    (the rest read again: a c10 or glog prefix after it); with `rank_before`, MPICH's
    `-prepend-rank` `[N] ` where the text after it matches `rank_before` (a bare `[N]` is
    also NCCL's `[cudaDev]`: only the parser knows which of its lines a rank precedes),
    its rank the line's task where no other label gave one."""
    text = line.text
    stripped = text.lstrip(" \t")
    if len(text) - len(stripped) > INDENT_MAX:
        return line
    if not line.labels:
        again = torchx_read(line, stripped) if torchx else None
        if again is not None:
            return again
        if len(stripped) != len(text) and stripped[:1] in _INDENTED_LABEL:
            again = read_line(line.number, stripped)[0]
            if again.labels:
                line = msgspec.structs.replace(again, raw=line.raw, repairs=line.repairs + again.repairs)
        else:
            line = uncaptioned(line)
    return prepended_rank(line, rank_before) if rank_before is not None else line


# a writer's caption before a pasted log line on the same line (`Error: [rank4]: ...`,
# `报错信息：[rank4]: ...`): a few words without brackets or colons, an ASCII or fullwidth colon,
# then torch's own `[rankN]:` label (nothing else is taken for a label behind prose)
_CAPTION = re.compile(r"[^\[\]:\uff1a]{1,40}[:\uff1a] {0,4}(?=\[rank\d{1,7}\]:)")


def uncaptioned(line: Line) -> Line:
    """`line` read again after a writer's caption (`_CAPTION`) where one leads it; else `line`."""
    m = _CAPTION.match(line.text) if "[rank" in line.text[:56] else None
    if m is None:
        return line
    again = read_line(line.number, line.text[m.end():])[0]
    if not again.labels:
        return line
    return msgspec.structs.replace(again, raw=line.raw, repairs=(*line.repairs, "caption", *again.repairs))


def torchx_read(line: Line, text: str) -> Line | None:
    """`text` (the line's, unindented) after torchx's `ROLE/REPLICA [LOCAL_RANK]:` read again
    as a line of its own, the label kept in `labels` and `role` ("trainer/0"); None without
    one. The local rank is the rank on replica 0 only (as torchrun's alone is on one node)."""
    m = TORCHX_LABEL.match(text) if "/" in text[:72] else None
    if m is None:
        return None
    again = read_line(line.number, text[m.end():])[0]
    replica, local = int(m.group(2)), int(m.group(3))
    return msgspec.structs.replace(
        again, raw=line.raw, labels=m.group(0) + again.labels, role=f"{m.group(1)}/{replica}",
        local_rank=local if replica == 0 else again.local_rank, repairs=line.repairs + again.repairs)


def prepended_rank(line: Line, before: re.Pattern[str]) -> Line:
    """`line` without MPICH's `-prepend-rank` `[N] ` where `before` matches what follows it."""
    stripped = line.text.lstrip(" \t")
    m = MPICH_RANK.match(stripped) if stripped[:1] == "[" else None
    if m is None or before.match(stripped, m.end()) is None:
        return line
    return msgspec.structs.replace(line, text=stripped[m.end():], labels=line.labels + m.group(0),
                                   task=line.task if line.task is not None else int(m.group(1)))


def mpich_rank(label: str) -> int | None:
    """The rank in a label that is MPICH's `[N]` alone; None for any other label."""
    m = MPICH_RANK.fullmatch(label + " ")
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- a program's logger around the line

# Ray's log deduplication after a line it folded: `... [repeated 7x across cluster]`
_RAY_REPEATED = lazy_compile(r"\s*\[repeated \d{1,9}x across cluster\]$")
# Python logging's BASIC_FORMAT `WARNING:torch.distributed.run:`, and the older
# `[INFO] 2024-01-01 10:00:00,123 name: ` (its time kept as a `pylog` stamp)
_BASIC_LOG = lazy_compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL): ?([A-Za-z_][\w.]{0,128}):")
# vLLM's logger (vllm/logger.py: `%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s`,
# its date `%m-%d %H:%M:%S`): `ERROR 03-02 03:24:44 worker_base.py:581] `, a traceback it logged
# behind it line by line (its frames' indent kept); the month-day stamp is no year's, left unread
# vLLM's `LEVEL MM-DD HH:MM:SS file.py:N] `; from about v0.9 the file is bracketed, `[file.py:N] `
_FILE_LOG = lazy_compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? "
                         r"\[?([\w.-]{1,128}\.py):\d{1,9}\] ")
_BRACKET_LOG = lazy_compile(
    r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ([\w.]{1,64}): "
)


def without_ray_repeat(line: Line) -> Line:
    """`line` without Ray's `[repeated Nx across cluster]` at its end (`repairs`: "repeated")."""
    body = line.text
    if body.endswith("]") and "across cluster" in body[-40:]:
        m = _RAY_REPEATED.search(body, max(0, len(body) - 60))
        if m:
            return msgspec.structs.replace(line, text=body[:m.start()], repairs=(*line.repairs, "repeated"))
    return line


def python_logging(line: Line) -> Line:
    """`line` without Python logging's prefix where its text starts with one: BASIC_FORMAT's
    `WARNING:torch.distributed.run:` and the older `[INFO] 2024-01-01 10:00:00,123 name: `
    (its time a `pylog` stamp), vLLM's `ERROR 03-02 03:24:44 worker_base.py:581] ` (or
    `[worker_base.py:581] `, newer vLLM's; its file
    the `source`); the logger's name is `source`, its level a letter, `logger`
    "pylog". A parser calls it where such a line is its (torch_log): `LEVEL:word:` alone
    is too common a shape to take off every tool's lines."""
    body = line.text
    bracket = body[:1] == "["
    m = _BRACKET_LOG.match(body) if bracket else _BASIC_LOG.match(body) if body[:1] in "DIWEC" else None
    if m is None and body[:1] in "DIWEC":
        m = _FILE_LOG.match(body)
        if m is not None:
            return msgspec.structs.replace(line, text=body[m.end():], labels=line.labels + m.group(0), logger="pylog",
                                           level=_PYLOG_LEVEL[m.group(1)], source=m.group(2))
    if m is None:
        return line
    fields: dict[str, object] = {"logger": "pylog", "level": _PYLOG_LEVEL[m.group(1)],
                                 "source": m.group(3) if bracket else m.group(2)}
    if bracket and not line.stamp:
        fields.update(stamp=m.group(2), stamp_kind="pylog")
    return msgspec.structs.replace(line, text=body[m.end():], labels=line.labels + m.group(0), **fields)


# ---------------------------------------------------------------- messages over several lines


def continues_indented(head_indent: int, text: str, marker: str) -> bool:
    """`text` continues a multi-line log message whose first line's message was indented
    `head_indent`: dmesg and journalctl print a kernel message's further lines indented
    under its stamp, each with the message's marker again (the driver's `NVRM:`)."""
    body = text.lstrip()
    return body.startswith(marker) and len(text) - len(body) > head_indent


def continues_bare(text: str, markers: Sequence[str]) -> bool:
    """`text` continues a log message pasted without its stamps, which the kernel printed
    over several lines (an Xid 31's `MMU Fault: ...` and `Fault is of type ...` after its
    `NVRM: Xid` line): words of its own at the line's start, no marker of a new message,
    no prompt, code fence or elision. The caller bounds how many lines it joins."""
    body = text.strip()
    if not body[:1].isalpha() or text[:1].isspace() or is_prompt(body):
        return False
    return not any(marker in body for marker in markers)


def join_continuation(head: str, text: str, marker: str) -> str:
    """`head` with a continuation line's words after its marker joined on."""
    return f"{head.rstrip()} {text.lstrip()[len(marker):].strip()}"


def word_wrapped(head: str, text: str, *, head_ends: re.Pattern[str], tail_starts: re.Pattern[str]) -> bool:
    """`text` is the rest of `head`, which a word wrap (an issue's, a chat's) moved onto a
    line of its own: `head` ends where its grammar expects more (`head_ends` matches at
    its end, searched in its last 200 characters) and `text` starts with what it expects."""
    if not text.strip() or tail_starts.match(text.lstrip()) is None:
        return False
    head = head.rstrip()
    return head_ends.search(head, max(0, len(head) - 200)) is not None


def unquoted(body: str, markers: Sequence[str]) -> str:
    """A log message another tool quoted (`[XID found] (54 minutes ago) "NVRM: Xid ...\\n"`)
    without its quotes and the `\\n` escape before the closing one: the message as logged.
    The message starts at the first of `markers`; one not opened by a quote is returned
    as it is."""
    at = min((i for i in (body.find(m) for m in markers) if i >= 0), default=-1)
    if at <= 0 or body[at - 1] not in "\"'":
        return body
    end = body.rfind(body[at - 1])
    inner = body[at:end] if end > at else body[at:]
    return body[: at - 1] + (inner[:-2] if inner.endswith("\\n") else inner)


# ---------------------------------------------------------------- hard wraps and elisions

WRAP_MIN = 40  # a terminal narrower than this wraps nothing a health judgement reads


def wrapped_word(line: Line, width_before: int, *, min_width: int = WRAP_MIN) -> bool:
    """`line` is the rest of a table's last cell (a host list) that a terminal hard-wrapped
    onto a line of its own: the line before it was at least `min_width` wide
    (`width_before`: its raw width, 0 when it was no row), and this one is one word with
    no blank before it. `rewrapped` says whether the next line may continue it too."""
    text = line.text
    if width_before < min_width or not text or text[:1].isspace():
        return False
    return len(text.split(None, 1)) == 1


def rewrapped(line: Line, width_before: int) -> int:
    """The width the next line's wrap test starts from: a tail as wide as the line before
    was wrapped again (its width), a shorter one ended the cell (0)."""
    width = len(line.raw.rstrip("\r"))
    return width if width == width_before else 0


def _raw_width(line: Line) -> int:
    return len(line.raw.rstrip("\r"))


def _padded(line: Line) -> bool:
    """The terminal (or the paste) padded the line with blanks to its width: the message
    ended on it (one blank at the end is a wrap at a word's end)."""
    return line.raw.rstrip("\r").endswith("  ")


# the right edge of a box a program drew (rich's traceback, a table): every row is the box's
# width, and none is a piece of a message a terminal wrapped
_DRAWN_EDGES = ("│", "┃", "║", "╮", "╯", "┐", "┘", "┤")


def _drawn(line: Line) -> bool:
    """A row of a drawn box: it ends at the box's right edge."""
    return line.raw.rstrip().endswith(_DRAWN_EDGES)


_HEAD_WORDS = 2  # leading words a tool's record shares with the record before it


def _same_head(before: Line, line: Line) -> bool:
    """`line` starts with the same words as `before` (`srun: error: `, an NCCL line's
    `host:pid:tid [0]`): the next record of the tool that printed both, which a terminal's
    wrap, cutting a message at a column, does not start that way."""
    head = before.text.split(None, _HEAD_WORDS)[:_HEAD_WORDS]
    return len(head) == _HEAD_WORDS and line.text.split(None, _HEAD_WORDS)[:_HEAD_WORDS] == head


def _wrap_piece(before: Line, line: Line) -> bool:
    """`line` can be the next piece of `before`'s message a terminal wrapped: a line of its
    own (not a torn fragment), with words, no label or stamp taken off it (a terminal's
    wrap carries none; a process's next line its own), no prompt, and not another record
    that starts as `before` does (srun's task lines of one width: field-15)."""
    return (line.number != before.number and not line.labels and not line.noise and bool(line.text.strip())
            and not _same_head(before, line))


WRAP_EVIDENCE = 2  # lines followed by an unlabelled one exactly as wide, for a text to be hard-wrapped


def terminal_width(lines: Sequence[Line], *, min_width: int = WRAP_MIN) -> int:
    """The width a terminal hard-wrapped `lines` at (0: none): the width of lines each
    followed by an unlabelled line exactly as wide, neither padded (a wrapped message's
    middle piece), seen at least WRAP_EVIDENCE times; of several such widths the most
    common, where no line is wider. A terminal makes every piece but the last exactly its width; an editor's
    reflow of a quoted paragraph makes lines of at most a width, two of which may match by
    chance (field/repos' 86-column quote of torch's abort message); two ranks' identical
    messages carry their labels."""
    seen: dict[int, int] = {}
    for before, line in zip(lines, lines[1:], strict=False):
        width = _raw_width(line)
        if (width >= min_width and width == _raw_width(before) and _wrap_piece(before, line)
                and not _padded(line) and not _padded(before) and not _drawn(before)):
            seen[width] = seen.get(width, 0) + 1
    width = max(seen, key=lambda w: seen[w]) if seen else 0
    if not width or seen[width] < WRAP_EVIDENCE:
        return 0
    return width if all(_raw_width(line) <= width for line in lines) else 0  # a terminal prints nothing wider


def hard_unwrapped(lines: Sequence[Line], width: int, *, max_line: int = MAX_LINE) -> Iterator[Line]:
    """`lines` with each message a terminal hard-wrapped at `width` (`terminal_width`) joined
    back into its first line: a line exactly `width` wide and not padded takes the next
    line where that is a piece of it (`_wrap_piece`), and so on while each piece is as wide
    and not padded (the last is shorter, or padded to the width). The joined line keeps
    its first line's number and labels (`repairs`: "hard-wrap"), at most `max_line`
    characters; each piece is told to the recorder as read by "hard-wrap"."""
    index = 0
    while index < len(lines):
        head = lines[index]
        index += 1
        if not width or _raw_width(head) != width or _padded(head) or _drawn(head):
            yield head
            continue
        text, before = head.text, head
        while index < len(lines) and len(text) < max_line and _wrap_piece(before, lines[index]):
            before = lines[index]
            index += 1
            text += before.text
            recorded(before, "hard-wrap")
            if _raw_width(before) != width or _padded(before) or _drawn(before):
                break
        yield head if before is head else msgspec.structs.replace(
            head, text=text[:max_line], repairs=(*head.repairs, "hard-wrap"))


_ELISION = frozenset(".…")


def is_elision(text: str) -> bool:
    """A line that is only an elision mark (`...`, `…`) where whoever pasted the output
    cut some of it, also bracketed (`[...]`): no tool's line, and no line to count as unread."""
    body = text.strip()
    if body[:1] in "[(" and body[-1:] in "])":
        body = body[1:-1].strip()
    # its first character first: most lines are no elision, and a set of a long line's characters costs
    return body[:1] in _ELISION and set(body) <= _ELISION


# ---------------------------------------------------------------- lines collapsed into one

# a terminal (or a copy out of one) that put a message's lines side by side on one line,
# each line break become a run of blanks padding the line out (field/issues-10's torch
# DistBackendError: `... NCCL version 2.20.5  ncclRemoteError: ...<55 blanks>Last error:`)
_BLANK_RUN = lazy_compile(r" {2,}")


def collapsed_pieces(text: str, continues: re.Pattern[str]) -> list[str]:
    """`text` split before each run of two or more blanks that one of the parser's lines
    follows (`continues`: anchored where it is tried, bounded), where words come before
    it: the lines a terminal collapsed into one, each its own again, the blanks dropped.
    Linear: each run is found once and `continues` tried once after it."""
    if "  " not in text:
        return [text]
    pieces: list[str] = []
    start = 0
    for m in _BLANK_RUN.finditer(text):
        if continues.match(text, m.end()) and text[start:m.start()].strip():
            pieces.append(text[start:m.start()])
            start = m.end()
    pieces.append(text[start:])
    return pieces


def uncollapsed(lines: Iterable[Line], continues: re.Pattern[str]) -> Iterator[Line]:
    """The lines, each that a terminal collapsed out of several (`collapsed_pieces`) split
    back into them: pieces of the same number, prefixes and labels (read as the same
    rank's), repair "collapsed"; every other line as it was."""
    for line in lines:
        pieces = collapsed_pieces(line.text, continues)
        if len(pieces) == 1:
            yield line
            continue
        repairs = (*line.repairs, "collapsed")
        for piece in pieces:
            yield msgspec.structs.replace(line, text=piece, repairs=repairs)
