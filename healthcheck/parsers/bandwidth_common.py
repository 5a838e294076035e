"""Bandwidth facts every collective test produces alike: nccl-tests (text or JSON) and
hc's own torch sweep both become `BandwidthSample`s, so thresholds, peer comparison and
reports treat them the same way (metric `busbw_gbytes_per_s` per collective and size).

The bus-bandwidth factors are nccl-tests' (`GetBw` in its src/*.cu; doc/PERFORMANCE.md):
busbw = algbw x factor(n ranks). n = 1 gives 0 for the reducing collectives, which is
why a one-rank run reports "Avg bus bandwidth 0" and must not be judged as slow.
"""

from __future__ import annotations

from typing import Literal, Optional

import msgspec

# the names hc uses (nccl-tests' binaries are <name>_perf)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall",
               "reduce", "sendrecv", "gather", "scatter", "hypercube", "alltoallv")

Placement = Literal["out-of-place", "in-place"]


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw for `collective` over `ranks` ranks (nccl-tests' formulas)."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, not {ranks}")
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter"):
        return (ranks - 1) / ranks
    if collective in ("broadcast", "reduce", "sendrecv", "hypercube"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")


class BandwidthSample(msgspec.Struct, frozen=True, omit_defaults=True):
    """One measured size of one collective: what a threshold is judged against."""

    collective: str  # one of COLLECTIVES
    size_bytes: int  # nccl-tests' `size` column: max(send, recv) bytes
    busbw_gbytes_per_s: float
    algbw_gbytes_per_s: float
    time_us: float
    ranks: int
    placement: Placement = "out-of-place"
    wrong: Optional[int] = None  # elements that failed validation; None when not checked (-c 0, N/A)
    dtype: str = "float"
    redop: Optional[str] = None
    # per-rank times in microseconds where the tool reports them (torch sweep; nccl-tests -I 1)
    rank_times_us: tuple[float, ...] = ()
