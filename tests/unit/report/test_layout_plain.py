"""report/layout.py's plain_table: the check run's table on a pipe, made without tabulate,
is the same bytes tabulate's "simple" table is; any other table is left to tabulate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from healthcheck.report.layout import plain_table, table

# printable ASCII with blanks inside, numbers, dashes and empty cells: what checks print
_CELL = st.one_of(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30).map(str.strip),
                  st.sampled_from(["", "0.000", "12", "-", "1e3", "PASS", "  padded  ".strip(), "a  b"]))


@st.composite
def _tables(draw):
    ncols = draw(st.integers(1, 6))
    headers = draw(st.lists(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ ", min_size=1, max_size=12).map(str.strip)
                            .filter(bool), min_size=ncols, max_size=ncols))
    rows = draw(st.lists(st.lists(_CELL, min_size=ncols, max_size=ncols), min_size=1, max_size=8))
    aligns = tuple(draw(st.lists(st.sampled_from(["left", "right"]), min_size=ncols, max_size=ncols)))
    return rows, headers, aligns


@settings(max_examples=400, deadline=None)
@given(_tables())
def test_the_plain_table_is_tabulates_simple_table(case):
    rows, headers, aligns = case
    made = plain_table(rows, headers, disable_numparse=True, colalign=aligns)
    assert made == tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True, colalign=aligns)


def test_the_check_tables_shape_is_made_without_tabulate():
    rows = [["net.mtu", "PASS", "0.057", "eth0 mtu 1400 bytes; hctbr0 mtu 9000 bytes (+9 more)"],
            ["sys.mounts", "PASS", "0.000", ""], ["sys.services", "FAIL", "12.500", "sys.E004 sshd not running"]]
    kw = {"disable_numparse": True, "colalign": ("left", "left", "right", "left")}
    headers = ["CHECK", "STATUS", "SECONDS", "NOTE"]
    assert plain_table(rows, headers, **kw) is not None
    assert table(rows, headers, None, **kw) == tabulate(rows, headers=headers, tablefmt="simple", **kw)


def test_what_it_does_not_make_is_left_to_tabulate():
    headers = ["CHECK", "STATUS"]
    kw = {"disable_numparse": True, "colalign": ("left", "left")}
    for rows in ([["gpu.xid", "\x1b[31;1mFAIL\x1b[0m"]],  # coloured
                 [["gpu.xid", "two\nlines"]],  # wrapped
                 [["gpu.xid", "GPU 0 \u2013 lost"]],  # not ASCII
                 [["gpu.xid", " padded "]],  # blanks tabulate strips
                 [["gpu.xid"]],  # a short row
                 []):
        assert plain_table(rows, headers, **kw) is None
        assert table(rows, headers, None, **kw) == tabulate(rows, headers=headers, tablefmt="simple", **kw)
    rows = [["a", "1.50"]]
    assert plain_table(rows, headers) is None  # numbers parsed: tabulate's
    assert plain_table(rows, headers, disable_numparse=True) is None  # no colalign
    assert plain_table(rows, headers, disable_numparse=True, colalign=("left", "center")) is None
