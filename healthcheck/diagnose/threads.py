"""A thread that died is not its rank's death.

Python's threading.excepthook prints `Exception in thread NAME:` and the traceback of an
exception a thread did not catch (a decode or prefetch thread, a metrics flusher); the
thread ends, the process goes on. Where the main thread then waits for what that thread
would have given (a `queue.get()`, a join, an event), the rank is alive and blocked
outside any collective while its peers wait in one: stuck, not dead. The torch log parser
marks such an exception with its thread (`ExceptionRaised.thread`); logfacts.rank_errors
leaves it out of the rank's own errors, so the dead-rank rule never names a rank for it,
and the stuck rules (stuck.py, postmortem.py) decide from the stacks and timeouts.

dead_threads gives each rank's dead threads as evidence; with_dead_threads adds them to a
finding that names the rank (stuck): the reason it waits, in its own output.

A multiprocessing child process (a batch producer) that raised prints `Process NAME:` and
its traceback, whose outermost frame is multiprocessing's `_bootstrap`, into the rank's
output; where the live stacks show the rank alive (in the `Queue.get` the child would
have fed), that traceback is the child's death, not the rank's: the same as a thread's.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import child_of_live_rank
from healthcheck.diagnose.sources import Collected


def dead_threads(col: Collected) -> dict[int, list[tuple[str, Evidence]]]:
    """rank -> the threads of it that died of an uncaught exception: (its name, the
    evidence line)."""
    out: dict[int, list[tuple[str, Evidence]]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for e in f.log.exceptions:
            rank = fact_rank(e, f.rank)
            if rank is None or not (e.thread or child_of_live_rank(col, e.child_process, rank)):
                continue
            at = f" in {e.frame}" if e.frame else ""
            name = f"thread {e.thread!r}" if e.thread else "child process (multiprocessing)"
            text = (f"rank {rank}: its {name} died of {e.type}: {e.message}"[:240] + at
                    + "; the rank went on without it")
            out.setdefault(rank, []).append((name, log_evidence(col, f.source, e.line, text, rank)))
    return out


def with_dead_threads(col: Collected, finding: JobFinding) -> JobFinding:
    """The finding with the dead threads of the ranks it names said (summary and
    evidence), unchanged where none of them lost a thread."""
    if finding.cls not in ("stuck-rank", "host-wedged"):
        return finding
    dead = dead_threads(col)
    named = [r for r in finding.ranks if r in dead]
    if not named:
        return finding
    lines = [e for r in named for _, e in dead[r][:2]]
    names = ", ".join(sorted({name for r in named for name, _ in dead[r][:2]}))
    summary = (f"{finding.message}; its {names} died (its traceback is in the rank's output) and the "
               "rank lived on, waiting for it")
    return job_finding(cls=finding.cls, summary=summary, confidence=finding.confidence, ranks=finding.ranks,
                       evidence=(*lines, *finding.lines)[:24], where=finding.where, divergence=finding.divergence)


__all__ = ["dead_threads", "with_dead_threads"]
