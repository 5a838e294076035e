"""A client for NCCL's RAS service (NCCL >= 2.24; TCP 28028 on each node, plain text).

The protocol (NVIDIA/nccl src/ras/client.cc and client_support.cc, v2.24-v2.30): the
client sends `CLIENT PROTOCOL 2\\n` and the server answers `SERVER PROTOCOL 2`; the client
may send `TIMEOUT <seconds>\\n` (answered `OK`); then `STATUS\\n` or `VERBOSE STATUS\\n`,
and the server sends the report and closes the connection. An error comes back as
`ERROR: ...`.

`query_ras` holds the whole exchange to one deadline and one byte budget, and returns a
transcript in the shape `parse_nccl_ras` reads (client lines prefixed `>>> `, as in
tests/fixtures/h100-captures/nccl-ras-*.txt). Nothing listening (connection refused) is
`absent`: most jobs run no RAS (NCCL < 2.24, NCCL_RAS_ENABLE=0, gloo), which is no fault.
`ask_ras` parses that transcript into the node's `RasEvidence` (diagnose/collect.py asks
it when told).
"""

from __future__ import annotations

import errno
import socket
import time
from typing import Literal

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.parsers.nccl_ras import NcclRasStatus, parse_nccl_ras

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 28028  # NCCL_RAS_ADDR's default port
PROTOCOL = 2
MAX_REPLY = 4 << 20  # a verbose report of a large job is a few hundred kB

RasOutcome = Literal["ok", "absent", "error"]


class RasExchange(msgspec.Struct, frozen=True, omit_defaults=True):
    """One talk with a RAS server: `outcome` ok (a report came, maybe cut: `truncated`),
    absent (nothing listens: connection refused), error (it listened but the exchange
    failed: timeout, reset, protocol mismatch, `ERROR:` from the server)."""

    outcome: RasOutcome
    address: str
    transcript: str = ""  # `>>> CLIENT PROTOCOL 2` / `SERVER PROTOCOL 2` / ... / the report
    reason: str | None = None
    truncated: bool = False  # the deadline or the byte budget cut the report
    duration_s: float = 0.0


class _Conn:
    """A socket read line by line against one deadline and one byte budget."""

    def __init__(self, sock: socket.socket, deadline: float, max_bytes: int) -> None:
        self.sock = sock
        self.deadline = deadline
        self.left = max_bytes
        self.buf = b""
        self.closed = False

    def _fill(self) -> bool:
        """Read once more; False at EOF or when the budget is spent. socket.timeout at the deadline."""
        if self.closed or self.left <= 0:
            return False
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline")
        self.sock.settimeout(remaining)
        data = self.sock.recv(min(65536, self.left))
        if not data:
            self.closed = True
            return False
        self.left -= len(data)
        self.buf += data
        return True

    def line(self) -> str | None:
        while b"\n" not in self.buf:
            if not self._fill():
                break
        if not self.buf:
            return None
        head, sep, rest = self.buf.partition(b"\n")
        self.buf = rest
        return head.decode("utf-8", errors="replace").rstrip("\r")

    def rest(self) -> tuple[str, bool]:
        """Everything until the server closes: (text, cut short by the deadline or the budget)."""
        cut = False
        try:
            while self._fill():
                pass
            cut = not self.closed
        except TimeoutError:
            cut = True
        text, self.buf = self.buf.decode("utf-8", errors="replace"), b""
        return text, cut

    def send(self, text: str) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline")
        self.sock.settimeout(remaining)
        self.sock.sendall(text.encode())


def query_ras(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, timeout_s: float = 5.0,
              verbose: bool = True, server_timeout_s: int | None = None,
              max_bytes: int = MAX_REPLY) -> RasExchange:
    """Ask the RAS server at host:port for its (verbose) status, within timeout_s in all.

    server_timeout_s is sent as `TIMEOUT N` (how long the server waits on its peers before
    it reports what it has); by default the whole-number part of timeout_s less a second,
    so the report comes before our own deadline.
    """
    start = time.monotonic()
    deadline = start + max(0.1, timeout_s)
    address = f"{host}:{port}"
    lines: list[str] = []

    def result(outcome: RasOutcome, reason: str | None = None, truncated: bool = False) -> RasExchange:
        return RasExchange(outcome, address, "\n".join(lines) + ("\n" if lines else ""), reason, truncated,
                           round(time.monotonic() - start, 3))

    try:
        sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
    except ConnectionRefusedError:
        return result("absent", f"nothing listens on {address} (connection refused): no NCCL RAS "
                                "on this node (NCCL < 2.24, NCCL_RAS_ENABLE=0, or no NCCL job)")
    except TimeoutError:
        return result("error", f"connecting to {address} timed out after {timeout_s:g} s")
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.EADDRNOTAVAIL):
            return result("absent", f"nothing listens on {address} ({exc.strerror})")
        return result("error", f"cannot connect to {address}: {exc.strerror or exc}")
    with sock:
        conn = _Conn(sock, deadline, max_bytes)
        try:
            conn.send(f"CLIENT PROTOCOL {PROTOCOL}\n")
            lines.append(f">>> CLIENT PROTOCOL {PROTOCOL}")
            reply = conn.line()
            if reply is None:
                return result("error", f"{address} closed the connection without answering the handshake")
            lines.append(reply)
            if not reply.startswith("SERVER PROTOCOL"):
                return result("error", f"unexpected handshake reply from {address}: {reply[:200]!r}")
            if reply.split()[-1] != str(PROTOCOL):  # a newer server still answers: note it, go on
                lines.append(f"# server protocol differs from the client's ({PROTOCOL})")
            wait = server_timeout_s if server_timeout_s is not None else max(1, int(timeout_s) - 1)
            conn.send(f"TIMEOUT {wait}\n")
            lines.append(f">>> TIMEOUT {wait}")
            reply = conn.line()
            if reply is None:
                return result("error", f"{address} closed the connection after TIMEOUT")
            lines.append(reply)
            if reply.startswith("ERROR"):
                return result("error", f"{address} refused TIMEOUT: {reply[:200]}")
            command = "VERBOSE STATUS" if verbose else "STATUS"
            conn.send(command + "\n")
            lines.append(f">>> {command}")
            text, cut = conn.rest()
        except TimeoutError:
            return result("error", f"{address} did not answer within {timeout_s:g} s", truncated=True)
        except OSError as exc:
            return result("error", f"talking to {address}: {exc.strerror or exc}")
    if text:
        lines.extend(text.rstrip("\n").split("\n"))
    if not text.strip():
        return result("error", f"{address} sent no report", truncated=cut)
    return result("ok", "report cut short (deadline or size)" if cut else None, truncated=cut)


DEFAULT_RAS_TIMEOUT_S = 5.0


class RasEvidence(msgspec.Struct, frozen=True, omit_defaults=True):
    """NCCL RAS on this node: ok with the parsed status, absent (nothing listens) or error."""

    outcome: RasOutcome
    address: str
    reason: str | None = None
    status: NcclRasStatus | None = None
    transcript: str | None = None  # the exchange as read (client lines prefixed `>>> `)
    duration_s: float = 0.0


def ask_ras(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout_s: float = DEFAULT_RAS_TIMEOUT_S,
            keep_transcript: bool = True) -> RasEvidence:
    """NCCL RAS's verbose status, parsed; refused = absent, not an error."""
    x = query_ras(host, port, timeout_s=timeout_s)
    status = None
    reason = x.reason
    outcome = x.outcome
    if x.transcript and outcome != "absent":
        try:
            status = parse_nccl_ras(x.transcript)
        except ParseError as exc:
            outcome, reason = "error", f"unreadable RAS reply: {exc}"
    return RasEvidence(outcome, x.address, reason, status, x.transcript if keep_transcript and x.transcript else None,
                       x.duration_s)
