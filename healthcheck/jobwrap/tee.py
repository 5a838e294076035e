"""The tee between the job and its stdout/stderr: the console sees every byte as before, and
`<log dir>/hc-run.rank<R>.<host>.<pid>.log` keeps every line with its time and stream
(format: parsers/run_output.py), where `hc diagnose logs DIR` reads it.

`start()` runs in `hc run` before the command is exec'd: it opens the file, starts the tee
as a process of its own (`python -I`, a clean environment: no RANK in its environ, so a
live `hc diagnose` never takes it for a rank), waits until it is ready, then points fds 1
and 2 at it. The command then keeps hc's pid (NCCL's %p) and the tee is its child; it
ends when the last writer closes the pipes (the job and whatever inherited them), having
written what it read: it ignores SIGINT/SIGTERM/SIGHUP, which are the job's to receive.
A console that goes away (EPIPE) closes that pipe, so the job sees it as it would have.
Once the output has ended the tee writes how the job exited (`end exit=-9`): from a pidfd
(Linux >= 6.15 keeps a reaped process's exit status for it), else from the zombie's
/proc/PID/stat before its parent reaps it (torchrun's agent looks every 0.1 s; Slurm and
Open MPI reap at once, and then it is `exit=unknown`). A rank SIGKILLed under
`torchrun ... hc run` thus has its death in the log directory, not only in the agent's.
The file is bounded: past MAX_FILE_BYTES it becomes `<name>.1` (the previous one goes) and
a new file starts, so at most twice that is kept, the end of the output always.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from healthcheck.parsers import run_output

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_PARTIAL = 64 * 1024  # a line longer than this is written in pieces
READY_TIMEOUT_S = 10.0
HOW = "{how}"  # in the line said after a failure: "exited 1", "was killed by SIGKILL"
EXIT_WAIT_S = 2.0  # after the output ended: how long to look for the exit status
# ioctl(pidfd, PIDFD_GET_INFO, struct pidfd_info) (linux/pidfd.h, 6.15): _IOWR(0xFF, 11, 64 bytes)
_PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
_PIDFD_INFO_EXIT = 0x8
_INFO_EXIT_CODE = 60  # the offset of exit_code (a wait status) in struct pidfd_info
_CHUNK = 65536
_ENTRY = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from healthcheck.jobwrap.tee import main; main(sys.argv[2:])")


class TeeError(Exception):
    """The tee could not be started: the job runs with its output as it was."""


def start(path: Path, head: str, *, after_failure: str = "") -> int:
    """Start the tee for `path` (created here, never over an existing file) and send fds 1 and 2
    through it. `after_failure`: what to say on the console (stderr) once the process has
    exited other than 0, followed by how it exited (the next step, said when it is needed).
    Returns the tee's pid; TeeError (nothing redirected) when it cannot."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    except OSError as exc:
        raise TeeError(f"{path}: {exc.strerror or exc}") from None
    fds: list[int] = [fd]
    try:
        os.write(fd, head.encode() + b"\n")
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        ready_r, ready_w = os.pipe()
        con_out, con_err = os.dup(1), os.dup(2)
        fds += [r_out, r_err, ready_r, ready_w, con_out, con_err]
        proc = _spawn(path, (r_out, r_err, con_out, con_err, fd, ready_w), after_failure)
        os.close(ready_w)
        fds.remove(ready_w)
        if not _ready(ready_r, proc):
            raise TeeError("the tee did not start")
    except OSError as exc:
        for f in fds:
            os.close(f)
        raise TeeError(f"{path}: {exc.strerror or exc}") from None
    except TeeError:
        for f in fds:
            os.close(f)
        raise
    for f in fds:
        os.close(f)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(w_out, 1)
    os.dup2(w_err, 2)
    os.close(w_out)
    os.close(w_err)
    return proc.pid


def quiet(pids: list[int]) -> None:
    """hc exits without starting the command (a preflight FAIL): the tee says nothing of it."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGUSR1)  # ours, by pid
        except OSError:
            pass


def _spawn(path: Path, fds: tuple[int, int, int, int, int, int], after_failure: str) -> subprocess.Popen[bytes]:
    package_parent = str(Path(__file__).resolve().parents[2])
    argv = [sys.executable, "-I", "-c", _ENTRY, package_parent, "hc-run-tee", str(path), *map(str, fds),
            str(os.getpid()), after_failure]
    return subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={"LC_ALL": "C.UTF-8"}, close_fds=True)


def _ready(ready_r: int, proc: subprocess.Popen[bytes]) -> bool:
    """The tee says it is reading (one byte) before any output goes its way."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        got, _, _ = select.select([ready_r], [], [], 0.2)
        if got:
            return os.read(ready_r, 1) == b"1"
        if proc.poll() is not None:
            return False
    proc.kill()  # ours, by pid; not ready: the job must not write into a pipe nobody reads
    proc.wait()
    return False


# ---------------------------------------------------------------- the tee process


class _Stream:
    """One of the job's streams: its pipe, the console it goes to, the line not ended yet."""

    def __init__(self, name: str, pipe: int, console: int) -> None:
        self.name = name
        self.pipe = pipe
        self.console: int | None = console
        self.partial = b""


class _File:
    """The log file: stamped lines, bounded (rotated once)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd: int | None = fd
        self.size = os.fstat(fd).st_size
        with open(path, "rb") as f:
            self.head = f.readline()

    def write(self, data: bytes) -> None:
        if self.fd is None or not data:
            return
        if self.size + len(data) > MAX_FILE_BYTES:
            self._rotate()
        try:
            _write_all(self.fd, data)
            self.size += len(data)
        except OSError:  # a full disk: the console still gets everything
            os.close(self.fd)
            self.fd = None

    def _rotate(self) -> None:
        try:
            os.replace(self.path, self.path + ".1")
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        except OSError:
            return  # keep writing where we are
        assert self.fd is not None
        os.close(self.fd)
        self.fd = fd
        self.size = 0
        self.write(self.head)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _lines(stream: _Stream, chunk: bytes, now: float, final: bool) -> bytes:
    """The stamped lines that `chunk` completes (all of it at the end of the stream)."""
    data = stream.partial + chunk
    parts = data.split(b"\n")
    stream.partial = parts.pop()
    if final and stream.partial:
        parts.append(stream.partial)
        stream.partial = b""
    while len(stream.partial) > MAX_PARTIAL:
        parts.append(stream.partial[:MAX_PARTIAL])
        stream.partial = stream.partial[MAX_PARTIAL:]
    return b"".join(run_output.line(now, stream.name, p) for p in parts)


def _pump(streams: list[_Stream], out: _File) -> None:
    """Copy until every stream has ended: console first (as it was), then the file."""
    open_streams = {s.pipe: s for s in streams}
    while open_streams:
        try:
            ready, _, _ = select.select(list(open_streams), [], [])
        except InterruptedError:
            continue
        now = time.time()
        for pipe in ready:
            s = open_streams[pipe]
            try:
                chunk = os.read(pipe, _CHUNK)
            except OSError:
                chunk = b""
            ended = not chunk
            if s.console is not None and chunk:
                try:
                    _write_all(s.console, chunk)
                except OSError:  # the console went away: the job sees its pipe close, as it would have
                    s.console = None
                    ended = True
            out.write(_lines(s, chunk, now, final=ended))
            if ended:
                os.close(pipe)
                del open_streams[pipe]


def main(argv: list[str]) -> None:
    """The tee process: `hc-run-tee PATH OUT ERR CONSOLE_OUT CONSOLE_ERR FILE READY JOB_PID SAY` (fds, a
    pid, the line for the console after a failure)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    say = [argv[9] if len(argv) > 9 else ""]
    signal.signal(signal.SIGUSR1, lambda *_: say.clear())  # hc exited itself: no command failed
    path = argv[1]
    pipe_out, pipe_err, con_out, con_err, file_fd, ready, job = (int(a) for a in argv[2:9])
    watch = _Watch(job)
    out = _File(path, file_fd)
    streams = [_Stream("out", pipe_out, con_out), _Stream("err", pipe_err, con_err)]
    os.write(ready, b"1")
    os.close(ready)
    try:
        _pump(streams, out)
    except Exception:  # never leave the job writing into a pipe nobody reads: the console only
        out.fd = None
        _pump([st for st in streams if _is_open(st.pipe)], out)
    code = watch.exit_code()
    out.write(run_output.end_line(time.time(), code))
    if code and say and say[0] and streams[1].console is not None:
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited {code}"
        try:
            _write_all(streams[1].console, say[0].replace(HOW, how).encode() + b"\n")
        except OSError:
            pass
    os._exit(0)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Watch:
    """How the job process exits, seen from its child (the tee is not its parent: no wait())."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = _stat(pid)[1]  # its start time: a pid used again later is another process
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):
            self.pidfd = None

    def exit_code(self) -> int | None:
        """The exit code (negative: the signal), None when it could not be seen in EXIT_WAIT_S."""
        deadline = time.monotonic() + EXIT_WAIT_S
        while time.monotonic() < deadline:
            status = self._from_pidfd()
            if status is None:
                state, start, status = _stat(self.pid)
                if state not in ("Z", "X") or start != self.start:
                    status = None
                if state == "" and self.pidfd is None:
                    return None  # reaped, and no pidfd to ask
            if status is not None:
                return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
            time.sleep(0.002)
        return None

    def _from_pidfd(self) -> int | None:
        if self.pidfd is None:
            return None
        buf = bytearray(64)
        struct.pack_into("<Q", buf, 0, _PIDFD_INFO_EXIT)
        try:
            fcntl.ioctl(self.pidfd, _PIDFD_GET_INFO, buf)
        except OSError:  # a kernel before 6.15
            os.close(self.pidfd)
            self.pidfd = None
            return None
        if not struct.unpack_from("<Q", buf, 0)[0] & _PIDFD_INFO_EXIT:
            return None  # not reaped yet
        return int(struct.unpack_from("<i", buf, _INFO_EXIT_CODE)[0])


def _stat(pid: int) -> tuple[str, str, int]:
    """(state, start time, exit code field) from /proc/PID/stat; ("", "", 0) when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read(4096).decode("ascii", errors="replace")
    except OSError:
        return "", "", 0
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 50:
        return (fields[0] if fields else ""), "", 0
    code = fields[49]  # field 52: the exit code, as waitpid reports it (Linux >= 3.5)
    return fields[0], fields[19], int(code) if code.lstrip("-").isdigit() else 0


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
