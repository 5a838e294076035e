"""Where in the program ranks are, compared: their stacks or tracebacks share the outer
frames (`main`, `train_step`) and part in the line of one shared function; the line each
is at there orders them. A rank whose line comes before every other rank's waits in a
collective its peers went past (desyncorder.py on stacks, postmortem.py on tracebacks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_OWN = re.compile(r"^(.{1,300}):(\d{1,9}) in (.{1,300})$")  # the torch log parser's own frame


def lines_where_they_part(chains: Sequence[Sequence[tuple[str, str, int]]]) -> tuple[dict[int, int], str]:
    """Chains of (function, file, line), outermost first: each chain's line in the
    outermost function they all share whose line differs between them (its index ->
    line), and that function; empty where they part in different functions first."""
    if len(chains) < 2 or not all(chains):
        return {}, ""
    for depth in range(min(len(c) for c in chains)):
        at = [c[depth] for c in chains]
        if len({(fn, file) for fn, file, _ in at}) > 1:
            return {}, ""
        if len({line for *_, line in at}) > 1:
            return {i: line for i, (*_, line) in enumerate(at)}, at[0][0]
    return {}, ""


def first_in_program(chains: Mapping[int, Sequence[str]]) -> tuple[tuple[int, ...], str, int] | None:
    """rank -> a traceback's own frames, outermost first ("train.py:88 in train_step"): the
    ranks whose line comes first where the chains part, that function and line; None
    where the chains do not share the function they part in."""
    ranks = sorted(chains)
    parsed = []
    for r in ranks:
        chain = [m for m in (_OWN.match(f) for f in chains[r]) if m is not None]
        parsed.append([(m.group(3), m.group(1), int(m.group(2))) for m in chain])
    lines, function = lines_where_they_part(parsed)
    if not lines:
        return None
    first = min(lines.values())
    return tuple(ranks[i] for i, line in lines.items() if line == first), function, first


__all__ = ["first_in_program", "lines_where_they_part"]
