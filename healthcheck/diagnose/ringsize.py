"""gloo's size check read per rank: each report says the sizes of two ranks, and a rank is
named only where those sizes leave a strict minority.

ProcessGroupGloo's allreduce on CPU runs gloo's chunked ring: each rank receives its
chunks from the next rank of the ring, (rank + 1) % world (every size and dtype mismatch
captured here with torch 2.13: `op.preamble.length <= op.nbytes. R vs E` printed by rank
k about a chunk from rank k + 1; tests/fixtures/diagnose-jobs/tuning). So one report gives
two ranks' chunk sizes: the reporter's own (E bytes) and its sender's (R bytes).

gloo checks on the receiving side and only a chunk larger than expected fails it: the
rank with the larger tensor is the reporter's sender whether it is the odd one (its tensor
grew: the reporter holds the majority's size) or the odd one is the reporter (its tensor
shrank: the sender holds the majority's). Both were captured (`size`/`small`), and each
gives exactly one report, so one report never says which of the two is odd. A rank is
named only where the reports together give three or more ranks' sizes with a strict
minority (majority vs minority of the byte counts), or where two or more ranks reported and one rank is a party
to every report (common_party: an odd element count gives its segments other sizes than
its peers', so both of its neighbours' checks can fail); otherwise the finding says which
two ranks disagree, with their sizes, and names none (at world 2 always).

gloo's allgather runs its ring the other way: each rank receives from the rank before it,
(rank - 1) % world (captured: all_gather_into_tensor with one element more on rank k aborts
rank k + 1); where the peers' tracebacks say all_gather, the reports are read that way.

The ring holds for all_reduce and reduce_scatter (reduce_scatter_tensor, captured at worlds
3-6 with the float64 rank at 0 to 4: the rank before it aborts, tests/fixtures/diagnose/
rules5). It does not for all_to_all: gloo's alltoallv (gloo/alltoallv.cc) posts every send
and receive at once, so the rank it aborted got the larger chunk from any one of its peers
(or its own output split is the short one), and which one no text says; a peer still
inside the all_to_all is only one its chunk had not reached yet (captured: the rank whose
split was off went on to the next collective while another stayed). The collective is
read from the peers' tracebacks; where one of them is an all_to_all, no ring is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from healthcheck.diagnose.analysis import minority
from healthcheck.diagnose.logfacts import first_errors, known_ranks
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


@dataclass(frozen=True)
class SizeReport:
    """One gloo size check that failed: rank `rank` received `received` bytes where its
    own tensor holds `expected`."""

    rank: int
    received: int
    expected: int


def ring_world(col: Collected) -> int | None:
    """The world size where the ranks the evidence knows are 0..N-1 and at least two."""
    ranks = known_ranks(col)
    if len(ranks) < 2 or ranks != set(range(len(ranks))):
        return None
    return len(ranks)


def ring_sender(report: SizeReport, world: int, step: int = 1) -> int:
    """The rank whose chunk the reporter received in gloo's ring: the next one (step 1,
    all_reduce, reduce_scatter) or the one before (step -1, all_gather)."""
    return (report.rank + step) % world


def ring_step(col: Collected, sizes: list[SizeReport]) -> int:
    """Which way gloo's ring runs for the collective the size check failed in, read from the
    peers' tracebacks: gloo's allgather receives from the rank before (rank - 1: captured with
    torch 2.13, all_gather_into_tensor with one element more on rank k aborts rank k + 1,
    tests/fixtures/diagnose/rules8), its allreduce from the next."""
    reporters = {s.rank for s in sizes}
    ops = {e.collective for r, e in first_errors(col).items() if r not in reporters and e.collective}
    return -1 if ops and all(op.startswith("all_gather") for op in ops) else 1


def chunk_sizes(sizes: list[SizeReport], world: int, step: int = 1) -> dict[int, str]:
    """rank -> its chunk size in bytes as the reports give it (the reporter's own, its
    sender's); a rank two reports disagree on is left out."""
    seen: dict[int, set[int]] = {}
    for s in sizes:
        seen.setdefault(s.rank, set()).add(s.expected)
        seen.setdefault(ring_sender(s, world, step), set()).add(s.received)
    return {r: f"{next(iter(b))} bytes" for r, b in seen.items() if len(b) == 1}


def common_party(sizes: list[SizeReport], world: int, step: int = 1) -> int | None:
    """The one rank that every report's pair (the reporter, its sender) holds, where two or
    more ranks reported: one odd tensor makes both of its neighbours' checks disagree with it
    (the rank before it receives its segments, it receives the next rank's), so reports
    from two ranks whose pairs share one rank name it. gloo cuts a tensor into 2 segments
    per rank, the last ones partial or empty: a tensor one element longer has other segment
    sizes than its peers', larger on some and smaller on others, so its sender's and its
    receiver's checks can both fail (captured with torch 2.13: 13 elements against 12 at
    world 3, `12 vs 8` from the rank before it and `8 vs 4` from itself)."""
    if len({s.rank for s in sizes}) < 2:
        return None
    common = set.intersection(*({s.rank, ring_sender(s, world, step)} for s in sizes))
    return next(iter(common)) if len(common) == 1 else None


def _reports(sizes: list[SizeReport], world: int, step: int) -> str:
    seen = sorted({(s.rank, ring_sender(s, world, step), s.received, s.expected) for s in sizes})
    return "; ".join(f"rank {r} got {got} bytes from rank {frm} where it expected {exp}"
                     for r, frm, got, exp in seen[:4])


def pairwise_exchange(col: Collected, sizes: list[SizeReport]) -> str:
    """The all_to_all a peer of the aborted ranks was in when they died, or "": the
    size check was then in gloo's alltoallv, not in a ring."""
    reporters = {s.rank for s in sizes}
    ops = {e.collective for r, e in first_errors(col).items() if r not in reporters}
    return next((op for op in sorted(ops) if op.replace("_", "").startswith("alltoall")), "")


def any_peer(sizes: list[SizeReport], op: str) -> str:
    """What one all_to_all size report says: the reporter and its sizes, no sender."""
    s = sizes[0]
    return (f"rank {s.rank} received {s.received} bytes from a peer in {op} where its own split for that peer gives "
            f"{s.expected}; gloo's alltoallv exchanges with every peer at once, so whose input split was off (or "
            f"whether rank {s.rank}'s own output split is the short one) the text does not say")


def ring_parties(col: Collected, sizes: list[SizeReport]) -> tuple[tuple[int, ...], str]:
    """(the odd rank, or () where no majority says; the text) from gloo's size reports."""
    world = ring_world(col)
    if world is None or not sizes:
        return (), ""
    op = pairwise_exchange(col, sizes)
    if op:
        return (), any_peer(sizes, op)
    s = sizes[0]
    step = ring_step(col, sizes)
    sender = ring_sender(s, world, step)
    pair = (f"rank {s.rank} received {s.received} bytes per chunk from rank {sender} (gloo's ring: each rank "
            f"receives from the {'next' if step == 1 else 'one before'}) where its own tensor gives {s.expected}")
    by_rank = chunk_sizes(sizes, world, step)
    pick = minority(by_rank) if len(by_rank) >= 3 else None
    if pick is not None:
        odd, top, theirs = pick
        return odd, f"{pair}; {rank_words(odd)} holds {theirs} per chunk where the others hold {top}"
    common = common_party(sizes, world, step)
    if common is not None:
        return (common,), (f"{pair}; {_reports(sizes, world, step)}: rank {common} is a party to every report (its "
                           "tensor's segments disagree with both its neighbours' in the ring): its tensor is the odd "
                           "one")
    return (), (f"ranks {min(s.rank, sender)} and {max(s.rank, sender)} disagree on a tensor size: {pair}; one "
                "report gives two ranks' sizes and no majority, so which of the two is odd the text does not say "
                "(gloo fails the check where the larger chunk arrives, whether it grew on one rank or shrank on "
                "the other)")


__all__ = ["SizeReport", "any_peer", "chunk_sizes", "common_party", "pairwise_exchange", "ring_parties", "ring_sender",
           "ring_step", "ring_world"]
