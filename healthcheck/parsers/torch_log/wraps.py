"""The width a terminal hard-wrapped a torch log at, where the line layer's evidence
(`lines.terminal_width`: two middle pieces as wide as each other) is too little: one
message wrapped alone onto two or three lines.

The evidence here is torch's own words: a line exactly as wide as the widest line of the
text (a terminal prints nothing wider), not padded, ends inside one of torch's fixed
phrases and the next line (its own, unlabelled) starts with the rest of that phrase
(`Watchdog caught collective op` / `eration timeout: WorkNCCL(...`). An editor's reflow
never cuts a word, and a line that ends at the widest width by chance does not end in the
first part of a phrase the next line finishes; the cut must leave at least MIN_PART
characters of the phrase on each side.

Linear: each line of the widest width is tested once, against the phrases whose characters
on either side of a cut are that line's last and the next line's first (a table built once).
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.parsers.lines import WRAP_MIN, Line, terminal_width

MIN_PART = 3  # characters of a phrase on each side of the cut

# torch's fixed phrases, as its watchdog and abort messages print them (corpus/torch-watchdog)
PHRASES = (
    "Watchdog caught collective operation timeout: WorkNCCL(",
    "Process group watchdog thread terminated with exception: ",
    "milliseconds before timing out.",
    "Some NCCL operations have failed or timed out.",
    "we are taking the entire process down.",
    "Heartbeat monitor timed out!",
)


def _cuts() -> dict[tuple[str, str], tuple[tuple[str, int], ...]]:
    """(last character before a cut, first after it) -> the (phrase, cut) pairs it may be."""
    table: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for phrase in PHRASES:
        for cut in range(MIN_PART, len(phrase) - MIN_PART + 1):
            table.setdefault((phrase[cut - 1], phrase[cut]), []).append((phrase, cut))
    return {key: tuple(value) for key, value in table.items()}


_CUTS = _cuts()


def _width(line: Line) -> int:
    return len(line.raw.rstrip("\r"))


def _piece_of(before: Line, line: Line) -> bool:
    """`line` may be the next piece of `before`'s message: a line of its own with words, no
    label, stamp or prompt of its own (as `lines.hard_unwrapped` takes a piece)."""
    return line.number != before.number and not line.labels and not line.noise and bool(line.text.strip())


def splits_a_phrase(head: str, rest: str) -> bool:
    """`head` ends inside one of torch's PHRASES and `rest` starts with what is left of it."""
    if not head or not rest:
        return False
    return any(head.endswith(phrase[:cut]) and rest.startswith(phrase[cut:])
               for phrase, cut in _CUTS.get((head[-1], rest[0]), ()))


def wrap_width(lines: Sequence[Line]) -> int:
    """`lines.terminal_width`, else the widest width where a line that wide cuts one of
    torch's phrases the next line finishes (module doc); 0 where neither."""
    width = terminal_width(lines)
    if width or not lines:
        return width
    widest = max(_width(line) for line in lines)
    if widest < WRAP_MIN:
        return 0
    for before, line in zip(lines, lines[1:], strict=False):
        if (_width(before) == widest and not before.raw.rstrip("\r").endswith("  ") and _piece_of(before, line)
                and splits_a_phrase(before.text, line.text)):
            return widest
    return 0
