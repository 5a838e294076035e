"""Stacks that may be waiting in a collective with no c10d frame of their own.

py_spy.hidden_collective reads the two common hidden waits from py-spy's `--locals` (a
Work held by the program's innermost frame; a DistributedDataParallel model above
autograd's backward). Without locals a stack inside `backward()` has two readings: DDP's
reducer waiting for its gradient all_reduce (a waiter), or a rank stuck computing or
syncing in its own backward (a culprit). Between the two, hc names nobody from that
stack: the rank is neither counted as waiting nor named as stuck.
"""

from __future__ import annotations

from healthcheck.diagnose.stacks import StackGroup
from healthcheck.parsers.py_spy import AUTOGRAD_FILES, BACKWARD_FRAMES


def maybe_waiting(group: StackGroup) -> bool:
    """The class sits outside any known collective, inside autograd's backward."""
    if group.collective is not None:
        return False
    for text in group.frames:
        name, _, where = text.partition(" (")
        if name.rsplit(".", 1)[-1] in BACKWARD_FRAMES and where.rstrip(")").rsplit(":", 1)[0].endswith(AUTOGRAD_FILES):
            return True
    return False
