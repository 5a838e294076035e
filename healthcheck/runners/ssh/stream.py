"""`RemoteStream`: a command on a node that keeps running while lines go to its stdin and
come back on its stdout (`hc bw serve`), over one of its connection's sessions; the line
reading and its bounds are line_stream.LineStream's.

The command runs under the same `timeout -k` wrapper as every SSH command, with a
lifetime instead of a per-command timeout. Closing sends end-of-input (the command's cue
to end) and waits a moment for its exit; a command that outlives that (one inside a test
that will not complete reads no input) is ended by the caller's `end_with`, which kills
its process group on the node by its id and waits until it is gone. Without one, it is
left to its wrapper and to the channel's close, and `still_running` says so.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from healthcheck.runners.line_stream import SEND_STALL_S, LineStream


class RemoteStream(LineStream):
    """Lines to a remote command's stdin and from its stdout; never raises once started."""

    def __init__(self, node: str, chan: Any, release: Callable[[], None]) -> None:
        super().__init__(node)
        self._chan = chan
        self._release = release
        self._left = ""  # after close(): why the command may still run ('' once it is known gone)
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
            self._eof = drain_chunks(self._chan.recv, chunks)
            self._out += b"".join(chunks)
            if self._eof:
                self._drain_stderr()
        except OSError:  # the transport went away under us
            self._eof = True

    def _drain_stderr(self) -> None:
        chunks: list[bytes] = []
        drain_chunks(self._chan.recv_stderr, chunks)
        for data in chunks:
            self._keep(data)

    def exit_status(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def close(self, wait_s: float = 3.0) -> bool:
        """End of input, up to wait_s for the command to end, then, where it did not, the
        caller's `end_with`; the channel closed; idempotent. True when it had to be killed."""
        with self._closing:
            if self._closed:
                return False
            self._closed = True
        try:
            ended = self._end_of_input(wait_s)
            if not ended and self._kill is not None:
                self._left = self._kill()
                return True
            if not ended:
                self._left = (f"it did not end within {wait_s:g} s of the end of its input, and hc knows "
                              "no process group of it to kill: left to its `timeout` wrapper")
            return False
        finally:
            try:
                self._chan.close()
            finally:
                self._release()

    def _end_of_input(self, wait_s: float) -> bool:
        """Send end of input; True once the command's exit came back within wait_s."""
        try:
            self._chan.shutdown_write()
            return bool(self._chan.status_event.wait(wait_s) if wait_s > 0 else self._chan.status_event.is_set())
        except Exception:  # the transport went away: nothing came back
            return False

    def still_running(self) -> str:
        if self._left and self._kill is not None:
            self._left = self._kill()
        return self._left


_READ_CHUNK = 1 << 16


def drain_chunks(read: Callable[[int], bytes], into: list[bytes]) -> bool:
    """Read what is buffered; True at end of stream."""
    while True:
        try:
            data = read(_READ_CHUNK)
        except TimeoutError:
            return False
        if not data:
            return True
        into.append(data)
