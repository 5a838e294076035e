"""`LineStream`: a command that keeps running while lines go to its stdin and come back on
its stdout (`hc bw serve`), whatever carries it: an SSH session (ssh/stream.py) or a
launcher hc started here, srun or mpirun (process_stream.py).

What they share is the reading: stdout is cut into lines, a line the caller does not
want is skipped, and output is bounded: a stdout line longer than MAX_LINE, or more than
MAX_LINE of text that never ends a line, ends the stream; the last STDERR_TAIL
characters of stderr are kept to say why it ended. A carrier supplies `_pump` (read what
arrived, waiting at most a moment), `_drain_stderr`, `_exited`, `send_line`, `close` and
`still_running`.

Closing is end of input, which ends a command that is reading it; one that is not (inside
a test that will never complete, or stopped) is ended by force: a launcher's tree by the
carrier itself, a remote command by the caller's `end_with` (only it knows the command's
process group on its node). `still_running` then says whether it is gone, so a caller
that needs what the command held (a port) waits for that instead of assuming it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

MAX_LINE = 4 << 20  # one stdout line; a sweep's reply is kilobytes
STDERR_TAIL = 8000
SEND_STALL_S = 5.0  # a stdin nobody reads for this long: the command is stuck


class LineStream:
    """Lines to a running command's stdin and from its stdout; never raises once started."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()  # one reader at a time; close() may come from another thread
        self._out = bytearray()
        self._err: deque[bytes] = deque()
        self._err_len = 0
        self._eof = False
        self._closed = False
        self._closing = threading.Lock()
        self._kill: Callable[[], str] | None = None

    # -- what a carrier supplies

    def _exited(self) -> bool:
        raise NotImplementedError

    def _pump(self, wait_s: float) -> None:
        """Wait up to wait_s for output, then take what arrived (stdout into _out, stderr
        through _keep), setting _eof at the end of stdout."""
        raise NotImplementedError

    def _drain_stderr(self) -> None:
        raise NotImplementedError

    def send_line(self, data: bytes) -> bool:
        """Write one line to the command's stdin; False when it can no longer be written."""
        raise NotImplementedError

    def close(self, wait_s: float = 3.0) -> bool:
        """End of input, up to wait_s for the command to end (0: it is known not to read its
        input), then it is killed, and the carrier closed; idempotent. True when the command
        had to be killed (it did not end at the end of its input)."""
        raise NotImplementedError

    def exit_status(self) -> int | None:
        """The command's exit status once it ended (negative: the signal that killed it), else None."""
        raise NotImplementedError

    def still_running(self) -> str:
        """After close(): '' once the command is known to be gone, else why not (checked
        again, and ended again where the carrier can, each time it is asked)."""
        raise NotImplementedError

    def end_with(self, kill: Callable[[], str]) -> None:
        """How to end the command where end of input does not (it is inside a test, or hung)
        and the carrier cannot itself: `kill` ends it and waits, bounded, until it is gone;
        '' then, else why not. A launcher's tree is its carrier's to kill: it ignores this."""
        self._kill = kill

    # -- shared

    @property
    def ended(self) -> bool:
        """The command ended, its output ended, or the stream was closed."""
        return self._closed or self._eof or self._exited()

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

    def _keep(self, data: bytes) -> None:
        self._err.append(data)
        self._err_len += len(data)
        while self._err and self._err_len - len(self._err[0]) >= STDERR_TAIL:
            self._err_len -= len(self._err.popleft())

    def _note(self, text: str) -> None:
        self._keep(f"\nhc: {text}\n".encode())

    def stderr_tail(self) -> str:
        """The last stderr line that says something (what the command last complained of)."""
        lines = [line.strip() for line in self.stderr_text().splitlines() if any(c.isalnum() for c in line)]
        return lines[-1][-300:] if lines else ""

    def stderr_text(self) -> str:
        """The stderr kept (its last STDERR_TAIL characters), whole: a launcher's banner of many lines."""
        with self._lock:  # never beside a reader (nor a close that is ending the carrier)
            try:
                self._drain_stderr()
            except OSError:
                pass
        return b"".join(self._err).decode("utf-8", errors="replace")[-STDERR_TAIL:]
