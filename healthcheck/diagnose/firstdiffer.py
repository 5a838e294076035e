"""ProcessGroupWrapper's fingerprint check read for the rank it points at, for mismatch.py.

Under TORCH_DISTRIBUTED_DEBUG=DETAIL each rank all-gathers every rank's fingerprint of the
collective it is about to run and compares it with its own, rank 0 first, raising at the
FIRST rank that differs: `Detected mismatch between collectives on ranks. Rank A is
running collective: CollectiveFingerPrint(...), but Rank B is running collective: ...`
(torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp, CollectiveFingerPrint::verify). So
ranks 0..B-1 hold what A holds, and B does not:

* where A's side then counts two ranks or more (B >= 2 with A < B, or B >= 1 with A > B:
  A and the ranks before B), B is the odd one against them: B is named;
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


def odd_rank(m: CollectiveMismatch) -> int | None:
    """The rank one report shows odd against two or more agreeing ranks, else None."""
    if m.remote is None or m.remote.rank == m.local.rank:
        return None
    return m.remote.rank if len(agreeing(m)) >= 2 else None


def first_differing(reports: list[CollectiveMismatch]) -> tuple[int, ...]:
    """The odd ranks the reports agree on (see the module's docstring); () where none."""
    odd = {r for r in (odd_rank(m) for m in reports) if r is not None}
    # a rank before some report's first differing rank matched that reporter (the reporter
    # itself is on its own side in any report, and says nothing of itself)
    matched = {r for m in reports if m.remote is not None for r in range(min(m.remote.rank, 1 << 16))}
    if not odd or odd & matched:
        return ()
    return tuple(sorted(odd))


__all__ = ["agreeing", "first_differing", "is_shape", "odd_rank"]
