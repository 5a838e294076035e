"""Deaths with a common cause, for classify.py and verdict.py: no rank stands out.

torchrun's ChildFailedError box gives each failed worker's exit, signal and time, to the
second. Where every entry of every box in the text died of one and the same signal (one
nobody sent it: not SIGTERM/SIGINT/SIGHUP), in one and the same second, and there are two
entries or more, the workers died together: one cause reached them all at once (SIGBUS on
every rank: /dev/shm full or a shared or mapped file gone; SIGSEGV everywhere: a library or
the host), not one rank that failed and took the others down. A peer that a dead rank took
down fails in a collective (an exit code, a timeout) or is stopped by the agent (SIGTERM),
seconds later; it does not die of the same signal in the same second. The box is then the
whole of what failed on its node (torch 2.x lists every worker it stopped as well), so this
holds for all of the world (every box's entries alike) or all of one host's ranks (one
box's entries alike, the other boxes' otherwise) alike; a rank elsewhere whose own error
came first is the dead rank's rule's to name, and then nothing is taken back.

Not a common death: a world of two where one entry is a second or more earlier than the
other (the first died first), or where one died by a signal and the other by an exit code
or another signal (the one killed by the signal is the dead rank), or an entry whose signal
the agent or an operator sent.

`common_death` returns the entries' description; `without_common_death` takes back a
dead-rank finding that stands on those entries alone (every one of its evidence lines is
one of them), so the verdict names no rank and says the host and the signal instead.

The seconds order a box's signalled entries where they differ (`first_seen`): the agent
times a worker that left no error file when it finds it exited (ProcessFailure's
`int(time.time())`), and finds them in two looks: the workers already dead when it first
polled, then, after it stopped the others (SIGTERM, waiting for them to end), whichever
ended meanwhile. An entry a second or more later than the box's earliest was alive at the
first look: of a dead-rank finding standing on one box's entries alone, only the earliest
second's ranks are named. Several boxes (each node's agent on its own clock) are
firstchild.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.logfacts import COLLATERAL, torchrun_time
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log import ChildFailure

# what one signal on every worker at once usually means (the words the verdict adds)
_CAUSE = {
    "SIGBUS": "a bus error on every worker at once: typically /dev/shm full or a shared or mapped file gone",
    "SIGSEGV": "a segmentation fault on every worker at once: a library, the host or the input they share",
    "SIGKILL": "killed together: the node's or the job's memory limit, or the scheduler",
}


@dataclass(frozen=True)
class CommonDeath:
    """Every box entry died of `signal` at `time`: the ranks, their hosts, and the lines."""

    signal: str
    time: str
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    lines: frozenset[tuple[str, int]]  # (source, line) of each entry

    def describe(self) -> str:
        where = f" on {', '.join(self.hosts)}" if self.hosts else ""
        cause = _CAUSE.get(self.signal, "one cause common to them all")
        return (f"the workers torchrun reports failed{where} ({rank_words(self.ranks)}) all died of {self.signal} "
                f"in the same second ({self.time}): {cause}; no rank stands out")


def _together(entries: list[tuple[str, ChildFailure]]) -> CommonDeath | None:
    """These entries' common death: two or more ranks, one signal nobody sent, one second."""
    signals = {x.signal for _, x in entries}
    times = {x.time for _, x in entries}
    ranks = {x.rank for _, x in entries}
    if len(signals) != 1 or len(times) != 1 or None in ranks or len(ranks) < 2:
        return None
    signal, time = signals.pop(), times.pop()
    if not signal or signal in COLLATERAL or not time:
        return None
    return CommonDeath(signal=signal, time=time, ranks=tuple(sorted(r for r in ranks if r is not None)),
                       hosts=tuple(sorted({x.host for _, x in entries if x.host})),
                       lines=frozenset((source, x.line) for source, x in entries))


def common_deaths(col: Collected) -> list[CommonDeath]:
    """The common deaths (see the module's docstring): every box's entries together where
    they all died so, else each box (one node's agent: all of that host's failed workers)
    whose entries did."""
    boxes = [[(f.source, x) for x in block.failures] for f in col.evidence.torch_logs if f.log is not None
             for block in f.log.child_failed]
    whole = _together([e for box in boxes for e in box])
    if whole is not None:
        return [whole]
    return [c for c in (_together(box) for box in boxes) if c is not None]


def without_common_death(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """`dead`, or None where it names only ranks of common deaths, on those entries' lines alone."""
    if dead is None or not dead.ranks:
        return dead
    lines = {line for c in common_deaths(col) for line in c.lines}
    if lines and all(e.line is not None and (e.source, e.line) in lines for e in dead.lines):
        return None
    return dead


def first_seen(col: Collected, dead: JobFinding | None) -> JobFinding | None:
    """`dead` naming only the entries of its box's earliest second, where it stands on one
    box's entries alone and some of them are a second or more later (see the module's docstring)."""
    if dead is None or len(dead.ranks) < 2:
        return dead
    boxes = [(f.source, block) for f in col.evidence.torch_logs if f.log is not None for block in f.log.child_failed]
    if len(boxes) != 1:
        return dead  # each node's agent polls on its own clock: several boxes are firstchild.py's
    source, block = boxes[0]
    lines = {x.line for x in block.failures}
    if not all(e.source == source and e.line in lines for e in dead.lines):
        return dead
    times = {x.rank: torchrun_time(x.time) for x in block.failures}
    if None in times.values() or None in times:
        return dead
    first = min(t for t in times.values() if t is not None)
    kept = tuple(r for r in dead.ranks if times.get(r) == first)
    later = tuple(r for r in dead.ranks if r not in kept)
    if not kept or not later:
        return dead
    return job_finding(cls="dead-rank", confidence=dead.confidence, ranks=kept, where=dead.where,
                       evidence=tuple(e for e in dead.lines if e.rank in kept),
                       summary=f"{rank_words(kept)} died first: "
                               f"torchrun's agent found {'it' if len(kept) == 1 else 'them'} dead at its first look; "
                               f"{rank_words(later)} died a second or more later, while the agent stopped the "
                               "workers (the agent times a signalled worker when it finds it exited)")


__all__ = ["CommonDeath", "common_deaths", "first_seen", "without_common_death"]
