"""A TCPStore key waited for by the program's own code (a checkpoint's commit, a barrier of
its own on the store, a setup key like a dataset index under a run prefix), for the
init-failure and post-mortem rules.

`store.wait([key])` / `store.get(key)` that ran out raises `DistStoreError: wait timeout
after Nms, keys: ...` (torch 2.x). In init_process_group or new_group it is the rendezvous
failing (a rank never came: startup.py, preinit.py, setupdeath.py); raised from the
program's own code after the job's loop went round (a `step N` logged, or any loop counter
logged with two values: `epoch 0`, `epoch 1`) it is a wait on a peer that never set the
key, like a collective's timeout. Such a wait is no init failure, and it counts as the
rank's timeout where the post-mortem compares who timed out with who did not
(postmortem.did_not_time_out).

Where only some ranks raise it and every other rank heard failed inside a collective (so
past its own setup, waiting on peers), the waiting ranks are the culprits, not the
rendezvous: the peers wait in a collective for a rank that sits in the store outside any
(`lone_store_waits`). After the loop went round that rank is stuck (a key no rank sets: a
reshuffle seed nobody publishes), `stuck_in_store`; before it, the rank never finished its
own setup (a setup key under another run's prefix: a stale RUN_ID in its launch),
`setup_store_waits` for the init-failure rule; so is a strict minority of three ranks or more
that all waited in the store, under another key prefix than the rest.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import minority
from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.logfacts import RankError, Wait, error_evidence, first_errors, ranks_heard
from healthcheck.diagnose.outofstep import last_steps
from healthcheck.diagnose.setupdeath import SETUP_FUNCTIONS
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

_STORE_TIMEOUT = "wait timeout after"
_KEYS = "keys: "


def _store_wait(e: RankError) -> bool:
    return e.type.endswith("DistStoreError") and _STORE_TIMEOUT in e.message and bool(e.frame) and \
        e.collective not in SETUP_FUNCTIONS


def loop_went_round(col: Collected) -> bool:
    """The job's loop logged a step, or a loop counter with two values or more (steps.py)."""
    return bool(last_steps(col)) or any(f.log is not None and f.log.loop_rounds >= 2 for f in col.evidence.torch_logs)


def midrun_store_waits(col: Collected) -> dict[int, RankError]:
    """rank -> its first error, a store wait that timed out in its own code after the job's
    loop went round (see the module's docstring); {} where it never did."""
    if not loop_went_round(col):
        return {}
    return {r: e for r, e in first_errors(col).items() if _store_wait(e)}


def store_waits(col: Collected) -> dict[int, Wait]:
    """The mid-run store waits as the post-mortem's waits (op "store.wait", at the own frame)."""
    return {r: Wait(rank=r, source=e.source, line=e.line, op="store.wait", where=e.frame, chain=e.chain,
                    text=f"timed out in store.wait at {e.frame}: {e.message[:120]}")
            for r, e in midrun_store_waits(col).items()}


def lone_store_waits(col: Collected) -> tuple[dict[int, RankError], dict[int, RankError]]:
    """(rank -> its store wait, rank -> its collective's error) where some ranks, not all,
    raised a store wait in their own code and every other rank heard failed inside a
    collective past its setup; ({}, {}) otherwise."""
    firsts = first_errors(col)
    waits = {r: e for r, e in firsts.items() if _store_wait(e)}
    others = {r: e for r, e in firsts.items() if r not in waits}
    if not waits or not others or set(firsts) != ranks_heard(col):
        return {}, {}
    if not all(e.collective and e.collective not in SETUP_FUNCTIONS for e in others.values()):
        return {}, {}
    return waits, others


def _keys(e: RankError) -> str:
    at = e.message.find(_KEYS)
    return e.message[at + len(_KEYS):][:120] if at >= 0 else "a key"


def _said(waits: dict[int, RankError], others: dict[int, RankError]) -> tuple[str, str]:
    """(what the waiting ranks waited for, where the others waited for them)."""
    first = waits[min(waits)]
    ops = sorted({e.collective for e in others.values()})
    return (f"{rank_words(sorted(waits))} waited in the store for {_keys(first)} at {first.frame}",
            f"{rank_words(sorted(others))} waited for {'it' if len(waits) == 1 else 'them'} in {', '.join(ops)}")


def stuck_in_store(col: Collected) -> JobFinding | None:
    """The ranks that sat in a store wait of their own mid-run while every other rank
    waited for them in a collective: stuck-rank (see the module's docstring)."""
    waits, others = lone_store_waits(col)
    if not waits or not loop_went_round(col):
        return None
    theirs, peers = _said(waits, others)
    summary = (f"{theirs} (a key no rank set: DistStoreError wait timeout) after the job's loop went round, "
               f"outside any collective, while {peers}: stuck")
    items = [error_evidence(e) for e in waits.values()] + [error_evidence(others[min(others)])]
    return job_finding(cls="stuck-rank", summary=summary, confidence="medium", ranks=tuple(sorted(waits)),
                       evidence=tuple(items[:12]), where=waits[min(waits)].frame)


def _prefix(e: RankError) -> str:
    """The key's path without its last part (`/default_pg/0//run-6e21//index` -> `.../run-6e21/`)."""
    return _keys(e).rpartition("/")[0]


def _odd_prefixes(col: Collected) -> tuple[dict[int, RankError], str]:
    """Every rank heard (three or more) waited in the store in its own code, and a strict
    minority waited under another key prefix than the rest: (those ranks' waits, why)."""
    firsts = first_errors(col)
    waits = {r: e for r, e in firsts.items() if _store_wait(e)}
    if len(waits) < 3 or set(waits) != ranks_heard(col):
        return {}, ""
    pick = minority({r: _prefix(e) for r, e in waits.items()})
    if pick is None:
        return {}, ""
    odd, theirs, mine = pick
    return ({r: waits[r] for r in odd},
            f"{rank_words(sorted(odd))} waited in the store under {mine or 'no prefix'} where every other rank "
            f"waited under {theirs or 'no prefix'}, before the job's loop went round: its launch names another run "
            "or prefix")


def setup_store_waits(col: Collected) -> tuple[dict[int, RankError], str]:
    """(the ranks that waited in the store for a key of their own setup before the job's
    loop went round, while every other rank had gone on into a collective and waited for
    them, or while every other rank waited under one other key prefix; why, in words): they
    could not finish their setup. ({}, "") otherwise."""
    if loop_went_round(col):
        return {}, ""
    waits, others = lone_store_waits(col)
    if not waits:
        return _odd_prefixes(col)
    theirs, peers = _said(waits, others)
    return waits, (f"{theirs} before the job's loop went round, while {peers}: no peer set the key it "
                   "waits for (a prefix or run id of another launch?)")


__all__ = ["loop_went_round", "midrun_store_waits", "setup_store_waits", "store_waits", "stuck_in_store"]
