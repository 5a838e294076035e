"""A rank outside any collective whose own thread keeps running on the CPU while the
others wait in one: it works through a long phase (a silent compute step, a big shard,
a checksum), it is not stuck. Stuck needs evidence that it does not progress: its stack
unchanged AND its thread using no CPU (blocked in a wait, a lock, a read, a sleep).

A live look of a second or a few cannot tell a 20 s compute phase from a loop that never
ends: both run, both log nothing, both keep the others waiting. Precision first: such a
rank is named by no rule; the diagnosis says it is busy, where, for how long it was seen
so and what the others wait in, and that a later look tells (a rank still there, still
running, minutes later is a loop to look at). CPU time is the kernel's count for the
rank's own thread (motion.RankMotion.running, cpuwork.runs_throughout); without it (a
saved dump, a node that would not let /proc be read) nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.analysis import Analysis, stack_source
from healthcheck.diagnose.findings import Evidence, job_finding
from healthcheck.diagnose.motion import JobMotion
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, rank_words


def working_ranks(groups: Sequence[StackGroup], motion: JobMotion | None) -> tuple[int, ...]:
    """Ranks outside any collective (their last stack and every sample since it last
    changed) whose own thread ran over the look."""
    if motion is None:
        return ()
    out: list[int] = []
    for g in groups:
        if g.collective is not None:
            continue
        out.extend(r for r in g.ranks if (m := motion.ranks.get(r)) is not None and m.outside and m.running)
    return tuple(sorted(out))


def _waiting(groups: Sequence[StackGroup], motion: JobMotion) -> tuple[tuple[int, ...], str]:
    """The ranks that wait, still, in a collective, and that collective."""
    ranks: list[int] = []
    where = ""
    for g in groups:
        if g.collective is None:
            continue
        still = [r for r in g.ranks if (m := motion.ranks.get(r)) is None or not m.moved]
        if still:
            ranks.extend(still)
            where = where or (g.collective if g.collective != "wait" else "a collective's wait")
    return tuple(sorted(ranks)), where


def _hosts(col: Collected, ranks: Sequence[int]) -> str:
    names = sorted({x.host for r in ranks if (x := col.evidence.ranks.get(r)) is not None and x.host})
    return f" on {','.join(names[:4])}" if names else ""


def busy_progress(col: Collected, out: Analysis) -> None:
    """See the module's docstring: a progressing finding naming no rank, and a note."""
    motion = out.motion
    if motion is None or any(f.ranks for f in out.findings) or any(f.cls == "progressing" for f in out.findings):
        return
    busy = working_ranks(out.groups, motion)
    waiting, collective = _waiting(out.groups, motion)
    if not busy or not waiting:
        return
    label = next((g.label for g in out.groups if set(g.ranks) & set(busy)), "its own code")
    seen = min(motion.ranks[r].span_s for r in busy)
    cpu = [motion.ranks[r].cpu_s for r in busy]
    used = f"its thread used {min(c for c in cpu if c is not None):.1f} s of CPU" if any(
        c is not None for c in cpu) else "its thread ran"
    verb = "is" if len(busy) == 1 else "are"
    words = (f"{rank_words(busy)}{_hosts(col, busy)} {verb} busy in {label} for {seen:.1f} s ({used} in no "
             f"collective); {rank_words(waiting)} wait{'s' if len(waiting) == 1 else ''} in {collective}")
    out.notes.append(words)
    items = [Evidence(source=stack_source(col.evidence.ranks.get(r)), rank=r,
                      text=f"rank {r}: outside any collective, its thread ran: {motion.ranks[r].cpu_s} s of CPU "
                           f"over {motion.ranks[r].span_s:.1f} s ({motion.ranks[r].samples} samples)")
             for r in busy[:16]]
    out.findings.append(job_finding(
        cls="progressing", confidence="low", evidence=tuple(items),
        summary=f"progressing: {words} ({motion.describe()}): working, not stuck (its thread runs; a stuck rank's "
                "stack stands still and uses no CPU); look again if it stays there"))
