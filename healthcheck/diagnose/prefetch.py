"""Reading a job's big text logs on several cores, with exactly the result of one.

Why: `hc diagnose logs` spends most of its time in a few pure functions of one file's text
(condensing it, the NCCL and torch parsers, the stamp index, the kernel scan), and one
process reads the files one after another. Here worker processes, forked once the reader is
set up (hc's modules imported, the walk done), each read whole files and run the same
per-file reading on a throwaway collection, recording what each pure call returned (a
`Tape`: the calls in order, each with a cheap guard of its arguments). The parent then reads
every file itself, in file order, into the one real collection, exactly as it does serially,
except that each pure call is answered from the file's tape where its name and guard match
(else computed, and the rest of that tape dropped). So everything that writes shared state
(the ranks, the attempts a restart cut, the logged sizes, the order of every list) runs in
the parent in file order as before, and the result is the serial one whatever the worker
count: a worker only saves the parent the time of the calls it answers. A worker that fails
answers nothing (the parent computes), never an error.

Bounds: workers only where at least two files are over `big` bytes (a fixture-sized input
pays no fork), at most the CPUs this process may run on that the load average leaves free
(two processes read faster than one only where a core is free) and never more than those
files; `HC_DIAGNOSE_WORKERS=N` sets the CPUs instead (1: serial). A worker dies with the parent
(PR_SET_PDEATHSIG) and the pool is ended when the reading ends; a worker that dies (killed)
leaves the files not yet answered to the parent, never a wait for ever.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import io
import multiprocessing
import multiprocessing.pool
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

T = TypeVar("T")

WORKERS_ENV = "HC_DIAGNOSE_WORKERS"
_PR_SET_PDEATHSIG = 1


@dataclass
class Tape:
    """The pure calls of one file's reading, in order: (name, guard, result)."""

    calls: list[tuple[str, tuple[object, ...], object]] = field(default_factory=list)
    recording: bool = True
    at: int = 0  # replaying: the next call's index


_TAPE: contextvars.ContextVar[Tape | None] = contextvars.ContextVar("hc_prefetch_tape", default=None)


def pure(name: str, guard: tuple[object, ...], compute: Callable[[], T]) -> T:
    """`compute()`, a pure function of one file's reading: recorded while a worker records,
    answered from the tape while the parent replays one whose next call is this one (`name`
    and `guard` equal), else computed."""
    tape = _TAPE.get()
    if tape is None:
        return compute()
    if tape.recording:
        result = compute()
        tape.calls.append((name, guard, result))
        return result
    if tape.at < len(tape.calls) and tape.calls[tape.at][:2] == (name, guard):
        tape.at += 1
        return cast(T, tape.calls[tape.at - 1][2])
    tape.at = len(tape.calls)  # out of step: compute this and every later call
    return compute()


@contextlib.contextmanager
def replaying(tape: Tape | None) -> Iterator[None]:
    """Answer `pure` calls from `tape` (None: compute them) within the block."""
    if tape is not None:
        tape.recording, tape.at = False, 0
    token = _TAPE.set(tape)
    try:
        yield
    finally:
        _TAPE.reset(token)


def recorded(read: Callable[[], None]) -> Tape:
    """The tape of `read()`'s pure calls."""
    tape = Tape()
    token = _TAPE.set(tape)
    try:
        read()
    finally:
        _TAPE.reset(token)
    return tape


def worker_count(sizes: Sequence[int], big: int) -> int:
    """How many workers read the files of `sizes` bytes: 0 (serial) for fewer than two over
    `big`; else the CPUs this process may use that the load average leaves free (workers on
    busy cores only add their start and the tapes' copies to the same CPU time: measured at
    load 9 on 2 cores, 1 GB read in 26 s with two workers, 18 s alone), at most those files;
    `HC_DIAGNOSE_WORKERS=N` instead of the free CPUs (1: serial)."""
    many = sum(size > big for size in sizes)
    if many < 2:
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cap = os.environ.get(WORKERS_ENV, "").strip()
    if cap.isdigit():
        cpus = min(cpus, int(cap))
    else:
        with contextlib.suppress(OSError, AttributeError):
            cpus -= round(os.getloadavg()[0])
    count = min(cpus, many)
    return count if count >= 2 else 0


_POLL_S = 0.5  # how often the parent, waiting for a tape, checks that the workers live
_INTERNED_CHARS = 64  # strings up to this long that the worker holds interned travel as a name


class _Pickler(pickle.Pickler):
    """A tape's pickling that keeps interned strings interned: the parent's copy of a field
    whose value is a literal (`launcher = "srun"`, a default) is the same object as the
    default, so msgspec's omit_defaults (an identity test for strings) leaves it out of the
    JSON as it does serially; a plain pickle would give an equal but other object."""

    def persistent_id(self, obj: object) -> str | None:
        if type(obj) is str and len(obj) <= _INTERNED_CHARS and sys.intern(obj) is obj:
            return obj
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: object) -> object:
        return sys.intern(str(pid))


def _dumps(tape: Tape) -> bytes:
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(tape)
    return out.getvalue()


def _loads(data: bytes | None) -> Tape | None:
    return None if data is None else cast(Tape, _Unpickler(io.BytesIO(data)).load())


_JOB: Callable[[int], Tape] | None = None  # set before the fork: the workers' reading of file i


def _die_with_parent(parent: int) -> None:
    """A worker's start: killed when the parent dies (Linux), ended at once if it already has;
    SIGINT left to the parent (it ends the pool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


def _children() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


def _answers(results: multiprocessing.pool.IMapIterator, count: int, started: set[int]) -> Iterator[Tape | None]:
    """The tapes of `results` in order; once a worker is gone (killed: the pool would
    replace it and wait for its file's tape for ever), None for the rest: the parent
    computes them."""
    for done in range(count):
        while True:
            try:
                data = results.next(timeout=_POLL_S)
                break
            except multiprocessing.TimeoutError:
                if not started <= _children():
                    yield from [None] * (count - done)
                    return
        yield _loads(data)


def _run(index: int) -> bytes | None:
    """A worker's reading of file `index`, pickled; None where it failed (the parent computes)."""
    try:
        return _dumps(_JOB(index)) if _JOB is not None else None
    except Exception:  # a worker answers or not: the parent reads the file itself either way
        return None


@contextlib.contextmanager
def prefetched(indices: Sequence[int], workers: int, job: Callable[[int], Tape]) -> Iterator[Iterator[Tape | None]]:
    """The tapes of `job(i)` for each of `indices`, in their order, read by `workers` forked
    processes (0: no process, every tape None). The pool ends with the block."""
    global _JOB
    if workers < 2 or not indices or "fork" not in multiprocessing.get_all_start_methods():
        yield iter([None] * len(indices))
        return
    _JOB = job
    before = _children()
    try:
        pool = multiprocessing.get_context("fork").Pool(workers, initializer=_die_with_parent,
                                                        initargs=(os.getpid(),))
    except OSError:
        _JOB = None
        yield iter([None] * len(indices))
        return
    started = _children() - before
    try:
        yield _answers(pool.imap(_run, indices, chunksize=1), len(indices), started)
    finally:
        pool.terminate()
        pool.join()
        _JOB = None
