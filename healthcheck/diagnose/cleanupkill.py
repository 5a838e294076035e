"""A rank killed by the launcher's clean-up among ranks that died of faults of their own.

The launchers report every rank's end, not only the first (srun's `task N: Killed`, mpd's
`exit status of rank R: killed by signal 9`, PALS's `died from signal 9`, Hydra's boxes):
once one process faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL: signals only the process's own
execution raises), the launcher ends the rest, with SIGTERM and then SIGKILL for a process
that did not leave at once. Where some ranks ended by such a fault and others by SIGKILL (or
a SIGTERM), the killed ones are the clean-up's, not culprits: a rank's own fault is never
SIGKILL, and a SIGKILL is what a launcher, an operator or the OOM killer sends. An OOM kill
the text says (srun's `Out Of Memory`, the kernel's OOM line for its pid) is the rank's own
and stays named. Without a fault beside it a SIGKILL keeps its reading (PALS's SIGKILL among
the others' SIGTERMs is the first death: signals.py). torchrun's box is not read so: its agent
names its own clean-up (`Sending process P closing signal`, its forced SIGKILL of a worker that
hung: signals.forced_kills), and a SIGKILL in its box at its first look came before it.
"""

from __future__ import annotations

from healthcheck.diagnose.sources import Collected

FAULTS = frozenset({"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"})
CLEANUP = frozenset({"SIGKILL", "SIGTERM"})


def _ends(col: Collected) -> dict[int, str]:
    """Rank -> the signal that ended it, as the launchers' reports give it (linked to the ranks
    by sources.py)."""
    return {rank: r.signal for rank, r in col.evidence.ranks.items() if r.signal}


def _oom(col: Collected) -> set[int]:
    """Ranks the text says the OOM killer or srun's memory limit ended."""
    ranks = {col.pid_ranks[k.pid] for k in col.evidence.kernel
             if k.kind == "oom-kill" and k.pid is not None and k.pid in col.pid_ranks}
    for f in col.evidence.torch_logs:
        if f.log is not None:
            ranks |= {t for x in f.log.task_exits if x.oom for t in x.tasks}
    return ranks


def cleanup_kills(col: Collected) -> set[int]:
    """The ranks killed by the launcher's clean-up after others faulted (module doc)."""
    if any(f.log is not None and f.log.child_failed for f in col.evidence.torch_logs):
        return set()  # torchrun's clean-up is its own word: closing signals, forced kills (signals.py)
    ends = _ends(col)
    if not any(s in FAULTS for s in ends.values()):
        return set()
    return {rank for rank, s in ends.items() if s in CLEANUP} - _oom(col)


__all__ = ["CLEANUP", "FAULTS", "cleanup_kills"]
