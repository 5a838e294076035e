"""A series of stamped lines of one log, (line number, epoch seconds) in line order, kept
compact: two typed arrays (12 bytes a stamp) instead of a list of tuples (about 120).

Why: `hc diagnose logs` indexes the time of every stamped line of every text log it reads
(sources.TextStamps, up to MAX_STAMPS a file), and a training loop stamps every line: 64
ranks' logs held over a gigabyte of tuples. The series answers what the rules ask of it,
the time of the last stamped line at or before a line, exactly as the list did.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator


class StampSeries:
    """(line, time) pairs appended in line order; `last_at(line)` is the time of the last
    pair at or before `line` (None before the first)."""

    __slots__ = ("lines", "times")

    def __init__(self, pairs: Iterable[tuple[int, float]] = ()) -> None:
        self.lines = array("q")
        self.times = array("d")
        for number, t in pairs:
            self.append((number, t))

    def append(self, pair: tuple[int, float]) -> None:
        self.lines.append(pair[0])
        self.times.append(pair[1])

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self.lines, self.times, strict=True)

    def __getitem__(self, i: int) -> tuple[int, float]:
        return self.lines[i], self.times[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StampSeries):
            return self.lines == other.lines and self.times == other.times
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the list it replaces

    def __repr__(self) -> str:
        return f"StampSeries({list(self)!r})"

    def last_at(self, line: int) -> float | None:
        """The time of the last pair whose line is at or before `line`."""
        lo, hi = 0, len(self.lines)
        lines = self.lines
        while lo < hi:
            mid = (lo + hi) // 2
            if lines[mid] <= line:
                lo = mid + 1
            else:
                hi = mid
        return self.times[lo - 1] if lo else None


def shared(series: StampSeries, whole: StampSeries) -> StampSeries:
    """`series`, a subsequence of `whole`, as `whole` itself where it holds every pair of it
    (one array pair kept, not two equal ones): a log whose stamped lines are all unlabelled,
    or all one rank's."""
    return whole if len(series) == len(whole) else series
