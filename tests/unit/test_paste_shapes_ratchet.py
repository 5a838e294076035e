"""The paste shapes hc's parsers survive only get better (tests/field/mutate.py, issue 20).

mutate.py puts every real output already read (the tuning and retired held-out field files)
through each paste shape (flatten, squeeze, quote, indent4, crlf, prompt, head-cut, tail-cut,
tabs) and counts, per tool and shape, the facts the parser still surfaces. paste-shapes.yaml
records each cell's [kept, expected]: a cell whose kept rate falls is a parser that lost a
shape; one whose rate rose must be recorded (`tests/field/mutate.py --record`), so the floor
rises with it. No transformed text may crash a parser.
"""

from __future__ import annotations

import pytest
from field import mutate

CELLS = mutate.audit()
RECORDED = mutate.recorded()


def _rate(kept: int, expected: int) -> float:
    return kept / expected if expected else 1.0


def test_every_cell_is_recorded_and_no_recorded_cell_is_gone():
    assert set(CELLS) == set(RECORDED), (
        f"new cells {sorted(set(CELLS) - set(RECORDED))}, gone {sorted(set(RECORDED) - set(CELLS))}: "
        "run tests/field/mutate.py --record")


@pytest.mark.parametrize("cell", sorted(CELLS), ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_paste_shape_keeps_at_least_what_it_kept(cell):
    now = CELLS[cell]
    assert not now.crashed, f"{cell}: crashed on {[f for f, _ in now.misses]}"
    kept, expected = RECORDED.get(cell, (0, 0))
    was, rate = _rate(kept, expected), _rate(now.kept, now.read)
    lost = "; ".join(f"{f}: {what}" for f, what in now.misses[:3])
    assert rate >= was - 1e-9, f"{cell}: kept {now.kept}/{now.read}, was {kept}/{expected} ({lost})"
    assert rate <= was + 1e-9 or (now.kept, now.read) == (kept, expected), (
        f"{cell}: kept {now.kept}/{now.read}, better than the recorded {kept}/{expected}: "
        "run tests/field/mutate.py --record")
