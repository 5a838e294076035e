"""One line to the local syslog socket, as NHC logs: `journalctl -t hc` (or grep hc in
/var/log/syslog) then answers "what did hc do on this node".

The hooks call it once per run. It must never fail a hook nor slow it: no socket (a
container, a minimal image), a socket nobody reads, or a journald too busy to drain its
queue all cost at most one non-blocking send, and every error is swallowed. Python's
`syslog` module and logging's SysLogHandler both send on a blocking socket (a full
queue would hold the hook until Slurm's deadline), so the datagram is written here: the
format glibc's syslog(3) sends, `<PRI>Mmm dd hh:mm:ss TAG[PID]: MSG`, which journald
and rsyslog both read (journald takes TAG as SYSLOG_IDENTIFIER).
"""

from __future__ import annotations

import _socket  # socket.py's four IntEnums cost a prologue ~2.5 ms; one datagram needs none
import os
import time
from collections.abc import Mapping

IDENT = "hc"
SOCKET_ENV = "HC_SYSLOG_SOCKET"  # another socket than /dev/log; empty: send nothing
DEFAULT_SOCKET = "/dev/log"
FACILITY_DAEMON = 3
PRIORITY = {"err": 3, "warning": 4, "notice": 5, "info": 6}
MAX_MESSAGE = 2048  # rsyslog's default maximum; a longer line keeps its head
# syslog's month names are the C locale's, whatever the node's locale says
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def socket_path(env: Mapping[str, str] | None = None) -> str:
    """The socket hc sends to: $HC_SYSLOG_SOCKET when set (empty: none), else /dev/log."""
    env = os.environ if env is None else env
    return env.get(SOCKET_ENV, DEFAULT_SOCKET)


def datagram(message: str, *, severity: str = "info", ident: str = IDENT, now: float | None = None,
             pid: int | None = None) -> bytes:
    """The bytes glibc's syslog(3) would send for `message` (one line, bounded)."""
    stamp = time.localtime(time.time() if now is None else now)
    when = f"{MONTHS[stamp.tm_mon - 1]} {stamp.tm_mday:2d} {stamp.tm_hour:02d}:{stamp.tm_min:02d}:{stamp.tm_sec:02d}"
    line = " ".join(message.split())  # a newline would start a second record
    if len(line) > MAX_MESSAGE:
        line = line[: MAX_MESSAGE - 3] + "..."
    priority = FACILITY_DAEMON * 8 + PRIORITY[severity]
    return f"<{priority}>{when} {ident}[{os.getpid() if pid is None else pid}]: {line}".encode(errors="replace")


def send(message: str, *, severity: str = "info", path: str | None = None) -> bool:
    """Send one line; True when the socket took it. Never raises, never waits."""
    path = socket_path() if path is None else path
    if not path:
        return False
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
    except OSError:
        return False
    try:
        sock.setblocking(False)  # a full queue drops the line instead of holding the hook
        sock.sendto(datagram(message, severity=severity), path)
        return True
    except (OSError, ValueError):  # no socket, not a socket, refused, queue full, bad path
        return False
    finally:
        sock.close()
