"""Whether a rank moves: its stack sampled several times, reduced to what tells a hang
from slow progress.

One py-spy dump cannot tell a rank that waits forever from one that waits a moment in
every step. The collector (sampling.py) dumps every rank several times over a short
window and keeps, per dump, a `StackSample`: a digest of the main thread's frames (file
and line), the collective it is in and that collective's process group (from py-spy
`--locals`), the process's I/O count (/proc/PID/io: a collective that completes moves
bytes, even when the stack looks the same in every step), the I/O count of the rank's
own main thread and of the thread it waits on (/proc/PID/task/TID/io: the bytes it read
and wrote, not its background threads'), the CPU time those threads used
(/proc/PID/task/TID/stat: cpuwork.py) and the program's step-like integer
locals (`step`, `iteration`, ...: the step rate). Values of other locals are never
kept: they may hold anything.

Here, on the diagnosing side, the samples become a `RankMotion` per rank: is it moving
(its stack, its own thread's I/O, the process's I/O while in a collective, or a step
counter changed within STILL_S of the last sample: a rank that moved early in the
window and then stopped in a collective is still; or its own I/O goes on at its own
pace, `io_active`: a checkpoint written shard by shard with sleeps between shows one
line in every sample but growing bytes), was it inside a collective, or outside any,
since it last changed, and its step rate. A rank still by time but seen so in fewer than
MIN_STILL_SAMPLES samples (a loaded node's samples come late) cannot be told still from
moving (lookdepth.py).
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

import msgspec

from healthcheck.diagnose.cpuwork import cpu_busy, cpu_used, runs_throughout
from healthcheck.diagnose.logprogress import logs_progress
from healthcheck.diagnose.newgroup import group_created, in_new_group
from healthcheck.diagnose.recency import keeps_rising
from healthcheck.diagnose.roots import collective_root
from healthcheck.parsers.py_spy import PySpyFrame, PySpyThread

GroupKind = str  # "default" (the world), "subgroup" (a group the call was given), "" (not known)
_STEP_NAME = re.compile(r"(?:global_|train_|cur_|curr_|current_)?(?:step|iteration|iter|it|batch_idx|batch_id|n_iter)")
_INT = re.compile(r"-?\d{1,18}")
_GROUP_KWARG = re.compile(r"[\"']group[\"']: ?([^,}]{1,200})")
MAX_COUNTERS = 8  # step-like locals kept per sample
IO_WORK_BYTES = 1024  # a rise of a rank's own I/O smaller than this is a log line (a retry's warning), not work
STILL_S = 1.0  # a rank whose stack, I/O and step counter did not change for this long is still
MIN_STILL_SAMPLES = 3  # ... and that many samples saw it so (lookdepth.py: two far-apart samples cannot tell)


class StackSample(msgspec.Struct, frozen=True, omit_defaults=True):
    """One dump of one rank, reduced (see the module's docstring)."""

    at: float  # seconds since the rank's first sample
    key: str  # digest of the main thread's frames: equal keys, the same stack
    collective: str | None = None  # the c10d call the main thread is in
    group: GroupKind = ""  # that collective's process group
    io: int | None = None  # rchar + wchar of the process at the sample
    thread_io: int | None = None  # rchar + wchar of the main thread (and the thread it waits on)
    cpu: float | None = None  # CPU seconds (utime + stime) of those threads (cpuwork.py)
    counters: dict[str, int] = {}  # "function:name" -> value of step-like int locals of program frames
    root: int | None = None  # the src/dst of the rooted collective it waits in (desyncorder.py)
    creating: tuple[int, ...] = ()  # the ranks of the process group it waits to create (newgroup.py)
    creating_name: str = ""  # that group's name
    in_new_group: bool = False  # in a new_group frame, locals or not


def stack_key(frames: Sequence[PySpyFrame]) -> str:
    text = "\n".join(f"{f.name}\x00{f.file}\x00{f.line}" for f in frames)
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def collective_group(frames: Sequence[PySpyFrame]) -> GroupKind:
    """The process group of the collective a stack waits in, as py-spy `--locals` shows
    it: torch's `_exception_logger` wrapper holds the call's args and kwargs; a
    `group` keyword or a third positional argument that is a ProcessGroup is a group the
    caller chose ("subgroup"), none is the default group ("default"). "" without locals."""
    for f in frames:
        if not f.name.endswith("wrapper") or not f.locals or "c10d_logger" not in (f.file or f.filename):
            continue
        values = {v.name: v.repr or "" for v in f.locals}
        kwarg = _GROUP_KWARG.search(values.get("kwargs", ""))
        if kwarg is not None:
            return "default" if kwarg.group(1).strip() == "None" else "subgroup"
        return "subgroup" if "ProcessGroup at" in values.get("args", "") else "default"
    return ""


def step_counters(frames: Iterable[PySpyFrame]) -> dict[str, int]:
    """Step-like integer locals of the program's own frames (not torch's, not the
    standard library's): `step`, `iteration`, `global_step`, `batch_idx`, ..."""
    out: dict[str, int] = {}
    for f in frames:
        if f.library or not f.locals:
            continue
        for v in f.locals:
            if _STEP_NAME.fullmatch(v.name) and v.repr is not None and _INT.fullmatch(v.repr):
                out[f"{f.name}:{v.name}"] = int(v.repr)
                if len(out) >= MAX_COUNTERS:
                    return out
    return out


def sample_of(thread: PySpyThread | None, at: float, io: int | None,
              blocker: PySpyThread | None = None, thread_io: int | None = None,
              cpu: float | None = None) -> StackSample:
    """A dump of a rank's main thread (and of the thread it waits on, where it does), reduced."""
    frames = thread.frames if thread is not None else ()
    both = (*frames, *(blocker.frames if blocker is not None else ()))
    created = group_created(frames)
    return StackSample(at=round(at, 3), key=stack_key(both), collective=thread.collective if thread else None,
                       group=collective_group(frames), io=io, thread_io=thread_io, cpu=cpu,
                       counters=step_counters(both),
                       root=collective_root(frames, thread.collective if thread else None),
                       creating=created[0] if created else (), creating_name=created[1] if created else "",
                       in_new_group=in_new_group(frames))


def _same(a: StackSample, b: StackSample) -> bool:
    """No change between two samples (an I/O count one of them could not read is no change).
    The process's I/O tells progress only inside a collective, where the bytes are the
    collective's: outside one, process I/O with an unchanged stack may be a background
    thread's (NCCL's watchdog, a logger), not the rank moving. Seen on an H100: one NCCL
    rank blocked in torch.cuda.synchronize behind a hung collective was called
    progressing. The main thread's own I/O (`thread_io`) is the rank's, wherever it is:
    a rank writing a checkpoint shard by shard, sleeping between, shows one line but
    growing bytes."""
    io_same = a.io is None or b.io is None or a.io == b.io or (a.collective is None and b.collective is None)
    own_same = a.thread_io is None or b.thread_io is None or abs(a.thread_io - b.thread_io) < IO_WORK_BYTES
    return a.key == b.key and io_same and own_same and a.counters == b.counters


def still_run(samples: Sequence[StackSample]) -> Sequence[StackSample]:
    """The samples since the rank's stack, I/O or step counter last changed."""
    start = len(samples) - 1
    while start > 0 and _same(samples[start - 1], samples[-1]):
        start -= 1
    return samples[start:]


def still_for(samples: Sequence[StackSample]) -> float:
    """Seconds the rank has been still at its last sample (0 when it just changed)."""
    run = still_run(samples)
    return run[-1].at - run[0].at if run else 0.0


def moved(samples: Sequence[StackSample]) -> bool:
    """The stack, the I/O count or a step counter changed less than STILL_S before the
    last sample: the rank is moving now (one that moved once and then stopped is not)."""
    return len(samples) > 1 and still_for(samples) < STILL_S


def nearly_still(samples: Sequence[StackSample]) -> bool:
    """Moving by STILL_S, but unchanged over two samples or more and for at least half of
    STILL_S: a rank that reached its wait just after the look began (seen still for 0.999 s
    of a 1.5 s look); one more round tells it from a rank that moves."""
    return moved(samples) and len(still_run(samples)) >= 2 and still_for(samples) >= STILL_S / 2


def io_rises(samples: Sequence[StackSample]) -> list[float]:
    """When the rank's own thread I/O (`thread_io`) rose: the times of the samples that saw it higher."""
    return [b.at for a, b in pairwise(samples)
            if a.thread_io is not None and b.thread_io is not None and b.thread_io - a.thread_io >= IO_WORK_BYTES]


def io_active(samples: Sequence[StackSample]) -> bool:
    """The rank's own thread does I/O at its own pace, whatever line its stack shows: its
    I/O rose within STILL_S of the last sample, or rose twice or more and has been quiet
    no longer than its longest gap between rises (plus one sample spacing, the samples'
    phase). A rise under IO_WORK_BYTES is a log line, not work: a rank retrying for ever
    with a warning per try (held-out-5's back-off) is not active. A writer of a shard
    every 1.25 s with a sleep between is active; a rank that printed a burst and then
    blocked is not."""
    rises = io_rises(samples)
    if not rises:
        return False
    if samples[-1].at - rises[-1] < STILL_S:
        return True
    return keeps_rising(rises, [s.at for s in samples])


BUSY_CHANGES = 3  # a stack that changed in this many sample intervals (and a quarter of them) is busy


def busy_stack(samples: Sequence[StackSample]) -> bool:
    """The main thread's stack changed in BUSY_CHANGES intervals or more, and in a quarter of
    them: a CPU-bound phase walks its loop's lines, where a rank sleeping between retries shows
    its sleep in nearly every sample. Under load the samples come further apart and a busy
    loop can show one line for a second at the end of the look; this asks about the whole look."""
    intervals = len(samples) - 1
    changes = sum(1 for a, b in pairwise(samples) if a.key != b.key)
    return intervals > 0 and changes >= BUSY_CHANGES and 4 * changes >= intervals


class RankMotion(msgspec.Struct, frozen=True, omit_defaults=True):
    rank: int
    samples: int
    span_s: float  # from the first sample to the last
    still_s: float  # how long it had not changed at the last sample
    moved: bool  # it changed within STILL_S of the last sample, or its own I/O goes on (io_active)
    in_collective: bool  # inside a collective in every sample since it last changed
    outside: bool  # outside any collective in every sample since it last changed
    step_rate: float | None = None  # steps per second, from a step counter that rose
    counter: str = ""  # which one: "main:step"
    io_active: bool = False  # its own thread reads or writes at its own pace (io_active)
    io_growth: int = 0  # how much its own thread's read and written bytes rose over the samples
    logging: bool = False  # its own thread keeps writing, a line at a time (logprogress.py)
    busy: bool = False  # its stack kept changing over the look (busy_stack), still or not at its end
    still_samples: int = 0  # the samples since it last changed (lookdepth.py: too few cannot tell)
    cpu_busy: bool = False  # its own thread ran on the CPU while its stack stood still (cpuwork.py)
    cpu_s: float | None = None  # CPU seconds its own thread used over the look
    running: bool = False  # its own thread ran on the CPU over the look and since it last changed (cpubound.py)


def working_and_logging(m: RankMotion) -> bool:
    """A rank outside any collective that keeps logging its progress (logprogress.py) while
    its stack moves, now or over the whole look (busy_stack), or while its own thread runs on
    the CPU though its stack stood still (cpuwork.py: one long call; samples a loaded node
    spread out), works through a long phase."""
    return (m.moved or m.busy or m.cpu_busy) and m.logging


def _rate(samples: Sequence[StackSample]) -> tuple[float | None, str]:
    first, last = samples[0], samples[-1]
    span = last.at - first.at
    for name, start in first.counters.items():
        end = last.counters.get(name)
        if end is not None and end > start and span > 0:
            return (end - start) / span, name
    return None, ""


def _io_growth(samples: Sequence[StackSample]) -> int:
    counts = [s.thread_io for s in samples if s.thread_io is not None]
    return max(0, counts[-1] - counts[0]) if counts else 0


def _cpu_s(samples: Sequence[StackSample]) -> float | None:
    used = cpu_used([(s.at, s.cpu) for s in samples])
    return round(used[0], 2) if used is not None else None


def rank_motion(rank: int, samples: Sequence[StackSample]) -> RankMotion | None:
    """None with fewer than two samples, or over less than STILL_S: too short a look to
    say whether a rank moves."""
    if len(samples) < 2 or samples[-1].at - samples[0].at < STILL_S:
        return None
    rate, counter = _rate(samples)
    run = still_run(samples)
    still = round(run[-1].at - run[0].at, 3)
    active = io_active(samples)
    return RankMotion(rank=rank, samples=len(samples), span_s=round(samples[-1].at - samples[0].at, 3),
                      still_s=still, moved=still < STILL_S or active,
                      in_collective=all(s.collective is not None for s in run),
                      outside=all(s.collective is None for s in run), step_rate=rate, counter=counter,
                      io_active=active, io_growth=_io_growth(samples),
                      logging=logs_progress([(s.at, s.thread_io) for s in samples]),
                      busy=busy_stack(samples), still_samples=len(run),
                      cpu_busy=cpu_busy([(s.at, s.cpu) for s in run]), cpu_s=_cpu_s(samples),
                      running=runs_throughout([(s.at, s.cpu) for s in samples], [(s.at, s.cpu) for s in run]))


class JobMotion(msgspec.Struct, frozen=True):
    """Every sampled rank's motion, and the sampling that gave it."""

    ranks: dict[int, RankMotion]
    samples: int  # the most samples any rank had
    span_s: float  # the longest window any rank was sampled over

    @property
    def still(self) -> set[int]:
        """Ranks that did not move (for STILL_S or more at the end)."""
        return {r for r, m in self.ranks.items() if not m.moved}

    @property
    def all_moved(self) -> bool:
        return bool(self.ranks) and not self.still

    def describe(self) -> str:
        return f"{self.samples} samples of every rank over {self.span_s:.1f} s"

    def step_rate(self) -> tuple[float | None, str]:
        """The median step rate of the ranks that show one, and the counter's name."""
        rates = [(m.step_rate, m.counter) for m in self.ranks.values() if m.step_rate is not None]
        if not rates:
            return None, ""
        return statistics.median(r for r, _ in rates), rates[0][1]


def job_motion(samples: Mapping[int, Sequence[StackSample]]) -> JobMotion | None:
    """rank -> its samples; None when no rank was sampled twice."""
    ranks = {r: m for r, s in samples.items() if (m := rank_motion(r, s)) is not None}
    if not ranks:
        return None
    return JobMotion(ranks=ranks, samples=max(m.samples for m in ranks.values()),
                     span_s=max(m.span_s for m in ranks.values()))


def waited_for(samples: Mapping[int, Sequence[StackSample]]) -> dict[int, int]:
    """rank -> in how many sample rounds it was the only kind of rank outside a
    collective while every other rank was inside one (the others waited for it). Rounds
    are aligned by index: a node dumps its ranks together, nodes start together."""
    rounds = min((len(s) for s in samples.values()), default=0)
    counts: dict[int, int] = {}
    for i in range(rounds):
        outside = {r for r, s in samples.items() if s[i].collective is None}
        if outside and len(outside) < len(samples):
            for r in outside:
                counts[r] = counts.get(r, 0) + 1
    return counts
