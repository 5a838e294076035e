"""What the diagnosis rules share: the `Analysis` they fill (findings, stack groups, the
Flight Recorder comparison, the sampled ranks' motion) and the small helpers that build
evidence from the collected logs. The rules live in their own modules (classify.py orders
them); a rule module imports this, never classify.py.
"""

from __future__ import annotations

import datetime as _dt

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


def line_time(col: Collected, source: str, line: int | None) -> float | None:
    st = col.stamps.get(source)
    return st.at(line) if st is not None and line is not None else None


def iso(t: float | None) -> str:
    if t is None:
        return ""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def log_evidence(col: Collected, source: str, line: int | None, text: str, rank: int | None) -> Evidence:
    """Evidence for a log line, with the line's time where the log stamps it."""
    return Evidence(source=source, line=line, text=text[:300], rank=rank, time=line_time(col, source, line))


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


def world(col: Collected) -> tuple[set[int], int | None]:
    """The ranks the evidence holds and the largest world size any rank saw."""
    sizes = {r.world_size for r in col.evidence.ranks.values() if r.world_size}
    return set(col.evidence.ranks), (max(sizes) if sizes else None)
