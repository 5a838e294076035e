"""A minority timed out in another collective while every other rank timed out waiting on a
gloo send in the all_reduce they share: the minority's messages reached that all_reduce, so
the minority is no rank that stayed out of it, and none is named (for postmortem.py).

gloo's ring all_reduce waits on each round's receive before its send (gloo/allreduce.cc), so a
rank that times out on a send got the data it waited to receive. A rank that never called the
collective leaves the rank that receives from it waiting on that receive (`Timed out waiting
Nms for recv operation`). Where every rank in the majority's all_reduce waits on a send,
none waits for the minority's data there: the minority took part and went past it (the
others' calls then disagree among themselves: another element count on some rank, which no
size check caught), or a later call of theirs paired with the all_reduce under the same tag
(a skipped call). The text does not say which, nor in the first reading whose call differs:
collective-mismatch naming none, said so. gloo's wording only (NCCL's watchdog names no
direction); ring collectives only (all_reduce, reduce_scatter), whose every rank receives.
"""

from __future__ import annotations

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import Wait, first_errors
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

_RING_OPS = ("allreduce", "reduce_scatter", "reduce_scatter_tensor")
_SEND_WAIT = "for send operation"


def _said(col: Collected, waits: dict[int, Wait]) -> dict[int, str]:
    """rank -> its timeout's whole message (a Wait's text is cut short)."""
    firsts = first_errors(col)
    return {r: firsts[r].message if r in firsts else w.text for r, w in waits.items()}


def went_past(col: Collected, waits: dict[int, Wait], odd: tuple[int, ...], top: str, theirs: str,
              items: tuple[Evidence, ...]) -> JobFinding | None:
    """The finding naming none where the module's conditions hold; else None."""
    majority = [r for r in waits if r not in odd]
    if len(majority) < 2 or any(waits[r].key[0] not in _RING_OPS for r in majority):
        return None
    said = _said(col, waits)
    if not all(_SEND_WAIT in said[r] for r in majority):
        return None
    return job_finding(cls="collective-mismatch", confidence="low", evidence=items, divergence=top,
                       summary=f"{rank_words(odd)} timed out in {theirs} while {rank_words(sorted(majority))} timed "
                               f"out in {top}, every one of them waiting on a send, none on a receive: the data of "
                               f"{rank_words(odd)} reached that all_reduce, so {'it' if len(odd) == 1 else 'they'} "
                               "did not stay out of it; either it went through and the others' calls there "
                               "disagree (another element count on some rank), or a later call of its paired with "
                               "it; which rank's call differs the timeouts do not say: rerun with "
                               "TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch compare each call")


__all__ = ["went_past"]
