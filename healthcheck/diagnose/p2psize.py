"""gloo's size check failed on a message that was no ring chunk and no broadcast: a
point-to-point send (a pipeline stage's activation, `isend`/`irecv`, `batch_isend_irecv`) or
a rooted collective whose members send to the root (`reduce`, `gather`), for mismatch.py.

gloo checks sizes where a message arrives: the rank it aborts is the receiver. In a ring
all_reduce every rank receives from its neighbour (ringsize.py), in a broadcast every
receiver from the source (bcastsize.py); in a point-to-point exchange or a reduce to a root
the receiver's tensor is compared with one sender's, and which of the two holds the odd size
the receiver's abort does not say. Reading such a report as a ring's chunk or a broadcast
names the wrong rank (the receiver gloo aborted, or a ring neighbour that sent nothing).

The peers' tracebacks say what they were in when the receiver died: a rank whose error was
raised in `reduce`, `gather`, `send` or `isend` (the c10d function its traceback passes
through) sent toward a root or a peer; a rank whose connection error was raised in its own
code's wait with no c10d function and no library frame (`work.wait()` of an isend/irecv or a
`batch_isend_irecv`) was in a point-to-point exchange, direction unknown. Where any peer was
in either, the report is read as neither a ring nor a broadcast. The one rank in a sending op
is named as the sender (its tensor or dtype differs from what the receiver expects: gloo
cannot tell, and the rank that sent is where the tensor was made); where that is not one
rank, or the only exchange is a wait of unknown direction, no rank is named.
"""

from __future__ import annotations

from healthcheck.diagnose.logfacts import RankError, first_errors
from healthcheck.diagnose.ringsize import SizeReport
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

_SENDING = ("reduce", "gather", "send", "isend")  # c10d functions whose caller sends toward a root or a peer
_P2P = ("send", "isend", "recv", "irecv", "batch_isend_irecv")
_PEER_LOST = ("Connection closed by peer", "Connection reset", "Read error", "Timed out waiting")


def _work_wait(e: RankError) -> bool:
    """A peer's connection error raised in its own code's wait, no c10d function and no
    library between (an isend/irecv's Work)."""
    return e.victim and not e.collective and not e.library and bool(e.frame) and any(
        w in e.message for w in _PEER_LOST)


def exchange_peers(col: Collected, sizes: list[SizeReport]) -> tuple[list[int], list[int]]:
    """(ranks in a sending op, ranks in a point-to-point exchange of any direction) among
    the ranks that reported no size error."""
    reporters = {s.rank for s in sizes}
    sending: list[int] = []
    exchanging: list[int] = []
    for r, e in sorted(first_errors(col).items()):
        if r in reporters:
            continue
        if e.collective in _SENDING:
            sending.append(r)
        if e.collective in _P2P or _work_wait(e):
            exchanging.append(r)
    return sending, exchanging


def not_ring_nor_broadcast(col: Collected, sizes: list[SizeReport]) -> tuple[tuple[int, ...], str] | None:
    """None where no peer was in a point-to-point exchange or a rooted send; else (the
    sender named, or none, and why) (see the module's docstring)."""
    sending, exchanging = exchange_peers(col, sizes)
    if not sending and not exchanging:
        return None
    receivers = sorted({s.rank for s in sizes})
    got = f"{rank_words(receivers)} received {sizes[0].received} bytes where it expected {sizes[0].expected}" \
        if sizes else "gloo aborted the receiving rank (Received data size doesn't match)"
    peers = {*sending, *exchanging}
    ops = sorted({e.collective or "a Work's wait" for r, e in first_errors(col).items() if r in peers})
    where = f"{rank_words(sorted(peers))} waited in {', '.join(ops)}"
    if len(sending) == 1:
        return (sending[0],), (f"{got}; {where}: the message was rank {sending[0]}'s, sent to a root or a peer "
                               f"(no ring chunk, no broadcast), so rank {sending[0]}'s tensor is the odd one")
    return (), (f"{got}; {where}: a point-to-point or rooted message (no ring chunk, no broadcast), and which "
                "rank sent it the text does not say")


__all__ = ["exchange_peers", "not_ring_nor_broadcast"]
