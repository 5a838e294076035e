"""Rule 4, shape-mismatch: a rank whose collective's arguments its own process group refused.

Before a collective exchanges anything, gloo's process group checks the arguments of the
call on the rank that made it (the output list's length against the world, tensor
sizes, types, layouts) and raises there at once: `ProcessGroupGloo::allgather: invalid
output tensor list at index 0 (expected length 3, got 2)` (`ProcessGroupGloo::<op>:
<what is wrong>`, torch 2.13's libtorch_cpu strings and a captured job). Nothing of a
peer is in that error: it is the size of that rank's own arguments, so that rank is the
shape culprit, and its peers, left waiting in the same collective, then fail with
"Connection closed by peer" (collateral, never named).

Where several ranks report such a refusal, all are named (each made the call with
arguments of its own).
"""

from __future__ import annotations

import re

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import RankError, error_evidence, first_errors
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

# `ProcessGroupGloo::allgather: invalid output tensor list ...`: the op, what was refused
_REFUSED = re.compile(r"ProcessGroupGloo::(\w{1,64}): (.{1,300})")
# words of a failure a peer caused (a gloo transport error or a timeout), never an argument check
_PEER_WORDS = ("Connection closed", "Connection reset", "Timed out", "Read error", "preamble", "Received data size")


def refusal(e: RankError) -> tuple[str, str] | None:
    """(op, what was refused) where the rank's error is its process group refusing the
    call's own arguments, else None."""
    m = _REFUSED.search(e.message)
    if m is None or any(w in e.message for w in _PEER_WORDS):
        return None
    return m.group(1), m.group(2).strip()


def refused_arguments(col: Collected) -> JobFinding | None:
    """The shape-mismatch finding for the ranks whose own call was refused, or None."""
    firsts = first_errors(col)
    refused = {r: x for r, x in ((r, refusal(e)) for r, e in firsts.items()) if x is not None}
    if not refused:
        return None
    ranks = sorted(refused)
    items: list[Evidence] = [error_evidence(firsts[r]) for r in ranks]
    victims = sorted(r for r, e in firsts.items() if r not in refused and e.victim)
    items.extend(error_evidence(firsts[r]) for r in victims[:4])
    op, what = refused[ranks[0]]
    collective = firsts[ranks[0]].collective or op
    summary = (f"{rank_words(ranks)} called {collective} with arguments its process group refused before any "
               f"exchange ({op}: {what[:160]}): the size of {'its' if len(ranks) == 1 else 'their'} collective's "
               "arguments differs from its peers'")
    if victims:
        summary += f"; {rank_words(victims)} failed after it in the same collective (peer errors): collateral"
    return job_finding(cls="shape-mismatch", summary=summary, confidence="high", ranks=ranks,
                       evidence=tuple(items[:20]), where=firsts[ranks[0]].frame)


__all__ = ["refusal", "refused_arguments"]
