"""ProcessGroupWrapper's fingerprint check read for the rank it points at, for mismatch.py.

Under TORCH_DISTRIBUTED_DEBUG=DETAIL each rank all-gathers every rank's fingerprint of the
collective it is about to run and compares it with its own, rank 0 first, raising at the
FIRST rank that differs: `Detected mismatch between collectives on ranks. Rank A is
running collective: CollectiveFingerPrint(...), but Rank B is running collective: ...`
(torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp, CollectiveFingerPrint::verify). So
ranks 0..B-1 hold what A holds, and B does not:

* where A's side then counts two ranks or more (B >= 2 with A < B, or B >= 1 with A > B:
  A and the ranks before B) and is a strict majority of the world, B is the odd one against
  them: B is named. The world is the one the ranks' environment or a torchrun command in
  the text gives (`--nproc_per_node 4`: ranks 0 and 1 against rank 2 are no majority, rank
  3 unseen may hold what 2 holds); where neither gives it, the ranks the text shows (every
  rank the evidence holds, A, B and the ranks before B) are the least it can be, and the
  side must be a strict majority of those;
* where B is 0, or A's side is A alone (A 0, B 1), the report is one pair's disagreement
  and nothing says which of the two is odd: no rank.

Several reports name the odd ranks only where they agree (each report's odd rank, none
shown by another report among the ranks before its first differing one).

The class: a desync (collective-mismatch) where the two sides' sequence numbers or op
types differ; a shape-mismatch only where the same op at the same sequence number holds
tensors of another shape or dtype (a side cut before its fingerprint: the differences'
words decide, `Sequence number`/`Op type` a desync).
"""

from __future__ import annotations

from healthcheck.parsers.torch_log import CollectiveMismatch

_DESYNC_WORDS = ("sequence number", "op type")
_SHAPE_WORDS = ("shape", "dtype")


def is_shape(m: CollectiveMismatch) -> bool:
    """Whether one report is a tensor disagreement at one collective (not a desync)."""
    a, b = m.local, m.remote
    diff = m.differences.lower()
    if b is not None and a.seq is not None and b.seq is not None and a.op_type and b.op_type:
        return a.seq == b.seq and a.op_type == b.op_type and (a.shape != b.shape or a.dtypes != b.dtypes
                                                              or any(w in diff for w in _SHAPE_WORDS))
    if any(w in diff for w in _DESYNC_WORDS):
        return False
    return any(w in diff for w in _SHAPE_WORDS)


def agreeing(m: CollectiveMismatch) -> set[int]:
    """The ranks the report shows holding the reporter's fingerprint: the reporter and
    every rank before the first that differs."""
    if m.remote is None:
        return set()
    return set(range(m.remote.rank)) | {m.local.rank}


def odd_rank(m: CollectiveMismatch, world: int) -> int | None:
    """The rank one report shows odd against two or more agreeing ranks that are a strict
    majority of `world`, else None."""
    if m.remote is None or m.remote.rank == m.local.rank:
        return None
    side = len(agreeing(m))
    return m.remote.rank if side >= 2 and 2 * side > world else None


def least_world(reports: list[CollectiveMismatch], seen: set[int]) -> int:
    """The least world the text allows: one past the highest rank it shows (`seen`, the
    reports' sides and the ranks before each report's differing rank)."""
    shown = set(seen)
    for m in reports:
        shown |= agreeing(m) | {m.local.rank} | ({m.remote.rank} if m.remote is not None else set())
    return max(shown, default=-1) + 1


def first_differing(reports: list[CollectiveMismatch], world: int | None = None,
                    seen: set[int] | frozenset[int] = frozenset()) -> tuple[int, ...]:
    """The odd ranks the reports agree on (see the module's docstring); () where none.
    `world`: the job's, where known; else the least the ranks `seen` and the reports allow."""
    size = world if world else least_world(reports, set(seen))
    odd = {r for r in (odd_rank(m, size) for m in reports) if r is not None}
    # a rank before some report's first differing rank matched that reporter (the reporter
    # itself is on its own side in any report, and says nothing of itself)
    matched = {r for m in reports if m.remote is not None for r in range(min(m.remote.rank, 1 << 16))}
    if not odd or odd & matched:
        return ()
    return tuple(sorted(odd))


__all__ = ["agreeing", "first_differing", "is_shape", "least_world", "odd_rank"]
