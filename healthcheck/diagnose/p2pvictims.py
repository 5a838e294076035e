"""Ranks left waiting on async point-to-point ops while the others wait in a collective.

A rank that times out in the `.wait()` of an isend/irecv's Work (logfacts.rank_waits: op
"wait", no c10d frame) posted its side of the exchange: async sends and receives are posted
together (a ring attention's hop: isend to the next rank, irecv from the one before), so no
order of the calls deadlocks them. Where the majority timed out in a collective (the world
all_reduce after the hops), the minority left in such waits are the victims of a partner
that went on without posting its side, and that partner is among the majority; gloo's
timeout does not say which peer a wait was for, so no rank is named (precision first:
naming the waiters names the victims). Blocking send/recv are not this rule's: two ranks
that each receive first deadlock each other, the minority is then the culprit.
"""

from __future__ import annotations

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import Wait
from healthcheck.diagnose.stacks import rank_words

# point-to-point ops as Wait.key spells them: a Work's `.wait()` with no c10d frame
# (logfacts.rank_waits: "wait"), and the blocking and async send/recv of torch and NCCL
P2P_OPS = frozenset({"wait", "send", "recv", "isend", "irecv", "batchisendirecv"})
ASYNC_WAIT = "wait"  # the `.wait()` of an async op's Work: its side was posted


def is_p2p(w: Wait) -> bool:
    return w.key[0] in P2P_OPS


def left_waiting(waits: dict[int, Wait], odd: tuple[int, ...], top: str, theirs: str,
                 items: tuple[Evidence, ...]) -> JobFinding | None:
    """collective-mismatch naming no rank where every odd rank waited in an async op's
    `.wait()` and the majority in a collective; None otherwise (the minority rule goes on)."""
    if not odd or not all(r in waits and waits[r].key[0] == ASYNC_WAIT for r in odd):
        return None
    majority = [w for r, w in waits.items() if r not in odd]
    if not majority or any(is_p2p(w) for w in majority):
        return None
    return job_finding(
        cls="collective-mismatch", confidence="medium", evidence=items, divergence=top,
        summary=f"{rank_words(odd)} timed out waiting on async point-to-point ops ({theirs}) while the others "
                f"timed out in {top}: they are left waiting by a partner that went on to {top} without "
                f"its send or receive; the timeouts do not say which peer each waited on, so no rank is named")


__all__ = ["ASYNC_WAIT", "P2P_OPS", "is_p2p", "left_waiting"]
