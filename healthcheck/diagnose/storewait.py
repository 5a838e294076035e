"""A TCPStore key waited for in the middle of training (a checkpoint's commit, a barrier of
the program's own on the store), for the init-failure and post-mortem rules.

`store.wait([key])` / `store.get(key)` that ran out raises `DistStoreError: wait timeout
after Nms, keys: ...` (torch 2.x). In init_process_group or new_group it is the rendezvous
failing (a rank never came: startup.py, preinit.py, setupdeath.py); raised from the
program's own code after the job logged a training step it is a wait on a peer that never
set the key: the peer is stuck or busy elsewhere, like a collective's timeout. Such a wait
is no init failure, and it counts as the rank's timeout where the post-mortem compares who
timed out with who did not (postmortem.did_not_time_out).
"""

from __future__ import annotations

from healthcheck.diagnose.logfacts import RankError, Wait, first_errors
from healthcheck.diagnose.outofstep import last_steps
from healthcheck.diagnose.setupdeath import SETUP_FUNCTIONS
from healthcheck.diagnose.sources import Collected

_STORE_TIMEOUT = "wait timeout after"


def _store_wait(e: RankError) -> bool:
    return e.type.endswith("DistStoreError") and _STORE_TIMEOUT in e.message and bool(e.frame) and \
        e.collective not in SETUP_FUNCTIONS


def midrun_store_waits(col: Collected) -> dict[int, RankError]:
    """rank -> its first error, a store wait that timed out in its own code after the job
    logged a training step (see the module's docstring); {} where no step was logged."""
    if not last_steps(col):
        return {}
    return {r: e for r, e in first_errors(col).items() if _store_wait(e)}


def store_waits(col: Collected) -> dict[int, Wait]:
    """The mid-run store waits as the post-mortem's waits (op "store.wait", at the own frame)."""
    return {r: Wait(rank=r, source=e.source, line=e.line, op="store.wait", where=e.frame, chain=e.chain,
                    text=f"timed out in store.wait at {e.frame}: {e.message[:120]}")
            for r, e in midrun_store_waits(col).items()}


__all__ = ["midrun_store_waits", "store_waits"]
