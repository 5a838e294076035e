"""A launcher's box sentence that a wrap split over lines, joined back before it is read.

A terminal's or an editor's wrap may split a box's one-line sentence anywhere: Open MPI's
`mpiexec noticed that process rank 0 with PID 10313 on node proton exited on ` then
`signal 6 (Aborted).` (field-8), at a blank (a word wrap; the blank kept or dropped) or
inside a word (a character wrap at the terminal's width: `... exi` / `ted on signal 6`). The
other wrap readers need a width (`lines.terminal_width`, wraps.py) or torch's c10 prefix
(reader.word_unwrapped); a launcher's box has neither, but its sentence is fixed: where a
line starts as one of SENTENCES starts (its first word) and does not hold the whole of it,
the next one or two pieces (lines of their own, unlabelled, not blank) are joined to it,
with a blank (a word wrap) or without (a character wrap), and kept joined only where the
join then holds the whole sentence. Anything else stays as it was: a line that starts so by
chance is joined with nothing.

Linear: one head is tried against at most MAX_PIECES pieces, 2**MAX_PIECES joins each.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import product

import msgspec

from healthcheck.parsers.lines import Line
from healthcheck.parsers.torch_log.agent import MPIRUN_SIGNAL, OMPI_LAUNCHERS
from healthcheck.parsers.torch_log.mpiabort import ABORT_HEADS, MPI_ABORT_WHOLE
from healthcheck.parsers.torch_log.mpireports import IMPROPER_EXIT, IMPROPER_HEADS

# (the words a sentence starts with, the whole sentence as its reader matches it): Open MPI's
# sentences hc reads, each whole however a wrap (or Open MPI's own help text, MPI_ABORT's)
# split it
SENTENCES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (OMPI_LAUNCHERS, MPIRUN_SIGNAL),
    (ABORT_HEADS, MPI_ABORT_WHOLE),
    (IMPROPER_HEADS, IMPROPER_EXIT),
)
MAX_PIECES = 2  # lines after the head a wrapped sentence may take
_EVERY_HEAD = tuple(head for heads, _ in SENTENCES for head in heads)


def _sentence(text: str) -> tuple[re.Pattern[str], ...]:
    """The sentences `text` starts as but does not hold whole (one launcher's name starts
    several: `mpirun noticed that ...`, `mpirun has exited due to ...`), else ()."""
    body = text.lstrip()
    if not body.startswith(_EVERY_HEAD):  # most lines: no sentence starts so
        return ()
    if any(whole.match(body) for heads, whole in SENTENCES if body.startswith(heads)):
        return ()
    return tuple(whole for heads, whole in SENTENCES if body.startswith(heads))


def _piece(head: Line, line: Line) -> bool:
    return line.number != head.number and not line.labels and not line.noise and bool(line.text.strip())


def _finished(held: list[Line], wholes: tuple[re.Pattern[str], ...]) -> Line | None:
    """The head with its pieces joined, each cut as a word wrap left it (a blank between) or
    as a character wrap did (none), where one such join holds one of the whole sentences;
    else None."""
    for cuts in product((" ", ""), repeat=len(held) - 1):
        text = held[0].text
        for cut, piece in zip(cuts, held[1:], strict=True):
            text = (text.rstrip() + " " + piece.text.strip()) if cut else (text + piece.text.strip())
        if any(whole.match(text.lstrip()) for whole in wholes):
            return msgspec.structs.replace(held[0], text=text)
    return None


def sentences_unwrapped(lines: Iterator[Line]) -> Iterator[Line]:
    """The lines, each split launcher sentence (module doc) joined into its first line."""
    held: list[Line] = []
    whole: tuple[re.Pattern[str], ...] = ()
    for line in lines:
        if held and whole and _piece(held[-1], line):
            held.append(line)
            joined = _finished(held, whole)
            if joined is not None:
                yield joined
                held = []
            elif len(held) > MAX_PIECES:
                yield from held
                held = []
            continue
        yield from held
        held = []
        whole = _sentence(line.text)
        if whole:
            held = [line]
        else:
            yield line
    yield from held


__all__ = ["MAX_PIECES", "SENTENCES", "sentences_unwrapped"]
