"""Init-failure from JAX's coordination service whose start-up barrier timed out.

`jax.distributed.initialize` waits at the coordination service's barrier until every
process has connected (parsers/torch_log/coordination.py reads the report): where it names
the tasks that never arrived (`Timed out task names:` then `/job:jax_worker/replica:0/
task:N`; N is the process id, the rank), those ranks never joined: init-failure naming
them (medium: a task may be missing because it crashed before connecting, which its own
output would show, or because it was never started). Where the barrier names no task
(`[Init]Wait_for_all_tasks_to_register`), the job failed while starting and no rank is
named. The tasks of every report read are named together. Only the start-up's barrier is
read here: one the program waits at after every task registered is programbarrier.py's.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.programbarrier import setup_barrier
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def coordination_timeout(col: Collected) -> JobFinding | None:
    """The init-failure of a JAX start-up barrier that timed out (module doc), else None."""
    # programbarrier.py: a barrier the program waits at after the start-up is no set-up's
    reports = [(f.source, c) for f in col.evidence.torch_logs if f.log is not None for c in f.log.coordination_timeouts
               if setup_barrier(f.log, c)]
    if not reports:
        return None
    missing = sorted({t for _, c in reports for t in c.tasks})
    barriers = sorted({c.barrier for _, c in reports})
    items = [log_evidence(col, source, c.line, f"JAX coordination barrier {c.barrier} timed out"
                          + (f"; tasks never arrived: {rank_words(list(c.tasks))}" if c.tasks else ""), None)
             for source, c in reports[:12]]
    if missing:
        summary = (f"{rank_words(missing)} never joined: JAX's coordination barrier {', '.join(barriers)} timed out "
                   "waiting for them (each crashed before connecting, or was never started)")
    else:
        summary = (f"init failure: JAX's coordination barrier {', '.join(barriers)} timed out before every task "
                   "registered; the report names no task (each process's own log says which did not start)")
    return job_finding(cls="init-failure", summary=summary, confidence="medium", ranks=missing, evidence=items)


__all__ = ["coordination_timeout"]
