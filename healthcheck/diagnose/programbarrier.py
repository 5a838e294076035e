"""JAX's coordination barriers: the service's own at start-up, or one the program waits at
after the job formed.

The coordination service's barrier report is one shape (`DEADLINE_EXCEEDED: Barrier timed
out. Barrier_id: B. Timed out task names:` then `/job:.../task:N` per task that never came,
parsers/torch_log/coordination.py) for two phases:

* set-up: `jax.distributed.initialize` connecting every process (its frames in
  jax/_src/distributed.py, the parser's `ExceptionRaised.setup` "jax-initialize"; the service's
  own barriers `PjRT_Client_Connect` and `[Init]Wait_for_all_tasks_to_register`, named so
  where the paste holds no frame): the tasks named never joined, coordination.py's
  init-failure;
* the program's own barrier after that (`client.wait_at_barrier(...)`, a
  `multihost_broadcast_sync`, `sync_global_devices`): the coordination service answered and
  every task had registered with it, so the world formed; the tasks named never reached a
  barrier the reporting task waited at, as ranks missing from a collective the others wait
  in: stuck-rank naming them, medium (whether each hung or died the report does not say; a
  death its own output shows is the dead-rank rule's, which comes first).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log import TorchLog
from healthcheck.parsers.torch_log.facts import CoordinationTimeout

# the coordination service's own barriers, which jax.distributed.initialize waits at
SERVICE_BARRIERS = ("PjRT_Client_Connect", "[Init]", "Wait_for_all_tasks_to_register")


def setup_barrier(log: TorchLog, c: CoordinationTimeout) -> bool:
    """The report is of the start-up's barrier: its traceback ran through JAX's
    initialisation, or its id is one of the service's own (module doc)."""
    raised = next((e for e in log.exceptions if e.line == c.line), None)
    if raised is not None and raised.setup:
        return True
    return c.barrier.startswith(SERVICE_BARRIERS)


def program_barrier(col: Collected) -> JobFinding | None:
    """Stuck-rank naming the tasks that never reached the program's own barrier (module doc)."""
    reports = [(f.source, c) for f in col.evidence.torch_logs if f.log is not None
               for c in f.log.coordination_timeouts if c.tasks and not setup_barrier(f.log, c)]
    if not reports:
        return None
    missing = sorted({t for _, c in reports for t in c.tasks})
    barriers = sorted({c.barrier for _, c in reports})
    items = [log_evidence(col, source, c.line, f"JAX barrier {c.barrier} timed out; tasks that never arrived: "
                          f"{rank_words(list(c.tasks))}", None) for source, c in reports[:12]]
    summary = (f"{rank_words(missing)} never reached the program's barrier {', '.join(barriers)}: the job had "
               "formed (every task registered with JAX's coordination service) and the others waited for them")
    return job_finding(cls="stuck-rank", summary=summary, confidence="medium", ranks=tuple(missing),
                       evidence=tuple(items))


__all__ = ["SERVICE_BARRIERS", "program_barrier", "setup_barrier"]
