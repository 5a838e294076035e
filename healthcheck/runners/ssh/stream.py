"""`RemoteStream`: a command on a node that keeps running while lines go to its stdin and
come back on its stdout (`hc bw serve`), over one of its connection's sessions.

The command runs under the same `timeout -k` wrapper as every SSH command, with a
lifetime instead of a per-command timeout. Closing sends end-of-input (the command's cue
to end) and waits a moment for its exit; a command that outlives that is left to its
wrapper and to the channel's close. Output is bounded: a stdout line longer than
MAX_LINE, or more than MAX_LINE of text that never ends a line, ends the stream; the
last STDERR_TAIL characters of stderr are kept to say why it ended.
"""

from __future__ import annotations

import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from healthcheck.runners.ssh.connection import _drain

MAX_LINE = 4 << 20  # one stdout line; a sweep's reply is kilobytes
STDERR_TAIL = 4000


class RemoteStream:
    """Lines to a remote command's stdin and from its stdout; never raises once started."""

    def __init__(self, node: str, chan: Any, release: Callable[[], None]) -> None:
        self.node = node
        self._chan = chan
        self._release = release
        self._lock = threading.Lock()  # one reader at a time; close() may come from another thread
        self._out = bytearray()
        self._err: deque[bytes] = deque()
        self._err_len = 0
        self._eof = False
        self._closed = False
        self._closing = threading.Lock()
        chan.settimeout(0.0)

    @property
    def ended(self) -> bool:
        """The command ended, its output ended, or the stream was closed."""
        return self._closed or self._eof or self._chan.exit_status_ready() or self._chan.closed

    def send_line(self, data: bytes) -> bool:
        """Write one line to the command's stdin; False when it can no longer be written."""
        if self.ended:
            return False
        payload = memoryview(data if data.endswith(b"\n") else data + b"\n")
        try:
            while payload:
                self._chan.settimeout(5.0)  # a stdin nobody reads for 5 s: the command is stuck
                sent = self._chan.send(payload)
                if sent <= 0:
                    return False
                payload = payload[sent:]
            return True
        except (OSError, TimeoutError):
            return False
        finally:
            self._chan.settimeout(0.0)

    def read_line(self, deadline: float, want: Callable[[bytes], bool]) -> bytes | None:
        """The next stdout line `want` accepts (others are skipped), or None at the deadline
        or the end of the output (`ended` tells which)."""
        with self._lock:
            while True:
                cut = self._out.find(b"\n")
                while cut >= 0:
                    line = bytes(self._out[:cut])
                    del self._out[:cut + 1]
                    if want(line):
                        return line
                    cut = self._out.find(b"\n")
                if len(self._out) > MAX_LINE:
                    self._note(f"a stdout line over {MAX_LINE} bytes")
                    self._eof = True
                if self._eof or self._closed:
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._pump(min(remaining, 0.5))

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

    def _keep(self, data: bytes) -> None:
        self._err.append(data)
        self._err_len += len(data)
        while self._err and self._err_len - len(self._err[0]) >= STDERR_TAIL:
            self._err_len -= len(self._err.popleft())

    def _note(self, text: str) -> None:
        self._keep(f"\nhc: {text}\n".encode())

    def stderr_tail(self) -> str:
        """The last stderr line that says something (what the command last complained of)."""
        try:
            self._drain_stderr()
        except OSError:
            pass
        text = b"".join(self._err).decode("utf-8", errors="replace")[-STDERR_TAIL:]
        lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
        return lines[-1][-300:] if lines else ""

    def exit_status(self) -> int | None:
        return self._chan.recv_exit_status() if self._chan.exit_status_ready() else None

    def close(self, wait_s: float = 3.0) -> None:
        """End of input, a moment for the command to end, then the channel closed; idempotent."""
        with self._closing:
            if self._closed:
                return
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
