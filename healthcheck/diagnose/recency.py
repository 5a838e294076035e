"""Whether something a rank does at its own pace is still going on at the end of a look:
the one recency rule motion.io_active (its own I/O work) and logprogress.logs_progress
(its log lines) share.

Given when a count rose (the times of the samples that saw it higher) and when the samples
were taken: it rose in two sample intervals or more, and has been quiet since its last rise
no longer than its longest gap between rises plus one sample spacing (the samples' phase).
A burst that then stopped is not going on; a writer that pauses between its writes, and
was last seen writing about as long ago as its pauses last, is. The spacing is the median
of the samples actually taken, so samples that came late (a loaded node) widen it, as they
should.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise


def keeps_rising(rises: Sequence[float], times: Sequence[float]) -> bool:
    """`rises`: when the count rose (ascending, each one of `times`); `times`: every sample's
    time, ascending. See the module's docstring."""
    if len(rises) < 2 or len(times) < 2:
        return False
    quiet = times[-1] - rises[-1]
    gap = max(b - a for a, b in pairwise(rises))
    spacing = statistics.median(b - a for a, b in pairwise(times))
    return quiet <= gap + spacing
