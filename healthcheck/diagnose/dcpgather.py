"""torch.distributed.checkpoint's gathered failure: a rank whose storage writer (or
planner) raised during `dcp.save` does not die alone. DCP gathers every rank's result to
the coordinator and raises one `CheckpointException ranks:dict_keys([R, ...])` on EVERY
rank, each printing the failed rank's traceback ("Traceback (most recent call last):
(RANK R)" and its OSError). The ranks DCP names are the dead ones; every other rank that
re-raised the exception is a victim of theirs, never the culprit.

(torch 2.13's torch/distributed/checkpoint/api.py `CheckpointException.__str__`:
`CheckpointException ranks:{self.failures.keys()}`; captured here:
tests/fixtures/diagnose/rules11, dcpwrite.)
"""

from __future__ import annotations

import re

_GATHERED = re.compile(r"CheckpointException ranks:dict_keys\(\[([0-9, ]{1,4000})\]\)")


def gathered_ranks(message: str) -> frozenset[int] | None:
    """The ranks a CheckpointException's message names; None: not DCP's gathered exception."""
    m = _GATHERED.search(message[:8000])
    if m is None:
        return None
    ranks = frozenset(int(x) for x in m.group(1).replace(" ", "").split(",") if x.isdigit() and len(x) <= 9)
    return ranks or None


def checkpoint_victim(exception_type: str, message: str, rank: int) -> bool | None:
    """Whether `rank`'s CheckpointException is another rank's failure it re-raised (True),
    its own (False: DCP names it), or None where the exception is not DCP's gathered one."""
    if not exception_type.endswith("CheckpointException"):
        return None
    named = gathered_ranks(message)
    return None if named is None else rank not in named


__all__ = ["checkpoint_victim", "gathered_ranks"]
