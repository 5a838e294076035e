"""A point-to-point deadlock on the stacks (collective-mismatch): the still ranks that wait
in send/recv while every other still rank waits in a collective.

Two ranks that both receive first (a send/recv pair in the wrong order), or a recv whose
partner never sends, block in `recv`; the others go on to the next collective and wait
there for them. Unlike a collective, a point-to-point op is between its two ranks only,
so the ranks in it are named at any count (the others' collective cannot finish without
them), never where every still rank is in a p2p op (a ring exchange: no side to tell).
The stack mismatch (stackrules.py) wants a strict minority and names none where the
waits split three ways (two in recv, two in a broadcast, two in the all_reduce after it).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import Analysis, stack_evidence
from healthcheck.diagnose.findings import job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.stuck import hosts_of, still_groups

P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"})


def p2p_deadlock(col: Collected, out: Analysis) -> None:
    """Name the still ranks blocked in send/recv while the others wait in collectives."""
    groups = still_groups(out.groups, out.motion)
    if len(groups) < 2 or any(g.collective is None for g in groups):
        return
    if any(g.collective == "wait" for g in groups):
        return  # a Work's wait of an unknown async op (py_spy.hidden_collective): it may be a send/recv too
    p2p = [g for g in groups if g.collective in P2P_OPS]
    others = [g for g in groups if g.collective not in P2P_OPS]
    if not p2p or not others:
        return
    odd = tuple(sorted(r for g in p2p for r in g.ranks))
    ops = sorted({g.collective or "" for g in p2p})
    theirs = sorted({g.collective or "" for g in others})
    out.findings.append(job_finding(
        cls="collective-mismatch", ranks=odd, confidence="medium",
        evidence=tuple(stack_evidence(col, g) for g in [*p2p, *others][:12]),
        where=next((g.where for g in p2p if g.where), ""),
        summary=f"{rank_words(odd)}{hosts_of(col, odd)} wait in point-to-point {'/'.join(ops)} while the others wait "
                f"in {', '.join(theirs)}: a send/recv pair in the wrong order (both receive first) or a recv whose "
                "partner never sends; the others' collective waits for them"))


__all__ = ["P2P_OPS", "p2p_deadlock"]
