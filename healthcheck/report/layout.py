"""Text tables and lines laid out for a reader: fitted to a width, long cells wrapped inside
their column, a status coloured where asked.

Pure: the caller says how wide (None: as wide as the text, for scripts reading a pipe) and
whether to colour (the CLI decides both from the terminal; see cli/app.py).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from healthcheck.core.status import Status

GAP = 2  # tabulate's "simple" layout puts two spaces between columns
HEADER_PADDING = 2  # and makes a column two wider than its header (tabulate.MIN_PADDING)
NARROWEST = 8  # a wrapped column keeps at least this many characters (or its header's)

# SGR colours of a STATUS cell; SKIP and PASS-looking words stay plain but for PASS
_COLOURS = {Status.FAIL: "31;1", Status.ERROR: "35;1", Status.WARN: "33", Status.PASS: "32"}


def coloured(text: str, status: Status | str, colour: bool) -> str:
    """`text` in its status's colour where `colour`; unchanged otherwise (never an escape code)."""
    if not colour:
        return text
    try:
        code = _COLOURS.get(Status(status))
    except ValueError:
        code = None
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


_SGR = re.compile(r"\x1b\[[0-9;]*m")  # what `coloured` adds: no width on a terminal


def _cell_width(cell: object) -> int:
    return max((len(line) for line in _SGR.sub("", str(cell)).split("\n")), default=0)


def fitted_widths(rows: Sequence[Sequence[object]], headers: Sequence[str], width: int | None
                  ) -> list[int | None] | None:
    """The widest each column may be for the table to fit `width` (None for a column left as
    it is), or None where it fits already (or no width is asked).

    The widest columns give way first, down to one shared cap: a short STATUS or ID column
    is never wrapped to spare a long NOTE. A column does not go below NARROWEST (or its
    header); where even that does not fit, the table is as narrow as it can be and wider
    than asked.
    """
    if width is None or not headers:
        return None
    least = [len(h) + HEADER_PADDING for h in headers]
    natural = [max(least[i], *(_cell_width(r[i]) for r in rows)) if rows else least[i] for i in range(len(headers))]
    room = width - GAP * (len(headers) - 1)
    if sum(natural) <= room:
        return None
    floors = [min(n, max(NARROWEST, low)) for n, low in zip(natural, least, strict=True)]

    def used(cap: int) -> int:
        return sum(min(n, max(cap, f)) for n, f in zip(natural, floors, strict=True))

    low, high = 0, max(natural)  # the largest cap that fits: used() grows with the cap
    while low < high:
        mid = (low + high + 1) // 2
        if used(mid) <= room:
            low = mid
        else:
            high = mid - 1
    return [max(low, f) if n > max(low, f) else None for n, f in zip(natural, floors, strict=True)]


def table(rows: Sequence[Sequence[object]], headers: Sequence[str], width: int | None = None, **kw: object) -> str:
    """tabulate's "simple" table, its long cells wrapped inside their columns to fit `width`."""
    caps = fitted_widths(rows, headers, width)
    if caps is None:
        plain = plain_table(rows, headers, **kw)
        if plain is not None:
            return plain
    from tabulate import tabulate

    if caps is None:
        return tabulate(rows, headers=list(headers), tablefmt="simple", **kw)  # type: ignore[arg-type]
    wrapped = [[wrap_cell(str(cell), cap) if cap else cell for cell, cap in zip(row, caps, strict=True)]
               for row in rows]
    return tabulate(wrapped, headers=list(headers), tablefmt="simple", **kw)  # type: ignore[arg-type]


def plain_table(rows: Sequence[Sequence[object]], headers: Sequence[str], *, disable_numparse: object = False,
                colalign: object = None, **kw: object) -> str | None:
    """tabulate's "simple" table, made here, for the table a check run prints on a pipe
    (no colour, nothing wrapped, numbers kept as written: `disable_numparse` and a
    left/right `colalign` for every column) where every cell and header is one line of
    printable ASCII with no blank at either end; None for any other table (tabulate's
    then). Importing tabulate costs more than the rest of a `hc node --local` of five
    checks (it reads its own version through importlib.metadata); the output is the same
    bytes (tests/unit/report/test_layout_plain.py holds the two to it)."""
    if kw or disable_numparse is not True or not isinstance(colalign, tuple) or not rows:
        return None
    texts = [list(headers), *rows]
    if len(colalign) != len(headers) or any(a not in ("left", "right") for a in colalign):
        return None
    if any(len(row) != len(headers) or not all(_plain_cell(c) for c in row) for row in texts):
        return None
    widths = [max(len(h) + HEADER_PADDING, *(len(str(row[i])) for row in rows)) for i, h in enumerate(headers)]
    lines = [_plain_row(row, widths, colalign) for row in texts]
    lines.insert(1, (" " * GAP).join("-" * w for w in widths))
    return "\n".join(lines)


def _plain_cell(cell: object) -> bool:
    return isinstance(cell, str) and cell.isascii() and cell.isprintable() and cell == cell.strip()


def _plain_row(row: Sequence[object], widths: list[int], aligns: tuple[str, ...]) -> str:
    cells = [str(c).ljust(w) if a == "left" else str(c).rjust(w) for c, w, a in zip(row, widths, aligns, strict=True)]
    return (" " * GAP).join(cells).rstrip()


def wrap_cell(text: str, cap: int) -> str:
    """`text` in lines of at most `cap` characters, broken at spaces; a word longer than a
    line (a dotted key, a path) is broken after a dot, slash or underscore where it has one
    ("gpu.nvlink_errors_warn." / "crc_flit_errors"), else cut."""
    lines: list[str] = []
    for line in text.split("\n"):
        lines.extend(_wrap_words(line.split(), cap) or [""])
    return "\n".join(lines)


_BREAK_AFTER = "/._-,:="  # where a long word reads best split


def _wrap_words(words: list[str], cap: int) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in words:
        if len(word) > cap:
            if current:
                lines.append(current)
            pieces = _pieces(word, cap)
            lines.extend(pieces[:-1])
            current = pieces[-1]
        elif not current:
            current = word
        elif len(current) + 1 + len(word) <= cap:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def _pieces(word: str, cap: int) -> list[str]:
    """`word` cut into pieces of at most `cap` characters, each after a _BREAK_AFTER
    character where one falls in the second half of the piece."""
    pieces = []
    while len(word) > cap:
        at = max(word.rfind(c, cap // 2, cap) for c in _BREAK_AFTER) + 1
        at = at if at > 0 else cap
        pieces.append(word[:at])
        word = word[at:]
    return [*pieces, word]


def wrap_line(text: str, width: int | None, indent: str = "  ") -> str:
    """One line of prose fitted to `width` (its continuation lines indented); as it is where
    no width is asked."""
    if width is None or len(text) <= width:
        return text
    return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False)) or text
