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

Where rank 0's report is not in the text, the ranks that reached the barrier say whom they
lost: `... from rank 0. Please check rank 0 logs for faulty rank.` (barrier_blamed). Rank 0
is the faulty rank only where it is the one rank that did not report reaching: every other
rank of the world did. The world is the one the job stated, or the ranks the evidence knows
(ringsize.ring_world: 0..N-1) only where rank 0's own output is there and holds no report of
an absent rank: rank 1 prints the very same words when a third rank was the one missing and
rank 0 only reported it (captured with torch 2.13: rank 2 asleep, `Connection closed by peer`
under rank 1's words once rank 0 raised), so a paste of the reporters alone names no one. The reporters' original
exception says how rank 0 failed: gloo's timeout, still there (stuck); else gone (dead).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence, world_of
from healthcheck.diagnose.findings import Evidence, FailureClass, JobFinding, job_finding
from healthcheck.diagnose.leavers import own_output
from healthcheck.diagnose.ringsize import ring_world
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

_ORIGINAL_REACH = 3  # lines after a reporter's message its ` Original exception:` and gloo's error come in


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


def _reached(col: Collected) -> tuple[dict[int, Evidence], set[int], set[str]]:
    """(reporter -> its report, the ranks they lost, the gloo kinds of their original
    exceptions) of the ranks that reached the barrier and lost the rank they waited on."""
    reporters: dict[int, Evidence] = {}
    lost: set[int] = set()
    kinds: set[str] = set()
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for b in f.log.barrier_failures:
            reporter = b.reporter if b.reporter is not None else fact_rank(b, f.rank)
            if b.waited_on is None or reporter is None:
                continue
            lost.add(b.waited_on)
            reporters.setdefault(reporter, log_evidence(
                col, f.source, b.line, f"rank {reporter} reached the monitored barrier and lost rank {b.waited_on}",
                reporter))
            kinds |= {g.kind for g in f.log.gloo if b.line < g.line <= b.line + _ORIGINAL_REACH
                      and fact_rank(g, f.rank) == reporter}
    return reporters, lost, kinds


def barrier_blamed(col: Collected, found: list[JobFinding]) -> JobFinding | None:
    """The rank every other rank lost at the monitored barrier, where no finding names a
    rank and rank 0's own report is not in the text, or None (see the module's docstring)."""
    if any(f.ranks for f in found) or any(b.ranks for f in col.evidence.torch_logs if f.log is not None
                                          for b in f.log.barrier_failures):
        return None
    reporters, lost, kinds = _reached(col)
    if len(lost) != 1:
        return None
    (blamed,) = lost
    world = world_of(col)[1] or (ring_world(col) if blamed in own_output(col) else None)
    if world is None or set(reporters) | lost != set(range(world)) or lost <= set(reporters):
        return None
    stuck = "timeout" in kinds
    cls: FailureClass = "stuck-rank" if stuck else "dead-rank"
    how = ("never answered (the others' wait for it timed out)" if stuck
           else "failed (its connection to the others closed)" if kinds else "failed")
    summary = (f"rank {blamed} {how} at the monitored barrier: every other rank ({rank_words(reporters)}) "
               f"reached it and lost rank {blamed}, the one rank of the {world} known that did not")
    return job_finding(cls=cls, summary=summary, confidence="medium", ranks=(blamed,),
                       evidence=tuple(list(reporters.values())[:8]))


__all__ = ["barrier_absentees", "barrier_blamed", "barrier_reports"]
