"""py-spy dumps of one process: which py-spy to run, `py-spy dump --json --pid PID`
(`--nonblocking` for a stopped or D-state process, which ptrace would make it fail or
wait on; `--locals` where sampling.py asks), and py-spy's complaints turned into errors
that name their fix (ptrace refused, no such process, no Python)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.diagnose.nodeschema import PTRACE_FIX, PY_SPY_FIX, CollectError, DumpMode
from healthcheck.diagnose.procs import parse_int
from healthcheck.parsers.py_spy import PySpyDump, PySpyThread, parse_py_spy
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import run_command
from healthcheck.runners.proctree import read_small

MAX_PY_SPY_OUTPUT = 4 << 20  # bytes of one py-spy dump kept and parsed


def resolve_py_spy(py_spy: str | None) -> str | None:
    """The py-spy to run: a path, or a name looked up next to this Python (hc's venv), then on PATH."""
    if not py_spy:
        return None
    if os.sep in py_spy:
        return py_spy if os.access(py_spy, os.X_OK) else None
    beside = Path(sys.executable).parent / py_spy  # the one installed with hc (its venv) first
    if os.access(beside, os.X_OK) and beside.is_file():
        return str(beside)
    return shutil.which(py_spy)


def process_main_thread(dump: PySpyDump, pid: int) -> PySpyThread | None:
    """The process's main thread: the one whose OS id is the pid, else MainThread, else the first."""
    threads = dump.threads
    return next((t for t in threads if t.os_thread_id == pid), None) \
        or next((t for t in threads if t.name == "MainThread"), None) \
        or (threads[0] if threads else None)


class StackDump(msgspec.Struct):
    """One py-spy dump of a process: its stack, or the error that took its place."""

    stack: PySpyDump | None = None
    mode: DumpMode | None = None
    seconds: float | None = None
    raw: str | None = None
    error: CollectError | None = None


def dump_mode(state: str) -> DumpMode:
    """How to dump a process in this state: stopped, traced or D-state ones without ptrace."""
    return "nonblocking" if state in ("T", "t", "D") else "blocking"


def py_spy_argv(py_spy: str, pid: int, mode: DumpMode, *, native: bool, with_locals: bool) -> list[str]:
    """The py-spy dump command line."""
    argv = [py_spy, "dump", "--json", "--pid", str(pid)]
    if native:
        argv.append("--native")
    if with_locals:
        argv.append("--locals")
    if mode == "nonblocking":
        argv.append("--nonblocking")
    return argv


def dump_stack(py_spy: str, pid: int, state: str, *, timeout_s: float, native: bool = False,
               keep_raw: bool = False, rank: int | None = None, with_locals: bool = False) -> StackDump:
    """`py-spy dump --json --pid PID` (`--nonblocking` for a stopped or D-state process;
    `--locals` with_locals: sampling.py reduces them at once)."""
    mode = dump_mode(state)
    argv = py_spy_argv(py_spy, pid, mode, native=native, with_locals=with_locals)
    r = run_command(argv, timeout_s=timeout_s, env={**os.environ, "RUST_BACKTRACE": "0"})
    seconds = round(r.duration_s, 3)
    error = _run_error(r, py_spy, pid, state, timeout_s, rank)
    if error is not None:
        return StackDump(mode=mode, seconds=seconds, error=error)
    out = r.stdout[:MAX_PY_SPY_OUTPUT]
    if not (r.returncode == 0 and out.strip()):
        return StackDump(mode=mode, seconds=seconds, error=py_spy_error(r.stderr or r.stdout, pid, rank,
                                                                         r.returncode))
    raw = out if keep_raw else None
    try:
        dump = parse_py_spy(out)
    except ParseError as exc:
        return StackDump(mode=mode, seconds=seconds, raw=raw, error=CollectError(
            "py-spy-failed", f"py-spy output for pid {pid} unreadable: {exc}", pid=pid, rank=rank))
    return StackDump(stack=dump, mode=mode, seconds=seconds, raw=raw)


def _run_error(r: CommandResult, py_spy: str, pid: int, state: str, timeout_s: float,
               rank: int | None) -> CollectError | None:
    """Why py-spy did not run to its end (missing, could not start, timed out), None when it did."""
    if r.not_found:
        return CollectError("py-spy-missing", f"{py_spy}: not found", fix=PY_SPY_FIX, pid=pid, rank=rank)
    if r.error:
        return CollectError("py-spy-failed", f"cannot run {py_spy}: {r.error}", fix=PY_SPY_FIX, pid=pid, rank=rank)
    if r.timed_out:
        return CollectError(
            "py-spy-timeout", f"py-spy dump of pid {pid} (state {state}) took more than {timeout_s:g} s",
            fix="retry with a longer --timeout, or dump it by hand with py-spy dump --nonblocking",
            pid=pid, rank=rank)
    return None


def py_spy_error(text: str, pid: int, rank: int | None = None, returncode: int | None = None) -> CollectError:
    """py-spy's complaint (stderr) as an error fact naming the fix."""
    try:
        err = parse_py_spy(text[:MAX_PY_SPY_OUTPUT]).error
    except ParseError:
        err = None
    if err is None:
        return CollectError("py-spy-failed", f"py-spy failed on pid {pid} (exit {returncode}): "
                            f"{clip(text.strip(), 400) or 'no message'}", pid=pid, rank=rank)
    said = "; ".join([err.message, *err.reasons])
    if err.kind == "permission":
        scope = ptrace_scope()
        where = f" (kernel.yama.ptrace_scope is {scope})" if scope is not None else ""
        return CollectError("ptrace-denied", f"py-spy was refused ptrace on pid {pid}{where}: {clip(said, 300)}",
                            fix=PTRACE_FIX, pid=pid, rank=rank)
    if err.kind == "no-process":
        return CollectError("process-gone", f"pid {pid} ended before py-spy read it: {clip(said, 300)}",
                            pid=pid, rank=rank)
    if err.kind == "no-python":
        return CollectError("py-spy-failed", f"py-spy found no Python in pid {pid}: {clip(said, 300)}",
                            fix="a Python newer than this py-spy knows? upgrade py-spy", pid=pid, rank=rank)
    return CollectError("py-spy-failed", f"py-spy failed on pid {pid}: {clip(said, 400)}", pid=pid, rank=rank)


def ptrace_scope(path: str = "/proc/sys/kernel/yama/ptrace_scope") -> int | None:
    """kernel.yama.ptrace_scope, None where the file does not exist."""
    data = read_small(path, 16)
    return parse_int(data.decode("ascii", errors="replace")) if data else None
