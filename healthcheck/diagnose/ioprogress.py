"""progressing, while the others wait for a rank that reads or writes: the rank outside
any collective whose own thread's I/O goes on (motion.io_active: a checkpoint written
shard by shard with sleeps between, a slow file read) is working, not stuck, whatever
line its stack shows; the ranks that wait for it in a collective wait for work, not for
a hang. So is a busy rank (its stack moves) that keeps writing its log (logprogress.py:
an index build logging every second). A rank that does no I/O and whose stack does not
move while the others wait is still stuck (stuck.py); one that moves with no I/O (a busy
loop) too.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from healthcheck.diagnose.motion import JobMotion, working_and_logging
from healthcheck.diagnose.stacks import StackGroup


class IoWait(msgspec.Struct, frozen=True):
    """The ranks doing I/O outside any collective, and the ranks waiting in one."""

    working: tuple[int, ...]
    waiting: tuple[int, ...]
    collective: str  # what the waiting ranks wait in ("barrier"); "" where they differ


def io_wait(groups: Sequence[StackGroup], motion: JobMotion | None) -> IoWait | None:
    """Every sampled rank either moved or waits, still, in a collective; at least one is
    outside any collective with its own I/O going on, and every rank outside one is such
    a rank. None otherwise."""
    if motion is None:
        return None
    working: list[int] = []
    waiting: list[int] = []
    collectives: set[str] = set()
    for g in groups:
        for r in g.ranks:
            m = motion.ranks.get(r)
            if m is None:
                return None
            if g.collective is None:
                if not (m.io_active or working_and_logging(m)):  # a busy rank logging works (logprogress.py)
                    return None
                working.append(r)
            elif not m.moved:
                waiting.append(r)
                collectives.add(g.collective)
    if not working or not waiting:
        return None
    return IoWait(working=tuple(sorted(working)), waiting=tuple(sorted(waiting)),
                  collective=next(iter(collectives)) if len(collectives) == 1 else "")
