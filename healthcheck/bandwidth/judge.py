"""Judging measured bandwidth against the fabric's floors, per collective, scope and size.

A floor applies only at the size it names ("16G"); other sizes are measured and
reported, not judged. A test is run again while it falls short, up to the fabric's
`repeats`, and a size FAILs only when every attempt fell short there: healthy nodes
vary, and a drain must rest on a repeatable shortfall. At one size the better of
nccl-tests' out-of-place and in-place figures counts, for the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from healthcheck.core.units import format_size, parse_size
from healthcheck.parsers.bandwidth_common import BandwidthSample

SCOPES = ("single_node", "ib_loopback", "pair")


class Floor(msgspec.Struct, frozen=True):
    """A busbw floor at one size, and the config key (with its size) that set it."""

    size_bytes: int
    gbytes_per_s: float
    key: str  # e.g. bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.16G
    size_text: str  # as the fabric wrote it


class SizeVerdict(msgspec.Struct, frozen=True):
    """One judged size: what each attempt reached there, and whether any met the floor."""

    collective: str
    scope: str
    floor: Floor
    attempts: tuple[float | None, ...]  # best busbw per attempt; None where that attempt lacks the size

    @property
    def measured(self) -> bool:
        return any(a is not None for a in self.attempts)

    @property
    def passed(self) -> bool:
        return any(a is not None and a >= self.floor.gbytes_per_s for a in self.attempts)

    @property
    def best(self) -> float | None:
        got = [a for a in self.attempts if a is not None]
        return max(got) if got else None


def floors(bandwidth_limits: Any, collective: str, scope: str) -> list[Floor]:
    """The floors the fabric sets for `collective` in `scope`, smallest size first."""
    section = getattr(getattr(bandwidth_limits, collective, None), scope, None)
    table = getattr(section, "busbw_min_gbytes_per_s", None) or {}
    key = f"bandwidth.{collective}.{scope}.busbw_min_gbytes_per_s"
    out = [Floor(parse_size(size), float(value), f"{key}.{size}", size) for size, value in table.items()]
    return sorted(out, key=lambda f: f.size_bytes)


def best_at(samples: Iterable[BandwidthSample], collective: str, size_bytes: int) -> float | None:
    """The best busbw `collective` reached at exactly `size_bytes` (either placement)."""
    got = [s.busbw_gbytes_per_s for s in samples if s.collective == collective and s.size_bytes == size_bytes]
    return max(got) if got else None


def short_of(samples: Sequence[BandwidthSample], collective: str, wanted: Sequence[Floor]) -> list[Floor]:
    """The floors this one attempt did not meet (a size it did not measure counts as short)."""
    out = []
    for floor in wanted:
        best = best_at(samples, collective, floor.size_bytes)
        if best is None or best < floor.gbytes_per_s:
            out.append(floor)
    return out


def judge(attempts: Sequence[Sequence[BandwidthSample]], collective: str, scope: str,
          wanted: Sequence[Floor]) -> list[SizeVerdict]:
    """Every floor judged over every attempt."""
    return [SizeVerdict(collective, scope, floor,
                        tuple(best_at(samples, collective, floor.size_bytes) for samples in attempts))
            for floor in wanted]


def size_range(sizes: Iterable[str | int]) -> tuple[int, int, int]:
    """nccl-tests' -b/-e/-f for a list of sizes: one run that measures every one of them.

    Sizes in a geometric progression give exactly those sizes (-f is the ratio); any
    other list is measured at every doubling between the smallest and largest, which
    includes each listed size that is a power-of-two multiple of the smallest.
    """
    values = sorted({parse_size(s) if isinstance(s, str) else int(s) for s in sizes})
    if not values:
        raise ValueError("no sizes")
    if len(values) == 1:
        return values[0], values[0], 2
    ratio = values[1] // values[0]
    if ratio >= 2 and all(b == a * ratio for a, b in zip(values, values[1:], strict=False)):
        return values[0], values[-1], ratio
    return values[0], values[-1], 2


def describe(floor: Floor) -> str:
    return f"{format_size(floor.size_bytes)} ({floor.size_text})" if floor.size_text != format_size(floor.size_bytes) \
        else format_size(floor.size_bytes)
