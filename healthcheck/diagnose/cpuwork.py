"""Whether a rank's own thread ran on the CPU while its stack stood still.

py-spy shows where a thread is, not whether it runs: a rank inside one long call (a
tokenizer's C loop, a big sort) shows one line in every sample, as a rank blocked in a
wait does; and on a loaded node the samples come further apart and fewer, so a busy
rank's stack can look unchanged between them. The kernel's count of the CPU time a thread
used (/proc/PID/task/TID/stat utime + stime, read at each sample: StackSample.cpu) tells
the two apart whatever the load: a thread blocked in a wait or a sleep uses none, one that
runs uses some (less on a loaded node, never none).

A thread that runs is not necessarily progressing (a spin loop runs for ever), so this
alone clears nobody: it stands in for "its stack moved" where a rank that logs its
progress is asked whether it also works (motion.working_and_logging).
"""

from __future__ import annotations

from collections.abc import Sequence

CPU_WORK_SHARE = 0.05  # of the wall time: a blocked or sleeping thread uses ~0, a running one far more, loaded or not

Sample = tuple[float, float | None]  # (seconds since the first sample, CPU seconds its own thread had used)


def cpu_used(samples: Sequence[Sample]) -> tuple[float, float] | None:
    """(CPU seconds used, wall seconds) from the first sample that read the count to the last."""
    known = [(at, cpu) for at, cpu in samples if cpu is not None]
    if len(known) < 2:
        return None
    return max(0.0, known[-1][1] - known[0][1]), known[-1][0] - known[0][0]


def cpu_busy(samples: Sequence[Sample]) -> bool:
    """Its own thread used at least CPU_WORK_SHARE of the wall time between the samples."""
    used = cpu_used(samples)
    return used is not None and used[1] > 0 and used[0] >= CPU_WORK_SHARE * used[1]


def runs_throughout(samples: Sequence[Sample], still: Sequence[Sample]) -> bool:
    """Its own thread ran over the whole look, and over the samples since its stack last
    changed where there are two of them (a rank that ran early and then blocked, its
    stack unchanged since, is not running). A thread blocked in a wait, a lock, a read of
    stdin (pdb) or a sleep uses no CPU: such a rank is still, whatever its count was before."""
    if not cpu_busy(samples):
        return False
    return cpu_used(still) is None or cpu_busy(still)
