"""Ranks still in different collectives with no side a strict minority (world size 2, or
two halves): the ranks called different collectives, and the stacks alone cannot say
which side is off. A rank that skipped the collective its peer waits in is past it (it
sits in the next one); a rank that added one sits in that extra call while its peer went
on: the two leave the same pair of stacks. Without the job's collective sequence (Flight
Recorder, the desync report, which rank entered which seq) hc does not guess: the class,
both sides, and no rank named.
"""

from __future__ import annotations

from collections.abc import Sequence

from healthcheck.diagnose.analysis import Analysis, stack_evidence
from healthcheck.diagnose.findings import job_finding
from healthcheck.diagnose.p2p import P2P_OPS
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup, rank_words

_NOT_HERE = P2P_OPS | {"wait", "backward"}


def no_majority(col: Collected, out: Analysis, groups: Sequence[StackGroup]) -> None:
    """Every group waits, still, in a collective, the sides differ and none is a strict
    minority: a collective-mismatch naming no rank."""
    sides = {f"{g.collective} <- {g.function or '?'}" for g in groups}
    if len(sides) < 2 or any(g.collective is None or g.collective in _NOT_HERE for g in groups):
        return  # point-to-point (p2p.py), or a wait whose op the stack does not say: other rules
    sizes = sorted(len(g.ranks) for g in groups)
    if sizes[0] * 2 < sum(sizes):
        return  # a strict minority: stack_mismatch names it
    words = "; ".join(f"{rank_words(g.ranks)} in {g.label}" for g in groups[:4])
    out.findings.append(job_finding(
        cls="collective-mismatch", confidence="low", evidence=tuple(stack_evidence(col, g) for g in groups[:8]),
        summary=f"the ranks called different collectives: {words}; no side is a minority, and the stacks alone "
                "cannot tell a skipped collective (the rank past it) from an added one (the rank in it): no rank "
                "named (rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL, or keep Flight Recorder dumps, to see who is off)"))
