"""When two ranks' SeqNums can be compared.

A watchdog's `WorkNCCL(SeqNum=N, ...)` counts the calls of ONE process group; a job that runs
several groups (Megatron's tensor, pipeline and data parallel groups) counts each apart, so
two ranks' SeqNums say who is behind only where both count the same group. torch >= 2.3
prints the group (`[PG 3 Rank 0]`, its name); older torch prints none. Where no group is
printed and some rank timed out at two SeqNums or more at once, several groups are in play
(one group's work times out once: the watchdog takes the process down at its first), so an
unlabelled SeqNum may be any of them, and different SeqNums of different ranks are no sign
that the ranks called different collectives.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank
from healthcheck.diagnose.sources import Collected


def seqs_comparable(col: Collected) -> bool:
    """False where the timeouts print no group and a rank timed out at several SeqNums (module doc)."""
    per: dict[int, set[int]] = {}
    unlabelled = False
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for t in f.log.timeouts:
            rank = fact_rank(t, f.rank)
            if rank is None or t.seq is None:
                continue
            per.setdefault(rank, set()).add(t.seq)
            unlabelled = unlabelled or not (t.pg_id or t.pg_name)
    return not (unlabelled and any(len(seqs) > 1 for seqs in per.values()))


__all__ = ["seqs_comparable"]
