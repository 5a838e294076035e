"""PyTorch Lightning's line as each process starts its process group: `initializing ddp:
GLOBAL_RANK: R, MEMBER: m/N` (Lightning 1.x's DDP plugins) and `Initializing distributed:
GLOBAL_RANK: R, MEMBER: m/N` (lightning_fabric's `_init_dist_connection`, printed once per
process before `init_process_group`; m is R + 1, N the world size). Each is the global rank
that process claims (DdpStart): two processes claiming one rank is a rank assignment gone
wrong (two nodes given the same node rank), which diagnose/ddpclaims.py judges."""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import DdpStart
from healthcheck.parsers.torch_log.state import TorchState, agent_where

_START = re.compile(r"(?:initializing ddp|Initializing distributed): GLOBAL_RANK: (\d{1,7}), "
                    r"MEMBER: (\d{1,7})/(\d{1,7})\b")


def read_ddp_start(state: TorchState, line: Line) -> bool:
    """One process's `GLOBAL_RANK: R, MEMBER: m/N`; a member that is not R + 1 is no such line."""
    m = _START.search(line.text)
    if m is None:
        return False
    rank, member, world = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if member != rank + 1 or member > world:
        return False
    state.add("ddp_starts", DdpStart(**agent_where(line), global_rank=rank, world=world))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("ddp-start", lambda b: "GLOBAL_RANK: " in b, read_ddp_start),
)

__all__ = ["HANDLERS", "read_ddp_start"]
