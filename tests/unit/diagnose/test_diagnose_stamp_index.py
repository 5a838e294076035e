"""The stamp index of `hc diagnose logs` (sources.TextStamps over stampseries.StampSeries):
compact, one series where two would be equal, answering the times the list of pairs did."""

from __future__ import annotations

from healthcheck.diagnose.sources import _stamps
from healthcheck.diagnose.stampseries import StampSeries


def test_the_stamp_index_keeps_one_series_where_two_would_be_equal():
    """A training loop stamps every line: the unlabelled lines' series was a second list of
    the same tuples (64 ranks' logs held over a gigabyte of them). One series now, answering
    the same times."""
    text = "\n".join(f"2026-11-27 13:05:{s:02d},000 INFO rank3 step {s} loss 0.5" for s in range(50))
    index = _stamps(text + "\nno stamp here\n", 2026)
    assert index.unlabelled is index.stamps and isinstance(index.stamps, StampSeries)
    assert index.at(51) == index.at(50) == index.stamps[49][1] and index.at(1, rank=3) == index.stamps[0][1]
    labelled = _stamps("[rank1]:2026-11-27 13:05:01,000 x\n2026-11-27 13:05:02,000 y\n", 2026)
    assert labelled.unlabelled is not labelled.stamps and len(labelled.unlabelled) == 1
    assert labelled.by_rank[1] is not labelled.stamps and labelled.at(2, rank=1) == labelled.stamps[0][1]


def test_a_stamp_series_answers_as_the_list_of_pairs_did():
    pairs = [(3, 10.0), (7, 11.5), (8, 12.0), (20, 30.25)]
    series = StampSeries(pairs)
    for line in range(0, 25):
        want = max((t for n, t in pairs if n <= line), default=None)
        assert series.last_at(line) == want
    assert list(series) == pairs and series == pairs and len(series) == 4
