"""A desync that gloo reports as a size mismatch: ranks in a one-element collective (a loss,
a flag, a metric all_reduced) met their peers' collective of a whole tensor (a gradient
bucket) at the same position of their sequences, because they ran one collective more or
fewer before it (another gradient-accumulation count, a skipped step).

gloo's check fails on the receiving side where a larger chunk arrives (ringsize.py). A
receiver whose own tensor is one element (E bytes, at most 8) that got R >= 16 E bytes
from its ring sender was not in the same collective as that sender: no shape or dtype
bug turns a chunk of one element into a chunk of many. Which side is the odd one the
sizes alone do not say (a culprit in the tensor collective sends into its peers' scalar
one just as well); the peers' own errors do: where every rank that reported no size error
and printed an error (two at least, each sender among them) failed in one collective at
one place of its own code, that is the majority's collective (where their tracebacks
name no torch.distributed function, DDP's gradient bucket all_reduced inside backward(),
the place alone), and the receivers, in another one, are the culprits. Named at world 3
or more only, the receivers a strict minority.

Captured with torch 2.13 (tests/fixtures/diagnose/rules10, `accumskip`: gradient
accumulation 3 on the odd ranks, 2 on the others: `468 vs 4`).
"""

from __future__ import annotations

from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import error_evidence, first_errors
from healthcheck.diagnose.ringsize import SizeReport, ring_sender, ring_step, ring_world
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

SCALAR_BYTES = 8  # one element of a dtype up to 8 bytes wide
# the peers' collective where their tracebacks name no torch.distributed function: DDP's
# gradient all_reduce, waited at the end of backward() (`loss.backward()` the own frame)
_HIDDEN = "an exchange with no torch.distributed frame (DDP's gradient all_reduce inside backward)"
MANY = 16  # a chunk this many times the receiver's whole tensor is another collective's


def _scalar_met_tensor(sizes: list[SizeReport]) -> bool:
    return bool(sizes) and all(0 < s.expected <= SCALAR_BYTES and s.received >= MANY * s.expected for s in sizes)


def scalar_meets_tensor(col: Collected, sizes: list[SizeReport]) -> tuple[tuple[int, ...], str, list[Evidence]] | None:
    """(the receivers, the words, the peers' errors) where one-element collectives met the
    peers' tensor collective; None otherwise."""
    world = ring_world(col)
    if world is None or world < 3 or not _scalar_met_tensor(sizes):
        return None
    receivers = sorted({s.rank for s in sizes})
    if 2 * len(receivers) >= world:
        return None
    step = ring_step(col, sizes)
    senders = {ring_sender(s, world, step) for s in sizes}
    firsts = first_errors(col)
    peers = [r for r in range(world) if r not in receivers]
    spoke = [r for r in peers if r in firsts]  # a launcher may stop a peer before it prints its error
    if senders & set(receivers) or not senders <= set(spoke) or len(spoke) < 2 or \
            not all(firsts[r].victim for r in spoke):
        return None
    places = {(firsts[r].collective, firsts[r].frame) for r in spoke}
    if len(places) != 1 or not next(iter(places))[1]:
        return None
    op, frame = next(iter(places))
    op = op or _HIDDEN  # a peer error (every spoke's is one) is raised inside an exchange, named or not
    s = sizes[0]
    text = (f"{rank_words(tuple(receivers))} ran another collective sequence than {rank_words(tuple(peers))}: "
            f"rank {s.rank} expected a one-element tensor ({s.expected} bytes) and received {s.received}-byte chunks "
            f"from rank {ring_sender(s, world, step)}, while every peer that printed an error failed in {op} at "
            f"{frame}: a one-element collective met the peers' collective of a whole tensor, so "
            f"{'it' if len(receivers) == 1 else 'they'} skipped or added a collective before it (gloo aborted "
            f"{'it' if len(receivers) == 1 else 'them'} on the size)")
    return tuple(receivers), text, [error_evidence(firsts[r]) for r in spoke[:4]]


__all__ = ["scalar_meets_tensor"]
