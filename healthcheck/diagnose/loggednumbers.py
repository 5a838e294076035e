"""What each rank logged about its own sizes, to tell which of the two ranks in one gloo
size report holds the odd tensor.

gloo's size check (`op.preamble.length <= op.nbytes. R vs E`) gives two ranks' sizes, the
receiver's and its sender's, and fails wherever the larger chunk arrives: one report alone
never says whether the sender's tensor grew or the receiver's shrank (ringsize.py). A job
often logs the size it is about to exchange, the same line on every rank (`sharded 1 layer:
257 of 768 params here`): where every rank logged a line of one template and all but one
logged the same integer in one place, that one rank's own size is the odd one. It is named
only where it is one of the report's two ranks and its number is off the way the report
says: larger for the sender (its chunk arrived too large), smaller for the receiver.

Read from each rank's own lines (a `[rankN]:`-style label, or the file the rank's output is
in), outside tracebacks, error lines and warnings, first occurrence per template; integers
only (not a decimal's digits, nor a clock's `05:01:02`). Captured with torch 2.13:
tests/fixtures/diagnose/rules10 (`padlog`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from healthcheck.parsers.lines import HOST_SAMPLE, Line, host_labelled, read_lines

TEMPLATES_MAX = 512  # templates kept per rank (a log's first ones)
TEMPLATE_CHARS = 200
NUMBERS_MAX = 16  # integers read per line
_INT = re.compile(r"(?<![\d.:\w])\d{1,12}(?![\d.:])")
_DIGITS = re.compile(r"\d{1,64}")  # in the template every digit run is one (`[r2/3]`: the rank's own name too)
_SKIP = ("Error", "error", "Exception", "Traceback", "Warning", "warn", "Timed out", "timeout", "terminate")

Logged = dict[int, dict[str, tuple[int, ...]]]  # rank -> template -> its integers, first time logged


def _template(text: str) -> tuple[str, tuple[int, ...]] | None:
    if not text or text[:1] in " \t" or any(w in text for w in _SKIP):
        return None
    numbers = tuple(int(n) for n in _INT.findall(text)[:NUMBERS_MAX])
    return (_DIGITS.sub("#", text)[:TEMPLATE_CHARS], numbers) if numbers else None


def same_reading(text: str, torch_lines: Sequence[Line]) -> bool:
    """Whether the torch log parser's lines of `text` (torch_log.read_torch_lines) are the
    ones `read_lines(text, records=True)` gives, so that the text is read once: they are
    unless the parser took a parallel shell's hosts off (host_labelled, decided on the first
    lines), glued one process's mpirun-tagged pieces back or took a viewer's column before
    them (`retagged`, `column`), or cut the last word of a text inside it (`cut-end`); a
    CR-split text is not judged."""
    if "\r" in text or any("cut-end" in line.repairs for line in torch_lines[-4:]):
        return False
    if any("retagged" in line.repairs or "column" in line.repairs for line in torch_lines):
        return False
    return not host_labelled(text.split("\n", HOST_SAMPLE)[:HOST_SAMPLE])


def read_logged(text: str, file_rank: int | None, into: Logged, lines: Iterable[Line] | None = None) -> None:
    """Each rank's templated lines of `text` into `into` (the first time each is logged).
    `lines`: `read_lines(text, records=True)` read already (same_reading)."""
    for line in read_lines(text, records=True) if lines is None else lines:  # a JSON log's records as lines
        rank = line.global_rank if line.global_rank is not None else file_rank
        if rank is None or line.noise:
            continue
        text = line.text.rstrip()
        seen = into.setdefault(rank, {})
        if len(seen) >= TEMPLATES_MAX or _DIGITS.sub("#", text)[:TEMPLATE_CHARS] in seen:
            continue  # a template logged before (its first numbers kept), or no room: nothing to read
        t = _template(text)
        if t is not None:
            seen[t[0]] = t[1]


def merge_logged(into: Logged, part: Logged) -> None:
    """One text's `read_logged` (read into an empty Logged) added to `into`, what the texts
    before it logged: exactly as reading the text into `into` would (each rank's templates
    the first time logged, TEMPLATES_MAX a rank). A template of the text is taken where
    `into` lacks it and has room; `part` holds the text's first TEMPLATES_MAX of a rank,
    enough: with k of them in `into` already, the first TEMPLATES_MAX - k that are new
    to it are among those. Ranks keep the order of their first line."""
    for rank, templates in part.items():
        seen = into.setdefault(rank, {})
        for template, numbers in templates.items():
            if len(seen) >= TEMPLATES_MAX:
                break
            seen.setdefault(template, numbers)


def _odd_one(values: dict[int, int]) -> tuple[int, int, int] | None:
    """(the one rank off, its value, the others' one value), where every other rank agrees."""
    counts = Counter(values.values())
    if len(counts) != 2:
        return None
    (top, n), (other, one) = counts.most_common()
    if one != 1 or n < 2:
        return None
    return next(r for r, v in values.items() if v == other), other, top


def _offs(logged: Logged, ranks: set[int]) -> list[tuple[int, int, int, str]]:
    """(rank, its value, the others', template) for each integer that one rank alone logged
    otherwise, in a template every rank of `ranks` logged with as many integers."""
    out = []
    templates = set.intersection(*(set(logged.get(r, {})) for r in ranks))
    for t in sorted(templates):
        rows = {r: logged[r][t] for r in ranks}
        if len({len(v) for v in rows.values()}) != 1:
            continue
        for i in range(len(next(iter(rows.values())))):
            odd = _odd_one({r: v[i] for r, v in rows.items()})
            if odd is not None:
                out.append((*odd, t))
    return out


def logged_odd(logged: Logged, ranks: set[int], receiver: int, sender: int) -> tuple[int, str] | None:
    """The one of (receiver, sender) whose own logged size is off its peers' the way gloo's
    report says (the sender's larger, the receiver's smaller), with the words; None where
    the logs say nothing, or both ways."""
    if len(ranks) < 3 or not all(logged.get(r) for r in ranks):
        return None
    found = {r: (v, top, t) for r, v, top, t in _offs(logged, ranks)
             if (r == sender and v > top) or (r == receiver and v < top)}
    if len(found) != 1:
        return None
    rank, (value, top, template) = next(iter(found.items()))
    return rank, (f"rank {rank} logged {value} where every other rank logged {top} ({template.replace('#', 'N')!r}): "
                  f"its own tensor is the odd one")


def one_rank_off(logged: Logged, ranks: set[int]) -> tuple[int, str] | None:
    """The one rank whose own logged numbers are off every peer's (three ranks or more, every
    one of them logging the same lines), with the words; None where none is, or several."""
    if len(ranks) < 3 or not all(logged.get(r) for r in ranks):
        return None
    offs = _offs(logged, ranks)
    if len({r for r, _, _, _ in offs}) != 1:
        return None
    rank, value, top, template = offs[0]
    return rank, f"rank {rank} logged {value} where every other rank logged {top} ({template.replace('#', 'N')!r})"


__all__ = ["Logged", "logged_odd", "one_rank_off", "read_logged"]
