"""`hc report html`: the page's structure read back with html.parser (sections, the heat map's
culprit row darker by its cells' fill, node cells coloured by status, floors on the curves,
the history's small multiples), hostile names escaped, bounded caps, and the refusals: a
report of another schema version, no report and no history (exit 4, one line), and an
empty history (the page without its history section, saying why).

Reports come from hc's own code paths (tests/sweep_reports.py: run_many over stand-in facts,
the real bw.torch check, pair tests localized by bw.pairs), and the saved v1 report fixture."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
from htmltree import Tree, fill_rows, parse
from support import FIXTURES, run_hc, run_hc_inproc
from sweep_reports import history_of_sweeps, write_config

from healthcheck.core.status import Status
from healthcheck.report import html as page
from healthcheck.report.history import History
from healthcheck.report.jsonio import decode, encode
from healthcheck.report.svg import STATUS_FILL, esc, luminance, ramp
from healthcheck.report.trend import from_history

NAMES = [f"gpu{i:02d}" for i in range(1, 9)]
SLOW, CULPRIT, LINK = "gpu02", "gpu04", ("gpu05", "gpu06")


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, Path]:
    """Four deep sweeps of 8 nodes recorded in a history: the config and the last report's file."""
    root = tmp_path_factory.mktemp("sweeps")
    cfg = write_config(root, "gpu[01-08]")
    report = history_of_sweeps(cfg, NAMES, runs=4)
    path = root / "last.json"
    path.write_bytes(encode(report))
    return cfg, path


def render(cfg: Path, report_file: Path | None, tmp_path: Path, *extra: str) -> tuple[str, Tree]:
    out = tmp_path / "report.html"
    args = ["report", "html", *([str(report_file)] if report_file else []), "-o", str(out), "--config", str(cfg),
            *extra]
    r = run_hc_inproc(*args)
    assert r.returncode == 0, r.stderr.decode()
    text = out.read_text()
    return text, parse(text)


# ------------------------------------------------------------------------------ structure


def test_the_page_has_every_section_and_no_script_or_outside_reference(swept, tmp_path):
    cfg, report_file = swept
    text, tree = render(cfg, report_file, tmp_path)
    for section in ("summary", "findings", "nodes", "pairs", "curves", "history"):
        assert tree.root.by_id(section) is not None, section
    for svg in ("heatmap", "node-grid-0", "curve-0", "curve-1", "trend-0"):
        assert tree.root.by_id(svg) is not None and tree.root.by_id(svg).tag == "svg", svg
    assert not [t for t, _ in tree.tags if t in ("script", "link", "iframe", "object", "embed", "img")]
    refs = [v for _, attrs in tree.tags for k, v in attrs.items() if k in ("src", "href") and v]
    assert all(v.startswith("#") for v in refs), refs  # nothing fetched: no URL but in-page ones
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    csp = tree.root.find("meta", http_equiv="Content-Security-Policy")
    assert csp and "default-src 'none'" in csp[0].attrs["content"]


def test_the_summary_names_the_run_its_counts_and_fabric(swept, tmp_path):
    cfg, report_file = swept
    report = decode(report_file.read_bytes())
    _, tree = render(cfg, report_file, tmp_path)
    summary = tree.root.by_id("summary").all_text()
    assert report.run_id in summary and "hc sweep, tier deep" in summary and "sim-h100 (8 nodes)" in summary
    assert re.search(r"Nodes\s*8: FAIL 2 PASS 6", summary)
    assert "bw.pairs" in summary  # the analyses that ran


def test_the_culprit_row_of_the_heat_map_is_darker_than_every_other(swept, tmp_path):
    cfg, report_file = swept
    _, tree = render(cfg, report_file, tmp_path)
    rows = fill_rows(tree)
    assert SLOW not in rows  # slow on its own: judged on that, never paired
    mean = {node: sum(v) / len(v) for node, v in rows.items()}
    others = [m for node, m in mean.items() if node != CULPRIT]
    assert len(others) == 6 and mean[CULPRIT] < 0.5 * min(others), mean
    # in every other row, the darkest cell is the one in the culprit's column
    cells = tree.root.by_id("heatmap").find("rect")
    for node in [n for n in rows if n != CULPRIT]:
        mine = [c for c in cells if c.attrs.get("data-row") == node and c.attrs.get("data-value")]
        darkest = min(mine, key=lambda c: luminance(c.attrs["fill"]))
        assert darkest.attrs["data-col"] == CULPRIT, node
    # the slow link is lighter than the culprit's cells, darker than a healthy pair
    link = next(c for c in cells if (c.attrs.get("data-row"), c.attrs.get("data-col")) == LINK)
    healthy = next(c for c in cells if (c.attrs.get("data-row"), c.attrs.get("data-col")) == ("gpu01", "gpu03"))
    assert max(rows[CULPRIT]) < luminance(link.attrs["fill"]) < luminance(healthy.attrs["fill"])
    label = [t for t in tree.root.by_id("heatmap").find("text") if t.all_text().startswith(CULPRIT)]
    assert label and all(t.attrs["fill"] == STATUS_FILL["FAIL"] for t in label)


def test_node_cells_are_coloured_by_status(swept, tmp_path):
    cfg, report_file = swept
    report = decode(report_file.read_bytes())
    _, tree = render(cfg, report_file, tmp_path)
    cells = {r.attrs["data-node"]: r for r in tree.root.by_id("node-grid-0").find("rect") if "data-node" in r.attrs}
    assert sorted(cells) == NAMES
    for n in report.nodes:
        assert cells[n.node].attrs["data-status"] == n.status.value
        assert cells[n.node].attrs["fill"] == STATUS_FILL[n.status.value]
    assert {n for n, c in cells.items() if c.attrs["data-status"] == "FAIL"} == {SLOW, CULPRIT}


def test_findings_are_folded_with_hint_action_limit_and_source(swept, tmp_path):
    cfg, report_file = swept
    report = decode(report_file.read_bytes())
    _, tree = render(cfg, report_file, tmp_path)
    rows = tree.root.by_id("findings").find("tr")[1:]
    assert len(rows) == len(report.findings_summary)
    by_id = {r.find("td")[1].all_text(): r for r in rows}
    assert {"bw.E001", "bw.E101", "bw.E102"} <= set(by_id)
    culprit = by_id["bw.E101"].all_text()
    from healthcheck.analyses.pairs import CULPRIT as SPEC

    assert CULPRIT in culprit and SPEC.hint in culprit and f"action: {SPEC.action}" in culprit
    slow = by_id["bw.E001"].all_text()
    assert "limit >= 460" in slow and "bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.16G" in slow
    assert "sim-h100.yaml:" in slow  # where the floor was set
    assert [r.find("td")[0].all_text() for r in rows][:2] == ["FAIL", "FAIL"]  # worst first


def test_curves_show_the_floors_and_the_nodes_with_findings(swept, tmp_path):
    cfg, report_file = swept
    _, tree = render(cfg, report_file, tmp_path)
    node_chart, pair_chart = tree.root.by_id("curve-0"), tree.root.by_id("curve-1")
    assert "single_node" in node_chart.attrs["aria-label"] and "pair" in pair_chart.attrs["aria-label"]
    assert "floor 460" in node_chart.all_text() and "floor 340" in pair_chart.all_text()
    assert [p.attrs["data-name"] for p in node_chart.find("polyline", class_="flagged")] == [SLOW]
    flagged = [p.attrs["data-name"] for p in pair_chart.find("polyline", class_="flagged")]
    assert flagged[0].startswith(f"{CULPRIT} (median of its") and "gpu05 \u2013 gpu06" in flagged
    assert node_chart.find("polyline", class_="median") and node_chart.find("polygon", class_="band")


def test_history_follows_the_nodes_with_findings_over_their_runs(swept, tmp_path):
    cfg, report_file = swept
    _, tree = render(cfg, report_file, tmp_path)
    history = tree.root.by_id("history")
    panels = history.find("svg", class_="trend")
    followed = [p.attrs["aria-label"].split(" ")[0] for p in panels]
    assert followed[:2] == [SLOW, CULPRIT] and set(LINK) <= set(followed)
    culprit = panels[followed.index(CULPRIT)]
    assert [c.attrs["data-status"] for c in culprit.find("circle", class_="trend-status")] == \
        ["PASS", "PASS", "FAIL", "FAIL"]
    slow = panels[followed.index(SLOW)]
    assert [c.attrs["data-status"] for c in slow.find("circle", class_="trend-status")] == \
        ["PASS", "PASS", "FAIL", "FAIL"]
    assert culprit.find("polyline", class_="trend-pair") and slow.find("polyline", class_="trend-own")


def test_without_a_file_the_newest_run_in_the_history_is_shown(swept, tmp_path):
    cfg, report_file = swept
    newest = decode(report_file.read_bytes()).run_id
    text, _ = render(cfg, None, tmp_path)
    assert f"<title>hc report {newest}: FAIL</title>" in text


def test_the_saved_v1_report_renders_without_pairs_or_curves(tmp_path):
    cfg = write_config(tmp_path, "gpu[01-08]", history=False)
    text, tree = render(cfg, FIXTURES / "reports" / "hc-report-1.json", tmp_path)
    assert "No pair matrix: this run tested no pairs of nodes" in tree.root.by_id("pairs").all_text()
    assert "No busbw was measured" in tree.root.by_id("curves").all_text()
    assert "ib.E002" in tree.root.by_id("findings").all_text()
    assert tree.root.by_id("history") is None
    assert "history.path is null" in tree.root.by_id("history-absent").all_text()


# ----------------------------------------------------------------------------- escaping

HOSTILE_NODE = '<script>alert(1)</script>"onload="alert(2)'
HOSTILE_IF = "mlx5_0'><svg onload=alert(3)>\x1b[31m"


def hostile_report(report_file: Path) -> bytes:
    """The real report with gpu04 (the culprit: in the heat map, curves, findings, grid) renamed
    to a hostile string everywhere it appears, and an interface name that closes tags."""
    data = report_file.read_text()
    data = data.replace('"gpu04', json.dumps(HOSTILE_NODE)[:-1]).replace("gpu04", json.dumps(HOSTILE_NODE)[1:-1])
    data = data.replace("all_reduce/single_node/16G", json.dumps(HOSTILE_IF)[1:-1])
    report = decode(data.encode())
    assert any(n.node == HOSTILE_NODE for n in report.nodes)
    return encode(report)


def test_hostile_names_are_shown_as_text_never_as_markup(swept, tmp_path):
    cfg, report_file = swept
    bad = tmp_path / "hostile.json"
    bad.write_bytes(hostile_report(report_file))
    text, tree = render(cfg, bad, tmp_path)
    assert not [t for t, _ in tree.tags if t == "script"]
    handlers = [(t, k) for t, attrs in tree.tags for k in attrs if k.startswith("on")]
    assert handlers == []
    svgs = [a for t, a in tree.tags if t == "svg"]
    assert all(a.get("xmlns") == "http://www.w3.org/2000/svg" for a in svgs)  # no injected <svg>
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;onload=&quot;" in text
    # shown, as the text it is: in the grid's cell titles, the heat map's labels and the findings
    everything = tree.root.all_text()
    assert HOSTILE_NODE in everything and "mlx5_0'><svg onload=alert(3)>\\x1b[31m" in everything
    grid = [r for r in tree.root.by_id("node-grid-0").find("rect") if r.attrs.get("data-node") == HOSTILE_NODE]
    assert grid and grid[0].attrs["data-status"] == "FAIL"
    assert fill_rows(tree)[HOSTILE_NODE]  # its heat map row is there, by its real name
    assert "\x1b" not in text  # control characters written out, not passed to the terminal a page is cat'ed on


def test_esc_handles_quotes_controls_and_lone_surrogates():
    assert esc('<a href="x">\'') == "&lt;a href=&quot;x&quot;&gt;&#x27;"
    assert esc("a\x00b\x1bc\u2028") == "a\\x00b\\x1bc\\u2028"
    assert esc("\ud800").encode("utf-8") == b"\\ud800"  # a lone surrogate would not encode


# ------------------------------------------------------------------------------ refusals


def test_a_report_of_another_schema_version_is_one_line_and_exit_4(swept, tmp_path):
    cfg, report_file = swept
    other = json.loads(report_file.read_text())
    other["schema"] = "hc.report/9"
    other["nodes"] = [{"name": "changed shape"}]
    bad = tmp_path / "v9.json"
    bad.write_text(json.dumps(other))
    out = tmp_path / "out.html"
    r = run_hc("report", "html", str(bad), "-o", str(out), "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 4 and err.count("\n") == 1 and "Traceback" not in err
    assert "unsupported report schema 'hc.report/9'" in err
    assert not out.exists()


def test_no_report_and_an_empty_history_is_one_line_and_exit_4(tmp_path):
    cfg = write_config(tmp_path, "gpu[01-08]")
    out = tmp_path / "out.html"
    r = run_hc_inproc("report", "html", "-o", str(out), "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 4 and err.count("\n") == 1 and "no run history yet" in err and not out.exists()


def test_an_empty_history_gives_the_page_without_its_history_section_saying_why(swept, tmp_path):
    _, report_file = swept
    cfg = write_config(tmp_path, "gpu[01-08]")  # a history path with nothing recorded
    text, tree = render(cfg, report_file, tmp_path)
    assert tree.root.by_id("history") is None and tree.root.by_id("heatmap") is not None
    assert f"no run history yet at {tmp_path}/history.sqlite" in tree.root.by_id("history-absent").all_text()


def test_a_history_with_only_this_run_says_there_is_no_earlier_one(swept, tmp_path):
    _, report_file = swept
    cfg = write_config(tmp_path, "gpu[01-08]")
    report = decode(report_file.read_bytes())
    with History(tmp_path / "history.sqlite") as h:
        h.record(report)
    trend = from_history(History(tmp_path / "history.sqlite"), report, page.followed_nodes(report), 10)
    assert trend.note is not None and "holds no earlier run of 'sweep' (tier deep)" in trend.note
    _, tree = render(cfg, report_file, tmp_path)
    assert tree.root.by_id("history") is None
    assert "holds no earlier run" in tree.root.by_id("history-absent").all_text()


def test_an_output_that_is_a_symbolic_link_is_refused_in_one_line_exit_4(swept, tmp_path):
    cfg, report_file = swept
    target = tmp_path / "elsewhere.html"
    target.write_text("keep me")
    (tmp_path / "x.html").symlink_to(target)
    r = run_hc_inproc("report", "html", str(report_file), "-o", str(tmp_path / "x.html"), "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 4 and err.count("\n") == 1 and "Traceback" not in err and "link" in err
    assert target.read_text() == "keep me"


# ---------------------------------------------------------------------------------- caps


def test_past_the_heat_map_cap_the_slowest_rows_stay_and_the_cap_is_said(swept, monkeypatch):
    _, report_file = swept
    report = decode(report_file.read_bytes())
    monkeypatch.setattr(page, "HEATMAP_NODES", 3)
    tree = parse(page.render_html(report))
    rows = fill_rows(tree)
    assert len(rows) == 3 and CULPRIT in rows  # the culprit has the lowest median: it keeps its row
    assert "heat map: 4 of 7 nodes left out" in tree.root.find("footer")[0].all_text()


def test_past_the_findings_cap_rows_are_counted_not_listed(swept, monkeypatch):
    _, report_file = swept
    report = decode(report_file.read_bytes())
    monkeypatch.setattr(page, "FINDING_ROWS", 2)
    tree = parse(page.render_html(report))
    assert len(tree.root.by_id("findings").find("tr")) == 3  # header and two rows
    more = len(report.findings_summary) - 2
    assert f"{more} more rows not shown" in tree.root.by_id("findings").all_text()


def test_the_heat_map_scale_is_dark_for_low_and_light_for_high():
    assert luminance(ramp(0.0)) < luminance(ramp(0.3)) < luminance(ramp(0.7)) < luminance(ramp(1.0))
    assert ramp(-1) == ramp(0.0) and ramp(2) == ramp(1.0)


def test_an_error_pair_is_grey_and_an_untested_one_blank(swept):
    _, report_file = swept
    report = decode(report_file.read_bytes())
    groups = [g for g in report.groups if not {"gpu01", "gpu03"} <= set(g.members)]  # gpu01-gpu03 never tested
    broken = next(g for g in groups if set(g.members) == {"gpu07", "gpu08"})
    groups = [msgspec.structs.replace(g, metrics=[], status=Status.ERROR) if g is broken else g for g in groups]
    tree = parse(page.render_html(msgspec.structs.replace(report, groups=groups)))
    cells = {(c.attrs.get("data-row"), c.attrs.get("data-col")): c for c in tree.root.by_id("heatmap").find("rect")}
    assert cells["gpu07", "gpu08"].attrs["data-status"] == "ERROR" and "data-value" not in cells["gpu07", "gpu08"].attrs
    assert cells["gpu01", "gpu03"].attrs["fill"] == "#ffffff" and "not tested" in cells["gpu01", "gpu03"].all_text()


def test_a_saved_report_can_come_from_stdin(swept, tmp_path):
    cfg, report_file = swept
    out = tmp_path / "stdin.html"
    r = run_hc("report", "html", "-", "-o", str(out), "--config", str(cfg), input=report_file.read_bytes())
    assert r.returncode == 0, r.stderr.decode()
    assert parse(out.read_text()).root.by_id("heatmap") is not None


def test_a_run_of_another_schema_in_the_history_is_skipped_and_named(swept, tmp_path):
    _, report_file = swept
    report = decode(report_file.read_bytes())
    older = msgspec.structs.replace(report, run_id="20261101T000000Z-000009", started_at="2026-11-01T00:00:00.000Z",
                                    schema="hc.report/9")
    earlier = msgspec.structs.replace(report, run_id="20261102T000000Z-000002", started_at="2026-11-02T00:00:00.000Z")
    with History(tmp_path / "h.sqlite") as h:
        h.record(older)
        h.record(earlier)
    trend = from_history(History(tmp_path / "h.sqlite"), report, [CULPRIT], 10)
    assert trend.note is None and trend.runs == 2  # the earlier run and this one
    assert len(trend.skipped) == 1 and "hc.report/9" in trend.skipped[0] and "000009" in trend.skipped[0]
    assert [p.status for p in trend.nodes[0].points] == ["FAIL", "FAIL"]


@pytest.mark.slow
def test_a_2000_node_sweep_with_a_64_node_pair_matrix_stays_under_5_mb(tmp_path):
    from synthetic import synthetic_node

    names = [f"gpu{i:05d}" for i in range(2000)]
    cfg = write_config(tmp_path, "gpu[00000-01999]")
    # the first 65 nodes less the one slow on its own (never paired): a 64-node matrix, every pair
    report = history_of_sweeps(cfg, names, runs=1, pair_nodes=65, base=lambda _n, i: synthetic_node(i))
    text = page.render_html(report)
    assert len(text.encode()) < 5_000_000
    tree = parse(text)
    assert len(fill_rows(tree)) == 64 and sum(len(v) for v in fill_rows(tree).values()) == 64 * 63
    cells = [r for r in tree.root.by_id("node-grid-0").find("rect") if "data-node" in r.attrs]
    assert len(cells) == 2000


def test_the_culprits_pairs_fold_into_one_row_so_the_slow_link_stays_listed(swept, tmp_path):
    cfg, report_file = swept
    _, tree = render(cfg, report_file, tmp_path)
    table = tree.root.by_id("pairs").find("table")[0]
    rows = [[td.all_text() for td in tr.find("td")] for tr in table.find("tr")[1:]]
    assert rows[0][0] == f"{CULPRIT} \u2013 6 partners" and "culprit" in rows[0][3]
    assert not any(CULPRIT in r[0] for r in rows[1:])
    assert rows[1][0] == "gpu05 \u2013 gpu06" and "bw.E102" in rows[1][3]
