"""The torch sweep's check data (`hc bw allreduce --check`): fill a send buffer with its rank's
pattern and count the output elements that differ from the exact expectation.

Every pattern and every expectation is periodic in the flat index with the sweep's period P
(torch_sweep.pattern_period): rank r sends `(i + r) % P + 1`, all_reduce returns
`reduced_pattern[i % P]`, and each chunk of a gathered or exchanged output is a sender's
pattern at some phase. So one period is built (P elements, at most 8191 on up to 2048 ranks)
and the buffers are filled by doubling copies and compared as rows of P against it: two
passes over a buffer and no index tensors, where building `arange` indices, their modulo and a
gather for every element cost more than the collective itself on CPU (issue 22: the check
took +39% CPU over --no-check).

Pure functions of torch tensors; torch comes in with the tensors (never imported here).
"""

from __future__ import annotations

from typing import Any

# rows of P compared at a time: the boolean temporary stays near this many elements
_COMPARE_ELEMS = 1 << 24


def period_base(torch: Any, period: int, shift: int, device: Any) -> Any:
    """One period of the pattern `(i + shift) % period + 1`, i = 0 .. period-1, as float32."""
    idx = torch.arange(period, dtype=torch.int64, device=device)
    return ((idx + shift) % period + 1).to(torch.float32)


def rotated(base: Any, shift: int) -> Any:
    """base read from phase `shift`: out[i] = base[(i + shift) % P]."""
    p = base.numel()
    s = shift % p
    return base if s == 0 else base.roll(-s)


def fill_periodic(buf: Any, base: Any) -> None:
    """buf[i] = base[i % P] for every i of the 1-D buffer, in place: one period copied, then
    the filled prefix doubled (each copy reads a prefix that starts at phase 0)."""
    n, p = buf.numel(), base.numel()
    first = min(n, p)
    buf[:first].copy_(base[:first])
    done = first
    while done < n:
        step = min(done, n - done)
        buf[done:done + step].copy_(buf[:step])
        done += step


def count_unlike(seg: Any, base: Any) -> Any:
    """How many elements of the 1-D view differ from base[i % P] (a 0-d int64 tensor)."""
    n, p = seg.numel(), base.numel()
    full = n // p
    rows = max(1, _COMPARE_ELEMS // p)
    wrong = (seg[:0] != base[:0]).sum()  # an int64 zero on the buffers' device
    for r0 in range(0, full, rows):
        r1 = min(full, r0 + rows)
        wrong = wrong + (seg[r0 * p:r1 * p].view(r1 - r0, p) != base).sum()
    tail = n - full * p
    if tail:
        wrong = wrong + (seg[full * p:] != base[:tail]).sum()
    return wrong


def count_wrong(torch: Any, collective: str, recv: Any, count: int, rank: int, ranks: int,
                period: int, reduced: Any, root: int) -> int:
    """Output elements of this rank that differ from the exact result of `collective` on the
    patterns (`count`: elements per chunk of a split buffer; `reduced`: one period of the
    reduced pattern, float32)."""
    device = recv.device
    if collective == "all_reduce":
        return int(count_unlike(recv, reduced).item())
    if collective == "reduce_scatter":  # this rank's chunk of the reduced buffer
        return int(count_unlike(recv, rotated(reduced, rank * count)).item())
    if collective == "broadcast":
        return int(count_unlike(recv, period_base(torch, period, root, device)).item())
    wrong = (recv[:0] != reduced[:0]).sum()
    for sender in range(ranks):  # chunk j of the output came from rank j
        # all_gather: rank j's own data; alltoall: rank j's chunk for this rank
        phase = sender + (rank * count if collective == "alltoall" else 0)
        chunk = recv[sender * count:(sender + 1) * count]
        wrong = wrong + count_unlike(chunk, period_base(torch, period, phase, device))
    return int(wrong.item())  # one device sync for all the chunks
