"""ssh_config's ProxyCommand: its %-tokens, the command run as OpenSSH runs it, its end.

OpenSSH runs `exec <command>` with `$SHELL -c` (else /bin/sh) and talks SSH over the
command's stdin and stdout. So does `ProxyProcess`, with one end of a socketpair as the
command's stdin and stdout, so that paramiko reads a real socket (timeouts, EOF when the
command dies). paramiko's own `ProxyCommand` is not used: it splits the line with shlex
instead of running a shell, spins at 100 % CPU once the command has exited (its recv
loops on empty reads until the timeout, so the transport never sees EOF), and its
close() sends SIGTERM without reaping or killing what the command started.

The command runs in a session (process group) of its own; `close()` ends the whole group
(SIGTERM, then SIGKILL after a grace) and reaps it, so nothing hc started for a
connection outlives the connection. Like every child of hc (runners/local.py) it dies
with hc (PR_SET_PDEATHSIG, forked from a thread that lasts: connections are made from
fan-out threads that end first) and its group is known to `kill_children`, which a
stopped hc calls before exiting.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import threading
from typing import TYPE_CHECKING

from healthcheck.runners import local
from healthcheck.runners.ssh.errors import SshError, SshErrorKind

if TYPE_CHECKING:
    from healthcheck.runners.ssh.config import Target

_STDERR_TAIL = 2048  # bytes of the command's stderr kept for an error message
_TERM_GRACE_S = 1.0  # SIGTERM, then this long before SIGKILL


def expand_tokens(command: str, target: Target) -> str:
    """OpenSSH's ProxyCommand tokens: %h host (after HostName), %p port, %r remote user,
    %n the name as given, %u local user, %% a percent. Another %-token is a config error
    (as in ssh); one left-to-right pass, so an expanded value is never expanded again."""
    values = {
        "%": "%", "h": target.hostname, "p": str(target.port), "r": target.user, "n": target.node,
        "u": getpass.getuser(),
    }
    out: list[str] = []
    i = 0
    while i < len(command):
        c = command[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        token = command[i + 1:i + 2]
        if token not in values:
            shown = f"%{token}" if token else "a trailing %"
            raise SshError(SshErrorKind.CONFIG, f"{target.node}: ProxyCommand {command!r}: unknown token {shown} "
                                                "(hc expands %h %p %r %n %u %%)")
        out.append(values[token])
        i += 2
    return "".join(out)


class ProxyProcess:
    """A running ProxyCommand; `sock` is hc's end of its stdin/stdout."""

    def __init__(self, command: str, where: str) -> None:
        self.command = command
        self.where = where
        ours, theirs = socket.socketpair()
        shell = os.environ.get("SHELL") or "/bin/sh"
        try:
            self.process = local.popen_for_life(
                [shell, "-c", f"exec {command}"], stdin=theirs.fileno(), stdout=theirs.fileno(), stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True,
            )
            local.track_group(self.process.pid)
        except OSError as exc:
            ours.close()
            raise SshError(SshErrorKind.CONFIG, f"{where}: cannot run ProxyCommand with {shell}: "
                                                f"{exc.strerror or exc}") from None
        finally:
            theirs.close()
        self.sock = ours
        self._tail = bytearray()
        self._reader = threading.Thread(target=self._drain_stderr, name=f"hc-proxy-{self.process.pid}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _drain_stderr(self) -> None:
        stream = self.process.stderr
        if stream is None:
            return
        with contextlib.suppress(OSError, ValueError):
            for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
                self._tail += chunk
                del self._tail[:-_STDERR_TAIL]

    def stderr_tail(self) -> str:
        text = bytes(self._tail).decode("utf-8", "replace")
        return " / ".join(line.strip() for line in text.strip().splitlines()[-3:] if line.strip())

    def failure(self, wait_s: float = 0.3) -> SshError | None:
        """Why the connection failed, when the command itself ended (else None): the
        command's exit status and the last lines it wrote to stderr."""
        try:
            status = self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(0.5)
        said = self.stderr_tail()
        if status in (126, 127):
            kind = SshErrorKind.CONFIG  # the shell could not find or run the command
        elif "refused" in said.lower():
            kind = SshErrorKind.REFUSED
        elif "timed out" in said.lower():
            kind = SshErrorKind.TIMEOUT
        else:
            kind = SshErrorKind.UNREACHABLE
        how = f"exited with status {status}" if status >= 0 else f"was killed by signal {-status}"
        return SshError(kind, f"{self.where}: ProxyCommand {self.command!r} {how}" + (f": {said}" if said else ""))

    def close(self) -> None:
        """End the command's process group and reap it; idempotent."""
        with contextlib.suppress(OSError):
            self.sock.close()  # the command sees EOF on its stdin first
        if self.process.returncode is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=_TERM_GRACE_S)
        # what the command started in its group (its leader may have exited already)
        self._signal_group(signal.SIGKILL)
        local.untrack_group(self.process.pid)
        self._reader.join(0.5)
        # a reader still in os.read (something that left the group holds the pipe) keeps
        # the fd: closed under it, its number could be reused and read by the wrong owner
        if self.process.stderr is not None and not self._reader.is_alive():
            with contextlib.suppress(OSError):
                self.process.stderr.close()

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
