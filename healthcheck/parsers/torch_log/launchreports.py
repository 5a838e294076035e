"""Launchers beside torchrun on the process that failed: Horovod's runner and DeepSpeed's
launcher (with the old torch.distributed.launch), each read as the agent's failed-worker
report (WorkerFailed) where its words name the process, and only there.

* Horovod's runner (horovod/runner, gloo and elastic modes): `RuntimeError: Horovod
  detected that one or more processes exited with non-zero status, thus causing the job to
  be terminated. The first process to do so was:` then `Process name: R` and `Exit code:
  N`, in either order, under any log prefix (Determined's `<>  [date] id || `). R is the
  process's rank (Open MPI's own box, `Process name: [[J,1],R]`, is agent.py's).
* DeepSpeed's launcher (deepspeed/launcher/launch.py `sigkill_handler`), once a child
  exits non-zero, logs `Killing subprocess P` for EVERY child (the failed one too), then
  `[ERROR] [launch.py:N:sigkill_handler] ['<python>', '-u', 'x.py', '--local_rank=L', ...]
  exits with return code = N`. The argument list is the launcher's `cmd` variable, which
  its spawn loop left at the LAST child it started (local rank = children - 1), not the
  failed child's: it names the failed process only where L is 0, the launcher's one child.
  The old launchers (DeepSpeed's first, torch.distributed.launch before torchrun) raise
  `subprocess.CalledProcessError: Command '[...]' returned non-zero exit status N.` with
  the same last `cmd` (after waiting for the children in local-rank order): read alike.
  Where L is above 0 no process is named: the launcher's children were L + 1, one of them
  failed, and the text does not say which.
* A driver's word on the one worker it saw fail, as a sentence of its own: a subject and
  its index, then `has failed` or `has died` ending the line. Ray Train's driver
  (ray/train/_internal/utils.py `check_for_failure`) logs `Worker N has failed.` for each
  worker whose task raised RayActorError (its process died), N its index in the worker
  group, the world rank Ray Train gives it; it returns at the first in older versions and
  logs every failed one of a batch in newer ones, so diagnose/firstchild.py names N only
  where the text holds one such report. No exit code is given (WorkerFailed.exitcode None).
"""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, TaskExit, WorkerFailed
from healthcheck.parsers.torch_log.state import TorchState, agent_where

_HOROVOD_HEAD = "Horovod detected that one or more processes exited with non-zero status"
_HOROVOD_FIRST = "The first process to do so was:"
_HOROVOD_NAME = re.compile(r"Process name: {0,16}(\d{1,9})[ \t]{0,64}$")
_HOROVOD_EXIT = re.compile(r"Exit code: {0,16}(-?\d{1,3})[ \t]{0,64}$")
_HOROVOD_LINES = 4  # lines after the head the two fields may take

# the launcher's own argument list: the python it ran with `-u`, then the script's arguments
_ARGV_LOCAL_RANK = re.compile(r"'-u', .{0,4096}?'--local[_-]rank=(\d{1,6})'")
_DEEPSPEED_EXIT = re.compile(r"sigkill_handler\] \[.{0,65536}\] exits with return code = (-?\d{1,3})")
# `Worker 0 has failed.` (Ray Train), `rank 3 has died`: the whole sentence, ending its line
_HAS_FAILED = re.compile(r"(?:^|[\s:>)\]])(?:[Ww]orker|[Pp]rocess|[Rr]ank|[Tt]ask) #?(\d{1,7}) "
                         r"has (?:failed|died)\.?\s{0,256}$")
_CALLED_PROCESS = re.compile(r"CalledProcessError: Command '\[.{0,65536}\]' returned non-zero exit status (-?\d{1,3})")


# a supervisor's (a job's own launcher's) word on each worker's end, as Python's subprocess
# gives it (a negative status is the signal that ended it): `worker 2 (pid 10584) exited with
# status 1`, `rank 0 (pid 11006) exited with code -6`; the pid, where given, places the
# process's own unlabelled lines (a glog FATAL). mp.spawn's `process N terminated with exit code
# C` is spawn.py's
_WORKER_EXIT = re.compile(r"(?<![\w-])(?:worker|rank|process|proc|task)[ _#-]?(\d{1,7})(?: \(pid:? ?(\d{1,10})\))? "
                          r"(?:exited|ended|died) with (?:exit )?(?:status|code|return code)[ :=]{0,3}"
                          r"(-?\d{1,3})\b")


def read_worker_exit(state: TorchState, line: Line) -> bool:
    """A supervisor's `worker R (pid P) exited with status C`: worker R's end (TaskExit,
    launcher "supervisor"), its signal where C is negative."""
    m = _WORKER_EXIT.search(line.text)
    if m is None:
        return False
    code = int(m.group(3))
    where = agent_where(line)
    state.add("task_exits", TaskExit(line=where["line"], time=where["time"], tasks=(int(m.group(1)),),
                                     state=f"exited with status {code}", exitcode=code,
                                     signal=SIGNALS.get(-code, "") if code < 0 else "", launcher="supervisor",
                                     pid=int(m.group(2)) if m.group(2) else None))
    return True


def _worker_failed(state: TorchState, line: Line, exitcode: int | None, *, rank: int | None = None,
                   local_rank: int | None = None) -> None:
    where = agent_where(line)
    state.add("worker_failures", WorkerFailed(
        line=where["line"], task=where["task"], time=where["time"], rank=rank, local_rank=local_rank,
        exitcode=exitcode, signal=SIGNALS.get(-exitcode, "") if exitcode is not None and exitcode < 0 else ""))


def read_has_failed(state: TorchState, line: Line) -> bool:
    """A driver's `Worker N has failed.` (module doc): worker N, the one it saw fail."""
    m = _HAS_FAILED.search(line.text)
    if m is None:
        return False
    _worker_failed(state, line, None, rank=int(m.group(1)))
    return True


def read_horovod(state: TorchState, line: Line) -> bool:
    """Horovod's runner's first failed process: its head opens the report, its `Process
    name:` and `Exit code:` lines (either order, within a few lines) fill it."""
    b = line.text
    if _HOROVOD_HEAD in b and b.rstrip().endswith(_HOROVOD_FIRST):
        state.horovod_first = {"at": line.number}
        return True
    report = state.horovod_first
    if report is None:
        return False
    if line.number - report["at"] > _HOROVOD_LINES:
        state.horovod_first = None
        return False
    m = _HOROVOD_NAME.search(b)
    if m is not None:
        report["rank"] = int(m.group(1))
    elif (m := _HOROVOD_EXIT.search(b)) is not None:
        report["exitcode"] = int(m.group(1))
    else:
        return False
    if "rank" in report and "exitcode" in report:
        state.horovod_first = None
        _worker_failed(state, line, report["exitcode"], rank=report["rank"])
    return True


def read_launcher_command(state: TorchState, line: Line) -> bool:
    """DeepSpeed's `sigkill_handler] [argv] exits with return code = N`, an old launcher's
    CalledProcessError with its argv: the failed child where the argv's local rank is 0
    (see the module's docstring)."""
    b = line.text
    m = _DEEPSPEED_EXIT.search(b) or _CALLED_PROCESS.search(b)
    if m is None:
        return False
    state.torch = True  # a distributed launcher's own words, whether or not they name a process
    argv = _ARGV_LOCAL_RANK.search(b, 0, m.end())
    if argv is not None and argv.group(1) == "0":
        _worker_failed(state, line, int(m.group(1)), local_rank=0)
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("worker-exit", lambda b: " with " in b, read_worker_exit),
    Handler("worker-has-failed", lambda b: " has failed" in b or " has died" in b, read_has_failed),
    Handler("horovod-first-exit",
            lambda b: _HOROVOD_HEAD in b or "Process name: " in b or "Exit code: " in b, read_horovod),
    Handler("launcher-command",
            lambda b: "exits with return code = " in b or "returned non-zero exit status" in b,
            read_launcher_command),
)
