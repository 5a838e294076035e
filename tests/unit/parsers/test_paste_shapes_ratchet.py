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

RECORDED = mutate.recorded()


@pytest.fixture(scope="module")
def cells() -> dict:
    """The audit: every field file through every paste shape, parsed (~3 s of CPU). Made once,
    in the one worker that runs this module's tests; at import it was made at collection in
    every xdist worker (collection in all of them holds up the first test of any)."""
    return mutate.audit()


def _rate(kept: int, expected: int) -> float:
    return kept / expected if expected else 1.0


def test_every_cell_is_recorded_and_no_recorded_cell_is_gone(cells):
    assert set(cells) == set(RECORDED), (
        f"new cells {sorted(set(cells) - set(RECORDED))}, gone {sorted(set(RECORDED) - set(cells))}: "
        "run tests/field/mutate.py --record")
    crashed = {cell: [f for f, _ in c.misses] for cell, c in cells.items() if c.crashed}
    assert not crashed, f"crashed on {crashed}"  # in every cell, recorded or new


# one test per recorded cell: a cell the audit has and the record not fails the test above
# (as it did before, where it had a test of its own here too); a recorded cell it lacks, here
@pytest.mark.parametrize("cell", sorted(RECORDED), ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_paste_shape_keeps_at_least_what_it_kept(cells, cell):
    now = cells.get(cell)
    assert now is not None, f"{cell}: recorded, and no longer in the audit: run tests/field/mutate.py --record"
    assert not now.crashed, f"{cell}: crashed on {[f for f, _ in now.misses]}"
    kept, expected = RECORDED[cell]
    was, rate = _rate(kept, expected), _rate(now.kept, now.read)
    lost = "; ".join(f"{f}: {what}" for f, what in now.misses[:3])
    assert rate >= was - 1e-9, f"{cell}: kept {now.kept}/{now.read}, was {kept}/{expected} ({lost})"
    assert rate <= was + 1e-9 or (now.kept, now.read) == (kept, expected), (
        f"{cell}: kept {now.kept}/{now.read}, better than the recorded {kept}/{expected}: "
        "run tests/field/mutate.py --record")
