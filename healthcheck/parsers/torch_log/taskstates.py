"""srun's task-state report, and srun's own lines behind another program's name.

srun prints its tasks' states (src/srun/task_state.c, `_do_log_msg`: `"%ps task%s %s: %s"`,
the step id, `s` for several, the task list as bit_fmt writes it, `0-3,5`, and the state:
`failed to start`, `running`, `exited abnormally`, `exited`, `unknown`) when a task exited
first under `-W`/`--wait` (`srun: First task exited 60s ago`) or on an interrupt: a
TaskState per line. A site may install srun under another name (Tianhe's `yhrun`), and its
log lines then carry that name (`yhrun: StepId=1544235.0 task 1: exited abnormally`,
`yhrun: error: cnode1995: task 0: Killed`): the state report is read under any one-word
program name, and srun's other lines under a name that is not srun's are read by srun's own
reader (agent.read_srun) as srun's, where the rest of the line is srun's own form.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.agent import read_srun
from healthcheck.parsers.torch_log.facts import TaskState
from healthcheck.parsers.torch_log.state import TorchState, agent_where
from healthcheck.parsers.torch_log.text import task_ids

_NAME = r"([A-Za-z][\w.-]{0,31})"
_STATES = ("failed to start", "running", "exited abnormally", "exited", "unknown")
_STATE = re.compile(rf"{_NAME}: StepId=(\d{{1,20}}\.\w{{1,32}}) tasks? ([\d,\-]{{1,4096}}): "
                    rf"({'|'.join(_STATES)})\s*$")
# srun's own lines (agent.read_srun) behind another name: its task-end report, its step's end
_SRUN_OWN = re.compile(rf"{_NAME}: (error: [^\s:]{{1,256}}: tasks? [\d,\-]{{1,4096}}: |Terminating StepId=|"
                       r"Job step aborted|First task exited)")
SRUN = "srun"


def read_task_state(state: TorchState, line: Line) -> bool:
    """`NAME: StepId=J.S task(s) LIST: STATE`: the tasks' state in srun's report."""
    m = _STATE.match(line.text)
    if m is None:
        return False
    state.add("task_states", TaskState(**agent_where(line), launcher=m.group(1), step=m.group(2),
                                       tasks=task_ids(m.group(3)), state=m.group(4)))
    return True


def read_renamed_srun(state: TorchState, line: Line) -> bool:
    """srun's own line printed under another program's name: read as srun's."""
    m = _SRUN_OWN.match(line.text)
    if m is None or m.group(1) == SRUN:
        return False
    if m.group(2) == "First task exited":
        return True  # the state report follows: nothing to keep of this line
    return read_srun(state, msgspec.structs.replace(line, text=f"{SRUN}: " + line.text[m.end(1) + 2:]))


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("srun-task-state", lambda b: ": StepId=" in b and " task" in b, read_task_state),
    Handler("srun-renamed", lambda b: "run: " in b[:40] and not b.startswith("srun: "), read_renamed_srun),
)

__all__ = ["HANDLERS", "SRUN", "read_renamed_srun", "read_task_state"]
