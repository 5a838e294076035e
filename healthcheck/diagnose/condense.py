"""A big text log condensed before its parsers read it: the middle of each long run of
lines that differ only in their digits left out, every other line kept with its number.

Why: a training job's log is mostly one line repeated with other numbers (`2026-11-27
13:11:30,123 INFO rank0 step 4113 loss 0.7143`), tens of thousands of times a rank, and
every parser hc runs on a log reads every line it is given in Python (the torch log
parser, the stamp index, the logged numbers): 64 ranks' 200 MB took minutes. Of such a run
the readers need its first lines (the first time each template is logged:
loggednumbers.py; a loop's first rounds: steps.py) and its last (the rank's last step and
warning, the last stamp before whatever follows); the lines between say the same again.

A run is found over the bytes in C (`template_runs`: `bytes.translate` of each digit to a
mark; stretches of identical marked lines found by comparing a line repeated against what
follows it, doubling, then halving; a stretch's template, its runs of marks squeezed to one,
made once and stretches of one template joined), so the lines left out cost no Python each
and the whole text is never split into lines;
`tests/unit/diagnose/test_diagnose_condense.py` holds it to the line-by-line reading it
replaced. Lines of one template hold the same characters but for their digits, so what the
first and last line of a run show, every line of it shows. Only a run with nothing that
tells its lines apart by source, and nothing a parser keeps line by line, is condensed: no
line carries a launcher's or rank label (the line layer's `labels_of`), a host's label or a
line number, or starts indented (a traceback's frames, a box's rows); each word that names a
rank, task, node or device names one number throughout (that word as the first line spells
it, searched for over the run); NCCL's parser reads none of its lines (parsers/nccl_log.
NCCL_MARKS: its facts count channels and operations line by line); and the torch log parser,
reading its first and its last line alone, finds none of its facts (each line of a store
barrier's wait or a timeout is a fact of its own) and no traceback. And the text is read
whole where its kept lines would decide a shape of the line layer otherwise than all of them
(`_shapes`: a quoted paste, a logging prefix, a viewer's numbers, worker labels by majority,
a parallel shell's hosts; `_same_wrap`: a terminal's hard wrap).

The invariant: a text of at most BIG_TEXT_BYTES, every fixture under tests/fixtures, is
read exactly as ever (`condensed` returns None). Above it the readers see the condensed
text with each line's number in the whole (lines.numbered_as): the same facts at the same
lines, except counts of lines a reader did not recognise (`unrecognized`, which no rule
reads), MAX_STAMPS (sources.py), which counts kept lines, and `loop_rounds`, the values a
loop counter took, of which the rules ask only whether there were two (a run's first and
last lines differ where its counter moved).
tests/unit/diagnose/test_diagnose_condense.py reads every text fixture both ways, with a
threshold of 0 and short runs, and compares the verdicts and every rank's facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from healthcheck.core.errors import ParseError
from healthcheck.parsers.lines import (
    HOST_SAMPLE,
    QUOTED_SAMPLE,
    clock_stamped,
    drop_quote,
    gutter_numbered,
    host_labelled,
    labels_of,
    line_numbered,
    logger_prefixed,
    quoted_paste,
    quoted_reply,
    read_line,
    viewer_columned,
    worker_labelled,
)
from healthcheck.parsers.nccl_log import NCCL_MARKS
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.torch_log.facts import FACT_KINDS

MiB = 1024 * 1024
BIG_TEXT_BYTES = 1 * MiB  # above it a text log is condensed; at or below, read whole as ever
RUN_KEEP = 16  # lines kept at each end of a condensed run
_MARK = b"\x00"  # every digit run becomes one: a template as loggednumbers.py makes, over bytes
_DIGITS_MARKED = bytes.maketrans(b"0123456789", _MARK * 10)
_SQUEEZE = re.compile(re.escape(_MARK) + b"+")
_SQUEEZED_MAX = 4096  # distinct marked lines whose template one text keeps

# what tells lines of one template apart by source: a rank's or device's number in words
# (`rank0`, `[Rank 3]`, `local_rank=1`, `GPU 2`); each such word keeps one number in a run
_NAMED = re.compile(r"\b(rank|task|worker|node|host|proc|process|pid|gpu|device|cuda|role|default|local_rank)"
                    r"[^\d\n]{0,3}(\d{1,12})(?!\d)", re.IGNORECASE)
# a parallel shell's host label (`gpu004: `), a viewer's line number (`[12] `, `12 `), an
# MPI launcher's `[1,3]<stdout>:`: the line layer takes them off per line, by majority
_SOURCE_LABEL = re.compile(r"\s{0,8}(?:[A-Za-z][\w.-]{0,62}\d[\w.-]{0,62}: |\[?\d{1,9}\]?\s|\[\d{1,9},\d{1,9}\])")


@dataclass(frozen=True)
class Condensed:
    """A text's kept lines joined, and each one's number in the whole text (1-based)."""

    text: str
    numbers: list[int]


@dataclass
class Run:
    """Lines of one template, one after another: the first one's index (0-based), how many,
    their bytes (`start`..`end`, the last line's newline in it where it has one) and, per
    stretch of lines identical but for the digits' values, how many and how wide (in
    characters, as `str.split` gives them)."""

    first: int
    count: int
    start: int
    end: int
    widths: list[tuple[int, int]]


def _repeats(marked: bytes, pos: int, width: int) -> int:
    """How many lines from `pos` on are `marked[pos:pos + width]` (a line and its newline)
    again, it included: doubling, then halving, each step one comparison in C."""
    line = marked[pos:pos + width]
    count, step = 1, 1
    while marked.startswith(line * step, pos + count * width):
        count += step
        step *= 2
    while step > 1:
        step //= 2
        if marked.startswith(line * step, pos + count * width):
            count += step
    return count


def _same_lines(marked: bytes) -> list[tuple[int, int, int, int]]:
    """(start, end of its first line, end, lines) of each stretch of identical lines of
    `marked` (the text with its digits one mark each, so a line and the next with other
    digit values but as many are identical), the last line (after the last newline, maybe
    empty) a stretch of its own."""
    out: list[tuple[int, int, int, int]] = []
    pos, find, startswith = 0, marked.find, marked.startswith
    while True:
        newline = find(b"\n", pos)
        if newline < 0:
            out.append((pos, len(marked), len(marked), 1))
            return out
        width = newline + 1 - pos
        count = _repeats(marked, pos, width) if startswith(marked[pos:newline + 1], newline + 1) else 1
        out.append((pos, newline, pos + count * width, count))
        pos += count * width


# the last ASCII text's digit-marked bytes and their runs (template_runs): a job's ranks' files
# are one program's output, most of them the same bytes but for their digits' values
_LAST_RUNS: list[tuple[bytes, list[Run]]] = []


def template_runs(data: bytes) -> list[Run]:
    """The runs of lines of one template (every run of digits one mark: a template as
    loggednumbers.py makes, over bytes) of `data`, in order: found in C over stretches of
    identical digit-marked lines (`_same_lines`), so a line costs Python only where its
    digits' count differs from the line before's; the template is made once a stretch.
    The runs are a function of the marked bytes alone where `data` is ASCII (a line's width
    is its marked line's), so an ASCII text marked as the one before it (another rank's file
    of the same job) gets that text's runs again, compared in C: read them, never change them."""
    marked = data.translate(_DIGITS_MARKED)
    ascii_only = data.isascii()  # a line's characters are its bytes
    if ascii_only and _LAST_RUNS and _LAST_RUNS[0][0] == marked:
        return list(_LAST_RUNS[0][1])
    runs = _runs(data, marked, ascii_only)
    if ascii_only:
        _LAST_RUNS[:] = [(marked, runs)]
    return list(runs)


def _runs(data: bytes, marked: bytes, ascii_only: bool) -> list[Run]:
    """template_runs' runs of `data`, `marked` its digit-marked bytes."""
    runs: list[Run] = []
    template, at = None, 0
    squeezed: dict[bytes, bytes] = {}  # a marked line's template: a loop's few forms come again and again
    for start, line_end, end, count in _same_lines(marked):
        line = marked[start:line_end]
        this = squeezed.get(line)
        if this is None:
            this = _SQUEEZE.sub(_MARK, line)
            if len(squeezed) < _SQUEEZED_MAX:
                squeezed[line] = this
        width = line_end - start if ascii_only else len(data[start:line_end].decode("utf-8", errors="replace"))
        if this == template:
            last = runs[-1]
            last.count += count
            last.end = end
            last.widths.append((count, width))
        else:
            runs.append(Run(at, count, start, end, [(count, width)]))
            template = this
        at += count
    return runs


def _no_facts(line: str) -> bool:
    """Whether the torch log parser, reading `line` alone, finds none of its facts (a timeout,
    an exception, a store barrier's wait, ...: each line of those is a fact of its own, kept
    in a list) and no traceback: only what it keeps per rank, the last step or warning."""
    try:
        log = parse_torch_log(line + "\n", rank_output=True)
    except ParseError:
        return True
    return not log.cut_tracebacks and not any(getattr(log, name) for name in FACT_KINDS)


def _condensable(first: str, last: str, count: int, run: Callable[[], str],
                 run_count: Callable[[str], int] | None = None) -> bool:
    """Whether a run of lines of one template is safe to condense: no line of a traceback,
    box or other indented block, none the torch log parser makes a fact of (its first and
    last read alone: the others share their template), no label, host, line number or
    NCCL line, and every word naming a rank or device naming one number (`run`: the run's
    `count` lines, each with its newline, asked for last; `run_count`: how often an ASCII
    string is in them, counted over their bytes)."""
    if first[:1].isspace() or _SOURCE_LABEL.match(first) or labels_of(first[:120], workers=True).labelled:
        return False
    if NCCL_MARKS.search(first) or NCCL_MARKS.search(last) or not (_no_facts(first) and _no_facts(last)):
        return False
    return _names_one_source(first, run, count, run_count)


def _names_one_source(first: str, run: Callable[[], str], count: int,
                      run_count: Callable[[str], int] | None = None) -> bool:
    """Whether each word of the run's first line that names a rank or device (`rank0`,
    `[Rank 3]`) names one number on every line of `run` (its lines, each ending in a
    newline, `count` of them). The lines share the first's template, so each such word and
    what separates it from its number is in every line as it is in the first: a literal
    searched for (fast) rather than the words in any case. The word and its separator hold
    no digit nor newline, so no line holds them where another does not (they cannot span a
    run of digits, and the rest of each line is the first's): `count` times the first's.
    An ASCII literal is counted over the run's bytes (`run_count`): the decoding keeps every
    ASCII byte and makes no ASCII character of any other, so the counts are the same; any
    other over the decoded `run()`, asked for once."""
    decoded: str | None = None
    for m in _NAMED.finditer(first):
        before = first[m.start():m.start(2)]  # the word and its separator, `rank` or `[Rank `
        named = first[m.start():m.end(2) + 1] if m.end(2) < len(first) else first[m.start():] + "\n"
        if run_count is not None and named.isascii():
            found = run_count(named)
        else:
            decoded = run() if decoded is None else decoded
            found = decoded.count(named)
        if found != count * first.count(before):  # a line where it names another number (or none)
            return False
    return True


def _decoded(data: bytes) -> str:
    """Lines of the log's bytes as the whole text's decoding holds them: a newline ends any
    cut character in both, so lines decoded apart are the lines of the whole decoded."""
    return data.decode("utf-8", errors="replace")


def _ends(data: bytes, run: Run, keep: int) -> tuple[int, int]:
    """Where the run's first `keep` lines end and its last `keep` start (bytes)."""
    head = run.start
    for _ in range(keep):
        head = data.find(b"\n", head) + 1
    tail = run.end - 1 if data[run.end - 1:run.end] == b"\n" else run.end
    for _ in range(keep):
        tail = data.rfind(b"\n", run.start, tail)
    return head, tail + 1


def _first_and_last(data: bytes, run: Run) -> tuple[str, str]:
    """A run's first and last line."""
    first_end = data.find(b"\n", run.start, run.end)
    end = run.end - 1 if data[run.end - 1:run.end] == b"\n" else run.end
    return (_decoded(data[run.start:first_end]),
            _decoded(data[data.rfind(b"\n", run.start, end) + 1:end]))


def _run_lines(data: bytes, run: Run) -> Callable[[], str]:
    """A run's lines, each ending in a newline (the text's last line given one)."""
    def lines() -> str:
        segment = _decoded(data[run.start:run.end])
        return segment if segment.endswith("\n") else segment + "\n"
    return lines


def _run_count(data: bytes, run: Run) -> Callable[[str], int]:
    """How often an ASCII string is in a run's lines as `_run_lines` gives them (the text's
    last line given a newline), counted over the bytes: no decoding, no copy."""
    def count(ascii_text: str) -> int:
        found = data.count(ascii_text.encode("ascii"), run.start, run.end)
        if ascii_text.endswith("\n") and data[run.end - 1:run.end] != b"\n":  # the newline _run_lines adds
            found += data.endswith(ascii_text[:-1].encode("ascii"), run.start, run.end)
        return found
    return count


def condensed(data: bytes, text: str) -> Condensed | None:
    """`text` (`data` decoded) with the middle of each long run of one template left out
    (see the module doc); None where it is at most BIG_TEXT_BYTES, where it is not split by
    "\\n" (a CR-only text) or where nothing would be left out: read it whole. The whole
    text is never split into lines: its runs are found over the bytes (`template_runs`),
    the kept lines alone decoded, and only the first lines that decide a shape split off."""
    if len(data) <= BIG_TEXT_BYTES or b"\n" not in data or (
            not data.isascii() and data.count(b"\n") != text.count("\n")):  # ASCII: decoding is no change
        return None  # small, a CR-only text, or one the decoding changed the lines of: read it whole
    keep = RUN_KEEP  # the module's, read now: the differential test lowers both
    pieces: list[bytes] = []
    numbers: list[int] = []
    bare = cut = False
    runs = template_runs(data)
    for run in runs:
        first, last = _first_and_last(data, run) if run.count > 2 * keep + 1 else ("", "")
        if run.count > 2 * keep + 1 and _condensable(first, last, run.count, _run_lines(data, run),
                                                     _run_count(data, run)):
            head, tail = _ends(data, run, keep)
            pieces += (data[run.start:head], data[tail:run.end])
            numbers.extend(range(run.first + 1, run.first + keep + 1))
            numbers.extend(range(run.first + run.count - keep + 1, run.first + run.count + 1))
            bare = bare or not read_line(1, first)[0].labels  # nothing taken off: a wrap's piece to the layer
            cut = True
        else:
            pieces.append(data[run.start:run.end])
            numbers.extend(range(run.first + 1, run.first + run.count + 1))
    if not cut:
        return None
    kept = _decoded(b"".join(pieces))
    lines = kept.split("\n")
    # the whole text's lines that decide its shapes: the first HOST_SAMPLE (every shape but
    # worker labels, which count all lines, and only where a ` | ` is in the text at all: in
    # the kept lines where in any, for a left-out line holds a kept line's characters but its
    # digits, and ` | ` holds no digit nor newline)
    pipes = " | " in kept
    leading = text.split("\n") if pipes else text.split("\n", HOST_SAMPLE)[:HOST_SAMPLE]
    stretches = [stretch for run in runs for stretch in run.widths]
    if len(lines) != len(numbers) or _shapes(lines, pipes) != _shapes(leading, pipes) or \
            not _same_wrap(stretches, lines, bare):
        return None  # the kept lines would decide a shape otherwise than the whole text: read it whole
    return Condensed(text=kept, numbers=numbers)


def _shapes(lines: list[str], pipes: bool) -> tuple[bool, ...]:
    """What the line layer decides over a text's lines before it reads one (lines.read_lines),
    each over its first lines (a quoted paste or reply, a logging prefix, a viewer's numbers or
    columns, a parallel shell's hosts) or, for a process manager's `NAME-N | ` labels, over
    all of them (only where a ` | ` is in the text at all, `pipes`: every such label holds one)."""
    workers = pipes and worker_labelled(lines)
    reply = quoted_reply(lines)
    # a CI runner's clock stamps, judged as read_lines judges them (a quoted reply's quotes off)
    sample = [drop_quote(x) for x in lines[:QUOTED_SAMPLE]] if reply else lines
    return (quoted_paste(lines), reply, logger_prefixed(lines), line_numbered(lines), gutter_numbered(lines),
            viewer_columned(lines), clock_stamped(sample), host_labelled(lines), workers)


def _same_wrap(stretches: list[tuple[int, int]], lines: list[str], bare: bool) -> bool:
    """Whether the kept `lines` tell a terminal's hard wrap (lines.terminal_width) as the
    whole text does (`stretches`: its lines as (how many, how wide) of lines one after
    another as wide). It is told by pairs of lines exactly as wide, the second with nothing
    taken off it, at the commonest such width, where no line is wider: so only at the widest
    width. Where no left-out line is bare (`bare` False: a stamp or a label came off each)
    the pairs are the same: the same wrap where the widest line is kept, and none either
    way where no two kept lines of the widest kept width make a pair. Where some are bare,
    none either way where the widest line is kept and no two of the widest lines follow
    one another, whole or kept."""
    widest = max(width for _, width in stretches)
    kept_widths = list(map(len, lines))
    kept_widest = max(kept_widths)
    if not bare:
        return kept_widest == widest or not any(
            kept_widths[n - 1] == kept_widths[n] == kept_widest and not read_line(1, lines[n])[0].labels
            for n in range(1, len(lines)))
    if kept_widest != widest:
        return False
    whole_follow = any(width == widest and (count > 1 or following == widest)
                       for (count, width), (_, following) in zip(stretches, [*stretches[1:], (0, -1)], strict=True))
    kept_follow = any(a == b == widest for a, b in zip(kept_widths, kept_widths[1:], strict=False))
    return not (whole_follow or kept_follow)
