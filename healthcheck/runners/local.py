"""Run a local command with a hard timeout that kills the whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class CommandResult:
    """The outcome of one command. A timeout or a missing tool is a result, not an exception."""

    argv: tuple[str, ...]
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    not_found: bool = False
    error: Optional[str] = None  # could not start for another reason (permission, ...)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.not_found and not self.error


def _decode(data: Optional[bytes]) -> str:
    # Tool output is not guaranteed to be UTF-8 (or text at all); never let decoding fail.
    return (data or b"").decode("utf-8", errors="replace")


def run_command(
    argv: tuple[str, ...] | list[str],
    *,
    timeout_s: float,
    input: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> CommandResult:
    """Run argv (never through a shell); on timeout kill its process group and return."""
    argv = tuple(argv)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            # Its own process group, so a timeout kills the tool and everything it started.
            start_new_session=True,
        )
    except FileNotFoundError:
        return CommandResult(argv, None, "", f"{argv[0]}: command not found", 0.0, not_found=True)
    except OSError as exc:
        return CommandResult(argv, None, "", "", 0.0, error=f"{exc.strerror or exc}")
    try:
        out, err = proc.communicate(input.encode() if input is not None else None, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            # Collect what it printed before it hung; a grandchild that left the process
            # group may still hold the pipes, so this wait is bounded too.
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            out, err = b"", b""
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
    """Runs commands on this machine."""

    def __init__(self, env: Optional[Mapping[str, str]] = None) -> None:
        self.env = env

    def run(
        self, argv: tuple[str, ...], *, timeout_s: float, input: Optional[str] = None
    ) -> CommandResult:
        return run_command(argv, timeout_s=timeout_s, input=input, env=self.env)
