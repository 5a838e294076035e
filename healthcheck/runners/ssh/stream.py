"""`RemoteStream`: a command on a node that keeps running while lines go to its stdin and
come back on its stdout (`hc bw serve`), over one of its connection's sessions; the line
reading and its bounds are line_stream.LineStream's.

The command runs under the same `timeout -k` wrapper as every SSH command, with a
lifetime instead of a per-command timeout. Closing sends end-of-input (the command's cue
to end) and waits a moment for its exit; a command that outlives that is left to its
wrapper and to the channel's close.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from healthcheck.runners.line_stream import SEND_STALL_S, LineStream
from healthcheck.runners.ssh.connection import _drain


class RemoteStream(LineStream):
    """Lines to a remote command's stdin and from its stdout; never raises once started."""

    def __init__(self, node: str, chan: Any, release: Callable[[], None]) -> None:
        super().__init__(node)
        self._chan = chan
        self._release = release
        chan.settimeout(0.0)

    def _exited(self) -> bool:
        return bool(self._chan.exit_status_ready() or self._chan.closed)

    def send_line(self, data: bytes) -> bool:
        """Write one line to the command's stdin; False when it can no longer be written."""
        if self.ended:
            return False
        payload = memoryview(data if data.endswith(b"\n") else data + b"\n")
        try:
            while payload:
                self._chan.settimeout(SEND_STALL_S)
                sent = self._chan.send(payload)
                if sent <= 0:
                    return False
                payload = payload[sent:]
            return True
        except (OSError, TimeoutError):
            return False
        finally:
            self._chan.settimeout(0.0)

    def _pump(self, wait_s: float) -> None:
        try:
            select.select([self._chan.fileno()], [], [], wait_s)
            self._drain_stderr()
            chunks: list[bytes] = []
            self._eof = _drain(self._chan.recv, chunks)
            self._out += b"".join(chunks)
            if self._eof:
                self._drain_stderr()
        except OSError:  # the transport went away under us
            self._eof = True

    def _drain_stderr(self) -> None:
        chunks: list[bytes] = []
        _drain(self._chan.recv_stderr, chunks)
        for data in chunks:
            self._keep(data)

    def exit_status(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def close(self, wait_s: float = 3.0) -> bool:
        """End of input, a moment for the command to end, then the channel closed; idempotent.
        False: a command that outlives it is its `timeout -k` wrapper's to end, not ours."""
        with self._closing:
            if self._closed:
                return False
            self._closed = True
        try:
            self._chan.shutdown_write()
            self._chan.status_event.wait(wait_s)
        except Exception:
            pass
        finally:
            try:
                self._chan.close()
            finally:
                self._release()
        return False
