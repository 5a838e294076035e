"""The ranks whose NCCL communicator of the whole world the text shows aborted
(`comm 0x.. rank R nranks N ... - Abort START|COMPLETE`, NCCL 2.x's INFO line).

torch aborts a rank's communicators when that rank's own watchdog saw its work fail or time
out, or an error from a peer, and then takes the process down ("To avoid data inconsistency,
we are taking the entire process down"); a rank busy elsewhere, with no work pending, has
nothing for its watchdog to fail and aborts nothing. So a rank whose world communicator
aborted ended with the failure the others timed out in: its missing timeout line is the
paste's cut (an excerpt of interleaved output), never evidence that it did not enter the
collective (postmortem.py's quiet ranks).
"""

from __future__ import annotations

from healthcheck.diagnose.sources import Collected


def aborted_ranks(col: Collected) -> set[int]:
    """Ranks whose world-sized communicator ended in an abort (module doc)."""
    out: set[int] = set()
    for n in col.evidence.nccl_logs:
        if n.log is None or not n.log.comms:
            continue
        world = max(c.nranks or 0 for c in n.log.comms)
        out |= {c.rank for c in n.log.comms
                if c.end == "abort" and c.nranks == world and c.rank is not None}
    return out


__all__ = ["aborted_ranks"]
