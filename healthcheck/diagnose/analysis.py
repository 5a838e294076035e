"""What the diagnosis rules share: the `Analysis` they fill (findings, stack groups, the
Flight Recorder comparison, the sampled ranks' motion) and the small helpers that build
evidence from the collected logs. The rules live in their own modules (classify.py orders
them); a rule module imports this, never classify.py.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter

import msgspec

from healthcheck.diagnose.evidence import RankEvidence
from healthcheck.diagnose.findings import Evidence, JobFinding
from healthcheck.diagnose.motion import JobMotion
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import StackGroup
from healthcheck.parsers.flight_recorder import FrComparison


class Analysis(msgspec.Struct, kw_only=True):
    """Everything the rules found, with what the verdict needs beside it."""

    findings: list[JobFinding] = []
    groups: list[StackGroup] = []
    fr: FrComparison | None = None
    events: list[Evidence] = []  # every error event, for the first failure
    world_sizes: dict[int, list[int]] = {}  # world size -> ranks that said it
    notes: list[str] = []
    motion: JobMotion | None = None  # the sampled ranks' motion (live); None: each stack is one look


def time_at(col: Collected, source: str, line: int | None, rank: int | None = None) -> float | None:
    """The time of a log line: its own stamp, else the last stamped line before it (of its
    rank where the log labels ranks)."""
    st = col.stamps.get(source)
    return st.at(line, rank) if st is not None and line is not None else None


def iso(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def log_evidence(col: Collected, source: str, line: int | None, text: str, rank: int | None) -> Evidence:
    """Evidence for a log line, with the line's time where the log stamps it."""
    return Evidence(source=source, line=line, text=text[:300], rank=rank, time=time_at(col, source, line))


def fact_rank(fact: object, file_rank: int | None) -> int | None:
    """The global rank a parsed log fact speaks of: its own, the file's, or its rank in
    the default process group."""
    r = getattr(fact, "rank", None)
    if r is not None:
        return r
    if file_rank is not None:
        return file_rank
    pg_rank = getattr(fact, "pg_rank", None)
    return pg_rank if pg_rank is not None and getattr(fact, "pg_id", "") in ("", "0") else None


def stack_source(r: RankEvidence | None) -> str:
    """Where a rank's stack came from, as the user would open it."""
    if r is None:
        return "py-spy"
    return next((s for s in r.sources if "spy" in s.lower()), r.sources[0] if r.sources else "py-spy")


def stack_evidence(col: Collected, group: StackGroup) -> Evidence:
    """A stack group as an evidence line: its first rank's stack, where that came from."""
    return Evidence(source=stack_source(col.evidence.ranks.get(group.ranks[0])), rank=group.ranks[0],
                    text=f"stack: {group.text}")


def world_of(col: Collected) -> tuple[set[int], int | None]:
    """The ranks the evidence holds and the largest world size any rank saw."""
    sizes = {r.world_size for r in col.evidence.ranks.values() if r.world_size}
    return set(col.evidence.ranks), (max(sizes) if sizes else None)


def minority(sides: dict[int, str]) -> tuple[tuple[int, ...], str, str] | None:
    """rank -> what it ran (a stack, an op, a launch variable): the ranks off the majority
    when one value is a strict plurality; with the majority's value and the first odd
    rank's. None when all agree or two values tie for the most."""
    counts = Counter(sides.values())
    if len(counts) < 2:
        return None
    (top, n_top), *rest = counts.most_common()
    if rest and rest[0][1] == n_top:
        return None
    odd = tuple(sorted(r for r, v in sides.items() if v != top))
    return odd, top, sides[odd[0]]
