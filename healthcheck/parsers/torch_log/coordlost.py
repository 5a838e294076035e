"""JAX's coordination service (XLA's tsl CoordinationService, on the coordinator's process)
losing a task after the start: `Task /job:jax_worker/replica:0/task:N heartbeat timeout.
This indicates that the remote task has failed, got preempted, or crashed unexpectedly.`,
often behind `/job:.../task:N has been set to ERROR in coordination service: UNAVAILABLE:`
on the same line (coordination_service.cc). N is the task's id, JAX's process index: the
rank. Each such line is a TaskLost naming N (diagnose/coordlost.py judges it)."""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import TaskLost
from healthcheck.parsers.torch_log.state import TorchState, agent_where

_HEARTBEAT = re.compile(r"Task /job:[\w-]{1,64}/replica:\d{1,9}/task:(\d{1,9}) heartbeat timeout")


def read_task_lost(state: TorchState, line: Line) -> bool:
    """The coordination service's `Task ... heartbeat timeout` (module doc)."""
    m = _HEARTBEAT.search(line.text, 0, 4000)
    if m is None:
        return False
    state.add("tasks_lost", TaskLost(**agent_where(line), lost=int(m.group(1)), how="heartbeat timeout"))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("coordination-task-lost", lambda b: " heartbeat timeout" in b, read_task_lost),
)

__all__ = ["HANDLERS", "read_task_lost"]
