"""Dead-rank from JAX's coordination service losing tasks after the start.

The service (on the coordinator's process) expects a heartbeat from every task; a task that
stops sending them is set to ERROR: `Task /job:jax_worker/replica:0/task:N heartbeat
timeout. This indicates that the remote task has failed, got preempted, or crashed
unexpectedly` (parsers/torch_log/coordlost.py). The others then fail because it did (the
service propagates the error), so task N, JAX's process index N, is the rank that died.
Read only where no other rule named a dead rank; each task the service lost is named, at
medium confidence (a task stalled hard enough to miss every heartbeat reads the same).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def lost_tasks(col: Collected) -> JobFinding | None:
    """The dead-rank of the tasks JAX's coordination service lost (module doc), else None."""
    lost = [(f.source, t) for f in col.evidence.torch_logs if f.log is not None for t in f.log.tasks_lost]
    if not lost:
        return None
    tasks = sorted({t.lost for _, t in lost})
    items = [log_evidence(col, source, t.line, f"rank {t.lost}: JAX's coordination service lost it ({t.how})",
                          t.lost) for source, t in lost[:12]]
    summary = (f"{rank_words(tasks)} stopped heartbeating to JAX's coordination service (task "
               f"{', '.join(str(t) for t in tasks[:8])}, process index = rank): it failed, was preempted or "
               "crashed, and the others failed after it")
    return job_finding(cls="dead-rank", summary=summary, confidence="medium", ranks=tasks, evidence=items)


__all__ = ["lost_tasks"]
