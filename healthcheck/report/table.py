"""Human-readable output: one line per group of identical findings, nodes folded, then
one line per run-level result (pair, group, job)."""

from __future__ import annotations

from healthcheck.core.catalogue import NOTHING_CHECKED
from healthcheck.core.model import GroupResult, Report
from healthcheck.core.status import Status

# above this many groups, passing ones are counted rather than listed (a 64-node pair
# matrix has 2,016 pairs; the slow ones must not drown)
LIST_PASSING_UP_TO = 20


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
    if report.groups:
        out.extend(render_groups(report.groups))
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


def _members(names: list[str]) -> str:
    from healthcheck.report.build import _foldable, sort_nodes

    if _foldable(names):
        from healthcheck.core.nodes import fold

        return fold(names)
    return ",".join(sort_nodes(dict.fromkeys(names)))  # NodeSet would reinterpret brackets and commas


def _worst_finding(group: GroupResult) -> str:
    """`ID message` of the group's most severe finding, or "-"."""
    if not group.findings:
        return "-"
    f = max(group.findings, key=lambda f: f.status.rank)  # the first of the worst: the producer's order
    return f"{f.id} {f.message}"


def render_groups(groups: list[GroupResult]) -> list[str]:
    """The run-level results, worst first: kind, name, members as a hostlist, status, worst finding."""
    from tabulate import tabulate

    from healthcheck.report.build import natural_key

    ordered = sorted(groups, key=lambda g: (-g.status.rank, g.kind, natural_key(g.name)))
    listed = [g for g in ordered if len(groups) <= LIST_PASSING_UP_TO or g.status.rank > Status.PASS.rank]
    rows = [[g.kind, printable(g.name), printable(_members(g.members)), g.status.value,
             printable(_worst_finding(g))] for g in listed]
    out = [tabulate(rows, headers=["GROUP", "NAME", "MEMBERS", "STATUS", "WORST FINDING"], tablefmt="simple")] \
        if rows else []
    hidden = len(groups) - len(listed)
    if hidden:
        out.append(f"{hidden} more pair/group/job results passed or were skipped (--format json lists them)")
    return out
