"""Ranks out of step: a size check gloo failed, or collectives that paired wrongly, where
one rank is a step off the others in its own training loop's log.

A rank that skips a collective its peers call (an all_reduce inside an `if` its batch
did not meet) pairs its next call with their skipped one: the sizes may differ and gloo
aborts whichever rank receives the larger chunk, often a peer, not the rank that
skipped; or they match and the ranks go on a step apart. A rank that calls one more does
the same the other way. gloo's report then names two ranks of its ring and cannot say
which one is odd; the step each rank last logged can: captured with torch 2.13 (held-out
jobs of issue 19 and tests/fixtures/diagnose/rules5), the rank that skipped logged one
step more than every peer, the one that made a call more one step fewer.

Named only where every rank the evidence knows logged steps (a loop that logs on rank 0
alone says nothing), the odd ranks are a strict minority one step from the others, and
gloo's size check failed with no rank named: then the class is collective-mismatch (the
ranks called different collectives), not a shape the text cannot pin. Not where a peer's
traceback says the message was a point-to-point one (mismatch.py asks p2psize.py): a
pipeline's stages run steps apart by design (the last stage of another pipeline logs its
next step while the failing exchange is elsewhere), and no collective was skipped.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence, minority
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import ranks_heard
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def last_steps(col: Collected) -> dict[int, tuple[int, Evidence]]:
    """rank -> (the last step it logged, that line as evidence)."""
    out: dict[int, tuple[int, Evidence]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for s in f.log.last_steps:
            rank = fact_rank(s, f.rank)
            if rank is not None:
                out[rank] = (s.step, log_evidence(col, f.source, s.line, f"rank {rank} logged step {s.step}", rank))
    return out


def out_of_step(col: Collected) -> tuple[tuple[int, ...], str, list[Evidence]] | None:
    """(the ranks a step off the others, why, their evidence), or None."""
    steps = last_steps(col)
    if len(steps) < 3 or set(steps) != ranks_heard(col):
        return None
    pick = minority({r: str(s) for r, (s, _) in steps.items()})
    if pick is None:
        return None
    odd, top, theirs = pick
    if len({steps[r][0] for r in odd}) != 1 or abs(int(theirs) - int(top)) != 1:
        return None
    others = next(r for r in steps if r not in odd)
    items = [steps[r][1] for r in odd[:8]] + [steps[others][1]]
    if int(theirs) > int(top):
        why = (f"{rank_words(odd)} logged step {theirs} where every peer's last is step {top}: it ran a step ahead, "
               "so it skipped a collective its peers called and its next call paired with theirs")
    else:
        why = (f"{rank_words(odd)} logged step {theirs} where every peer got to step {top}: it fell a step behind, "
               "so it called a collective more than its peers and theirs paired with it")
    return odd, why, items


__all__ = ["last_steps", "out_of_step"]
