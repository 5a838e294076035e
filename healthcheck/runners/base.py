"""What every runner shares: the result of one command and the `Runner` protocol.

Nothing from healthcheck (msgspec and the standard library only): the kernel
(`healthcheck.core`) imports this module and nothing else from runners, so runners may
import the kernel without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import msgspec


class CommandResult(msgspec.Struct, frozen=True):
    """The outcome of one command. A timeout or a missing tool is a result, not an exception."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    not_found: bool = False
    error: str | None = None  # could not start for another reason (permission, ...)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.not_found and not self.error


class Runner(Protocol):
    """Where a command runs: locally, over SSH, under srun.

    env: variables set for this command on top of the runner's own environment;
    cwd: the directory it runs in. Callers pass them only when they need them, so a
    runner that predates them keeps working for every other command.
    """

    def run(
        self,
        argv: tuple[str, ...],
        *,
        timeout_s: float,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult: ...
