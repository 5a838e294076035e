"""gloo's size check failed inside a broadcast (broadcast_object_list's first collective is a
broadcast of the objects' sizes from src): which rank's tensor is the odd one.

In a broadcast every receiver compares the source's size with its own, and gloo fails the
check only where more arrives than the receiver's tensor holds. Had the source's tensor
been the odd (larger) one, every receiver would have failed alike (broadcast_source in
mismatch.py names it). Where one receiver alone reported while two or more other ranks
went on past the broadcast into a later collective (at least one of them a receiver that
took the source's data without complaint), the source holds the majority's size and the
reporter's own tensor is the odd one: it is named. Captured with torch 2.13:
broadcast_object_list with a list of 2 on one rank where rank 0 passes 3 (`24 vs 16` on
that rank, 8 bytes a size; tests/fixtures/diagnose/rules6). A broadcast is never read as a
ring all_reduce (ringsize.py): where the rule does not settle it, the finding says so.
"""

from __future__ import annotations

from healthcheck.diagnose.logfacts import first_errors
from healthcheck.diagnose.ringsize import SizeReport
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def _broadcast(op: str) -> bool:
    return op.startswith("broadcast")


def in_broadcast(col: Collected, sizes: list[SizeReport]) -> bool:
    """The size check failed in a broadcast: a rank that reported none waits in one, and none
    of them in an all_to_all."""
    reporters = {s.rank for s in sizes}
    ops = {e.collective for r, e in first_errors(col).items() if r not in reporters and e.collective}
    return any(_broadcast(op) for op in ops) and not any(op.replace("_", "").startswith("alltoall") for op in ops)


def odd_receivers(col: Collected, sizes: list[SizeReport]) -> tuple[tuple[int, ...], str]:
    """(the reporters, why) where they are the odd ones (see the module's docstring); ((), "")
    where the text does not settle it."""
    reporters = sorted({s.rank for s in sizes})
    if not reporters or not in_broadcast(col, sizes):
        return (), ""
    past = sorted(r for r, e in first_errors(col).items()
                  if r not in reporters and e.collective and not _broadcast(e.collective))
    if len(past) < 2 or len(reporters) >= len(past):
        return (), ""
    s = sizes[0]
    return tuple(reporters), (f"{rank_words(reporters)} received {s.received} bytes in a broadcast where its own "
                              f"tensor holds {s.expected}, while {rank_words(past)} took the source's data and went "
                              "on to a later collective: the source holds their size (were its tensor the odd one, "
                              f"every receiver would have failed alike), so {rank_words(reporters)} holds the odd one")


def undecided(sizes: list[SizeReport]) -> str:
    """What a broadcast's size report says where the rule does not settle it."""
    s = sizes[0]
    return (f"rank {s.rank} received {s.received} bytes in a broadcast where its own tensor holds {s.expected}: "
            f"its size or the source's is the odd one, and which the text does not say (too few ranks went past "
            "the broadcast)")


__all__ = ["in_broadcast", "odd_receivers", "undecided"]
