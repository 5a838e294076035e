"""A busy rank that keeps writing its log is working, not stuck.

A rank outside any collective whose stack moves may be spinning for ever (a loop that
cannot end) or working through a long CPU-bound phase (building an index, tokenizing)
while the others wait for it in a collective. The difference a live look can see: the
working rank reports its progress (a log line every second or so), the spinning one
writes nothing. A log line is small (under ioprogress' IO_WORK_BYTES, which counts work,
not lines), so this counts any rise of the rank's own thread's I/O, and asks for rises in
at least two sample intervals, the last one recent (no longer ago than the longest gap
between rises plus a sample spacing): a burst that then stopped is not progress. A rank
whose stack stays on one line (a back-off sleep between retries, each retry a warning)
did not move, and is not judged here.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from healthcheck.diagnose.recency import keeps_rising

Sample = tuple[float, int | None]  # (seconds since the first sample, the own thread's rchar + wchar)


def write_times(samples: Sequence[Sample]) -> list[float]:
    """When the rank's own thread I/O rose at all: the times of the samples that saw it higher."""
    return [b[0] for a, b in pairwise(samples) if a[1] is not None and b[1] is not None and b[1] > a[1]]


def logs_progress(samples: Sequence[Sample]) -> bool:
    """Its own thread wrote in two sample intervals or more, and lately (recency.py)."""
    return keeps_rising(write_times(samples), [t for t, _ in samples])
