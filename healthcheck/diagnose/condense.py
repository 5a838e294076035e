"""A big text log condensed before its parsers read it: the middle of each long run of
lines that differ only in their digits left out, every other line kept with its number.

Why: a training job's log is mostly one line repeated with other numbers (`2026-11-27
13:11:30,123 INFO rank0 step 4113 loss 0.7143`), tens of thousands of times a rank, and
every parser hc runs on a log reads every line it is given in Python (the torch log
parser, the stamp index, the logged numbers): 64 ranks' 200 MB took minutes. Of such a run
the readers need its first lines (the first time each template is logged:
loggednumbers.py; a loop's first rounds: steps.py) and its last (the rank's last step and
warning, the last stamp before whatever follows); the lines between say the same again.

A run is found over the bytes in C (`bytes.translate` of the digits to one mark, runs of
the mark squeezed to one, `split`, `itertools.groupby`), so the lines left out cost no
Python each. Lines of one template hold the same characters but for their digits, so what
the first and last line of a run show, every line of it shows. Only a run with nothing that
tells its lines apart by source, and nothing a parser keeps line by line, is condensed: no
line carries a launcher's or rank label (the line layer's `labels_of`), a host's label or a
line number, or starts indented (a traceback's frames, a box's rows); each word that names a
rank, task, node or device names one number throughout (that word as the first line spells
it, searched for over the run); NCCL's parser reads none of its lines (parsers/nccl_log.
NCCL_MARKS: its facts count channels and operations line by line); and the torch log parser,
reading its first and its last line alone, finds none of its facts (each line of a store
barrier's wait or a timeout is a fact of its own) and no traceback. And the text is read
whole where its kept lines would decide a shape of the line layer otherwise than all of
them (`_shapes`: a quoted paste, a logging prefix, a viewer's numbers, worker labels by
majority, a parallel shell's hosts; `_same_wrap`: a terminal's hard wrap).

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
from dataclasses import dataclass
from itertools import groupby

from healthcheck.core.errors import ParseError
from healthcheck.parsers.lines import (
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


def _templates(data: bytes) -> list[bytes]:
    """Each line of `data` with every run of digits one mark (C speed)."""
    marked = data.translate(_DIGITS_MARKED)
    twice = _MARK * 2
    marked = marked.replace(twice * 2, _MARK)  # a clock's and a date's four digits at once: fewer passes
    while twice in marked:
        marked = marked.replace(twice, _MARK)
    return marked.split(b"\n")


def _no_facts(line: str) -> bool:
    """Whether the torch log parser, reading `line` alone, finds none of its facts (a timeout,
    an exception, a store barrier's wait, ...: each line of those is a fact of its own, kept
    in a list) and no traceback: only what it keeps per rank, the last step or warning."""
    try:
        log = parse_torch_log(line + "\n", rank_output=True)
    except ParseError:
        return True
    return not log.cut_tracebacks and not any(getattr(log, name) for name in FACT_KINDS)


def _condensable(lines: list[str]) -> bool:
    """Whether a run of lines of one template is safe to condense: no line of a traceback,
    box or other indented block, none the torch log parser makes a fact of (its first and
    last read alone: the others share their template), no label, host, line number or
    NCCL line, and every word naming a rank or device naming one number."""
    first = lines[0]
    if first[:1].isspace() or _SOURCE_LABEL.match(first) or labels_of(first[:120], workers=True).labelled:
        return False
    if NCCL_MARKS.search(first) or NCCL_MARKS.search(lines[-1]) or not (_no_facts(first) and _no_facts(lines[-1])):
        return False
    return _names_one_source(first, "\n".join(lines))


def _names_one_source(first: str, run: str) -> bool:
    """Whether each word of the run's first line that names a rank or device (`rank0`,
    `[Rank 3]`) names one number on every line of `run`. The lines share the first's
    template, so each such word and what separates it from its number is in every line as
    it is in the first: a literal searched for (fast) rather than the words in any case."""
    run += "\n"
    for m in _NAMED.finditer(first):
        before = first[m.start():m.start(2)]  # the word and its separator, `rank` or `[Rank `
        named = first[m.start():m.end(2) + 1] if m.end(2) < len(first) else first[m.start():] + "\n"
        if run.count(named) != run.count(before):  # a line where the word names another number (or none)
            return False
    return True


def condensed(data: bytes, text: str) -> Condensed | None:
    """`text` (`data` decoded) with the middle of each long run of one template left out
    (see the module doc); None where it is at most BIG_TEXT_BYTES, where it is not split by
    "\\n" (a CR-only text) or where nothing would be left out: read it whole."""
    if len(data) <= BIG_TEXT_BYTES or "\n" not in text:
        return None
    keep = RUN_KEEP  # the module's, read now: the differential test lowers both
    raw = text.split("\n")
    templates = _templates(data)
    if len(templates) != len(raw):
        return None  # the decoding changed the lines (cannot happen with errors="replace"): read it whole
    kept: list[int] = []  # 0-based indexes into raw
    at, bare = 0, False
    for _, group in groupby(templates):
        n = len(list(group))
        if n > 2 * keep + 1 and _condensable(raw[at:at + n]):
            kept.extend(range(at, at + keep))
            kept.extend(range(at + n - keep, at + n))
            bare = bare or not read_line(1, raw[at])[0].labels  # nothing taken off: a wrap's piece to the layer
        else:
            kept.extend(range(at, at + n))
        at += n
    if len(kept) == len(raw):
        return None
    lines = [raw[i] for i in kept]
    if _shapes(lines, text) != _shapes(raw, text) or not _same_wrap(raw, kept, bare):
        return None  # the kept lines would decide a shape otherwise than the whole text: read it whole
    return Condensed(text="\n".join(lines), numbers=[i + 1 for i in kept])


def _shapes(lines: list[str], text: str) -> tuple[bool, ...]:
    """What the line layer decides over a text's lines before it reads one (lines.read_lines),
    each over its first lines (a quoted paste or reply, a logging prefix, a viewer's numbers or
    columns, a parallel shell's hosts) or, for a process manager's `NAME-N | ` labels, over
    all of them (only where a ` | ` is in the text at all: every such label holds one)."""
    workers = " | " in text and worker_labelled(lines)
    reply = quoted_reply(lines)
    # a CI runner's clock stamps, judged as read_lines judges them (a quoted reply's quotes off)
    sample = [drop_quote(x) for x in lines[:QUOTED_SAMPLE]] if reply else lines
    return (quoted_paste(lines), reply, logger_prefixed(lines), line_numbered(lines), gutter_numbered(lines),
            viewer_columned(lines), clock_stamped(sample), host_labelled(lines), workers)


def _same_wrap(raw: list[str], kept: list[int], bare: bool) -> bool:
    """Whether the kept lines tell a terminal's hard wrap (lines.terminal_width) as the whole
    text does. It is told by pairs of lines exactly as wide, the second with nothing taken
    off it, at the commonest such width, where no line is wider: so only at the widest
    width. Where no left-out line is bare (`bare` False: a stamp or a label came off each)
    the pairs are the same: the same wrap where the widest line is kept, and none either
    way where no two kept lines of the widest kept width make a pair. Where some are bare,
    none either way where the widest line is kept and no two of the widest lines follow
    one another, whole or kept."""
    widths = list(map(len, raw))
    widest, kept_widths = max(widths), [widths[i] for i in kept]
    kept_widest = max(kept_widths)
    if not bare:
        return kept_widest == widest or not any(
            kept_widths[n - 1] == kept_widths[n] == kept_widest and not read_line(1, raw[kept[n]])[0].labels
            for n in range(1, len(kept)))
    if kept_widest != widest:
        return False
    at = [n for n, width in enumerate(widths) if width == widest]
    positions = [n for n, width in enumerate(kept_widths) if width == widest]
    return not any(b - a == 1 for pairs in (at, positions) for a, b in zip(pairs, pairs[1:], strict=False))
