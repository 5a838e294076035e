"""`ProcessStream`: a launcher hc starts here (srun or mpirun, one task on one node) whose
task keeps running while lines go to its stdin and come back on its stdout: a deep
sweep's persistent worker (`hc bw serve`) when the fabric's pairs are started by a
launcher instead of hc's own SSH. srun hands its stdin to the task and the task's
stdout back (Slurm's default, one task here); mpirun hands its stdin to rank 0.

Children die with the run, as every launch's do (launch.py): the launcher has its own
process group, registered with runners.local so a hook's deadline reaches it, and dies
with hc (PR_SET_PDEATHSIG, forked from a thread that lasts: local.popen_for_life), and a
stop (SIGINT, SIGTERM, SIGHUP) kills its tree first (runners/stop.py). Its task goes with
it: the launcher's end closes the task's input, which ends the worker (mpirun's daemons
also end their ranks). What a SIGKILLed srun cannot do is release an allocation it asked
for: that is orchestrate/allocations.py's (a time limit, a cancel, the next sweep).
Closing sends end-of-input (the worker's cue to end), waits a moment (none for a worker
known not to read it: inside a test that will not complete), then kills the launcher's
whole tree; `close()` says whether it had to, and `exit_status()` how it
ended, so the caller can cancel an allocation srun did not give back (see orchestrate/pairsweep/workers.py).
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from healthcheck.runners import local, stop
from healthcheck.runners.launch import Launch, kill_tree
from healthcheck.runners.line_stream import SEND_STALL_S, LineStream

_READ_CHUNK = 65536


class ProcessStream(LineStream):
    """Lines to a launched task's stdin and from its stdout; never raises once started."""

    def __init__(self, node: str, proc: subprocess.Popen) -> None:
        super().__init__(node)
        self.proc = proc
        self.argv = tuple(str(a) for a in proc.args) if isinstance(proc.args, (list, tuple)) else (str(proc.args),)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._in, self._stdout, self._stderr = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        for fd in (self._in, self._stdout, self._stderr):
            os.set_blocking(fd, False)
        self._err_eof = False
        self._send = threading.Lock()  # a writer and close() never use stdin's fd at once
        self._pipes_closed = False  # once set, no fd number is read again (it may be reused)
        self._forget_stop: Callable[[], None] = _nothing  # unregisters the launcher from a stop's cleanup

    @classmethod
    def start(cls, node: str, spec: Launch, env: Mapping[str, str]) -> ProcessStream:
        """Start spec's launcher with its stdin and stdout kept open; OSError (FileNotFoundError
        for a launcher that is not installed) when it cannot be started."""
        run_env = {**env, **spec.env}

        def fork() -> subprocess.Popen:
            # forked from a thread that lasts (the caller's is a test's): see popen_for_life
            return local.popen_for_life(spec.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=run_env,
                                         start_new_session=True)  # its own group: close() reaches all of it

        # a stop (SIGINT, SIGTERM, SIGHUP) ends the launcher first (srun then gives up its
        # request or its job): runners/stop.py; once hc is stopping, none is started (OSError)
        # from the main thread, a stop is raised once all this is done
        with stop.deferred(), local.starting() as register:
            try:
                proc, forget = stop.start_registered(fork, lambda p: kill_tree(p, 2.0))
            except stop.StopRefused as exc:
                raise OSError(str(exc)) from None
            register(proc.pid)
            stream = cls(node, proc)
            stream._forget_stop = forget
        return stream

    def _exited(self) -> bool:
        return self.proc.poll() is not None

    def send_line(self, data: bytes) -> bool:
        with self._send:
            return not self.ended and self._send_locked(data)

    def _send_locked(self, data: bytes) -> bool:
        payload = memoryview(data if data.endswith(b"\n") else data + b"\n")
        stall = time.monotonic() + SEND_STALL_S
        try:
            while payload:
                _, ready, _ = select.select([], [self._in], [], max(0.0, stall - time.monotonic()))
                if not ready:
                    return False
                payload = payload[os.write(self._in, payload):]
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # the task's stdin is gone (EPIPE): it ended
            return False

    def _pump(self, wait_s: float) -> None:
        if self._pipes_closed:
            self._eof = True
            return
        fds = [self._stdout] + ([] if self._err_eof else [self._stderr])
        try:
            select.select(fds, [], [], wait_s)
            self._drain_stderr()
            chunks: list[bytes] = []
            self._eof = _drain_fd(self._stdout, chunks)
            self._out += b"".join(chunks)
            if self._eof:
                self._drain_stderr()
        except OSError:
            self._eof = True

    def _drain_stderr(self) -> None:
        if self._err_eof or self._pipes_closed:
            return
        chunks: list[bytes] = []
        self._err_eof = _drain_fd(self._stderr, chunks)
        for data in chunks:
            self._keep(data)

    def close(self, wait_s: float = 3.0) -> bool:
        with self._closing:
            if self._closed:
                return False
            self._closed = True
        killed = False
        try:
            with self._send:
                try:
                    assert self.proc.stdin is not None
                    self.proc.stdin.close()  # end of input: the worker's cue to end, the launcher's to follow it
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                killed = True
                kill_tree(self.proc, 2.0)
                try:
                    self.proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            self._forget_stop()
            local.untrack_group(self.proc.pid)
            # a reader sees _closed within one pump (half a second) and lets the lock go; then
            # no fd number of ours is read again once closed
            with self._lock:
                self._pipes_closed = True
                for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                    if pipe is not None:
                        try:
                            pipe.close()
                        except OSError:
                            pass
        return killed

    def exit_status(self) -> int | None:
        return self.proc.poll()

    def still_running(self) -> str:
        """The launcher's whole tree was killed by close(); its task ends with it (module doc)."""
        if self.proc.poll() is not None:
            return ""
        return f"{os.path.basename(self.argv[0])} (pid {self.proc.pid}) did not end when killed"


def _nothing() -> None:
    return None


def _drain_fd(fd: int, into: list[bytes]) -> bool:
    """Read what is buffered on a non-blocking fd; True at its end."""
    while True:
        try:
            data = os.read(fd, _READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return False
        if not data:
            return True
        into.append(data)
