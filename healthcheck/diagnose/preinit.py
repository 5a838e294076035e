"""A rank that died before it joined: its peers' rendezvous/store timeouts are the consequence.

A rank that raises in its own code before init_process_group (a config it cannot parse)
never reaches the store: the store's host times out "3/4 clients joined", the others time
out waiting for its key. The init-failure rule (startup.py) sees only those waits and can
name no rank; the dead-rank rule (deaths.py) names the rank whose own exception (or
signal) ended it. Where the init-failure names no rank, is not a port in use, and every
rendezvous/store error is a peer's (none the dead rank's own), the job did not fail to
start: one rank died before it joined, and dead-rank is the verdict.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank
from healthcheck.diagnose.findings import JobFinding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def _store_waiters(col: Collected) -> set[int]:
    """Ranks that printed a rendezvous/store error of their own."""
    return {r for f in col.evidence.torch_logs if f.log is not None
            for r in (fact_rank(z, f.rank) for z in f.log.rendezvous) if r is not None}


def died_before_joining(col: Collected, init: JobFinding | None, dead: JobFinding | None) -> str:
    """Why the init-failure is the dead rank's consequence ("" where it is not): see the
    module's docstring."""
    if init is None or dead is None or init.ranks or not dead.ranks:
        return ""
    if any("address already in use" in e.text for e in init.lines):
        return ""
    waiters = _store_waiters(col)
    if not waiters or waiters & set(dead.ranks):
        return ""
    return (f"{rank_words(waiters)} timed out in the rendezvous/store waiting for "
            f"{rank_words(dead.ranks)}, which died before it joined: the start did not fail, a rank died")


__all__ = ["died_before_joining"]
