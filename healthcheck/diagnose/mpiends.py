"""Dead-rank from an MPI runtime's one report of a rank's end, for deaths.py, where nothing
else in the text names a rank (parsers/torch_log/mpireports.py reads the reports):

* Open MPI's `mpirun has exited due to process rank R with PID P on node H exiting
  improperly` (or `without calling "finalize"`): mpirun names the first process it saw
  leave without MPI_Finalize (no init, no finalize, or an abort it could not see as one),
  and then ends the job. Like its first-non-zero-exit box (firstchild.lone_mpirun_exit), R
  is named only where that is the one such report and the text holds no rank's own output,
  no rank's error and no timeout: a rank that failed in its own words first (an MPI error
  handler's abort) may be another, and mpirun names whichever exit it processed first.
* MPICH's `application called MPI_Abort(MPI_COMM_WORLD, CODE) - process N`: where one
  process of the world alone called MPI_Abort, it ended the job: rank N (in another
  communicator, N is the caller's rank there: its world rank only where the line's MPICH
  prefix states it, `Abort(C) on node W` or Cray's `MPICH ERROR [Rank W]`; a caller whose
  world rank no line states leaves it unknown who called, and none is named). Where several did
  (a program that finds an input error on every process aborts on each, often with code
  0), none stands out and none is named. Not where a rank timed out or another rank's own
  error is in the text.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import RankError, any_timed_out
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.mpireports import IMPROPER_STATE, abort_world_rank


def improper_exit(col: Collected, firsts: dict[int, RankError], own: set[int]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the report's line) for Open MPI's one `exiting improperly` report where the
    text holds no rank's own output (`own`: leavers.own_output), error or timeout, else None."""
    exits = [(f.source, t) for f in col.evidence.torch_logs if f.log is not None for t in f.log.task_exits
             if t.launcher == "mpirun" and t.state == IMPROPER_STATE]
    if len({t.tasks for _, t in exits}) != 1 or own or firsts or spoke_of_failure(col) or any_timed_out(col, firsts):
        return None
    source, t = exits[0]
    rank = t.tasks[0]
    where = f" on {t.host}" if t.host else ""
    text = (f"rank {rank}{where}: mpirun reports it exited improperly (without MPI_Finalize) and ended the job; "
            "its own output is not in the text")
    return rank, "exited without MPI_Finalize", log_evidence(col, source, t.line, text, rank)


def lone_abort_call(col: Collected, firsts: dict[int, RankError]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the line) for the one process of MPI_COMM_WORLD that MPICH reports calling
    MPI_Abort, where no other process did, no rank timed out and no other rank's own error is
    in the text; else None (module doc)."""
    calls = [(f.source, c) for f in col.evidence.torch_logs if f.log is not None for c in f.log.mpi_abort_calls]
    if any(abort_world_rank(c) is None for _, c in calls):
        return None  # a caller whose world rank the line does not state: it may be another process
    processes = {abort_world_rank(c) for _, c in calls}
    if len(processes) != 1 or any_timed_out(col, firsts):
        return None
    rank = processes.pop()
    if rank is None or set(firsts) - {rank} or rank in spoke_of_failure(col):
        return None
    source, c = calls[0]
    text = f"rank {rank}: MPICH reports it called MPI_Abort({c.comm}, {c.code}); no other process did"
    return rank, f"called MPI_Abort (code {c.code})", log_evidence(col, source, c.line, text, rank)


__all__ = ["improper_exit", "lone_abort_call"]
