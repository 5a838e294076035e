"""torch.multiprocessing.spawn's console, where the script is its own launcher: how it
reports the first process that failed (it prints only that one, then terminates the rest).

* `-- Process N terminated with the following error:` then the child's traceback,
  unlabelled: the traceback is process N's, read as rank N's (mp.spawn's process index;
  where one mp.spawn starts the whole world, as on one node, the index is the rank), and
  process N exited 1 (mp.spawn's child does after an exception).
* `ProcessExitedException: process N terminated with signal SIGKILL` (or `with exit code
  C`; torch 1.x raised a plain `Exception:` with the same words): process N died without a
  traceback of its own; read as a launcher's word on a task, like Open MPI's `exited on
  signal` box (the first one it saw die).

Captured with torch 2.13 (tests/fixtures/diagnose/rules10)."""

from __future__ import annotations

import re

import msgspec

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, TaskExit
from healthcheck.parsers.torch_log.state import TorchState, agent_where

_ERROR_HEAD = re.compile(r"-- Process (\d{1,9}) terminated with the following error:\s*$")
# torch 1.x raised a plain `Exception: process N terminated with signal S` (spawn.py's join)
_EXITED = re.compile(r"(?:[\w.]{0,64}\.)?(?:ProcessExited)?Exception: process (\d{1,9}) terminated with "
                     r"(?:signal (\w{1,16})|exit code (-?\d{1,9}))")


def read_error_head(state: TorchState, line: Line) -> bool:
    """`-- Process N terminated with the following error:`: the unlabelled lines after it are N's."""
    m = _ERROR_HEAD.match(line.text)
    if m is None or line.global_rank is not None:
        return False
    state.spawn_process, state.spawn_opened = int(m.group(1)), False
    # mp.spawn's child puts its traceback on the error queue and exits 1 (spawn.py's _wrap)
    state.add("task_exits", TaskExit(**agent_where(line), tasks=(state.spawn_process,), launcher="spawn",
                                     state="terminated with an error", exitcode=1))
    return True


def read_exited(state: TorchState, line: Line) -> bool:
    """`ProcessExitedException: process N terminated with signal S | exit code C`."""
    m = _EXITED.search(line.text)
    if m is None:
        return False
    name, code = m.group(2), m.group(3)
    number = next((n for n, s in SIGNALS.items() if s == name), None) if name else None
    state.add("task_exits", TaskExit(
        **agent_where(line), tasks=(int(m.group(1)),), launcher="spawn",
        state=f"terminated with signal {name}" if name else f"terminated with exit code {code}",
        signal=name or "", exitcode=-number if number else (int(code) if code else None)))
    return True


def spawn_labelled(state: TorchState, line: Line) -> Line:
    """An unlabelled line inside the failed process's report, labelled with its rank."""
    if state.spawn_process is None or line.global_rank is not None or line.task is not None:
        return line
    return msgspec.structs.replace(line, rank=state.spawn_process)


def end_spawn_error(state: TorchState, line: Line) -> None:
    """The report ends where the child's traceback, once open, is closed by its exception."""
    process = state.spawn_process
    if process is None or line.rank != process:
        return
    if state.tracebacks.get((process, None), 0):
        state.spawn_opened = True
    elif state.spawn_opened:
        state.spawn_process, state.spawn_opened = None, False


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("spawn-error", lambda b: b.startswith("-- Process "), read_error_head),
    Handler("spawn-exited", lambda b: "Exception: process " in b, read_exited),
)
