"""A process group some ranks create while a member of it went past: new_group called in
another order (or not at all) on that member.

torch names a group by how many groups the process made before it (`group_name` "1", "2",
..., unless hashed names were asked for), and its members meet in the store under that
name. A rank that builds the same groups in another order gives a group a name its peers
give another one; the members that come to the name later wait in
`_new_process_group_helper` for a peer that is already past every new_group (captured
live with torch 2.13, tests/fixtures/diagnose/rules5 `grouporder`: rank 1 built the odd
ranks' group first, rank 3 second; rank 3 waited in new_group([1, 3]) for rank 1, which
was in the training loop). The rank that waits looks stuck; the member that is past is
the one out of order.

Read from py-spy `--locals` (newgroup.py: the ranks of the group and its name are the
arguments of torch's new_group frames). Named: the ranks that wait to create a group
under a name its other waiting members do not give it (captured w5: the rank that built
the odd ranks' group first waits for the even ranks' as "2", they as "1"); else the one
member of a group others wait to create that is itself past every new_group. Where
several members are past (captured w4: the out-of-order rank's group took the other
group's name, and a member of that one met it there and went on too), none is named.
Without locals nothing is named here.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import Analysis, minority
from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.findings import Evidence, job_finding
from healthcheck.diagnose.newgroup import group_created, in_new_group
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import main_thread, rank_words


def creating(x: RankEvidence) -> tuple[tuple[int, ...], str] | None:
    """(the group's ranks, its name) of the group a rank waits to create, from its last
    live sample or its saved dump; None outside new_group or without locals."""
    if x.samples:
        last = x.samples[-1]
        return (last.creating, last.creating_name) if last.creating else None
    thread = main_thread(x.stack) if x.stack is not None else None
    return group_created(thread.frames) if thread is not None else None


def past_new_group(x: RankEvidence) -> bool:
    """A rank whose stack is known and in no new_group frame."""
    if x.samples:
        return not x.samples[-1].in_new_group
    thread = main_thread(x.stack) if x.stack is not None else None
    return thread is not None and not in_new_group(thread.frames)


def renamed(waiting: dict[int, tuple[tuple[int, ...], str]]) -> tuple[tuple[int, ...], str] | None:
    """Ranks that wait to create one group (the same ranks) under a name a minority of its
    waiting members gives it: they made it at another place in their order of groups."""
    by_members: dict[tuple[int, ...], dict[int, str]] = {}
    for r, (members, name) in waiting.items():
        if name:
            by_members.setdefault(members, {})[r] = name
    for members, names in by_members.items():
        pick = minority(names)
        if pick is not None:
            odd, top, theirs = pick
            return odd, (f"{rank_words(odd)} wait{'s' if len(odd) == 1 else ''} to create the group of "
                         f"{rank_words(members)} as group {theirs!r} where its other members wait in it as group "
                         f"{top!r}: {rank_words(odd)} created its groups in another order")
    return None


def went_past(col: Collected, waiting: dict[int, tuple[tuple[int, ...], str]]) -> dict[int, list[int]]:
    """member -> the ranks waiting to create a group of it, for members in no new_group."""
    past: dict[int, list[int]] = {}
    for r, (members, _) in waiting.items():
        for m in members:
            x = col.evidence.ranks.get(m)
            if m != r and x is not None and past_new_group(x):
                past.setdefault(m, []).append(r)
    return past


def group_order(col: Collected, out: Analysis) -> None:
    """Name the rank out of order in the groups other ranks wait to create (see the module's
    docstring): one named a group differently; else the one member past every new_group."""
    ranks = col.evidence.ranks
    waiting = {r: found for r, x in ranks.items() if (found := creating(x)) is not None}
    if not waiting:
        return
    items = [Evidence(source=(ranks[w].sources or ["live collection"])[0], rank=w,
                      text=f"rank {w} waits in new_group to create the group of {list(members)}"
                           + (f" (name {name!r})" if name else ""))
             for w, (members, name) in sorted(waiting.items())[:8]]
    found = renamed(waiting)
    if found is not None:
        out.findings.append(job_finding(cls="collective-mismatch", ranks=found[0], confidence="medium",
                                        evidence=tuple(items), summary=found[1]))
        return
    past = went_past(col, waiting)
    if not past:
        return
    odd = tuple(sorted(past))
    waiters = sorted({w for ws in past.values() for w in ws})
    named = odd if len(odd) == 1 else ()
    who = rank_words(odd) if named else f"one of {rank_words(odd)} (each went past a group another waits in)"
    out.findings.append(job_finding(
        cls="collective-mismatch", ranks=named, confidence="medium", evidence=tuple(items),
        summary=f"{rank_words(waiters)} wait{'s' if len(waiters) == 1 else ''} in new_group to create a process "
                f"group with {rank_words(odd)}, which went past every new_group: {who} created its groups in "
                "another order (or not this one), so a group's name means another group there and its members "
                "never meet" + ("" if named else "; which one the stacks do not say")))


__all__ = ["creating", "group_order", "past_new_group", "renamed", "went_past"]
