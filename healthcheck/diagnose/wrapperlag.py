"""The rank behind in TORCH_DISTRIBUTED_DEBUG=DETAIL's own log of the collectives each rank
entered, for the stuck rule (classify._stuck), where nothing else names a rank.

Under DETAIL every process group is a ProcessGroupWrapper, which logs each collective a rank
enters before running it: `[I ProcessGroupWrapper.cpp:562] [Rank 2] Running collective:
CollectiveFingerPrint(SequenceNumber=1276, OpType=ALLREDUCE, ...)` (parsers/torch_log keeps
each rank's last). A hung job's last lines then say how far each rank got: where three or
more ranks logged one, all but one at the same SequenceNumber of one op and that one lower,
it never entered the collective the others wait in (stuck or busy elsewhere) and is named,
medium confidence (the lines carry no process group: a rank may be behind in another
group's numbering). Two ranks, or no strict majority at one number, name nobody.

A running job's output cut at any moment looks the same: the ranks enter each collective
one after another, so a cut often finds one rank that has not yet logged the next one
(captured: tests/fixtures/diagnose/rules16, a healthy 4-rank gloo job's console copied
every 0.5 s). So where the text shows the ranks' run of entries (a rank logged more than
one), the last lines are only a moment of a job that may be moving: one rank behind counts
only where the text shows the job stopped there, a failure (a timeout, an error, an abort,
the heartbeat monitor, an exception) logged after the last entry. A text of one entry per
rank is the tail someone took of a job they saw hang, and is read as before.
"""

from __future__ import annotations

from collections import Counter

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected

_MIN_RANKS = 3


def _last_entered(col: Collected) -> dict[int, tuple[int, str, Evidence]]:
    """rank -> (SequenceNumber, op, its line) of the last collective DETAIL logged it entering."""
    out: dict[int, tuple[int, str, Evidence]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for x in f.log.last_fingerprints:
            if x.rank is None or x.seq is None:
                continue
            if x.rank not in out or x.seq > out[x.rank][0]:
                text = f"rank {x.rank} last entered {x.op_type or 'a collective'} SequenceNumber {x.seq}"
                out[x.rank] = (x.seq, x.op_type, log_evidence(col, f.source, x.line, text, x.rank))
    return out


_STOPS = ("timeouts", "cut_timeouts", "gloo", "backend_errors", "aborts", "stuck", "exceptions", "store_lost",
          "barrier_failures", "desync")


def moment_only(col: Collected) -> bool:
    """Whether DETAIL's lines are a run of entries cut at a moment, with nothing after them
    that says the job stopped there (see the module's docstring)."""
    history = stopped = False
    for f in col.evidence.torch_logs:
        if f.log is None or not f.log.last_fingerprints:
            continue
        history = history or any(x.entered > 1 for x in f.log.last_fingerprints)
        end = max(x.line for x in f.log.last_fingerprints)
        stopped = stopped or any(fact.line > end for kind in _STOPS for fact in getattr(f.log, kind))
    return history and not stopped


def wrapper_behind(col: Collected) -> JobFinding | None:
    """The stuck-rank finding for the one rank behind every other in DETAIL's log, or None."""
    last = _last_entered(col)
    if len(last) < _MIN_RANKS or moment_only(col):
        return None
    top, count = Counter((seq, op) for seq, op, _ in last.values()).most_common(1)[0]
    behind = [r for r, (seq, _, _) in last.items() if seq < top[0]]
    if count != len(last) - 1 or len(behind) != 1:
        return None
    rank = behind[0]
    seq, op, item = last[rank]
    others = sorted(r for r in last if r != rank)
    return job_finding(
        cls="stuck-rank", confidence="medium", ranks=(rank,), divergence=f"{top[1]} SequenceNumber {top[0]}",
        evidence=(item, *(last[r][2] for r in others[:8])),
        summary=(f"rank {rank} last entered {op or 'a collective'} SequenceNumber {seq} while every other rank "
                 f"logged ({len(others)}) entered {top[1] or 'a collective'} SequenceNumber {top[0]} "
                 f"(TORCH_DISTRIBUTED_DEBUG=DETAIL): rank {rank} never entered the collective they wait in "
                 "(stuck or busy elsewhere)"))


__all__ = ["moment_only", "wrapper_behind"]
