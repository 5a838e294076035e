"""Ranks that aborted after another rank's shown fault are its victims, not culprits.

A fault signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL) is raised by the process's own execution; an
abort (SIGABRT, MPI_Abort, an MPI library's errors-are-fatal handler) is what a process does
when something it depends on failed: a peer's message that never comes right (MVAPICH's
`Control shouldn't reach here` after a peer segfaulted), a CUDA driver shutting down under it,
std::terminate on a library's error. Where the ranks' own deaths carry no time to order them,
the text's order in one file is the only order shown: an abort printed after a fault of another
rank in the same file followed that fault, and is its victim. (Timed deaths are ordered by
their times in deaths.py; a Python exception of the rank's own code is its own, whatever comes
before it.) Precision first: naming such an abort beside the faults adds a false culprit. A launcher's
report of a task's fault (srun's `task 1: Segmentation fault`, mpirun's `exited on signal 11`)
is such a fault too: Cray MPICH's rank 0 `Fatal error in PMPI_Recv` printed after it is its
victim (field-25).
"""

from __future__ import annotations

from healthcheck.diagnose.cleanupkill import FAULTS
from healthcheck.diagnose.logfacts import RankError
from healthcheck.parsers.torch_log.mpiabort import ABORT_TYPE

ABORTS = frozenset({"SIGABRT", ABORT_TYPE})


def _aborted_after(errors: list[RankError], faults: list[tuple[str, int, int | None]]) -> set[int]:
    """The ranks of `errors` that are an abort printed in the same file after a fault of another
    rank (`faults`: source, line, rank)."""
    return {e.rank for e in errors if e.type in ABORTS
            and any(src == e.source and line < e.line and rank != e.rank for src, line, rank in faults)}


def aborted_after_faults(firsts: dict[int, RankError], ranks: list[int]) -> set[int]:
    """Of `ranks` (untimed own deaths), those whose first error is an abort printed in the same
    file after another rank's fault signal (module doc)."""
    errors = [firsts[r] for r in ranks if r in firsts]
    return _aborted_after(errors, [(e.source, e.line, e.rank) for e in errors if e.type in FAULTS])


def aborted_after_shown(faults: list[tuple[str, int, int | None]], firsts: dict[int, RankError],
                        ranks: list[int]) -> set[int]:
    """Of `ranks`, those whose first error is an untimed abort printed after another rank's fault
    that a launcher reported in the same file (`faults`: source, line, rank): its victims."""
    return _aborted_after([firsts[r] for r in ranks if r in firsts and firsts[r].time is None], faults)


__all__ = ["ABORTS", "aborted_after_faults", "aborted_after_shown"]
