"""TCP connect to a node within a deadline (a bounded name lookup), errors as SshError kinds."""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import Any

from healthcheck.runners.ssh.errors import SshError, SshErrorKind


def _resolve(host: str, port: int, timeout_s: float) -> list[tuple]:
    """getaddrinfo, bounded: a stuck resolver must not outlast the connect timeout."""
    try:  # an address needs no resolver (and no thread)
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass
    box: dict[str, Any] = {}

    def lookup() -> None:
        try:
            box["ok"] = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
        except Exception as exc:
            box["err"] = exc

    thread = threading.Thread(target=lookup, name=f"hc-dns-{host}", daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    if thread.is_alive():
        raise SshError(SshErrorKind.TIMEOUT, f"resolving {host} took more than {timeout_s:g}s")
    if "err" in box:
        why = getattr(box["err"], "strerror", None) or box["err"]
        raise SshError(SshErrorKind.UNREACHABLE, f"cannot resolve {host}: {why}")
    return box["ok"]


_UNREACHABLE = {
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN, errno.EADDRNOTAVAIL,
}


def open_socket(host: str, port: int, deadline: float) -> socket.socket:
    """TCP connect to host:port by `deadline`; SshError refused/timeout/unreachable."""
    infos = _resolve(host, port, deadline - time.monotonic())
    last: SshError | None = None
    for family, kind, proto, _canon, addr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(remaining)
        try:
            sock.connect(addr)
        except TimeoutError:
            sock.close()
            last = SshError(SshErrorKind.TIMEOUT, f"TCP connect to {addr[0]}:{port} timed out")
            continue
        except ConnectionRefusedError:
            sock.close()
            last = SshError(SshErrorKind.REFUSED, f"connection refused by {addr[0]}:{port} (is sshd running?)")
            continue
        except OSError as exc:
            sock.close()
            kind_ = SshErrorKind.UNREACHABLE if exc.errno in _UNREACHABLE else SshErrorKind.OTHER
            last = SshError(kind_, f"TCP connect to {addr[0]}:{port}: {exc.strerror or exc}")
            continue
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # small request/reply packets: without this, Nagle + delayed ACK add ~40 ms each
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last or SshError(SshErrorKind.TIMEOUT, f"TCP connect to {host}:{port} timed out")
