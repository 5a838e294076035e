"""Dead-rank from any tool's statement that numbered ranks ended, for deaths.py, where nothing
more specific in the text named a rank (a fallback: srun's, Open MPI's, Hydra's, mpd's, PALS's,
torchrun's and Ray's reports keep their own rules, which decide first).

The statements come from parsers/torch_log/memberends.py (`rank=[3] was aborted`, `Rank 0(g:0)
received signal SIGSEGV(11)`, `worker 3 died with exit code 137`) and from MPICH's
`application called MPI_Abort(MPI_COMM_WORLD, C) - process N` lines (mpireports.py; in another
communicator where the line's MPICH prefix states the caller's world rank). The
judgement, in general terms:

* a member's index is a rank of the job only where it is bounded: below the world the text
  states (the statement's own `Out of all 4 trainers` / `of 4`, the ranks' world size), and
  a `process N` / `proc N` only where a world is known at all (a pid is printed the same way);
* an end by SIGTERM/SIGKILL/SIGINT/SIGHUP, or a bare `killed`/`terminated`, is what a launcher
  sends the others after the first end: clean-up, never a culprit; nor is an exit with code 0
  (a clean exit);
* where some ends name a fault of the process's own (SIGSEGV, SIGBUS, SIGFPE, SIGILL), only
  those are culprits: a later abort or error is a victim of the shown fault;
* where the ends are stamped, the first second's are the culprits;
* a bare `failed` with no cause is the weakest word (a member that failed waiting on a dead
  peer is reported alike, as Ray Train's driver reports every failed worker of a batch):
  ranks known only from it are named only where one rank is; an MPI_Abort with code 0 (a
  program ending every process alike on an input error) names no one;
* ends that cover every rank of the world (stated, or 0..N-1 with no gap where none is
  stated) name no one: each rank's end listed is no first end;
* nothing is named where a rank timed out, a rank's own output reports a collective's
  failure, or another rank printed an error of its own (those rules judge the text), nor
  where a process called MPI_Abort in a communicator whose world rank no line states (it
  may be any rank, and it ended too).
Precision first: a wrong rank named is worse than none, so each doubt names no one.
"""

from __future__ import annotations

from dataclasses import dataclass

from healthcheck.diagnose.analysis import log_evidence, time_at, world_of
from healthcheck.diagnose.cleanupkill import FAULTS
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import COLLATERAL, RankError, any_timed_out
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.mpireports import abort_world_rank

_CLEANUP_SIGNALS = frozenset({*COLLATERAL, "SIGKILL"})
_CLEANUP_VERBS = frozenset({"killed", "terminated"})
_PID_LIKE = frozenset({"process", "proc"})
_RANK_MAX = 1 << 20  # no job has more ranks: a larger index is no rank


@dataclass(frozen=True)
class End:
    """One member's end as a statement gives it."""

    rank: int
    how: str
    signal: str
    source: str
    line: int
    world: int | None
    pid_like: bool
    cleanup: bool
    time: float | None
    weak: bool = False  # a bare `failed`, or MPI_Abort with code 0 (module doc)


def _how(verb: str, signal: str, code: int | None) -> str:
    cause = f" ({signal})" if signal else (f" (code {code})" if code is not None else "")
    return f"{verb}{cause}"


def _statements(col: Collected) -> list[End]:
    out: list[End] = []
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for e in f.log.member_ends:
            cleanup = (e.signal in _CLEANUP_SIGNALS or (e.verb in _CLEANUP_VERBS and not e.signal)
                       or e.exitcode == 0)
            at = time_at(col, f.source, e.line)
            out += [End(rank=r, how=_how(e.verb, e.signal, e.exitcode), signal=e.signal, source=f.source,
                        line=e.line, world=e.world, pid_like=e.noun in _PID_LIKE, cleanup=cleanup, time=at,
                        weak=e.verb == "failed" and not e.signal and not e.exitcode)
                    for r in e.members]
        for c in f.log.mpi_abort_calls:
            rank = abort_world_rank(c)  # in MPI_COMM_WORLD, or the line's prefix's
            if rank is not None:
                out.append(End(rank=rank, how=f"called MPI_Abort (code {c.code})", signal="", source=f.source,
                               line=c.line, world=None, pid_like=False, cleanup=False,
                               time=time_at(col, f.source, c.line), weak=c.code == 0))
    return out


def _unplaced_aborts(col: Collected) -> bool:
    """Whether a process called MPI_Abort whose world rank no line states (module doc)."""
    return any(abort_world_rank(c) is None for f in col.evidence.torch_logs if f.log is not None
               for c in f.log.mpi_abort_calls)


def _bounded(ends: list[End], col: Collected) -> list[End]:
    """The ends whose index is a rank of the job (module doc)."""
    _, sized = world_of(col)
    stated = {e.world for e in ends if e.world}
    world = min(stated | ({sized} if sized else set())) if stated or sized else None
    return [e for e in ends if e.rank < (world or _RANK_MAX) and not (e.pid_like and world is None)]


def _every_rank(ranks: set[int], ends: list[End], col: Collected) -> bool:
    """Whether the ends cover every rank: of the world stated, else 0..N-1 with no gap."""
    _, sized = world_of(col)
    stated = {e.world for e in ends if e.world} | ({sized} if sized else set())
    if stated:
        return ranks >= set(range(min(stated)))
    return len(ranks) >= 2 and ranks == set(range(max(ranks) + 1))


def _culprits(ends: list[End]) -> list[End]:
    """Of the ends not the clean-up's: the faults where some are shown, then the first stamped second's."""
    own = [e for e in ends if not e.cleanup]
    strong = [e for e in own if not e.weak]
    if strong:
        own = strong
    elif len({e.rank for e in own}) > 1:
        return []
    faults = [e for e in own if e.signal in FAULTS]
    if faults:
        own = faults
    if own and all(e.time is not None for e in own):
        first = min(e.time for e in own if e.time is not None)
        own = [e for e in own if e.time is not None and e.time < first + 1.0]
    return own


def member_ends(col: Collected, firsts: dict[int, RankError]) -> list[tuple[int, str, Evidence]]:
    """(rank, how, the statement's line) for each rank the statements show ending first of
    its own (module doc); [] where none is named."""
    ends = _bounded(_statements(col), col)
    if not ends or any_timed_out(col, firsts) or _unplaced_aborts(col):
        return []
    spoke = spoke_of_failure(col)
    culprits = [e for e in _culprits(ends) if e.rank not in spoke]
    ranks = {e.rank for e in culprits}
    if not ranks or set(firsts) - ranks or _every_rank(ranks, ends, col):
        return []
    out: list[tuple[int, str, Evidence]] = []
    for e in sorted(culprits, key=lambda x: (x.rank, x.line)):
        if all(e.rank != r for r, _, _ in out):
            text = f"rank {e.rank}: a tool's report says it {e.how}"
            out.append((e.rank, e.how, log_evidence(col, e.source, e.line, text, e.rank)))
    return out


__all__ = ["End", "member_ends"]
