"""A SIGABRT that is the rank's own death, not gloo's abort of a mismatch's party.

gloo aborts (SIGABRT) a rank whose size check failed (`Received data size doesn't
match`): that death is the mismatch's consequence, and the dead-rank rule skips SIGABRT
for it. But SIGABRT is also how a rank dies of its own native code: a C/C++ `assert`
(glibc's `prog: FILE:LINE: FUNC: Assertion `EXPR' failed.`, then abort()), std::terminate.
torchrun's failure block then says `exitcode: -6 (SIGABRT)` for that rank, and the others
it stopped after it `-15 (SIGTERM)`. A SIGABRT torchrun reports is the rank's own death
where nothing in the job's text is a gloo size check failing and the rank's own lines
report no collective's failure (victims.spoke_of_failure): nothing of gloo aborted it. A
rank whose output holds an exception of its own is left to that exception (it says more
than the signal the exception ended in).

A SIGABRT of a rank whose own output is not in the text at all (torchrun's box, or its
tail, alone: no line of the rank's, no traceback, no error) is no such evidence: NCCL's
watchdog aborts a rank whose collective timed out the same way (`exitcode: -6`), every
rank that waited in it, and nothing says which of the two it was. Such a rank is not
named (`bare_aborts`; the verdict says why), unless the box shows its whole failure list
and the rank is its only failure (`<NO_OTHER_FAILURES>` beside its one entry): then no
other rank aborted with it, which is not the watchdog's many aborts.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank
from healthcheck.diagnose.leavers import own_output
from healthcheck.diagnose.logfacts import gloo_size_aborts
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure


def _aborted(col: Collected) -> set[int]:
    """The ranks torchrun's box reports dead of SIGABRT."""
    return {x.rank for f in col.evidence.torch_logs if f.log is not None
            for b in f.log.child_failed for x in b.failures if x.rank is not None and x.signal == "SIGABRT"}


def _lone_failures(col: Collected) -> set[int]:
    """The ranks a whole box lists as its one failure (`<NO_OTHER_FAILURES>`)."""
    return {b.failures[0].rank for f in col.evidence.torch_logs if f.log is not None for b in f.log.child_failed
            if b.no_other_failures and len(b.failures) == 1 and b.failures[0].rank is not None}


def bare_aborts(col: Collected) -> frozenset[int]:
    """The ranks torchrun reports dead of SIGABRT of which the text holds nothing of their
    own: the watchdog's abort as likely as a native assert (module doc)."""
    return frozenset(_aborted(col) - own_output(col) - _lone_failures(col))


def own_aborts(col: Collected) -> frozenset[int]:
    """The ranks torchrun reports dead of SIGABRT whose abort is their own (see the
    module's docstring)."""
    aborted = _aborted(col) - bare_aborts(col)
    if not aborted or gloo_size_aborts(col):
        return frozenset()
    raised = {r for f in col.evidence.torch_logs if f.log is not None
              for r in (fact_rank(e, f.rank) for e in f.log.exceptions) if r is not None}
    return frozenset(aborted - spoke_of_failure(col) - raised)


__all__ = ["bare_aborts", "own_aborts"]
