"""Collective-mismatch on the stacks where every rank waits in a collective but no side is a
strict majority (stackrules.stack_mismatch's minority finds none, or several sides).

* another root: a broadcast, reduce, scatter or gather names its root (`src`/`dst`, in
  the call's arguments, which py-spy `--locals` shows in torch's `_exception_logger`
  wrapper: roots.py reads it, for a saved dump and for each live sample). Every rank
  must name the same root. Where ranks wait in the same such call at one call site with
  different roots, the ranks whose root only a strict minority of
  the ranks waiting in that op name are the odd ones: `rank 2 broadcasts from src 2`
  while ranks 0, 1 and 3 name src 0 (two of them in the next broadcast, which the wrong
  root let them reach). Without such a minority (two ranks, two roots) none is named.
* behind in the program: all stacks share their outer frames (`main`, `train_step`) and
  differ in the line of one shared function. The ranks whose line there comes before
  every other rank's wait in a collective all their peers went past: they called one
  collective more than the others (an added barrier), which their peers' next
  collective paired with; the ranks between wait for them. Named only where those ranks
  are a strict minority of three or more sides (a skipped collective leaves most ranks
  behind: the minority rule names the one ahead), and not where extracall.py names the
  side with the extra call or ranks wait in send/recv (p2p.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from healthcheck.diagnose.p2p import P2P_OPS
from healthcheck.diagnose.progorder import lines_where_they_part
from healthcheck.diagnose.roots import ROOTED
from healthcheck.diagnose.stacks import StackGroup, rank_words

_FRAME = re.compile(r"^(.{1,300}) \((.{1,500}):(\d{1,9})\)$")


def other_root(groups: Sequence[StackGroup], roots: Mapping[int, int]) -> tuple[tuple[int, ...], str] | None:
    """(odd ranks, why) where ranks at one call site of a rooted op disagree on its root
    and a strict minority of that op's waiting ranks name the odd root; else None."""
    for g in groups:
        mine = {r: roots[r] for r in g.ranks if r in roots}
        if g.collective not in ROOTED or len(set(mine.values())) < 2:
            continue
        waiting = {r: roots[r] for x in groups if x.collective == g.collective for r in x.ranks if r in roots}
        counts = Counter(waiting.values())
        (top, n_top), *rest = counts.most_common()
        if rest and rest[0][1] == n_top or n_top < 2:
            return None
        odd = tuple(sorted(r for r, root in waiting.items() if root != top))
        theirs = ", ".join(sorted({f"{ROOTED[g.collective]} {waiting[r]}" for r in odd}))
        why = (f"{rank_words(odd)} {_verb(odd)} in {g.collective} with {theirs} where "
               f"{rank_words(sorted(r for r in waiting if r not in odd))} name {ROOTED[g.collective]} {top} "
               "(a collective's root must be the same on every rank)")
        return odd, why
    return None


def _verb(ranks: Sequence[int]) -> str:
    return "waits" if len(ranks) == 1 else "wait"


def _chain(group: StackGroup) -> list[tuple[str, str, int]]:
    """The group's frames, outermost first, as (function, file, line)."""
    out = []
    for text in reversed(group.frames):
        m = _FRAME.match(text)
        if m is None:
            return []
        out.append((m.group(1), m.group(2), int(m.group(3))))
    return out


def program_lines(groups: Sequence[StackGroup]) -> tuple[dict[int, int], str]:
    """Each stack group's line where the groups' stacks part (lines_where_they_part)."""
    return lines_where_they_part([_chain(g) for g in groups])


def behind(groups: Sequence[StackGroup]) -> tuple[tuple[int, ...], str] | None:
    """(ranks, why) for the ranks behind every other one in the program (see the module's
    docstring), or None."""
    if len(groups) < 3 or any(g.collective is None or g.collective in P2P_OPS for g in groups):
        return None  # point-to-point waits are p2p.py's
    lines, function = program_lines(groups)
    if not lines:
        return None
    first = min(lines.values())
    back = [groups[i] for i, line in lines.items() if line == first]
    ranks = tuple(sorted(r for g in back for r in g.ranks))
    total = sum(len(g.ranks) for g in groups)
    if len(ranks) * 2 >= total:
        return None
    ahead = [g for g in groups if g not in back]
    between = "; ".join(f"{rank_words(g.ranks)} {_verb(g.ranks)} in {g.label}" for g in ahead[:3])
    why = (f"{rank_words(ranks)} {_verb(ranks)} in {back[0].label}, before every other rank in {function} "
           f"(line {first}): its peers went past that call, so it made one collective more (an added call "
           f"their next one paired with); {between}")
    return ranks, why


__all__ = ["behind", "other_root", "program_lines"]
