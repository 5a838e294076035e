"""The heat-map section of `hc report html` drawn from a fixed report, compared byte for byte
with the page hc wrote before `_heatmap` was split into its parts (tests/fixtures/report-html/):
the 8-node deep sweep as recorded, its rows capped, an ERROR pair and an untested pair, and
matrices of 14 and 34 nodes (the smaller cells without their numbers).

The fixed report is tests/fixtures/reports/deep-sweep-8-nodes.json: one `hc sweep --tier deep`
of gpu[01-08] from tests/sweep_reports.py (a culprit, a slow link, a slow node), its run id
and config path made fixed. If the drawing is changed on purpose, write the files again with
`python tests/unit/report/test_report_html_heatmap_golden.py` and review the difference."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import msgspec
import pytest

from healthcheck.core.model import Report
from healthcheck.core.status import Status
from healthcheck.report import html as page
from healthcheck.report.jsonio import decode

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REPORT = FIXTURES / "reports" / "deep-sweep-8-nodes.json"
GOLDEN = FIXTURES / "report-html"
DIGESTED = {"34-nodes"}  # 1,156 cells: kept as the page's SHA-256, not 230 kB of expected text


def fixed_report() -> Report:
    return decode(REPORT.read_bytes())


def with_nodes(report: Report, count: int) -> Report:
    """Every pair of gpu01..gpuNN tested, each pair taking the groups of the fixed report in turn."""
    names = [f"gpu{i:02d}" for i in range(1, count + 1)]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    model = report.groups
    groups = [msgspec.structs.replace(model[k % len(model)], members=list(pair)) for k, pair in enumerate(pairs)]
    return msgspec.structs.replace(report, groups=groups)


def with_error_and_untested(report: Report) -> Report:
    groups = [g for g in report.groups if not {"gpu01", "gpu03"} <= set(g.members)]
    broken = next(g for g in groups if set(g.members) == {"gpu07", "gpu08"})
    groups = [msgspec.structs.replace(g, metrics=[], status=Status.ERROR) if g is broken else g for g in groups]
    return msgspec.structs.replace(report, groups=groups)


def pairs_section(report: Report) -> str:
    """The heat map's section of the page, and the caps the footer lists."""
    text = page.render_html(report)
    section = re.search(r'<section id="pairs">.*?</section>', text, re.S)
    caps = re.findall(r"<li>heat map:[^<]*</li>", text)
    assert section is not None
    return section.group(0) + "\n" + "\n".join(caps) + "\n"


def cases() -> dict[str, tuple[Report, int]]:
    """name -> (report, HEATMAP_NODES)."""
    report = fixed_report()
    return {
        "as-recorded": (report, page.HEATMAP_NODES),
        "capped-3": (report, 3),
        "error-and-untested": (with_error_and_untested(report), page.HEATMAP_NODES),
        "14-nodes": (with_nodes(report, 14), page.HEATMAP_NODES),
        "34-nodes": (with_nodes(report, 34), page.HEATMAP_NODES),
        "no-pairs": (msgspec.structs.replace(report, groups=[]), page.HEATMAP_NODES),
    }


@pytest.mark.parametrize("name", sorted(cases()))
def test_the_heat_map_is_drawn_as_it_was(name, monkeypatch):
    report, cap = cases()[name]
    monkeypatch.setattr(page, "HEATMAP_NODES", cap)
    assert expected_form(name, pairs_section(report)) == (GOLDEN / expected_file(name)).read_text()


def expected_file(name: str) -> str:
    return f"heatmap-{name}.sha256" if name in DIGESTED else f"heatmap-{name}.html"


def expected_form(name: str, section: str) -> str:
    return hashlib.sha256(section.encode()).hexdigest() + "\n" if name in DIGESTED else section


if __name__ == "__main__":  # write the expected files again (a deliberate change of the drawing)
    GOLDEN.mkdir(exist_ok=True)
    default = page.HEATMAP_NODES
    for name, (report, cap) in cases().items():
        page.HEATMAP_NODES = cap
        (GOLDEN / expected_file(name)).write_text(expected_form(name, pairs_section(report)))
        page.HEATMAP_NODES = default
    sys.exit(0)
