"""A rank the peers' reports say never came (stuck-rank) whose process the text shows dying:
dead, not stuck.

A rank's own fatal signal outranks "stuck" for that rank: a process that crashed never joins
the next collective, and its peers' watchdog and desync report then name it as the one that
did not come. Where the crash is placed on the rank by a label, the dead-rank rule already
names it. A runtime's crash report often carries no rank (abseil's `*** SIGSEGV received at
time=... ***`, glog's `received by PID`, Julia's `signal (6)`: parsers/torch_log/
crashreports.py, Open MPI's unlabelled report): it is placed by elimination, on the one rank a
stuck finding names, where the text holds exactly one such unplaced crash, no rank's own death,
and every other rank it shows printed an error of its own that is no death (it was alive to
report after the crash: a watchdog timeout, a collective's failure, a desync report).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import first_errors
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log.facts import SIGNAL_NAMES
from healthcheck.parsers.torch_log.signalreport import DEATH_TYPES


def _unplaced_crashes(col: Collected) -> list[Evidence]:
    """Every process's own report of a fatal signal that no label, file or pid places on a rank."""
    found = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for e in f.log.exceptions:
            if (e.native and e.type in DEATH_TYPES and fact_rank(e, f.rank) is None
                    and (e.pid is None or e.pid not in col.pid_ranks)):
                found.append(log_evidence(col, f.source, e.line, f"{e.type}: {e.message}", None))
    return found


def stuck_died(col: Collected, findings: list[JobFinding]) -> JobFinding | None:
    """dead-rank of the one rank a stuck finding names, whose crash the text holds unplaced
    (module doc); else None."""
    if any(f.cls == "dead-rank" for f in findings):
        return None
    stuck = next((f for f in findings if f.cls == "stuck-rank"), None)
    if stuck is None or len(stuck.ranks) != 1:
        return None
    crashes = _unplaced_crashes(col)
    if len(crashes) != 1:
        return None
    rank = stuck.ranks[0]
    firsts = first_errors(col)
    shown = {r for f in col.evidence.torch_logs if f.log is not None for r in f.log.ranks} - {rank}
    if rank in firsts or not shown or any(e.type in SIGNAL_NAMES or e.type == "signal"
                                          for r, e in firsts.items() if r in shown):
        return None
    crash = crashes[0]
    return job_finding(
        cls="dead-rank", confidence="medium", ranks=(rank,), evidence=(crash, *stuck.lines)[:20],
        summary=f"rank {rank} died: the text's one crash ({crash.text[:160]}) names no rank, every other rank it "
                f"shows was alive to report after it, and its peers' reports say rank {rank} never came "
                f"({stuck.message[:160]})")
