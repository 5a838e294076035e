"""`hc report html`: one run as one self-contained HTML page, to open offline or attach to a ticket.

The page is text only: inline CSS and inline SVG drawn here (report/svg.py), no script,
no font, no image fetched, and a Content-Security-Policy that forbids any (so even a
string that slipped past escaping could not run or call out). Its sections:

- summary: run, when, tier, status counts, fabrics, analyses;
- findings: the report's folded groups (report/build.py) with each ID's hint, suggested
  action, the limit and where it was set, and the first evidence;
- nodes: a grid per fabric, one cell per node coloured by status;
- bandwidth between nodes: the pair matrix at the largest size as a heat map (low busbw
  dark, so a culprit's row and column read as dark bands), and the slowest pairs;
- busbw per message size: per fabric, collective and scope, the band of every node (or
  pair) with its median, the fabric's floors, and the nodes with findings drawn alone;
- history: for the nodes with findings, their status and busbw over recent runs
  (report/trend.py), or why there is none.

Everything is bounded so a 2,000-node sweep stays small and fast (the caps below; each
one the page says when it applies).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from healthcheck import __version__
from healthcheck.bandwidth import judge
from healthcheck.core import catalogue
from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, GroupResult, NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.core.units import parse_size
from healthcheck.report.build import natural_key, sort_nodes
from healthcheck.report.svg import (
    SERIES,
    Svg,
    clip,
    esc,
    gradient,
    luminance,
    measure,
    nice_max,
    num,
    ramp,
    status_fill,
)
from healthcheck.report.table import PairCell, best_cell, fold_members, pair_sizes, pair_unit

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.report.trend import Trend

# caps: what a page for a very large run leaves out (and says it did)
FINDING_ROWS = 500  # folded findings listed; the rest counted
EVIDENCE_ROWS = 100  # rows that carry their first evidence excerpt
EVIDENCE_CHARS = 3000
CELL_CHARS = 2000  # a table cell's text (a hostlist of hostile names can be long)
GRID_NODES = 10_000  # node cells drawn; past it, only nodes that did not pass
HEATMAP_NODES = 96  # heat map rows; past it, the slowest nodes (lowest median busbw)
SLOWEST_PAIRS = 20
CURVE_CHARTS = 12
CURVE_HIGHLIGHTS = 8  # nodes or pairs drawn as their own line on a chart
TREND_NODES = 12  # nodes followed over their runs

NODE_BUSBW = "busbw_gbytes_per_s"
_FLOOR_KEY = re.compile(r"^bandwidth\.(\w+)\.(\w+)\.busbw_min_gbytes_per_s\.(.+)$")
_ORDER = (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS, Status.SKIP)


@dataclass(frozen=True)
class FloorMark:
    """A busbw floor the fabric sets at one size, and where it was read."""

    size_bytes: int
    size: str
    gbytes_per_s: float
    key: str
    source: str


# (fabric, collective, scope) -> floors by size in bytes
Floors = dict[tuple[str, str, str], dict[int, FloorMark]]


def _size_bytes(size: str) -> int | None:
    try:
        return parse_size(size)
    except ValueError:
        return None


def report_floors(report: Report) -> Floors:
    """The floors the run's findings were compared with (their limits), per fabric."""
    fabric_of = {n.node: n.fabric for n in report.nodes}
    out: Floors = defaultdict(dict)
    for f, fabric in _all_findings(report, fabric_of):
        limit = f.limit
        if limit is None or not isinstance(limit.value, (int, float)) or isinstance(limit.value, bool):
            continue
        m = _FLOOR_KEY.match(limit.key)
        size_bytes = _size_bytes(m.group(3)) if m else None
        if m is None or size_bytes is None or not fabric:
            continue
        out[(fabric, m.group(1), m.group(2))].setdefault(
            size_bytes, FloorMark(size_bytes, m.group(3), float(limit.value), limit.key, limit.source or "the run"))
    return dict(out)


def config_floors(config: Config, fabrics: Iterable[str]) -> tuple[Floors, list[str]]:
    """The floors the config's fabrics set now (for sizes the run's findings do not name), and
    notes for fabrics the config cannot give."""
    out: Floors = {}
    notes = []
    for fabric in sorted(set(fabrics)):
        try:
            bw = config.fabric(fabric).bandwidth
        except HcError as exc:
            notes.append(f"no floors for fabric {fabric} from the config: {exc}")
            continue
        for collective in bw.collectives:
            for scope in ("single_node", "ib_loopback", "pair"):
                got = judge.floors(bw, collective, scope)
                if got:
                    out[(fabric, collective, scope)] = {
                        f.size_bytes: FloorMark(f.size_bytes, f.size_text, f.gbytes_per_s, f.key,
                                                f"fabric {fabric} in {config.path}") for f in got}
    return out, notes


def merge_floors(first: Floors, then: Floors) -> Floors:
    """`first`'s floors, and `then`'s at the sizes `first` does not name."""
    out: Floors = {k: dict(v) for k, v in first.items()}
    for key, marks in then.items():
        for size, mark in marks.items():
            out.setdefault(key, {}).setdefault(size, mark)
    return out


def _all_findings(report: Report, fabric_of: dict[str, str]) -> Iterable[tuple[Finding, str]]:
    for n in report.nodes:
        for f in n.findings:
            yield f, n.fabric
    for g in report.groups:
        for f in g.findings:
            members = f.members or tuple(g.members)
            yield f, next((fabric_of[m] for m in members if m in fabric_of), "")
    for f in report.run_findings:
        yield f, ""


# ---------------------------------------------------------------------------------- page


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;margin:0;background:#fafafa}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
section{margin-bottom:12px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #e0e0e0;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;min-width:44px;text-align:center;border-radius:3px;color:#fff;font-weight:600;
font-size:12px;padding:1px 6px}
.b-PASS{background:#2e7d32}.b-WARN{background:#f2a900;color:#222}.b-FAIL{background:#c62828}
.b-ERROR{background:#6a1b9a}.b-SKIP{background:#9e9e9e}
.note{color:#555;font-size:13px}.cap{color:#8a4b00;font-size:13px}
.hint{color:#333;font-size:13px}.meta td:first-child{font-weight:600;background:#f7f7f7}
pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:6px;margin:4px 0;font-size:12px;
max-height:240px;overflow:auto}
details summary{cursor:pointer;color:#1a5fb4;font-size:12px}
svg{background:#fff;display:block;margin:6px 0}
.multiples,.charts{display:flex;flex-wrap:wrap;gap:8px 16px}
table.findings{width:100%;table-layout:fixed}table.findings td{overflow-wrap:anywhere}
td.pair{white-space:nowrap}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.swatch{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px;border-radius:2px}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;overflow-wrap:anywhere}
footer{color:#666;font-size:12px;margin-top:32px}
"""


def _badge(status: str) -> str:
    return f'<span class="badge b-{esc(status)}">{esc(status)}</span>'


def _cell(text: object) -> str:
    s = str(text)
    if len(s) > CELL_CHARS:
        s = s[:CELL_CHARS] + f"\u2026 ({len(s) - CELL_CHARS} more characters: see the JSON report)"
    return esc(s)


def _members(names: Sequence[str]) -> str:
    return fold_members(list(names))


def render_html(report: Report, *, floors: Floors | None = None, trend: Trend | None = None,
                notes: Sequence[str] = (), generated_at: str = "") -> str:
    """The page for `report`; `floors` from report_floors/config_floors, `trend` from report.trend."""
    floors = floors if floors is not None else report_floors(report)
    caps: list[str] = []
    body = [
        _summary(report),
        _findings(report, caps),
        _node_grid(report, caps),
        _heatmap(report, floors, caps),
        _curves(report, floors, caps),
        _history(report, trend),
    ]
    extra = "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
    capped = "".join(f"<li>{esc(c)}</li>" for c in caps)
    footer = (f"<footer>Written by hc {esc(__version__)}{' at ' + esc(generated_at) if generated_at else ''} "
              f"from run {esc(report.run_id)} ({esc(report.schema)}). One self-contained file: no script, no "
              f"network; the charts are inline SVG (hover a cell or point for its values). "
              + (f"<p>Left out to keep the page small:</p><ul>{capped}</ul>" if caps else "")
              + "</footer>")
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>hc report {esc(report.run_id)}: {esc(report.status.value)}</title>"
            f"<style>{_CSS}</style></head><body><main>\n" + extra + "\n".join(body) + footer
            + "</main></body></html>\n")


# ------------------------------------------------------------------------------- summary


def _counts(report: Report) -> dict[str, int]:
    counts = {s.value: 0 for s in _ORDER}
    for n in report.nodes:
        counts[n.status.value] = counts.get(n.status.value, 0) + 1
    return counts


def _summary(report: Report) -> str:
    counts = _counts(report)
    fabrics: dict[str, int] = defaultdict(int)
    for n in report.nodes:
        fabrics[n.fabric] += 1
    pairs = sum(1 for g in report.groups if g.kind == "pair")
    groups = sum(1 for g in report.groups if g.kind == "group")
    jobs = [g for g in report.groups if g.kind == "job"]  # hc diagnose: a job's verdict, its findings diag.E0xx
    rows = [
        ("Run", f'<span class="mono">{esc(report.run_id)}</span>'),
        ("Status", _badge(report.status.value)),
        ("Command", f"hc {esc(report.command)}, tier {esc(report.tier)}"),
        ("When", f"{esc(report.started_at)} to {esc(report.finished_at)} ({report.duration_s:.1f} s)"),
        ("Nodes", f"{len(report.nodes):,}: " + " ".join(
            f"{_badge(s)} {counts[s]:,}" for s in counts if counts[s])),
        ("Fabrics", ", ".join(f"{esc(f)} ({c:,} nodes)" for f, c in sorted(fabrics.items())) or "-"),
        ("Tests between nodes", f"{pairs:,} pair tests, {groups:,} group results" if pairs or groups else "none"),
        *([("Jobs diagnosed", _jobs(jobs))] if jobs else []),
        ("Analyses", ", ".join(f"{esc(a.name)} {_badge(a.status.value)}" for a in report.analyses) or "none"),
        ("Scheduler actions", f"{len(report.actions):,}" if report.actions else "none"),
        ("Ran from", f"{esc(report.host)}, hc {esc(report.hc_version)}, config {esc(report.config_path)} "
                     f'<span class="mono">{esc(report.config_digest[:19])}</span>'),
    ]
    table = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    bar = _count_bar(counts, len(report.nodes))
    run_findings = ""
    if report.run_findings:
        items = "".join(f"<li>{_badge(f.status.value)} <b>{esc(f.id)}</b> {_cell(f.message)}</li>"
                        for f in report.run_findings[:50])
        run_findings = f"<h3>About the run</h3><ul>{items}</ul>"
    return (f'<section id="summary"><h1>hc report: {_badge(report.status.value)} '
            f"{len(report.nodes):,} node{'s' if len(report.nodes) != 1 else ''}</h1>"
            f'<table class="meta">{table}</table>{bar}{run_findings}</section>')


def _jobs(jobs: list[GroupResult]) -> str:
    """Each diagnosed job: its status, name, and its verdict (the first finding)."""
    items = []
    for g in jobs[:20]:
        first = g.findings[0] if g.findings else None
        said = f" <b>{esc(first.id)}</b> {_cell(first.message)}" if first is not None else ""
        items.append(f"{_badge(g.status.value)} {esc(g.name)}{said}")
    more = f"<br>... {len(jobs) - 20:,} more" if len(jobs) > 20 else ""
    return "<br>".join(items) + more


def _count_bar(counts: dict[str, int], total: int) -> str:
    if not total:
        return ""
    svg = Svg(600, 22, label="nodes per status", class_="counts")
    x = 0.0
    for status, count in counts.items():
        if count:
            w = 600 * count / total
            svg.rect(x, 0, w, 22, status_fill(status), title=f"{status}: {count:,} of {total:,} nodes")
            x += w
    return svg.render()


# ------------------------------------------------------------------------------ findings


def _findings(report: Report, caps: list[str]) -> str:
    groups = report.findings_summary
    if not groups:
        return ('<section id="findings"><h2>Findings</h2><p class="note">No finding of WARN or worse: '
                "nothing to act on.</p></section>")
    fabric_of = {n.node: n.fabric for n in report.nodes}
    about: dict[str, Finding] = {}  # per ID: a stamped finding (hint, action)
    example: dict[tuple[str, str, str], Finding] = {}  # per (status, id, component): the first with evidence
    for f, _fabric in _all_findings(report, fabric_of):
        if f.id not in about or (not about[f.id].hint and f.hint):
            about[f.id] = f
        key = (f.status.value, f.id, f.component)
        if key not in example or (example[key].evidence is None and f.evidence):
            example[key] = f
    rows = []
    for i, g in enumerate(groups[:FINDING_ROWS]):
        stamped = about.get(g["id"])
        spec = catalogue.CATALOGUE.get(g["id"])
        hint = (stamped.hint if stamped and stamped.hint else spec.hint if spec else "")
        action = (stamped.suggested_action if stamped and stamped.suggested_action
                  else spec.action if spec else "")
        first = example.get((g["status"], g["id"], g["component"]))
        extra = ""
        if first is not None and first.limit is not None:
            lim = first.limit
            extra += (f'<div class="hint">limit {esc(lim.op)} {_cell(lim.value)} <span class="mono">{esc(lim.key)}'
                      f"</span>{' (' + esc(lim.source) + ')' if lim.source else ''}</div>")
        if first is not None and first.evidence and i < EVIDENCE_ROWS:
            ev = first.evidence[-EVIDENCE_CHARS:]
            who = first.node or ",".join(first.members)
            extra += (f"<details><summary>evidence ({esc(clip(who, 60))})</summary>"
                      f"<pre>{esc(ev)}</pre></details>")
        rows.append(
            f"<tr><td>{_badge(g['status'])}</td><td class=\"mono\">{esc(g['id'])}</td>"
            f"<td class=\"mono\">{_cell(g['nodes'])}</td><td class=\"num\">{g['count']:,}</td>"
            f"<td class=\"mono\">{_cell(g['component'] or '-')}</td><td>{_cell(g['message'])}{extra}</td>"
            f"<td class=\"hint\">{_cell(hint)}{'<br><b>action:</b> ' + esc(action) if action else ''}</td></tr>")
    if len(groups) > FINDING_ROWS:
        caps.append(f"findings: {len(groups) - FINDING_ROWS:,} of {len(groups):,} folded rows "
                    f"(hc report show lists them all)")
    more = (f'<p class="cap">{len(groups) - FINDING_ROWS:,} more rows not shown (hc report show lists them).</p>'
            if len(groups) > FINDING_ROWS else "")
    return ('<section id="findings"><h2>Findings</h2><p class="note">Identical findings folded across nodes, '
            "worst first.</p><table class=\"findings\"><colgroup><col style=\"width:64px\"><col style=\"width:90px\">"
            "<col style=\"width:15%\"><col style=\"width:44px\"><col style=\"width:13%\"><col><col style=\"width:27%\">"
            "</colgroup><thead><tr><th>Status</th><th>ID</th><th>Nodes</th><th>#</th><th>Subject</th>"
            "<th>Message</th><th>Hint and suggested action</th></tr></thead><tbody>" + "".join(rows)
            + f"</tbody></table>{more}</section>")


# ----------------------------------------------------------------------------- node grid


def _worst_finding(node: NodeResult) -> Finding | None:
    return max(node.findings, key=lambda f: f.status.rank) if node.findings else None


def _node_title(node: NodeResult) -> str:
    f = _worst_finding(node)
    why = f" \u2014 {f.id} {f.message}" if f is not None and f.status.rank >= Status.WARN.rank else ""
    if node.error:
        why = f" \u2014 {node.error}"
    return clip(f"{node.node}: {node.status.value}{why}", 300)


def _node_grid(report: Report, caps: list[str]) -> str:
    by_fabric: dict[str, list[NodeResult]] = defaultdict(list)
    for n in report.nodes:
        by_fabric[n.fabric].append(n)
    legend = '<p class="legend">' + "".join(
        f'<span><i class="swatch" style="background:{status_fill(s.value)}"></i>{s.value}</span>'
        for s in _ORDER) + "</p>"
    budget = GRID_NODES
    parts = ['<section id="nodes"><h2>Nodes</h2>', legend]
    for index, (fabric, nodes) in enumerate(sorted(by_fabric.items())):
        shown = nodes if len(nodes) <= budget else [n for n in nodes if n.status is not Status.PASS][:budget]
        if len(shown) < len(nodes):
            caps.append(f"node grid, fabric {fabric}: {len(nodes) - len(shown):,} nodes not drawn "
                        f"(past {GRID_NODES:,} cells only nodes that did not pass)")
        budget = max(budget - len(shown), 0)
        counts: dict[str, list[str]] = defaultdict(list)
        for n in nodes:
            counts[n.status.value].append(n.node)
        said = ", ".join(f"{len(counts[s.value]):,} {s.value}" for s in _ORDER if counts[s.value])
        parts.append(f"<h3>Fabric {esc(fabric)}: {len(nodes):,} nodes ({said})</h3>")
        parts.append(_grid_svg(shown, f"node-grid-{index}", fabric))
        bad = [f"{_badge(s.value)} <span class=\"mono\">{_cell(_members(counts[s.value]))}</span>"
               for s in _ORDER[:3] if counts[s.value]]
        if bad:
            parts.append("<p>" + "<br>".join(bad) + "</p>")
    parts.append("</section>")
    return "".join(parts)


def _grid_svg(nodes: list[NodeResult], id_: str, fabric: str) -> str:
    if len(nodes) <= 64:  # few nodes: named cells
        w, h, gap, cols = 96.0, 22.0, 3.0, min(len(nodes), 10) or 1
    else:
        w = h = 12.0
        gap, cols = 2.0, 64
    rows = (len(nodes) + cols - 1) // cols
    svg = Svg(cols * (w + gap) + gap, max(rows, 1) * (h + gap) + gap, id_=id_, class_="node-grid",
              label=f"nodes of fabric {fabric} by status")
    for i, n in enumerate(nodes):
        x, y = gap + (i % cols) * (w + gap), gap + (i // cols) * (h + gap)
        fill = status_fill(n.status.value)
        svg.rect(x, y, w, h, fill, title=_node_title(n), data_node=n.node, data_status=n.status.value)
        if w > 20:
            ink = "#fff" if luminance(fill) < 0.4 else "#111"
            svg.text(x + 4, y + 15, clip(n.node, 13), size=11, fill=ink)
    return svg.render()


# ------------------------------------------------------------------------------ heat map


def _pairs(groups: Iterable[GroupResult]) -> dict[tuple[str, str], list[GroupResult]]:
    out: dict[tuple[str, str], list[GroupResult]] = {}
    for g in groups:
        if g.kind == "pair" and len(set(g.members)) == 2:
            a, b = sort_nodes(g.members)
            out.setdefault((a, b), []).append(g)
    return out


@dataclass(frozen=True)
class _Matrix:
    """What the heat map draws: the pair cells at one size and the nodes given a row."""

    pairs: dict[tuple[str, str], list[GroupResult]]
    cells: dict[tuple[str, str], PairCell]
    nodes: list[str]
    size: str
    unit: str
    top: float  # the fastest pair: the light end of the scale
    culprits: set[str]


@dataclass(frozen=True)
class _Layout:
    """The heat map's geometry: the cell's side, the labels' room (left and above), the font."""

    side: float
    label_w: float
    font: float
    scale_w: float

    @property
    def top_h(self) -> float:
        return self.label_w


def _heatmap(report: Report, floors: Floors, caps: list[str]) -> str:
    head = '<section id="pairs"><h2>Bandwidth between nodes</h2>'
    matrix = _matrix(report, caps)
    if isinstance(matrix, str):
        return head + f'<p class="note">No pair matrix: {matrix}.</p></section>'
    fabric_of = {n.node: n.fabric for n in report.nodes}
    floor = _pair_floor(floors, fabric_of.get(matrix.nodes[0], ""), matrix.size)
    return head + _heatmap_note(matrix) + _heatmap_svg(matrix, floor) + _slowest_pairs(matrix) + "</section>"


def _matrix(report: Report, caps: list[str]) -> _Matrix | str:
    """The pairs' best busbw at the largest size, and the nodes given a row; or why there is none."""
    pairs = _pairs(report.groups)
    every = [g for tests in pairs.values() for g in tests]
    sizes = pair_sizes(every)
    if not pairs or not sizes:
        return ("no test between nodes gave a busbw" if pairs else
                "this run tested no pairs of nodes (hc sweep --tier deep does)")
    size = sizes[-1]
    cells = {pair: got for pair, tests in pairs.items() if (got := best_cell(tests, size)) is not None}
    measured = [c.value for c in cells.values() if c.value is not None]
    return _Matrix(pairs=pairs, cells=cells, nodes=_rows_shown(cells, sort_nodes({n for pair in pairs for n in pair}),
                                                                 caps),
                   size=size, unit=pair_unit(every), top=max(measured) if measured else 1.0,
                   culprits={f.node for n in report.nodes for f in n.findings if f.id == "bw.E101"})


def _rows_shown(cells: dict[tuple[str, str], PairCell], nodes: list[str], caps: list[str]) -> list[str]:
    """Every node, or past HEATMAP_NODES the slowest (the culprits' rows are the ones worth a row)."""
    if len(nodes) <= HEATMAP_NODES:
        return nodes
    values: dict[str, list[float]] = defaultdict(list)
    for (a, b), c in cells.items():
        if c.value is not None:
            values[a].append(c.value)
            values[b].append(c.value)
    slowest = sorted(nodes, key=lambda n: (statistics.median(values[n]) if values[n] else float("inf"),
                                           natural_key(n)))[:HEATMAP_NODES]
    caps.append(f"heat map: {len(nodes) - HEATMAP_NODES:,} of {len(nodes):,} nodes left out (the "
                f"{HEATMAP_NODES} with the lowest median busbw are shown)")
    return sort_nodes(slowest)


def _heatmap_layout(nodes: list[str]) -> _Layout:
    n = len(nodes)
    side = 40.0 if n <= 12 else 22.0 if n <= 32 else 11.0
    # the scale below the cells is at least 200 px wide
    return _Layout(side=side, label_w=10 + 7.2 * min(max(len(x) for x in nodes), 24), font=min(11.0, side - 1),
                   scale_w=min(320.0, max(n * side, 200.0)))


def _heatmap_svg(m: _Matrix, floor: FloorMark | None) -> str:
    at = _heatmap_layout(m.nodes)
    n = len(m.nodes)
    legend_h = 50.0
    # room for the scale below the cells and its end label
    width = at.label_w + max(n * at.side, at.scale_w) + 60
    height = at.top_h + n * at.side + legend_h
    svg = Svg(width, height, id_="heatmap", class_="heatmap",
              label=f"pair busbw at {m.size} ({m.unit}), {n} nodes: low is dark")
    _draw_node_labels(svg, m, at)
    _draw_cells(svg, m, at)
    _draw_scale(svg, m, at, floor)
    return svg.render()


def _draw_node_labels(svg: Svg, m: _Matrix, at: _Layout) -> None:
    """Each node's name left of its row and above its column, a culprit's in red."""
    for i, name in enumerate(m.nodes):
        mark = "#c62828" if name in m.culprits else "#222"
        y = at.top_h + i * at.side + at.side / 2 + at.font / 3
        svg.text(at.label_w - 4, y, clip(name, 24), size=at.font, anchor="end", fill=mark, title=name,
                 font_weight="bold" if name in m.culprits else None)
        x = at.label_w + i * at.side + at.side / 2 + at.font / 3
        svg.text(x, at.top_h - 4, clip(name, 24), size=at.font, anchor="start", rotate=-90, fill=mark, title=name)


def _draw_cells(svg: Svg, m: _Matrix, at: _Layout) -> None:
    index = {name: i for i, name in enumerate(m.nodes)}
    for a in m.nodes:
        for b in m.nodes:
            x, y = at.label_w + index[b] * at.side, at.top_h + index[a] * at.side
            _draw_cell(svg, m, a, b, x, y, at.side)


def _draw_cell(svg: Svg, m: _Matrix, a: str, b: str, x: float, y: float, side: float) -> None:
    """One pair's cell: grey on the diagonal, blank untested, grey ERROR, else its busbw on the ramp."""
    if a == b:
        svg.rect(x, y, side, side, "#eeeeee", data_row=a, data_col=b)
        return
    here = m.cells.get((a, b)) or m.cells.get((b, a))
    if here is None:
        svg.rect(x, y, side, side, "#ffffff", stroke="#eeeeee", title=f"{a} \u2013 {b}: not tested",
                 data_row=a, data_col=b)
    elif here.value is None:
        svg.rect(x, y, side, side, "#bdbdbd", title=f"{a} \u2013 {b}: no result (every test ERROR)",
                 data_row=a, data_col=b, data_status="ERROR")
    else:
        fill = ramp(here.value / m.top)
        svg.rect(x, y, side, side, fill, title=f"{a} \u2013 {b}: {measure(here.value)} {m.unit} at {m.size}, "
                 f"{here.status.value}", data_row=a, data_col=b, data_value=num(here.value),
                 data_status=here.status.value)
        if side >= 40:  # room for the figure in the cell
            ink = "#fff" if luminance(fill) < 0.4 else "#111"
            svg.text(x + side / 2, y + side / 2 + 4, measure(here.value), size=10, anchor="middle", fill=ink)


def _draw_scale(svg: Svg, m: _Matrix, at: _Layout, floor: FloorMark | None) -> None:
    """The scale: dark is slow; the floor marked on it above, the ends below."""
    ly = at.top_h + len(m.nodes) * at.side + 18
    lw = at.scale_w
    svg.raw(gradient("heat-scale", ((i / 10, ramp(i / 10)) for i in range(11))))
    svg.rect(at.label_w, ly, lw, 10, "url(#heat-scale)")
    svg.text(at.label_w, ly + 23, "0", size=10)
    svg.text(at.label_w + lw, ly + 23, f"{measure(m.top)} {m.unit}", size=10, anchor="end")
    if floor is not None and 0 < floor.gbytes_per_s <= m.top:
        fx = at.label_w + lw * floor.gbytes_per_s / m.top
        svg.line(fx, ly - 3, fx, ly + 13, "#c62828", 2)
        svg.text(fx, ly - 5, f"floor {floor.gbytes_per_s:g}", size=10, anchor="middle", fill="#c62828",
                 title=f"{floor.key} ({floor.source})")


def _heatmap_note(m: _Matrix) -> str:
    everyone = {x for pair in m.pairs for x in pair}
    possible = len(everyone) * (len(everyone) - 1) // 2
    return (f'<p class="note">Pair busbw at {esc(m.size)} ({esc(m.unit)}), the best of each pair\'s tests: '
            f"{len(m.cells):,} of {possible:,} pairs. Dark is slow: a node slow with every partner shows as a dark "
            f"row and column{'; culprits (bw.E101) in red' if m.culprits else ''}. Other sizes are in the curves "
            "below.</p>")


def _slowest_pairs(m: _Matrix) -> str:
    """The table under the map: each culprit's pairs as one row, then the slowest other pairs."""
    measured = [(pair, c) for pair, c in m.cells.items() if c.value is not None]
    folded = _culprit_rows(m, measured)
    slow = sorted(((pair, c) for pair, c in measured if not m.culprits.intersection(pair)),
                  key=lambda pc: (pc[1].value, natural_key(pc[0][0]), natural_key(pc[0][1])))[:SLOWEST_PAIRS]
    worst = {frozenset(g.members): g for tests in m.pairs.values() for g in tests if g.findings}
    rows = folded + "".join(
        f'<tr><td class="mono pair">{esc(a)} \u2013 {esc(b)}</td>'
        f'<td class="num">{measure(c.value) if c.value is not None else "-"}</td>'
        f"<td>{_badge(c.status.value)}</td><td>{_pair_finding(worst.get(frozenset((a, b))))}"
        "</td></tr>"
        for (a, b), c in slow)
    title = (f"The culprits' pairs and the {len(slow)} slowest other pairs" if folded
             else f"The {len(slow)} slowest pairs")
    return (f"<h3>{title}</h3><table><thead><tr><th>Pair</th>"
            f"<th>busbw</th><th>Status</th><th>Finding</th></tr></thead><tbody>{rows}</tbody></table>")


def _culprit_rows(m: _Matrix, measured: list[tuple[tuple[str, str], PairCell]]) -> str:
    """A culprit's pairs fold into one row each (they are all slow for one reason), so the
    slowest of the rest (a slow link) is not pushed off the list."""
    folded = ""
    for culprit in sort_nodes(m.culprits & {x for pair, _ in measured for x in pair}):
        mine = [c.value for pair, c in measured if culprit in pair and c.value is not None]
        folded += (f'<tr><td class="mono pair">{esc(culprit)} \u2013 {len(mine)} partners</td>'
                   f'<td class="num">{measure(min(mine))}\u2013{measure(max(mine))}</td><td>{_badge("FAIL")}</td>'
                   f'<td>{esc(culprit)} is the culprit (<span class="mono">bw.E101</span>): slow with every '
                   "partner</td></tr>")
    return folded


def _pair_floor(floors: Floors, fabric: str, size: str) -> FloorMark | None:
    size_bytes = _size_bytes(size)
    for (fab, _collective, scope), marks in sorted(floors.items()):
        if fab == fabric and scope == "pair" and size_bytes in marks:
            return marks[size_bytes]
    return None


def _pair_finding(group: GroupResult | None) -> str:
    """The pair's own worst finding (a slow link, a tool that failed), or "-"."""
    if group is None:
        return "-"
    f = max(group.findings, key=lambda f: f.status.rank)
    return f'<span class="mono">{esc(f.id)}</span> {_cell(clip(f.message, 300))}'


# -------------------------------------------------------------------------------- curves


@dataclass
class _Chart:
    fabric: str
    collective: str
    scope: str
    series: dict[str, dict[int, float]]  # node or pair name -> busbw by size
    labels: dict[int, str]  # size in bytes -> as written
    flagged: list[str]  # series drawn alone (findings), worst first
    derived: dict[str, dict[int, float]] = field(default_factory=dict)  # drawn alone, not in the band


def _curves(report: Report, floors: Floors, caps: list[str]) -> str:
    charts = _charts(report)
    head = '<section id="curves"><h2>Bus bandwidth per message size</h2>'
    if not charts:
        return head + ('<p class="note">No busbw was measured in this run (the deep tier measures it: '
                       "hc node --local --tier deep, hc sweep --tier deep).</p></section>")
    if len(charts) > CURVE_CHARTS:
        caps.append(f"curves: {len(charts) - CURVE_CHARTS} of {len(charts)} charts left out")
    out = [head, '<p class="note">Per fabric, collective and scope: the band spans every node (or pair) at '
           "each size, the dark line is their median, red dashes are the fabric's floors, coloured lines are the "
           "nodes or pairs with findings.</p>", '<div class="charts">']
    for i, chart in enumerate(charts[:CURVE_CHARTS]):
        fmarks = floors.get((chart.fabric, chart.collective, chart.scope), {})
        if chart.scope == "pair" and not fmarks:
            fmarks = next((m for (f, _c, s), m in sorted(floors.items()) if f == chart.fabric and s == "pair"), {})
        out.append(f"<div>{_curve_svg(chart, fmarks, f'curve-{i}')}</div>")
    out.append("</div></section>")
    return "".join(out)


class _ChartBook:
    """The charts of one report, keyed by (fabric, collective, scope), and the lines each flags."""

    def __init__(self) -> None:
        self.charts: dict[tuple[str, str, str], _Chart] = {}
        self.flagged: dict[tuple[str, str, str], list[tuple[int, str]]] = defaultdict(list)

    def chart(self, fabric: str, collective: str, scope: str) -> _Chart:
        key = (fabric, collective, scope)
        if key not in self.charts:
            self.charts[key] = _Chart(fabric, collective, scope, {}, {}, [])
        return self.charts[key]

    def add_nodes(self, report: Report) -> None:
        """Each node's own bus bandwidth per size, and the bw findings that flag it."""
        for n in report.nodes:
            for m in n.metrics:
                if m.name != NODE_BUSBW or m.component.count("/") != 2 or not _is_number(m.value):
                    continue
                collective, scope, size = m.component.split("/")
                size_bytes = _size_bytes(size)
                if size_bytes is None:
                    continue
                c = self.chart(n.fabric, collective, scope)
                c.series.setdefault(n.node, {})[size_bytes] = float(m.value)
                c.labels[size_bytes] = size
            for f in n.findings:
                if f.check.startswith("bw.") and f.status.rank >= Status.WARN.rank and f.component.count("/") >= 1:
                    collective, scope = f.component.split("/")[:2]
                    self.flagged[(n.fabric, collective, scope)].append((-f.status.rank, n.node))

    def add_pairs(self, report: Report, collective: str) -> dict[str, list[dict[int, float]]]:
        """Each pair's best bus bandwidth per size; returns each node's pairs' series."""
        fabric_of = {n.node: n.fabric for n in report.nodes}
        by_node: dict[str, list[dict[int, float]]] = defaultdict(list)
        for (a, b), tests in _pairs(report.groups).items():
            name = f"{a} \u2013 {b}"
            fabric = fabric_of.get(a, "")
            for g in tests:
                self._add_pair_test(g, fabric, collective, name)
            pair_series = self.charts.get((fabric, collective, "pair"))
            if pair_series is not None and name in pair_series.series:
                by_node[a].append(pair_series.series[name])
                by_node[b].append(pair_series.series[name])
        return by_node

    def _add_pair_test(self, g: GroupResult, fabric: str, collective: str, name: str) -> None:
        for m in g.metrics:
            if m.name != "busbw" or not _is_number(m.value):
                continue
            size_bytes = _size_bytes(m.component)
            if size_bytes is None:
                continue
            c = self.chart(fabric, collective, "pair")
            best = c.series.setdefault(name, {})
            best[size_bytes] = max(best.get(size_bytes, 0.0), float(m.value))
            c.labels[size_bytes] = m.component
        if g.status.rank >= Status.WARN.rank and g.findings:  # a slow link, a tool that failed
            self.flagged[(fabric, collective, "pair")].append((-g.status.rank, name))

    def add_named_medians(self, report: Report, collective: str, by_node: dict[str, list[dict[int, float]]]) -> None:
        """Nodes the pairs analysis named (a culprit, an outlier): the median of their pairs, drawn first."""
        for n in report.nodes:
            named = [f for f in n.findings if f.check == "bw.pairs" and f.status.rank >= Status.WARN.rank]
            target = self.charts.get((n.fabric, collective, "pair"))
            if not named or target is None or not by_node.get(n.node):
                continue
            mine = by_node[n.node]
            label = f"{n.node} (median of its {len(mine)} pairs)"
            sizes = {s for series in mine for s in series}
            target.derived[label] = {s: statistics.median([series[s] for series in mine if s in series])
                                     for s in sizes}
            self.flagged[(n.fabric, collective, "pair")].append((-max(f.status.rank for f in named) - 10, label))

    def finished(self) -> list[_Chart]:
        """The charts in display order, each with its flagged lines, worst first, once each."""
        for key, c in self.charts.items():
            seen: dict[str, None] = {}
            for _rank, name in sorted(self.flagged.get(key, [])):
                if name in c.series or name in c.derived:
                    seen.setdefault(name)
            c.flagged = list(seen)
        return [self.charts[k] for k in sorted(self.charts, key=lambda k: (k[0], k[1], k[2] == "pair", k[2]))]


def _charts(report: Report) -> list[_Chart]:
    book = _ChartBook()
    book.add_nodes(report)
    collective = _pair_collective(report)
    by_node = book.add_pairs(report, collective)
    book.add_named_medians(report, collective, by_node)
    return book.finished()


def _pair_collective(report: Report) -> str:
    """The collective the pair tests ran, as their findings' limits name it (all_reduce otherwise)."""
    for g in report.groups:
        for f in g.findings:
            if f.limit is not None and (m := _FLOOR_KEY.match(f.limit.key)):
                return m.group(1)
    for n in report.nodes:
        for f in n.findings:
            if f.check == "bw.pairs" and f.limit is not None and (m := _FLOOR_KEY.match(f.limit.key)):
                return m.group(1)
    return "all_reduce"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _curve_svg(chart: _Chart, fmarks: dict[int, FloorMark], id_: str) -> str:
    sizes = sorted(set(chart.labels) | set(fmarks))
    labels = {**{s: m.size for s, m in fmarks.items()}, **chart.labels}
    values = [v for series in chart.series.values() for v in series.values()]
    y_top = nice_max(max([*values, *(m.gbytes_per_s for m in fmarks.values())], default=1.0) * 1.05)
    left, right, top, bottom = 56.0, 64.0, 26.0, 40.0
    width, plot_h = 600.0, 220.0
    plot_w = width - left - right
    svg = Svg(width, top + plot_h + bottom, id_=id_, class_="curve",
              label=f"busbw per size, {chart.collective} {chart.scope}, fabric {chart.fabric}")
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])

    def px(size: int) -> float:
        return left + (plot_w / 2 if hi == lo else plot_w * (math.log2(size) - lo) / (hi - lo))

    def py(value: float) -> float:
        return top + plot_h * (1 - value / y_top)

    kind = "pairs" if chart.scope == "pair" else "nodes"
    svg.text(left, 16, f"{chart.collective} / {chart.scope} \u2014 fabric {chart.fabric}: "
                       f"{len(chart.series):,} {kind}", size=12, font_weight="bold")
    for k in range(6):
        v = y_top * k / 5
        svg.line(left, py(v), left + plot_w, py(v), "#e6e6e6")
        svg.text(left - 6, py(v) + 4, f"{v:g}", size=10, anchor="end")
    svg.text(14, top + plot_h / 2, "busbw (GB/s)", size=10, anchor="middle", rotate=-90)
    for s in sizes:
        svg.line(px(s), top + plot_h, px(s), top + plot_h + 4, "#999")
        svg.text(px(s), top + plot_h + 16, labels.get(s, str(s)), size=10, anchor="middle")
    svg.text(left + plot_w / 2, top + plot_h + 34, "message size", size=10, anchor="middle")
    measured = sorted(chart.labels)
    per_size = {s: sorted(v[s] for v in chart.series.values() if s in v) for s in measured}
    per_size = {s: v for s, v in per_size.items() if v}
    if per_size:
        xs = sorted(per_size)
        band = [(px(s), py(per_size[s][-1])) for s in xs] + [(px(s), py(per_size[s][0])) for s in reversed(xs)]
        svg.polygon(band, "#cfe3f3", class_="band")
        svg.polyline([(px(s), py(statistics.median(per_size[s]))) for s in xs], "#1f4e79", 2.5, class_="median",
                     title=f"median of {len(chart.series):,} {kind}")
        for s in xs:
            at = per_size[s]
            mid = statistics.median(at)
            svg.circle(px(s), py(mid), 3, "#1f4e79",
                       title=f"{labels[s]}: median {measure(mid)}, min {measure(at[0])}, max {measure(at[-1])} GB/s")
    if fmarks:
        pts = [(px(s), py(m.gbytes_per_s)) for s, m in sorted(fmarks.items())]
        if len(pts) > 1:
            svg.polyline(pts, "#c62828", 1.5, stroke_dasharray="6 4", class_="floor")
        for s, m in sorted(fmarks.items()):
            svg.line(px(s) - 14, py(m.gbytes_per_s), px(s) + 14, py(m.gbytes_per_s), "#c62828", 2.5,
                     class_="floor", stroke_dasharray="4 2")
            svg.text(px(s) + 16, py(m.gbytes_per_s) + 4, f"floor {m.gbytes_per_s:g}", size=10, fill="#c62828",
                     title=f"{m.key} ({m.source})")
    legend = []
    for colour, name in zip(SERIES, chart.flagged[:CURVE_HIGHLIGHTS], strict=False):
        series = chart.series.get(name) or chart.derived[name]
        pts = [(px(s), py(series[s])) for s in sorted(series)]
        svg.polyline(pts, colour, 2, title=name, class_="flagged", data_name=name)
        for s in sorted(series):
            svg.circle(px(s), py(series[s]), 3.5, colour, title=f"{name}: {measure(series[s])} GB/s at {labels[s]}")
        legend.append(f'<span><i class="swatch" style="background:{colour}"></i>{esc(clip(name, 60))}</span>')
    more = len(chart.flagged) - CURVE_HIGHLIGHTS
    if more > 0:
        legend.append(f'<span class="cap">{more} more with findings not drawn</span>')
    return svg.render() + (f'<p class="legend">{"".join(legend)}</p>' if legend else "")


# ------------------------------------------------------------------------------- history


def followed_nodes(report: Report, limit: int = TREND_NODES) -> list[str]:
    """The nodes worth following over their runs: those with a finding of WARN or worse (on the
    node or on a pair it is in), worst first, at most `limit`."""
    rank: dict[str, int] = {}
    for n in report.nodes:
        for f in n.findings:
            if f.status.rank >= Status.WARN.rank:
                rank[n.node] = max(rank.get(n.node, 0), f.status.rank)
    known = {n.node for n in report.nodes}
    for g in report.groups:
        for f in g.findings:
            if f.status.rank >= Status.WARN.rank and f.id != "bw.E108":  # a short test alone names nobody yet
                for m in f.members or g.members:
                    if m in known:
                        rank[m] = max(rank.get(m, 0), f.status.rank)
    return sorted(rank, key=lambda n: (-rank[n], natural_key(n)))[:limit]


def _history(report: Report, trend: Trend | None) -> str:
    head = '<section id="history"><h2>History</h2>'
    if trend is None:
        return ""  # not asked for: no section
    if trend.note is not None or not trend.nodes:
        why = trend.note or "no node to follow"
        skipped = "".join(f"<li>{esc(s)}</li>" for s in trend.skipped)
        return (f'<section id="history-absent"><h2>History</h2><p class="note">No history section: {esc(why)}.</p>'
                + (f"<ul>{skipped}</ul>" if skipped else "") + "</section>")
    panels = [_trend_svg(t, trend, i) for i, t in enumerate(trend.nodes)]
    own = f"own: the node's {esc(trend.own_label)} busbw" if trend.own_label else ""
    pair = f"pairs: the median busbw of its tests with other nodes at {esc(trend.pair_label)}" \
        if trend.pair_label else ""
    lines = "; ".join(x for x in (own, pair) if x)
    skipped = (f'<p class="cap">{len(trend.skipped)} runs could not be read: '
               + esc("; ".join(trend.skipped[:5])) + "</p>") if trend.skipped else ""
    return (head + f'<p class="note">The nodes with findings over the last {trend.runs} runs of hc '
            f"{esc(report.command)} (tier {esc(report.tier)}), oldest left: the status of each run as a dot"
            + (f"; {lines}" if lines else "") + f'.</p><p class="legend"><span><i class="swatch" '
            f'style="background:{SERIES[3]}"></i>own</span><span><i class="swatch" style="background:{SERIES[0]}">'
            f'</i>pairs</span></p><div class="multiples">{"".join(panels)}</div>{skipped}</section>')


def _trend_svg(t: Any, trend: Trend, index: int) -> str:
    width, height = 280.0, 124.0
    left, right, top = 34.0, 10.0, 24.0
    plot_h = 66.0
    svg = Svg(width, height, id_=f"trend-{index}", class_="trend", label=f"{t.node} over its last runs")
    now = t.points[-1].status or "absent"
    svg.text(4, 14, clip(t.node, 28), size=12, font_weight="bold", title=t.node)
    svg.text(width - 4, 14, now, size=11, anchor="end", fill=status_fill(now))
    values = [v for p in t.points for v in (p.own, p.pair) if v is not None]
    y_top = nice_max(max(values) * 1.05) if values else 1.0
    n = len(t.points)
    plot_w = width - left - right

    def px(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def py(v: float) -> float:
        return top + plot_h * (1 - v / y_top)

    svg.line(left, top + plot_h, left + plot_w, top + plot_h, "#ccc")
    svg.text(left - 4, top + 8, f"{y_top:g}", size=9, anchor="end")
    svg.text(left - 4, top + plot_h, "0", size=9, anchor="end")
    for attr, colour, what in (("own", SERIES[3], "own busbw"), ("pair", SERIES[0], "pair busbw")):
        pts = [(i, getattr(p, attr)) for i, p in enumerate(t.points) if getattr(p, attr) is not None]
        if len(pts) > 1:
            svg.polyline([(px(i), py(v)) for i, v in pts], colour, 1.8, class_=f"trend-{attr}")
        for i, v in pts:
            svg.circle(px(i), py(v), 2.5, colour, title=f"{t.points[i].started_at}: {what} {measure(v)} GB/s")
    for i, p in enumerate(t.points):
        status = p.status or "absent"
        svg.circle(px(i), top + plot_h + 16, 5, status_fill(status) if p.status else "#ffffff",
                   stroke="#999" if not p.status else None, class_="trend-status", data_status=status,
                   title=f"{p.started_at} run {p.run_id}: {status}")
    return svg.render()
