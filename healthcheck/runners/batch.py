"""Run many commands on a remote node in one SSH session, in parallel there.

sshd starts a session (fork, shell, environment) per channel, ~100 ms of its CPU each;
agentless checks of one node need half a dozen commands. One session that runs them all
in the background and returns each command's stdout, stderr and exit code, framed by
byte counts, costs one session start instead of six.
"""

from __future__ import annotations

import base64
import binascii
import math
import shlex
from collections.abc import Mapping
from typing import Any

from healthcheck.runners.base import CommandResult, Runner
from healthcheck.runners.ssh.commands import remote_result

_MARK = "@@hc-batch"


def batch_script(commands: list[tuple[str, ...]], timeout_s: float) -> str:
    """A POSIX sh script running `commands` concurrently, each under `timeout`."""
    t = max(1, math.ceil(timeout_s))
    lines = ['d=$(mktemp -d) || exit 99', 'trap \'rm -rf "$d"\' EXIT']
    for i, argv in enumerate(commands):
        # each command's own start and end, from /proc/uptime by the `read` builtin (no
        # process): its 137 is a timeout only if it ran that long, else a kill (the OOM
        # killer's) that must not read as one; without /proc the batch's length stands in
        lines.append(f'( read s _ </proc/uptime; timeout -k 2 {t} {shlex.join(argv)} >"$d/{i}.o" 2>"$d/{i}.e" '
                     f'</dev/null; r=$?; read e _ </proc/uptime; echo "$r $s $e" >"$d/{i}.r" ) 2>/dev/null &')
    lines.append("wait")
    for i in range(len(commands)):
        # base64 per stream: output may hold anything (markers, newlines, invalid UTF-8);
        # `read` is a builtin, so each command costs two processes here, not five
        lines.append(f'read r <"$d/{i}.r"; echo "{_MARK} {i} $r"; '
                     f'base64 -w0 "$d/{i}.o"; echo; base64 -w0 "$d/{i}.e"; echo')
    return "\n".join(lines) + "\n"


def parse_batch(output: str, commands: list[tuple[str, ...]],
                duration_s: float, timeout_s: float) -> dict[tuple[str, ...], CommandResult]:
    """The per-command results in `output` (commands missing from it are left out), each
    mapped as a single remote command's is (`remote_result`): `duration_s` is the whole
    batch's, the bound of every command's where the node did not say its own."""

    results: dict[tuple[str, ...], CommandResult] = {}
    lines = output.split("\n")
    i = 0
    while i + 2 < len(lines):
        parts = lines[i].split()
        if not 3 <= len(parts) <= 5 or parts[0] != _MARK or not parts[1].isdigit():
            i += 1
            continue
        index = int(parts[1])
        try:
            rc = int(parts[2])
            stdout = base64.b64decode(lines[i + 1], validate=True).decode(errors="replace")
            stderr = base64.b64decode(lines[i + 2], validate=True).decode(errors="replace")
        except (ValueError, binascii.Error):
            i += 1
            continue
        if index < len(commands):
            took = _own_duration(parts[3:], duration_s)
            results[commands[index]] = remote_result(commands[index], rc, stdout, stderr, took, timeout_s)
        i += 3
    return results


def _own_duration(stamps: list[str], batch_s: float) -> float:
    """A command's seconds from its two /proc/uptime readings, else the batch's (which ran
    every command at once, so no command took longer)."""
    try:
        start, end = (float(x) for x in stamps)
    except ValueError:  # not two numbers: no /proc/uptime on the node, or a torn record
        return batch_s
    took = end - start
    return took if math.isfinite(took) and 0 <= took <= batch_s + 1 else batch_s


class PrefetchingRunner:
    """Serves commands fetched together in one session; anything else runs on its own."""

    def __init__(self, runner: Runner, results: dict[tuple[str, ...], CommandResult]) -> None:
        self.runner = runner
        self.results = results

    def run(self, argv: tuple[str, ...], *, timeout_s: float, input: str | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        """The prefetched result of argv, or argv run on the underlying runner."""
        # the batch ran with no input, environment or directory of its own: only such calls match
        plain = input is None and env is None and cwd is None
        cached = self.results.get(tuple(argv)) if plain else None
        if cached is not None:
            return cached
        extra: dict[str, Any] = {}
        if env is not None:
            extra["env"] = env
        if cwd is not None:
            extra["cwd"] = cwd  # only passed when asked: not every runner takes them yet
        return self.runner.run(argv, timeout_s=timeout_s, input=input, **extra)


def prefetch(runner: Runner, commands: list[tuple[str, ...]], timeout_s: float) -> PrefetchingRunner:
    """Run `commands` in one session; a batch that fails leaves every command to run alone."""
    commands = list(dict.fromkeys(tuple(c) for c in commands))
    if not commands:
        return PrefetchingRunner(runner, {})
    result = runner.run(("sh", "-c", batch_script(commands, timeout_s)), timeout_s=timeout_s + 5)
    if result.timed_out or result.error or result.returncode == 99:
        return PrefetchingRunner(runner, {})
    return PrefetchingRunner(runner, parse_batch(result.stdout, commands, result.duration_s, timeout_s))
