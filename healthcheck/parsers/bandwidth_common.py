"""Bandwidth facts every collective test produces alike: nccl-tests (text or JSON) and
hc's own torch sweep both become `BandwidthSample`s, so thresholds, peer comparison and
reports treat them the same way (metric `busbw_gbytes_per_s` per collective and size).

The bus-bandwidth factors are nccl-tests' (`GetBw` in its src/*.cu; doc/PERFORMANCE.md):
busbw = algbw x factor(n ranks). n = 1 gives 0 for the reducing collectives, which is
why a one-rank run reports "Avg bus bandwidth 0" and must not be judged as slow.
"""

from __future__ import annotations

from typing import Literal

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
    wrong: int | None = None  # elements that failed validation; None when not checked (-c 0, N/A)
    dtype: str = "float"
    redop: str | None = None
    # per-rank times in microseconds where the tool reports them (torch sweep; nccl-tests -I 1)
    rank_times_us: tuple[float, ...] = ()


class BandwidthAttempt(msgspec.Struct, frozen=True, omit_defaults=True):
    """One run of a bandwidth tool on a node (or pair): what it measured and how it ended."""

    argv: tuple[str, ...]
    env: dict[str, str] = {}  # the variables hc set for it (NCCL_*, CUDA_*), echoed in the report
    samples: tuple[BandwidthSample, ...] = ()
    ranks: int = 0  # how many ranks reported (0: unknown)
    expected_ranks: int = 0
    duration_s: float = 0.0
    returncode: int | None = None
    hung: bool = False  # killed at hc's timeout: the last size reached is in last_size_bytes
    last_size_bytes: int | None = None
    wrong: int | None = None  # total elements that failed validation (None: not checked)
    out_of_bounds: int | None = None
    failures: tuple[str, ...] = ()  # the tool's own failure lines (Test NCCL failure ..., Couldn't connect ...)
    misconfigured: str | None = None  # why the run says nothing about the node (lone ranks, launcher refused)
    output_tail: str = ""  # the end of what it printed: evidence for a finding


class BandwidthRun(msgspec.Struct, frozen=True):
    """Every attempt of one collective in one scope (a test is re-run while it falls short)."""

    collective: str
    scope: str  # single_node | ib_loopback | pair
    attempts: tuple[BandwidthAttempt, ...]


class BandwidthRuns(msgspec.Struct, frozen=True, omit_defaults=True):
    """A node's bandwidth tests of one tool; gpus == 0 means there was nothing to test."""

    tool: str  # nccl-tests | torch
    gpus: int
    runs: tuple[BandwidthRun, ...] = ()
