"""Human-readable output: one line per group of identical findings, nodes folded."""

from __future__ import annotations

from healthcheck.core.catalogue import NOTHING_CHECKED
from healthcheck.core.model import Report


def printable(text: object) -> str:
    """Escape control characters so hostile tool output cannot forge table lines."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def render(report: Report, *, show_checks: bool | None = None) -> str:
    from tabulate import tabulate

    out: list[str] = []
    groups = report.findings_summary
    if groups:
        rows = [
            [g["status"], g["id"], printable(g["nodes"]), printable(g["component"] or "-"), printable(g["message"])]
            for g in groups
        ]
        out.append(tabulate(rows, headers=["STATUS", "ID", "NODES", "SUBJECT", "MESSAGE"], tablefmt="simple"))
        out.append("")
    if show_checks is None:
        show_checks = len(report.nodes) == 1
    if show_checks:
        for node in report.nodes:
            rows = [[c.name, c.status.value, f"{c.duration_s:.3f}", printable(c.reason or "")] for c in node.checks]
            out.append(tabulate(rows, headers=["CHECK", "STATUS", "SECONDS", "NOTE"], tablefmt="simple"))
            out.append("")
    counts = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    nodes = len(report.nodes)
    node_word = "node" if nodes == 1 else "nodes"
    fabrics = sorted({n.fabric for n in report.nodes})
    verdict = report.status.value
    if any(f.id == NOTHING_CHECKED.id for f in report.run_findings):
        verdict += " (nothing was checked)"  # an all-SKIP run must not read as a clean one
    out.append(
        f"{verdict}: {nodes} {node_word} ({counts}), tier {report.tier}, "
        f"fabric {', '.join(fabrics) or '-'}, {report.duration_s:.2f}s, run {report.run_id}"
    )
    return "\n".join(out)
