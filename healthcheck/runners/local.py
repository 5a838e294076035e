"""Run a local command with a hard timeout that kills the whole process group.

Children die with the run: each command runs in its own process group (so a timeout
kills everything it started), the groups still running are known (`kill_children`, which
the hooks' hard deadline and signal handlers and a sweep's stop (runners/stop.py) call
before exiting; a stop arriving at the fork is raised once the group is known), and each
child asks the kernel for SIGKILL when hc dies (PR_SET_PDEATHSIG), so an hc killed by
slurmd or the OOM killer leaves no orphaned `scontrol` to drain a node after a newer run
resumed it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from healthcheck.runners.base import CommandResult

# process groups of the commands running now (leader pid == pgid)
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()
# forks under way (a token each, see `starting`), and those a kill_children() call has doomed:
# a child can run before its parent registers its group, so the kill must reach it there
_STARTING: set[object] = set()
_DOOMED: set[object] = set()


def kill_children() -> None:
    """SIGKILL every command group hc started that is still running (safe in a signal handler)."""
    _DOOMED.update(list(_STARTING))  # registered after this call: killed at registration
    for pgid in list(_LIVE):
        _kill_pgid(pgid)


def _kill_pgid(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


@contextmanager
def starting() -> Iterator[Callable[[int], None]]:
    """Bracket one fork and its registration; yields the function that registers its group.

    kill_children() called between the fork and the registration (another thread's hard
    deadline) still reaches the group: the registration kills it. Forks that begin after
    the call are not affected: kill_children is not a latch (a test process calls it and
    goes on)."""
    token = object()
    with _LIVE_LOCK:
        _STARTING.add(token)
    try:
        yield lambda pgid: track_group(pgid, token)
    finally:
        with _LIVE_LOCK:
            _STARTING.discard(token)
            _DOOMED.discard(token)


def _pdeathsig() -> Callable[[], None] | None:
    """A preexec function that makes the child die with hc (Linux), resolved before any fork.

    It only calls prctl(2) and getppid(2) through an already-resolved ctypes function,
    so it takes no lock that another thread could hold at fork time.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # hc died between fork and prctl
            os._exit(137)

    return preexec


_PREEXEC: Callable[[], None] | None = None
_PREEXEC_PID = -1


def die_with_hc() -> Callable[[], None] | None:
    """The preexec function that makes a child die with this process (PR_SET_PDEATHSIG),
    resolved once per process because the parent's pid is baked into it."""
    global _PREEXEC, _PREEXEC_PID
    if _PREEXEC_PID != os.getpid():
        _PREEXEC, _PREEXEC_PID = _pdeathsig(), os.getpid()
    return _PREEXEC


_LASTING: Any = None  # concurrent.futures.ThreadPoolExecutor: one thread that lives as long as hc
_LASTING_LOCK = threading.Lock()


def popen_for_life(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **popen) for a child meant to outlive the thread that asks for it
    (a persistent worker started from a test's short-lived thread), yet die with hc.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process:
    a child forked from a short-lived thread would be killed with that thread. So it is
    forked from one thread kept for the life of the process, and dies with hc as every
    child does."""
    global _LASTING
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 -- persistent workers only; not the prologue's

    with _LASTING_LOCK:
        if _LASTING is None:
            _LASTING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hc-spawn")
        spawner = _LASTING
    return spawner.submit(subprocess.Popen, list(argv), preexec_fn=die_with_hc(), **popen).result()


def track_group(pgid: int, token: object = None) -> None:
    """Register a running command's process group, so kill_children() reaches it; a group
    whose fork (`starting` token) a kill_children() call overlapped is killed here."""
    with _LIVE_LOCK:
        _LIVE.add(pgid)
    if token is not None and token in _DOOMED:
        _kill_pgid(pgid)


def untrack_group(pgid: int) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(pgid)


def _decode(data: bytes | None) -> str:
    # Tool output is not guaranteed to be UTF-8 (or text at all); never let decoding fail.
    return (data or b"").decode("utf-8", errors="replace")


# What holds a stop signal's raise while a command is forked and its group registered:
# runners.stop.install() sets its `deferred` here. Until then no stop handler runs (the
# hooks never install one, and never import runners.stop: the prologue stays fast).
stop_deferral: Callable[[], AbstractContextManager[None]] = nullcontext


def run_command(
    argv: tuple[str, ...] | list[str],
    *,
    timeout_s: float,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Run argv (never through a shell); on timeout kill its process group and return."""
    argv = tuple(argv)
    start = time.monotonic()
    proc: subprocess.Popen | None = None
    try:
        # a stop (Ctrl-C, SIGTERM) arriving between the fork and track_group is raised
        # after it, inside this try: no command runs that kill_children and the except miss
        with stop_deferral(), starting() as register:
            try:
                proc = _popen(argv, input, env, cwd)
            except FileNotFoundError as exc:
                if cwd is not None and exc.filename == cwd:  # the directory is missing, not the tool
                    return CommandResult(argv, None, "", "", 0.0, error=f"cannot run in {cwd}: {exc.strerror}")
                return CommandResult(argv, None, "", f"{argv[0]}: command not found", 0.0, not_found=True)
            except OSError as exc:
                return CommandResult(argv, None, "", "", 0.0, error=f"{exc.strerror or exc}")
            register(proc.pid)
        return _wait(proc, argv, input, timeout_s, start)
    except BaseException:  # Ctrl-C, a hook's deadline: what hc started dies with it
        if proc is not None:
            _kill_group(proc)
        raise
    finally:
        if proc is not None:
            untrack_group(proc.pid)


def _popen(argv: tuple[str, ...], input: str | None, env: Mapping[str, str] | None,
           cwd: str | None) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        # Its own process group, so a timeout kills the tool and everything it started.
        start_new_session=True,
        preexec_fn=die_with_hc(),
    )


def _wait(proc: subprocess.Popen, argv: tuple[str, ...], input: str | None, timeout_s: float,
          start: float) -> CommandResult:
    try:
        out, err = proc.communicate(input.encode() if input is not None else None, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            # Collect what it printed before it hung (the evidence of a hang); a grandchild
            # that left the process group may still hold the pipes, so this wait is bounded too.
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired as exc:
            # what was read so far comes with the exception: keep it rather than nothing
            out, err = exc.output or b"", exc.stderr or b""
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait(timeout=1.0)
        return CommandResult(
            argv, None, _decode(out), _decode(err), time.monotonic() - start, timed_out=True
        )
    return CommandResult(argv, proc.returncode, _decode(out), _decode(err), time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


class LocalRunner:
    """Runs commands on this machine, in `env` (None: hc's own environment)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = env

    def run(
        self,
        argv: tuple[str, ...],
        *,
        timeout_s: float,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run argv here; `env` adds to (and overrides) the runner's environment, as over SSH."""
        merged = self.env
        if env:
            merged = {**(self.env if self.env is not None else os.environ), **env}
        return run_command(argv, timeout_s=timeout_s, input=input, env=merged, cwd=cwd)
