"""Stuck-rank from torch's monitored_barrier: the ranks that never arrived are named.

`dist.monitored_barrier` on gloo has rank 0 wait for every other rank, each one in turn,
and where one does not arrive in time rank 0 raises `[Rank 0]: Rank 2 failed to pass
monitoredBarrier in 6000 ms` (`Ranks 1, 3 ...` with wait_all_ranks); the ranks that did
arrive then time out waiting for rank 0's answer (`Rank 1 successfully reached
monitoredBarrier, but received errors while waiting for send/recv from rank 0`) and are
its collateral. The ranks rank 0 names were alive and elsewhere (a lock, a slow save):
stuck, as rank 0's own report says. Only the first absent rank is reported without
wait_all_ranks, so a second one may be missing from it, and nothing is guessed for it. A
rank another rule already found dead is not called stuck.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def barrier_reports(col: Collected) -> tuple[set[int], list[Evidence]]:
    """(the ranks a monitoredBarrier report says did not arrive, those reports)."""
    absent: set[int] = set()
    items: list[Evidence] = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for b in f.log.barrier_failures:
            if not b.ranks:
                continue
            absent.update(b.ranks)
            reporter = b.reporter if b.reporter is not None else fact_rank(b, f.rank)
            if len(items) < 8:
                items.append(log_evidence(col, f.source, b.line, f"rank {reporter}: {rank_words(b.ranks)} failed "
                                          f"to pass monitoredBarrier in {b.timeout_ms} ms", reporter))
    return absent, items


def barrier_absentees(col: Collected, found: list[JobFinding]) -> JobFinding | None:
    """The stuck-rank finding of the ranks monitored_barrier reports absent, or None (see
    the module's docstring)."""
    absent, items = barrier_reports(col)
    dead = {r for f in found if f.cls == "dead-rank" for r in f.ranks}
    absent -= dead
    if not absent:
        return None
    summary = (f"{rank_words(absent)} never reached the monitored barrier (the barrier's own report names it); "
               "the ranks that reached it timed out waiting for rank 0 after it")
    return job_finding(cls="stuck-rank", summary=summary, confidence="high", ranks=tuple(sorted(absent)),
                       evidence=tuple(items))


__all__ = ["barrier_absentees", "barrier_reports"]
