"""Stuck ranks from the flight recorder analyser's report, for classify.py.

torchfrtrace merges every rank's Flight Recorder buffer and, where a collective was
entered by some ranks of its group and not by others, prints `Not all ranks joining
collective, sequence number: N` with `collective: nccl:all_reduce`, `missing ranks: {3,
4, 5, 6, 7}`, `world size: 8` (or `expected ranks: {...}`) and `collective state:
scheduled`; NVRx's attribution prints the same as a table's `Missing Ranks` column. The
missing ranks never entered the collective the others wait in: they are stuck elsewhere
(or gone), the waiting ranks their victims. A rank is named only where the report shows
others that did enter (the missing ranks fewer than the group's), so the report of a
collective nobody joined names no one.
"""

from __future__ import annotations

from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.flight_recorder import FrAnalysisFinding, FrAttributionRow


def _group_size(f: FrAnalysisFinding) -> int | None:
    if f.expected_ranks:
        return len(f.expected_ranks)
    return f.world_size


def _from_finding(f: FrAnalysisFinding) -> tuple[tuple[int, ...], str] | None:
    """(missing ranks, what they missed) of one torchfrtrace report, where others joined."""
    size = _group_size(f)
    missing = tuple(sorted(set(f.missing_ranks)))
    if f.kind != "missing-ranks" or not missing or size is None or len(missing) >= size:
        return None
    what = f"{f.collective or 'a collective'} #{f.seq}" + (f" on group {f.group}" if f.group else "")
    state = f", state {f.state}" if f.state else ""
    return missing, f"{what} ({len(missing)} of {size} ranks missing{state})"


def _from_row(row: FrAttributionRow) -> tuple[tuple[int, ...], str] | None:
    if row.column != "missing" or not row.ranks:
        return None
    return tuple(sorted(set(row.ranks))), f"{row.op} on group {row.pg_id} ({row.pg_desc})"


def _reports(col: Collected) -> list[tuple[str, tuple[int, ...], str]]:
    out = []
    for text in col.evidence.fr_analyses:
        a = text.analysis
        for got in [*(_from_finding(f) for f in a.findings), *(_from_row(r) for r in a.attribution)]:
            if got is not None:
                out.append((text.source, *got))
    return out


def fr_missing(col: Collected) -> JobFinding | None:
    """The stuck-rank finding of the first report of missing ranks (the analyser reports
    the first collective a group disagrees at), or None."""
    reports = _reports(col)
    if not reports:
        return None
    source, ranks, what = reports[0]
    more = f"; {len(reports) - 1} more report(s) of missing ranks" if len(reports) > 1 else ""
    return job_finding(
        cls="stuck-rank", confidence="high", ranks=ranks,
        summary=(f"{rank_words(ranks)} never joined {what}, which the other ranks of the group entered "
                 f"(the flight recorder analyser's merge of every rank's buffer){more}"),
        evidence=(Evidence(source=source, text=f"Flight Recorder analysis: not all ranks joining {what}: missing "
                                               f"{rank_words(ranks)}"),))


__all__ = ["fr_missing"]
