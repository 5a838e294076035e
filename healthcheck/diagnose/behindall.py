"""Every rank timed out, each side of them in another collective and none a majority: the
one rank whose traceback stops first in the function every traceback shares made one
collective more, and the others went on past it.

postmortem.py names a minority side; with no majority (world 3 in three collectives: a
checkpoint's barrier on one rank, the step's broadcast and all_reduce on the others) it
named none. Collectives match in program order: a peer that is further along the shared
function than a rank (its line there comes later) went past the call that rank waits in,
without it, so that rank called a collective its peers did not. progorder.py orders them.
Named only where one rank alone is first, the others are at two or more later places (one
place shared by all of them would be a majority, or at world 2 a skip on either side that
the text cannot tell from an extra call) and at least three ranks timed out. Captured with
torch 2.13 (tests/fixtures/diagnose/rules8): a checkpoint barrier on another interval on
one rank of 3; the root of the step's broadcast waits sending to it, the third rank took
the broadcast and waits in the all_reduce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healthcheck.diagnose.progorder import first_in_program
from healthcheck.diagnose.stacks import rank_words


def earliest_alone(chains: Mapping[int, Sequence[str]], sides: Mapping[int, str]) -> tuple[tuple[int, ...], str] | None:
    """(the rank first in program order, why) where the module's conditions hold; else None.
    chains: rank -> its traceback's own frames, outermost first; sides: rank -> where it
    timed out."""
    if len(sides) < 3 or set(chains) != set(sides) or not all(chains.values()):
        return None
    found = first_in_program(chains)
    if found is None or len(found[0]) != 1:
        return None
    (back,), function, line = found
    later = {sides[r] for r in sides if r != back}
    if len(later) < 2 or sides[back] in later:
        return None
    others = sorted(r for r in sides if r != back)
    return (back,), (f"rank {back} timed out in {sides[back]}, before every other rank in {function} (line {line}): "
                     f"{rank_words(others)} went on past that call without it, each to a later collective, so it "
                     "called one its peers did not")


__all__ = ["earliest_alone"]
