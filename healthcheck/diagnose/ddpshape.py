"""DDP's parameter shape check (shape-mismatch): a rank whose model differs.

DistributedDataParallel's constructor compares every parameter's shape with process 0's
and raises on each rank whose own differs: `RuntimeError: [3]: params[0] in this process
with sizes [48, 16] appears not to match sizes of the same param in process 0.` (torch 2.13,
captured here). That exception is the rank's own and ends it (dead-rank names it), but
what went wrong is its model's shape: the finding is a shape-mismatch of the raising
ranks. Where every rank but the compared process raised, with three ranks or more, the
compared process is the odd one and is named instead. At world 2 the count cannot tell
which side is odd; the raising rank is named with low confidence.
"""

from __future__ import annotations

import re

from healthcheck.diagnose.analysis import world_of
from healthcheck.diagnose.findings import Confidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import RankError, rank_errors
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

_PARAM_SHAPE = re.compile(r"params\[(\d{1,9})\] in this process with sizes (\[[\d, ]{0,200}\]) appears not to match "
                          r"sizes of the same param in process (\d{1,9})")


def _checks(col: Collected, ranks: tuple[int, ...]) -> dict[int, tuple[RankError, re.Match[str]]]:
    """rank -> its own first error and the shape check it reports; {} unless every rank does."""
    errors = rank_errors(col)
    out: dict[int, tuple[RankError, re.Match[str]]] = {}
    for r in ranks:
        own = next((e for e in errors.get(r, []) if not e.victim), None)
        m = _PARAM_SHAPE.search(own.message[:2000]) if own is not None else None
        if own is None or m is None:
            return {}
        out[r] = (own, m)
    return out


def _odd_ones(col: Collected, raised: tuple[int, ...], against: set[int]) -> tuple[tuple[int, ...], Confidence]:
    """The odd ranks and the confidence: the compared process where every other rank raised."""
    seen, world = world_of(col)
    heard = seen | set(rank_errors(col)) | {r for f in col.evidence.torch_logs if f.log is not None
                                            for r in f.log.ranks if r is not None}
    size = max(world or 0, len(heard), max(heard, default=-1) + 1)
    if len(against) == 1 and size >= 3 and set(raised) | against == set(range(size)):
        return tuple(against), "medium"
    return raised, "low" if size <= 2 else "high"


def param_shape(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """The dead-rank finding as DDP's shape mismatch where its ranks' own errors are that
    check (see the module's docstring); `dead` unchanged otherwise."""
    if dead is None or dead.cls != "dead-rank" or not dead.ranks:
        return dead
    checks = _checks(col, dead.ranks)
    if not checks:
        return dead
    against = {int(m.group(3)) for _, m in checks.values()}
    odd, confidence = _odd_ones(col, dead.ranks, against)
    first, m = checks[dead.ranks[0]]
    raised = rank_words(dead.ranks)
    if odd == dead.ranks:
        why = (f"{raised}'s model differs: DDP compared parameter shapes at its construction and "
               f"{raised}'s params[{m.group(1)}] has sizes {m.group(2)}, unlike process {m.group(3)}'s")
    else:
        why = (f"{rank_words(odd)}'s model differs: every other rank ({raised}) raised DDP's shape check against "
               f"process {m.group(3)} (params[{m.group(1)}]: their sizes {m.group(2)})")
    if confidence == "low":
        why += "; with two ranks the count cannot tell which side is the odd one"
    return job_finding(cls="shape-mismatch", ranks=odd, confidence=confidence, evidence=dead.lines,
                       where=first.frame or dead.where, summary=why)
