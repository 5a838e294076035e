"""The remote command line (timeout wrapper, env, cwd, quoting) and what its exit status means."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from healthcheck.runners.base import CommandResult
from healthcheck.runners.launch import check_env  # one rule for environment names

# The remote `timeout` sends SIGTERM at N seconds and SIGKILL this much later.
KILL_AFTER_S = 2

# Exit statuses of coreutils `timeout`: timed out (TERM, then KILL); its own failure;
# command found but not runnable; command not found.
_TIMED_OUT_CODES = (124, 137)


def format_seconds(seconds: float) -> str:
    """Duration for coreutils `timeout`: plain decimal, never 0 (0 would mean 'no limit')."""
    text = f"{max(float(seconds), 0.01):.3f}".rstrip("0").rstrip(".")
    return text


def remote_command(
    argv: tuple[str, ...] | list[str], *, timeout_s: float, env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """The command line sent to the remote shell; ValueError for an argv or env it cannot carry.

    `timeout -k 2 N [env NAME=value ...] argv...`, every word quoted by shlex.join, so no
    argument is ever interpreted by the remote shell. `timeout` stops option parsing at N
    and `env` at its first non-option word, so an argv[0] starting with "-" is still run
    as a command; only an argv[0] containing "=" cannot follow `env` (it would be read as
    an assignment). With cwd, `cd -- <cwd>` comes first; a directory it cannot enter
    exits 125 with a line starting `hc: cannot cd` (see `remote_result`).
    """
    argv = tuple(argv)
    if not argv:
        raise ValueError("empty command")
    for arg in argv:
        if not isinstance(arg, str):
            raise ValueError(f"command arguments must be strings, got {arg!r}")
        if "\0" in arg:
            raise ValueError("command arguments cannot contain NUL bytes")
    variables = check_env(env)
    words = ["timeout", "-k", str(KILL_AFTER_S), format_seconds(timeout_s)]
    if variables:
        if "=" in argv[0]:
            raise ValueError(f"cannot run {argv[0]!r} with an environment (it contains '=')")
        words += ["env", *(f"{k}={v}" for k, v in variables.items())]
    command = shlex.join([*words, *argv])
    return f"{_cd_prefix(cwd)}{command}" if cwd is not None else command


_CD_FAILED = "hc: cannot cd to "


def _cd_prefix(cwd: str) -> str:
    """`cd -- <cwd> || exit 125; `, quoted; ValueError for a cwd that cannot be carried."""
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        raise ValueError(f"invalid working directory {cwd!r}")
    # 125 plus our own line tells "could not start there" from the command's own failure
    failed = shlex.quote(f"{_CD_FAILED}{cwd}")
    return f"cd -- {shlex.quote(cwd)} || {{ printf '%s\\n' {failed} >&2; exit 125; }}; "


def remote_result(
    argv: tuple[str, ...], status: int, stdout: str, stderr: str, duration: float, timeout_s: float
) -> CommandResult:
    """Map the wrapper's exit statuses to the local runner's result shape."""
    # 124/137 mean "timed out" only when that much time has passed: a tool's own 124
    # (or an OOM kill's 137) after a second must not read as a timeout.
    if status in _TIMED_OUT_CODES and duration >= timeout_s - 0.1:
        return CommandResult(argv, None, stdout, stderr, duration, timed_out=True)
    if status == 127:
        wrapper = stderr.startswith(("timeout: failed to run command", "env: "))
        said = f"{argv[0]}: command not found" if wrapper or not stderr.strip() else stderr
        return CommandResult(argv, None, stdout, said, duration, not_found=True)
    if status in (125, 126) and stderr.startswith(("timeout: ", "env: ")):
        said = stderr.strip().splitlines()[-1]
        return CommandResult(argv, None, stdout, stderr, duration, error=said)
    if status == 125 and _CD_FAILED in stderr:  # the cwd prefix: the command never started
        said = "; ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
        return CommandResult(argv, None, stdout, stderr, duration, error=said)
    return CommandResult(argv, status, stdout, stderr, duration)
