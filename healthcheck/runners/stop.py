"""How hc stops on SIGINT, SIGTERM and SIGHUP: every launcher and Slurm allocation it
started is ended by one bounded cleanup, whatever the main thread is doing, and hc exits
128 + the signal (130, 143, 129).

Python runs a signal's handler only in the main thread, between two bytecodes, and a
KeyboardInterrupt is an exception like any other, so on its own a stop can come late or
not at all:

- raised between a launcher's fork and the code that would kill it (inside Popen, before
  the `try` that owns the process), it leaves the launcher and what it started running;
- taken by the kernel in another thread, or in the main thread just before it blocks in
  poll() or on a lock (the handler ran, the wait began after it), it wakes nobody: the
  main thread sleeps on until a child prints or its timeout ends (half an hour for a
  sweep through Slurm);
- raised inside a finalizer (`__del__`), it is printed and dropped.

So `install()` (the CLI, for the commands that start launchers and allocations) adds:

- a wakeup fd (signal.set_wakeup_fd): the interpreter's C-level handler writes the
  signal's number to a pipe at once, in whichever thread received it, and the `hc-stop`
  thread reading it starts the cleanup itself: every registered process cleanup
  (`at_stop(..., phase=PROCESSES)`: a launcher's tree, SIGTERM then SIGKILL) and then
  every command group still running (runners.local), then every Slurm cleanup
  (`phase=SLURM`: cancel the allocations hc asked for), each phase's cleanups at once,
  all within STOP_BOUND_S;
- a Python handler that raises `Stopped` (a KeyboardInterrupt) in the main thread once,
  so it starts nothing more and unwinds; a later signal is not raised (it would cut the
  unwinding's own cleanup short; the bound ends hc anyway). `deferred()` holds the raise
  while the main thread forks a launcher and registers it, and `start_registered()` does
  the fork and the registration with no stop between them in any thread: once the stop
  began, no launcher is started (`StopRefused`);
- the exit: the main thread, unwound, waits for the cleanup (`finish()`) and leaves with
  os._exit (interpreter shutdown would wait on threads); if it has not within
  STOP_GRACE_S of the cleanup's end (stuck in a C call, or the exception was swallowed),
  the `hc-stop` thread ends the process itself, with the same code and message.

A signal ignored when hc started (nohup's SIGHUP, a background job's SIGINT) stays
ignored. SIGKILL cannot be handled: what a SIGKILLed hc started dies with it
(PR_SET_PDEATHSIG), and the allocations it asked for end at their time limit or are
cancelled by the next sweep (orchestrate/allocations.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from healthcheck.runners import local
from healthcheck.runners.local import kill_children

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PROCESSES, SLURM = 0, 1  # cleanup phases: launchers end before their allocations are cancelled
STOP_BOUND_S = 30.0  # the whole cleanup (slurmd's KillWait, 30 s, is what a batch job's hc gets)
STOP_GRACE_S = 5.0  # after the cleanup, for the main thread to exit by itself
STOP_PARALLEL = 32  # cleanups at once

T = TypeVar("T")


class Stopped(KeyboardInterrupt):
    """A stop signal, raised in the main thread: everything unwinds; the CLI exits 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRefused(RuntimeError):
    """hc is stopping: nothing new is started."""

    def __init__(self) -> None:
        super().__init__("hc is stopping: nothing new is started")


_lock = threading.Lock()  # the registry and the start of the stop
_cleanups: dict[int, tuple[int, Callable[[], object]]] = {}
_next_token = 0
_stopping: int | None = None  # the signal whose cleanup began
_done = threading.Event()  # the cleanup ended
_notes: list[str] = []  # what the cleanup said (allocations cancelled), for stderr
_said = False
_installed = False
# set by the Python-level handler in the main thread (never under a lock: it may run
# between any two bytecodes of code holding one)
_received: int | None = None
_raised = False
_defer_depth = 0  # the main thread's deferred() sections
_pending: int | None = None  # a stop that arrived inside one


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP as described above (main thread only; once)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C handler must never block
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    # a child forked with a preexec function runs Python until it execs: it must not
    # write into this pipe (the parent would take the child's signal for its own)
    os.register_at_fork(after_in_child=_forget_in_child)
    threading.Thread(target=_relay, args=(read_end,), name="hc-stop", daemon=True).start()

    local.stop_deferral = deferred  # run_command's fork and registration: one step for a stop
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _handler)
    _installed = True


def installed() -> bool:
    return _installed


def received() -> int | None:
    """The stop signal hc received, if any."""
    return _received if _received is not None else _stopping


def stopping() -> bool:
    return _stopping is not None or _received is not None


def _forget_in_child() -> None:
    global _raised
    _raised = True  # a child running a preexec function is not hc: its exec drops the handler anyway
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass


def _handler(signum: int, frame: object) -> None:
    global _received, _raised, _pending
    if _received is None:
        _received = signum
    if _raised:
        return  # the main thread is unwinding already: let its cleanup finish
    if _defer_depth > 0:
        _pending = signum  # raised when the launcher is registered (deferred())
        return
    _raised = True
    raise Stopped(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """In the main thread: a stop that arrives inside is raised at its end, not inside
    (a fork and its registration are not cut apart). Elsewhere: nothing (only the main
    thread is ever interrupted)."""
    global _defer_depth, _pending, _raised
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _defer_depth += 1
    try:
        yield
    finally:
        _defer_depth -= 1
        if _defer_depth == 0 and _pending is not None:
            signum, _pending = _pending, None
            _raised = True
            raise Stopped(signum)


def at_stop(cleanup: Callable[[], object], phase: int = PROCESSES, *, late: bool = True) -> Callable[[], None]:
    """Register `cleanup` (idempotent, bounded; what it returns, if a str, is said on stderr)
    to run if hc is stopped; returns the function that unregisters it. Registered once the
    stop began: run now when `late`, else not at all (the caller starts nothing: see
    start_registered)."""
    with _lock:
        if _stopping is None:
            return _register(cleanup, phase)
    if late:
        _run_one(cleanup)
    return _nothing


def start_registered(start: Callable[[], T], cleanup: Callable[[T], object],
                     phase: int = PROCESSES) -> tuple[T, Callable[[], None]]:
    """start() (a fork) and at_stop(cleanup(its result)) with no stop between them: the
    stop's cleanup either sees the registration or this raises StopRefused before
    starting anything. Returns the result and the function that unregisters it."""
    with _lock:
        if _stopping is not None:
            raise StopRefused()
        started = start()
        return started, _register(lambda: cleanup(started), phase)


def _register(cleanup: Callable[[], object], phase: int) -> Callable[[], None]:
    global _next_token
    _next_token += 1
    token = _next_token
    _cleanups[token] = (phase, cleanup)

    def forget() -> None:
        with _lock:
            _cleanups.pop(token, None)

    return forget


def _nothing() -> None:
    return None


def _begin(signum: int) -> bool:
    """Start the cleanup for `signum` (once); whether this call started it."""
    global _stopping
    with _lock:
        if _stopping is not None:
            return False
        _stopping = signum
        cleanups = list(_cleanups.values())
        _cleanups.clear()
    threading.Thread(target=_clean, args=(cleanups,), name="hc-stop-cleanup", daemon=True).start()
    return True


def _clean(cleanups: list[tuple[int, Callable[[], object]]]) -> None:
    deadline = time.monotonic() + STOP_BOUND_S
    try:
        _run_all([fn for phase, fn in cleanups if phase == PROCESSES], deadline)
        kill_children()  # every command group still running (sinfo, ssh-less probes)
        _run_all([fn for phase, fn in cleanups if phase == SLURM], deadline)
    finally:
        _done.set()


def _run_all(cleanups: list[Callable[[], object]], deadline: float) -> None:
    """Run the cleanups, STOP_PARALLEL at once (a sweep of a thousand nodes must not send
    Slurm a thousand scancels at once), until they end or the deadline passes."""
    todo = list(reversed(cleanups))
    take = threading.Lock()

    def worker() -> None:
        while time.monotonic() < deadline:
            with take:
                if not todo:
                    return
                fn = todo.pop()
            _run_one(fn)

    threads = [threading.Thread(target=worker, name="hc-stop-one", daemon=True)
               for _ in range(min(STOP_PARALLEL, len(cleanups)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def _run_one(cleanup: Callable[[], object]) -> None:
    try:
        said = cleanup()
    except Exception as exc:  # one cleanup's failure must not stop the others
        said = f"a cleanup failed: {type(exc).__name__}: {exc}"
    if isinstance(said, str) and said:
        with _lock:
            _notes.append(said)


def _relay(fd: int) -> None:
    """The `hc-stop` thread: a stop signal's byte starts the cleanup, then bounds the exit."""
    while True:
        try:
            data = os.read(fd, 512)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        signum = next((b for b in data if b in STOP_SIGNALS), None)
        if signum is not None:
            _begin(signum)
            _done.wait(STOP_BOUND_S + 1)
            time.sleep(STOP_GRACE_S)
            # the main thread has not exited by itself: stuck in a call, or the stop was swallowed
            _say(_stopping or signum)
            os._exit(128 + (_stopping or signum))


def finish() -> int:
    """For the main thread once it unwound from a stop: wait for the cleanup (bounded), say
    what happened on stderr, and return the exit code (128 + the signal); the caller exits
    with os._exit."""
    signum = received() or signal.SIGINT
    _begin(signum)
    _done.wait(STOP_BOUND_S + 1)
    _say(signum)
    return 128 + signum


def _say(signum: int) -> None:
    """The stop's lines on stderr, once; written to the fd (stderr's buffer may be held by
    a thread that never returns, and after SIGHUP the terminal may be gone)."""
    global _said
    with _lock:
        if _said:
            return
        _said = True
        notes = list(_notes)
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    text = "".join(f"hc: {note}\n" for note in notes) + f"hc: {what}\n"
    try:
        os.write(2, text.encode("utf-8", errors="replace"))
    except OSError:
        pass
