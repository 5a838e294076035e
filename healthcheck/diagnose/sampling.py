"""Sampling a node's ranks: every rank's stack several times over a short window, so the
diagnosis can tell a rank that waits forever from one that is merely slow (motion.py).

The window (`samples` dumps over `window_s`, default 4 over 1.5 s, never under
motion.STILL_S) is the price every diagnosis pays. Where a rank on this node is still at
the window's end (its stack, I/O and step counter unchanged for STILL_S) it may be stuck,
or a straggler whose step is longer than the window; sampling then goes on, at the same
pace, until no rank is still or `horizon_s` (default 6 s) has passed: a hang costs the
horizon, a healthy job only the window (and a round or two more where a rank was
nearly still: it may have reached its wait just after the first round). Where at the horizon one rank is still while
another changed within STILL_S (it reached its wait late: a loaded node), sampling goes
on up to SETTLE_S more, so that rank too is seen still or moving. A stopped (T) rank cannot move and does
not hold sampling up. Everything stays inside the node's deadline.

Each dump is `py-spy dump --json --locals` (the caller's `dump`): the locals give the
process group of the collective a rank waits in and the step counter; they are reduced
to a `StackSample` at once, and the last dump, which becomes the rank's stack (the
rank as it is at the end, as motion.py judges it), is kept without them (a local may
hold anything).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from healthcheck.diagnose.motion import (
    MIN_STILL_SAMPLES,
    STILL_S,
    StackSample,
    moved,
    nearly_still,
    sample_of,
    still_run,
)
from healthcheck.diagnose.stacks import blocking_thread, main_thread
from healthcheck.parsers.py_spy import PySpyDump, PySpyFrame, PySpyLocal, PySpyProcess, PySpyThread

DEFAULT_SAMPLES = 4
DEFAULT_WINDOW_S = 1.5
DEFAULT_HORIZON_S = 6.0
MAX_SAMPLES = 20
MAX_WINDOW_S = 5.0
MAX_HORIZON_S = 10.0
MARGIN_S = 0.5  # left before the node's deadline: sampling never eats the rest of the collection
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's utime and stime unit
SETTLE_S = 2.0  # past the horizon, while one rank is still and another only just stopped changing

# (pid, state, timeout_s) -> the collector's dump result (an object with .stack: PySpyDump | None)
Dumper = Callable[[int, str, float], Any]


class SamplingSpec(msgspec.Struct, frozen=True):
    samples: int = DEFAULT_SAMPLES
    window_s: float = DEFAULT_WINDOW_S
    horizon_s: float = DEFAULT_HORIZON_S

    @property
    def interval_s(self) -> float:
        """Between two rounds (at least 0.1 s: a window of 0 still spreads its samples)."""
        return max(0.1, self.window_s / (self.samples - 1)) if self.samples > 1 else 0.0


@dataclass
class Sampled:
    """Per pid: its last dump that gave a stack (the collector's result object; where
    none did, its first result, with why) and its samples."""

    last: dict[int, Any] = field(default_factory=dict)
    samples: dict[int, list[StackSample]] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)


def _io_sum(path: str, fields: tuple[str, ...]) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    total = 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in fields and value.strip().isdigit():
            total += int(value)
    return total


def read_io(pid: int, proc: str = "/proc") -> int | None:
    """rchar + wchar of the process (/proc/PID/io): bytes it passed to read and write
    calls, sockets included. None where the file cannot be read."""
    return _io_sum(f"{proc}/{pid}/io", ("rchar", "wchar"))


def read_thread_io(pid: int, tids: Sequence[int], proc: str = "/proc") -> int | None:
    """rchar + wchar of the given threads (/proc/PID/task/TID/io): the bytes the rank's
    own thread read and wrote, not its background threads'. Not syscr/syscw: py-spy's
    dump stops the process, which interrupts a blocked read or write; the kernel restarts
    it and counts the call again, so a rank blocked on a full pipe shows one more call per
    dump (seen on held-out-6's logger pipe). None where no file could be read."""
    counts = [_io_sum(f"{proc}/{pid}/task/{tid}/io", ("rchar", "wchar")) for tid in tids]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def _thread_cpu(path: str) -> int | None:
    """utime + stime (clock ticks) of /proc/PID/task/TID/stat; None where it cannot be read.
    The command name, field 2, is in parentheses and may hold spaces and parentheses: the
    fields are counted from the last ')'."""
    try:
        with open(path, "rb") as f:
            text = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if len(fields) < 13 or not (fields[11].isdigit() and fields[12].isdigit()):
        return None  # state is field 3, utime 14 and stime 15: 0, 11 and 12 after the name
    return int(fields[11]) + int(fields[12])


def read_thread_cpu(pid: int, tids: Sequence[int], proc: str = "/proc") -> float | None:
    """Seconds of CPU the given threads used (/proc/PID/task/TID/stat utime + stime): a
    thread that burned CPU between two samples ran, whatever line py-spy caught it on; one
    blocked in a wait burns none, however loaded the node. None where none could be read."""
    ticks = [_thread_cpu(f"{proc}/{pid}/task/{tid}/stat") for tid in tids]
    known = [t for t in ticks if t is not None]
    return round(sum(known) / CLOCK_TICKS, 2) if known else None


def own_threads(pid: int, main: PySpyThread | None, blocker: PySpyThread | None) -> list[int]:
    """The OS thread ids of the rank's main thread (the pid where py-spy gave none) and of
    the thread it waits on."""
    tids = [t.os_thread_id for t in (main, blocker) if t is not None and t.os_thread_id is not None]
    return tids or [pid]


_TYPE_ONLY = re.compile(r"<[\w.]{1,200} at 0x[0-9a-fA-F]{1,16}>")  # py-spy's repr of an object: its type, no value


def _type_only(fs: Sequence[PySpyLocal]) -> tuple[PySpyLocal, ...]:
    """The locals whose repr is a type's name and an address (a Work, a DDP model: what
    py_spy.hidden_collective reads); every value dropped."""
    return tuple(v for v in fs if v.repr and _TYPE_ONLY.fullmatch(v.repr))


def without_locals(dump: PySpyDump) -> PySpyDump:
    """The dump with every frame's locals' values dropped (a type-only repr is kept)."""
    def frames(fs: Sequence[PySpyFrame]) -> tuple[PySpyFrame, ...]:
        return tuple(msgspec.structs.replace(f, locals=_type_only(f.locals)) if f.locals else f for f in fs)

    procs = tuple(msgspec.structs.replace(p, threads=tuple(msgspec.structs.replace(t, frames=frames(t.frames))
                                                               for t in p.threads)) for p in dump.processes)
    return msgspec.structs.replace(dump, processes=procs)


def _process(dump: PySpyDump, pid: int) -> PySpyProcess | None:
    return next((p for p in dump.processes if p.pid == pid), None) or (dump.processes[0] if dump.processes else None)


def _take(out: Sampled, pid: int, result: Any, now: float, proc: str) -> bool:
    """Record one dump of pid; False when it gave no stack (the pid is sampled no more)."""
    stack: PySpyDump | None = getattr(result, "stack", None)
    process = _process(stack, pid) if stack is not None else None
    if process is None:
        out.last.setdefault(pid, result)
        return False
    start = out.started.setdefault(pid, now)
    main = main_thread(process)
    blocker = blocking_thread(process, main)
    tids = own_threads(pid, main, blocker)
    out.samples.setdefault(pid, []).append(sample_of(main, now - start, read_io(pid, proc), blocker,
                                                     read_thread_io(pid, tids, proc), read_thread_cpu(pid, tids, proc)))
    assert stack is not None
    out.last[pid] = msgspec.structs.replace(result, stack=without_locals(stack))  # the rank as it is now
    return True


def _round(pids: Sequence[tuple[int, str]], dump: Dumper, pool: concurrent.futures.Executor, deadline: float,
           per_dump_s: float, clock: Callable[[], float]) -> dict[int, Any]:
    left = deadline - clock()
    futures = {pid: pool.submit(dump, pid, state, max(0.5, min(per_dump_s, left))) for pid, state in pids}
    got: dict[int, Any] = {}
    for pid, fut in futures.items():
        try:
            got[pid] = fut.result(timeout=max(0.1, deadline - clock() + 2.0))
        except concurrent.futures.TimeoutError:
            fut.cancel()
    return got


def _shortest_span(out: Sampled, pids: set[int]) -> float:
    """The shortest time from a pid's first sample to its last: the look motion.py judges.
    The window is counted from before the first round, whose dumps take their time (more on
    a loaded node): 4 samples over 1.5 s whose first round took 0.6 s span 0.9 s, too short
    a look to judge (motion.rank_motion), and a rank unchanged over it was taken for one
    look."""
    spans = [s[-1].at - s[0].at for pid in pids if (s := out.samples.get(pid))]
    return min(spans, default=STILL_S)


def _go_on(done: int, spec: SamplingSpec, out: Sampled, waiting_for: set[int], elapsed: float) -> bool:
    """Another round: the window (at least STILL_S: a rank must be seen still that long,
    and every rank's samples must span it) is not over; or a rank is still and the
    horizon allows; or, past the horizon (by at most SETTLE_S), a rank is still while
    another changed within STILL_S (a rank that
    reached its wait late is given the time to be seen still), or a still rank was seen
    so fewer than MIN_STILL_SAMPLES times (a loaded node's samples came late: more of
    them, so that lookdepth.py can tell)."""
    if done < spec.samples or elapsed < STILL_S or _shortest_span(out, waiting_for) < STILL_S:
        return True
    sampled = [out.samples[pid] for pid in waiting_for if len(out.samples.get(pid, [])) > 1]
    still_runs = [len(still_run(s)) for s in sampled if not moved(s)]
    if not still_runs:
        # A rank nearly still may be one that entered its wait just after the first round.
        return any(nearly_still(s) for s in sampled) and elapsed + spec.interval_s <= spec.horizon_s
    horizon = max(spec.horizon_s, spec.window_s, STILL_S)
    if elapsed + spec.interval_s <= horizon:
        return True
    settling = len(still_runs) < len(sampled) or min(still_runs) < MIN_STILL_SAMPLES
    return settling and elapsed + spec.interval_s <= horizon + SETTLE_S


def sample_ranks(targets: Sequence[tuple[int, str]], dump: Dumper, spec: SamplingSpec, *,
                 pool: concurrent.futures.Executor, deadline: float, per_dump_s: float, proc: str = "/proc",
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Sampled:
    """Dump every (pid, state) of `targets` in rounds (see the module's docstring).
    Zombies are not dumped; a pid whose dump fails is not dumped again."""
    out = Sampled()
    live = [(pid, state) for pid, state in targets if state not in ("Z", "X")]
    stopped = {pid for pid, state in live if state in ("T", "t")}
    t0 = clock()
    done = 0
    while live:
        got = _round(live, dump, pool, deadline, per_dump_s, clock)
        now = clock()
        live = [(pid, state) for pid, state in live if pid in got and _take(out, pid, got[pid], now, proc)]
        for pid, result in got.items():
            out.last.setdefault(pid, result)
        done += 1
        waiting_for = {pid for pid, _ in live} - stopped
        if spec.samples <= 1 or not _go_on(done, spec, out, waiting_for, now - t0):
            break
        next_at = t0 + done * spec.interval_s
        if next_at > deadline - MARGIN_S:
            break
        if next_at > now:
            sleep(next_at - now)
    return out
