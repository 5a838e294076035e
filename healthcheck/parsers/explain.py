"""Which handler read each line of a tool's text: `hc parse TOOL FILE --explain`.

An operator whose paste hc reads wrongly (or refuses) sends the explanation with it: per
line, what read it. How much a parser can say depends on how it reads:

- `handlers`: it reads through a table of `lines.Handler`s with `lines.dispatch`, so
  each line is named by the handler that read it, `unrecognized` where none did, and
  what the line layer made of the rest (`blank`, `prompt`: a shell prompt, noise;
  `command`: the bare command line before the output, noise;
  `elision`: a paste's `...`; `file-header`: tail's `==> FILE <==`;
  `outside the table`: read, or skipped, by the parser's own code before its table);
- `unrecognized`: it counts the lines it did not read (`lines.Unrecognized` in its
  facts), so each line is `read` or `not read`; past the sample of unread lines, where
  more were not read than were sampled, a line is `not known`;
- `none`: the parser cannot tell yet; the explanation says so and lists no line.

Recording the handlers: `lines.dispatch` tells each line it dispatched, and the handler
that read it, to the recorder `lines.recording` sets for the one parse (a context
variable: nothing is swapped, and a parse in another thread records nothing here); a
parser with a table of its own tells `lines.recorded` the same.

Bounded: at most EXPLAIN_LINES lines listed (the rest counted), each cut at EXPLAIN_TEXT
characters; per-handler counts cover every line.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.parsers import lines as line_layer
from healthcheck.parsers.lines import Line, Unrecognized, is_elision, read_lines

EXPLAIN_LINES = 200  # lines listed; the rest are counted in `lines_left_out`
EXPLAIN_TEXT = 100  # characters of each line's text shown

BLANK = "blank"
PROMPT = "prompt"
COMMAND = "command"  # lines.Line.noise of a bare command echo
ELISION = "elision"
FILE_HEADER = "file-header"  # tail's `==> FILE <==` before each file's lines
OUTSIDE = "outside the table"
UNRECOGNIZED = "unrecognized"
READ = "read"
NOT_READ = "not read"
NOT_KNOWN = "not known"


class ExplainedLine(msgspec.Struct, frozen=True):
    line: int  # 1-based, as `sed -n Np` counts
    by: str  # the handler that read it, or one of BLANK, PROMPT, COMMAND, OUTSIDE, UNRECOGNIZED, READ, ...
    text: str  # the line as the parser saw it (prefixes taken off), cut at EXPLAIN_TEXT


class Explanation(msgspec.Struct, frozen=True):
    how: str  # "handlers" | "unrecognized" | "none": how much the parser can say (module doc)
    note: str  # one sentence saying what the table means, or why there is none
    lines_total: int = 0
    counts: dict[str, int] = {}  # lines per handler (or read / not read), every line counted
    lines: list[ExplainedLine] = []  # the first EXPLAIN_LINES
    lines_left_out: int = 0
    refused: str = ""  # the parser's one-line refusal, when it refused the text


Recorder = dict[int, list[str]]  # line number -> the handlers that read its pieces (None: none)


@contextmanager
def recording_dispatch() -> Iterator[Recorder]:
    """Every line a parser dispatches (`lines.dispatch`, `lines.recorded`) while the block
    runs, recorded by line number."""
    record: Recorder = {}

    def note(line: Line, name: str | None) -> None:
        record.setdefault(line.number, []).append(name or UNRECOGNIZED)

    with line_layer.recording(note):
        yield record


def uses_handlers(parse: Callable[..., Any]) -> bool:
    """Whether the parser's module reads through `lines.dispatch`."""
    module = sys.modules.get(getattr(parse, "__module__", "") or "")
    return getattr(module, "dispatch", None) is line_layer.dispatch


def find_unrecognized(facts: Any) -> Unrecognized | None:
    """The `Unrecognized` a parser's facts carry at their top level, if any."""
    found = getattr(facts, "unrecognized", None)
    return found if isinstance(found, Unrecognized) else None


def _cut(text: str) -> str:
    text = text.strip()
    return text if len(text) <= EXPLAIN_TEXT else text[:EXPLAIN_TEXT - 3] + "..."


def _layer_view(line: Line) -> str | None:
    """What the line layer alone says of a line: blank, a prompt, a paste's elision, or nothing."""
    if not line.text.strip():
        return BLANK
    if line.noise:
        return line.noise if line.noise in (COMMAND, FILE_HEADER) else PROMPT
    return ELISION if is_elision(line.text) else None


def by_handlers(text: str, record: Recorder) -> list[ExplainedLine]:
    """Each line named by the handlers that read it (a torn line's pieces joined by '+')."""
    out = []
    for line in _first_pieces(text):
        names = record.get(line.number)
        if names and set(names) == {UNRECOGNIZED} and is_elision(line.text):
            names = None  # no handler's line: the paste's `...`, never counted unread
        by = "+".join(dict.fromkeys(names)) if names else (_layer_view(line) or OUTSIDE)
        out.append(ExplainedLine(line=line.number, by=by, text=_cut(line.text)))
    return out


def by_unrecognized(text: str, unrecognized: Unrecognized) -> list[ExplainedLine]:
    """Each line read or not read, from the parser's count and sample of unread lines."""
    unread = {s.line for s in unrecognized.sample}
    complete = unrecognized.count <= len(unrecognized.sample)
    last_sampled = max(unread, default=0)
    out = []
    for line in _first_pieces(text):
        by = _layer_view(line)
        if by is None:
            if line.number in unread:
                by = NOT_READ
            else:
                by = READ if complete or line.number < last_sampled else NOT_KNOWN
        out.append(ExplainedLine(line=line.number, by=by, text=_cut(line.text)))
    return out


def _first_pieces(text: str) -> Iterator[Line]:
    """One Line per line number (a torn line's first piece stands for it)."""
    number = 0
    for line in read_lines(text):
        if line.number != number:
            number = line.number
            yield line


def explain(tool: str, parse: Callable[[Any], Any], data: str | bytes) -> tuple[Any, Explanation]:
    """(the facts, or None when the parser refused; the explanation) of one parse."""
    if isinstance(data, bytes):
        facts = parse(data)
        return facts, Explanation(how="none", note=f"{tool} input is binary (read as data): it has no lines to explain")
    refused = ""
    facts = None
    with recording_dispatch() as record:
        try:
            facts = parse(data)
        except ParseError as exc:
            refused = str(exc)
    if uses_handlers(parse) or record:
        listed = by_handlers(data, record)
        how, note = "handlers", "each line named by the handler that read it"
    elif facts is not None and (unrecognized := find_unrecognized(facts)) is not None:
        listed = by_unrecognized(data, unrecognized)
        how, note = "unrecognized", (f"the {tool} parser says which lines it did not read, not which part "
                                    "read the others")
    elif facts is None:
        listed = []
        how, note = "none", f"the {tool} parser refused the text before saying which lines it read"
    else:
        listed = []
        how, note = "none", f"the {tool} parser does not explain its reading per line yet"
    return facts, _bounded(how, note, listed, refused)


def _bounded(how: str, note: str, listed: list[ExplainedLine], refused: str) -> Explanation:
    counts = Counter(x.by for x in listed)
    return Explanation(how=how, note=note, lines_total=len(listed), counts=dict(counts.most_common()),
                       lines=listed[:EXPLAIN_LINES], lines_left_out=max(0, len(listed) - EXPLAIN_LINES),
                       refused=refused)


def render(tool: str, source: str, explanation: Explanation) -> str:
    """The explanation as a table for a terminal or a ticket."""
    out = [f"{tool} <- {source}: {explanation.note}"]
    if explanation.refused:
        out.append(f"refused: {explanation.refused}")
    if explanation.lines:
        width = max(len(x.by) for x in explanation.lines)
        out.append(f"{'LINE':>6}  {'READ BY':<{width}}  TEXT")
        out.extend(f"{x.line:>6}  {x.by:<{width}}  {x.text}" for x in explanation.lines)
    if explanation.lines_left_out:
        out.append(f"... {explanation.lines_left_out} more lines not listed")
    if explanation.counts:
        out.append("lines: " + ", ".join(f"{name} {n}" for name, n in explanation.counts.items()))
    return "\n".join(out)
