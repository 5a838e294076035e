"""The torch sweep's check data: the periodic fill and comparison count exactly what an
element-by-element reference counts, for every collective, at sizes below, at and across
the period, with and without wrong elements."""

from __future__ import annotations

import random

import pytest

from healthcheck.bandwidth import checkdata
from healthcheck.bandwidth.torch_sweep import ROOT, reduced_pattern

torch = pytest.importorskip("torch")


def pattern(i: int, shift: int, p: int) -> float:
    return float((i + shift) % p + 1)


def expected(collective: str, i: int, rank: int, ranks: int, count: int, p: int, reduced: list[int]) -> float:
    """The exact output element i of `rank`, one element at a time (the old check's formulas)."""
    if collective == "all_reduce":
        return float(reduced[i % p])
    if collective == "reduce_scatter":
        return float(reduced[(i + rank * count) % p])
    if collective == "broadcast":
        return pattern(i, ROOT, p)
    sender, within = divmod(i, count)
    if collective == "alltoall":
        within += rank * count
    return pattern(within, sender, p)


def output(collective: str, rank: int, ranks: int, count: int, p: int, reduced: list[int]) -> list[float]:
    n = count * ranks if collective in ("all_gather", "alltoall") else count
    return [expected(collective, i, rank, ranks, count, p, reduced) for i in range(n)]


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "broadcast", "all_gather", "alltoall"])
@pytest.mark.parametrize("ranks,count,p", [(2, 5, 7), (3, 7, 7), (4, 23, 7), (3, 1, 11), (5, 40, 13)])
def test_the_count_is_the_reference_count(collective, ranks, count, p):
    rng = random.Random(f"{collective}{ranks}{count}{p}")
    reduced = reduced_pattern(ranks, p)
    reduced_t = torch.tensor(reduced, dtype=torch.float32)
    for rank in range(ranks):
        right = output(collective, rank, ranks, count, p, reduced)
        buf = torch.tensor(right, dtype=torch.float32)
        assert checkdata.count_wrong(torch, collective, buf, count, rank, ranks, p, reduced_t, ROOT) == 0
        bad = rng.sample(range(len(right)), k=min(3, len(right)))
        for i in bad:
            buf[i] = -1.0
        assert checkdata.count_wrong(torch, collective, buf, count, rank, ranks, p, reduced_t, ROOT) == len(bad)


@pytest.mark.parametrize("n", [1, 6, 7, 8, 13, 14, 15, 50, 97])
@pytest.mark.parametrize("shift", [0, 3, 9])
def test_the_fill_is_the_pattern_at_every_index(n, shift):
    p = 7
    buf = torch.full((n,), -1.0)
    checkdata.fill_periodic(buf, checkdata.period_base(torch, p, shift, buf.device))
    assert buf.tolist() == [pattern(i, shift, p) for i in range(n)]


def test_a_comparison_longer_than_one_block_counts_every_block(monkeypatch):
    monkeypatch.setattr(checkdata, "_COMPARE_ELEMS", 14)  # two rows of 7 per block
    base = checkdata.period_base(torch, 7, 0, torch.device("cpu"))
    buf = torch.empty(7 * 5 + 3)
    checkdata.fill_periodic(buf, base)
    buf[0] = buf[20] = buf[36] = 0.0
    assert int(checkdata.count_unlike(buf, base)) == 3
