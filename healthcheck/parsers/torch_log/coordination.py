"""JAX's coordination service (XLA's tsl CoordinationService) whose start-up barrier ran out.

`jax.distributed.initialize` connects every process to the coordination service, and the
service holds a barrier until all tasks arrive. When it times out, XLA raises
`DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: PjRT_Client_Connect. Timed out task
names:` followed by one `/job:jax_worker/replica:0/task:N` line per task that never
arrived (N is the process id: the rank); the service's own registration barrier says
`Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0.` and names no task. Each
is a CoordinationTimeout: the barrier and the tasks named on the lines right after it.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import CoordinationTimeout
from healthcheck.parsers.torch_log.state import TorchState, agent_where, rank_key

_OPEN = "coordination"
_BARRIER = re.compile(r"DEADLINE_EXCEEDED: Barrier timed out\. (?:Barrier_id|Id): ([^\s:]{1,128})")
_TASK = re.compile(r"/job:[\w-]{1,64}/replica:\d{1,9}/task:(\d{1,9})\s*$")
TASKS_MAX = 4096  # tasks one report keeps


def read_barrier(state: TorchState, line: Line) -> bool:
    """`DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: B` (or `Id: B::N`): a report opens."""
    m = _BARRIER.search(line.text)
    if m is None:
        return False
    index = state.add("coordination_timeouts", CoordinationTimeout(**agent_where(line),
                                                                   barrier=clip(m.group(1).rstrip("."), 128)))
    if index >= 0:
        state.start(_OPEN, index, rank_key(line))
    return True


def read_task(state: TorchState, line: Line) -> bool:
    """`/job:jax_worker/replica:0/task:N` on the lines right after the report: a task it names."""
    m = _TASK.match(line.text.strip())
    opened = state.find_open(_OPEN, rank_key(line))
    if m is None or opened is None:
        return False
    fact = state.facts["coordination_timeouts"][opened.index]
    if line.number != fact.line + len(fact.tasks) + 1 or len(fact.tasks) >= TASKS_MAX:
        return False  # the names follow the report line by line
    state.amend("coordination_timeouts", opened.index, tasks=(*fact.tasks, int(m.group(1))))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("coordination-barrier", lambda b: "Barrier timed out." in b, read_barrier),
    Handler("coordination-task", lambda b: "/job:" in b and "/task:" in b, read_task),
)

__all__ = ["HANDLERS", "TASKS_MAX", "read_barrier", "read_task"]
