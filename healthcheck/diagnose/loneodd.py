"""The one rank out of step: where every rank of the job shows which collectives it entered
(a stall report's ready lists, one side per rank) and all ranks but one agree, the one that
differs is the odd rank, whichever side made the extra or the missing call: with three ranks
or more, one rank's single divergence explains the report, the others' would need all of them
to diverge alike. Two ranks split one and one, or several ranks each differing, name no one
(nomajority.py's reading for stacks); nor a rank the report does not show at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping

MIN_WORLD = 3


def lone_odd(sides: Mapping[int, Hashable], world: int) -> int | None:
    """The one rank whose side differs where every other of `world` ranks shares one, else None."""
    if world < MIN_WORLD or set(sides) != set(range(world)):
        return None
    counts = Counter(sides.values())
    if len(counts) != 2:
        return None
    (common, n), (odd, m) = counts.most_common()
    if m != 1 or n != world - 1:
        return None
    return next(r for r, side in sides.items() if side == odd)


__all__ = ["MIN_WORLD", "lone_odd"]
