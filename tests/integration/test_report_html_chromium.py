"""The HTML report in a real browser: Debian's headless Chromium loads the page `hc report html`
wrote for a deep sweep (tests/sweep_reports.py: run_many, the real bw.torch check over
stand-in facts, pair tests localized by bw.pairs, four runs in the history), takes a
screenshot (the PNG has the requested size and is not blank: many colours, the FAIL red
and the culprit's dark heat-map cells among them), logs no console message (a script
error or a blocked fetch would be one), and its DOM after load holds the heat map, the
node grid and the curves. Every Chromium call is bounded and its process group killed by
pid; skipped where chromium is not installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from chromium import CHROMIUM, available, read_png
from chromium import run as run_chromium
from htmltree import fill_rows, parse
from support import run_hc
from sweep_reports import history_of_sweeps, write_config

pytestmark = pytest.mark.skipif(not available(), reason=f"{CHROMIUM} is not installed")
# touches no rig (tests/conftest.py): runs beside the rig's tests, in any worker
USES_RIG = False
NAMES = [f"gpu{i:02d}" for i in range(1, 9)]
CULPRIT = "gpu04"
WIDTH, HEIGHT = 1280, 4000
CONSOLE = re.compile(r"CONSOLE[:(]|Uncaught")


def chromium(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    try:
        return run_chromium(*args, timeout=timeout)
    except TimeoutError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    cfg = write_config(root, "gpu[01-08]")
    history_of_sweeps(cfg, NAMES, runs=4)
    out = root / "report.html"
    r = run_hc("report", "html", "-o", str(out), "--config", str(cfg))  # the newest run in the history
    assert r.returncode == 0, r.stderr.decode()
    return out


def test_chromium_logs_console_messages_so_their_absence_means_something(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    rc, _out, err = chromium("--dump-dom", bad.as_uri())
    assert rc == 0 and CONSOLE.search(err), err[-2000:]


def test_the_page_loads_without_console_messages_and_its_dom_holds_the_charts(page):
    rc, dom, err = chromium("--dump-dom", page.as_uri())
    assert rc == 0, err[-2000:]
    assert not [line for line in err.splitlines() if CONSOLE.search(line)], err[-3000:]
    tree = parse(dom)
    heat = tree.root.by_id("heatmap")
    assert heat is not None and heat.tag == "svg"
    rows = fill_rows(tree)
    assert len(rows) == 7 and all(len(v) == 6 for v in rows.values())  # 7 paired nodes: 6 partners each
    grid = [r for r in tree.root.by_id("node-grid-0").find("rect") if "data-node" in r.attrs]
    assert sorted(r.attrs["data-node"] for r in grid) == NAMES
    curves = tree.root.find("svg", class_="curve")
    assert len(curves) == 2 and all(c.find("polyline", class_="median") for c in curves)
    assert tree.root.find("svg", class_="trend")
    assert not tree.root.find("script")


def test_the_screenshot_has_the_requested_size_and_shows_the_page(page, tmp_path):
    shot = tmp_path / "shot.png"
    rc, _out, err = chromium(f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
                             "--hide-scrollbars", page.as_uri())
    assert rc == 0 and shot.exists(), err[-2000:]
    width, height, rows, bpp = read_png(shot)
    assert (width, height) == (WIDTH, HEIGHT)
    colours = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), 4 * bpp)}
    assert len(colours) > 200, len(colours)  # text, badges, charts: not a blank or one-colour page
    assert bytes.fromhex("c62828") in colours  # FAIL: badges and the failed nodes' cells
    # the culprit's cells in the heat map, at the fill the page gave them
    tree = parse(page.read_text())
    dark = {bytes.fromhex(r.attrs["fill"][1:]) for r in tree.root.by_id("heatmap").find("rect")
            if r.attrs.get("data-row") == CULPRIT and r.attrs.get("data-value")}
    every = {row[i:i + 3] for row in rows for i in range(0, len(row), bpp)}
    assert dark & every, "the culprit's heat-map row is not on the screenshot"
