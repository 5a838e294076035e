"""Human-readable output: one line per group of identical findings, nodes folded, then
the bandwidth between nodes (a pair matrix per message size, the groups' busbw), then
one line per run-level result (pair, group, job)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from healthcheck.core.catalogue import NOTHING_CHECKED
from healthcheck.core.config.loader import EMBEDDED_DEFAULT
from healthcheck.core.model import CheckResult, Finding, GroupResult, Metric, NodeResult, Report
from healthcheck.core.nodes import fold
from healthcheck.core.registry import current
from healthcheck.core.status import Status, worst
from healthcheck.core.units import parse_size
from healthcheck.report.build import foldable, natural_key, sort_nodes
from healthcheck.report.layout import coloured, table, wrap_line

# above this many groups, passing ones are counted rather than listed (a 64-node pair
# matrix has 2,016 pairs; the slow ones must not drown)
LIST_PASSING_UP_TO = 20
# a pair matrix is printed for at most this many nodes (wider does not fit a terminal);
# past it, the SLOWEST_PAIRS slowest pairs of each size are listed instead
MATRIX_UP_TO = 32
SLOWEST_PAIRS = 20
BUSBW = "busbw"  # the metric a bandwidth test between nodes reports, per message size (its component)
_MARK = {Status.WARN: "!", Status.FAIL: "!!"}  # after a cell's value: the test shown fell short
NO_RESULT = "ERR"  # a cell whose pair's tests all ended ERROR (could not run): no value


def printable(text: object) -> str:
    """Escape control characters so hostile tool output cannot forge table lines."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def render(report: Report, *, show_checks: bool | None = None, width: int | None = None,
           colour: bool = False) -> str:
    """The report for a person: findings, bandwidth, run-level results, each node's checks
    (one node: by default) and the verdict. `width`: fit the tables and lines to it (None:
    as wide as they are, for a pipe); `colour`: the STATUS cells in colour (a terminal)."""
    out: list[str] = []
    groups = report.findings_summary
    if groups:
        rows = [
            [coloured(g["status"], g["status"], colour), g["id"], printable(g["nodes"]),
             printable(g["component"] or "-"), printable(g["message"])]
            for g in groups
        ]
        out.append(table(rows, ["STATUS", "ID", "NODES", "SUBJECT", "MESSAGE"], width))
        out.append("")
    if report.groups:
        out.extend(render_bandwidth(report.groups))  # nothing where no pair or group was tested
        out.extend(render_groups(report.groups, width=width, colour=colour))
        out.append("")
    if show_checks is None:
        show_checks = len(report.nodes) == 1
    if show_checks:
        for node in report.nodes:
            if len(report.nodes) > 1:  # which node each table is about
                out.append(f"{printable(node.node)}:")
            out.extend(render_checks(node, width=width, colour=colour))
            out.append("")
    out.append(wrap_line(summary_line(report), width))
    return "\n".join(out)


def summary_line(report: Report) -> str:
    """The verdict, what it counts, and what the run was: tier, fabric, config, time, run ID."""
    counts = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
    nodes = len(report.nodes)
    node_word = "node" if nodes == 1 else "nodes"
    fabrics = sorted({n.fabric for n in report.nodes})
    verdict = report.status.value
    if any(f.id == NOTHING_CHECKED.id for f in report.run_findings):
        verdict += " (nothing was checked)"  # an all-SKIP run must not read as a clean one
    return (f"{verdict}: {nodes} {node_word} ({counts}){_beyond_nodes(report)}, tier {report.tier}, "
            f"fabric {', '.join(fabrics) or '-'}, config {config_name(report.config_path)}, "
            f"{report.duration_s:.2f}s, run {report.run_id}")


def config_name(path: str) -> str:
    """The config a run used, as the summary names it: its path, or "embedded default" for
    the one inside hc (its path is an install directory, which tells an operator nothing)."""
    if not path:
        return "-"  # a report made without a config (a job's diagnosis)

    return "embedded default" if path == str(EMBEDDED_DEFAULT) else printable(path)


def render_checks(node: NodeResult, *, width: int | None = None, colour: bool = False) -> list[str]:
    """A node's checks, one row each: its status, its own time and a note (the finding behind
    a FAIL, WARN or ERROR; a PASS's evidence; why a check was skipped). A node that could
    not be checked at all has no checks: one line says so and why."""
    if not node.checks:
        why = f"not checked: {node.error}" if node.error is not None else "no check ran"
        return [wrap_line(f"{printable(node.node)}: {coloured(node.status.value, node.status, colour)}, "
                          f"{printable(why)}", width)]
    notes = CheckNotes(node)
    rows = [[c.name, coloured(c.status.value, c.status, colour), f"{c.duration_s:.3f}", notes.note(c)]
            for c in node.checks]
    return [table(rows, ["CHECK", "STATUS", "SECONDS", "NOTE"], width, disable_numparse=True,
                  colalign=("left", "left", "right", "left"))]


# a PASS row's evidence: at most this many of the check's metrics, then how many more
EVIDENCE_SHOWN = 2


class CheckNotes:
    """The NOTE of each check of one node, from the node's findings (stamped with the check
    that made them) and metrics (matched to a check by the names it declares as its
    evidence: `@check(evidence_metrics=...)`)."""

    def __init__(self, node: NodeResult) -> None:
        self.findings: dict[str, list[Finding]] = {}
        for f in node.findings:
            self.findings.setdefault(f.check, []).append(f)
        self.metrics = node.metrics

    def note(self, check: CheckResult) -> str:
        if check.status in (Status.FAIL, Status.WARN, Status.ERROR):
            found = self.findings.get(check.name, [])
            if found:
                worst_first = max(found, key=lambda f: f.status.rank)  # the first of the worst: the check's order
                more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
                return printable(f"{worst_first.id} {worst_first.message}{more}")
        if check.status is Status.PASS and not check.reason:
            return printable(self.evidence(check.name))
        return printable(check.reason or "")

    def evidence(self, check: str) -> str:
        """"eth0 mtu 9000 bytes": what the check measured, from the metrics it names as its
        evidence (the first EVIDENCE_SHOWN, the rest counted); "" where it names none."""
        names = evidence_metrics(check)
        if not names:
            return ""
        rank = {name: i for i, name in enumerate(names)}
        chosen = sorted((m for m in self.metrics if m.name in rank), key=lambda m: rank[m.name])  # stable
        shown = "; ".join(metric_text(m) for m in chosen[:EVIDENCE_SHOWN])
        more = len(chosen) - EVIDENCE_SHOWN
        return shown + (f" (+{more} more)" if more > 0 else "")


def metric_text(m: Metric) -> str:
    """One measurement in words: "eth0 mtu 9000 bytes", "/tmp free_gib 78.2 GiB"."""
    value = f"{m.value:g}" if isinstance(m.value, float) else str(m.value)
    return " ".join(part for part in (m.component, m.name, value, m.unit or "") if part)


def evidence_metrics(check: str) -> tuple[str, ...]:
    """The metric names `check` declares as its evidence; () for a check this hc does not know."""

    spec = current().spec(check)
    return spec.evidence_metrics if spec is not None else ()


def _beyond_nodes(report: Report) -> str:
    """Where the verdict comes from when the nodes' own statuses do not explain it ("ERROR:
    1 node (1 PASS)" would read as a contradiction): the run-level results and run findings
    at the run's status, e.g. " + 1 run finding ERROR (act.E003)"; '' otherwise."""

    if report.status.rank <= worst((n.status for n in report.nodes), default=Status.SKIP).rank:
        return ""
    status = report.status
    parts = []
    kinds: dict[str, int] = {}
    for g in report.groups:
        if g.status is status:
            kinds[g.kind] = kinds.get(g.kind, 0) + 1
    parts += [f"{n} {printable(kind)}{'' if n == 1 else 's'} {status.value}" for kind, n in sorted(kinds.items())]
    # "nothing was checked" is said in the verdict already
    found = [f for f in report.run_findings if f.status is status and f.id != NOTHING_CHECKED.id]
    if found:
        ids = ", ".join(sorted({printable(f.id) for f in found}))
        parts.append(f"{len(found)} run finding{'' if len(found) == 1 else 's'} {status.value} ({ids})")
    return "".join(f" + {p}" for p in parts)


def fold_members(names: list[str]) -> str:
    if foldable(names):
        return fold(names)
    return ",".join(sort_nodes(dict.fromkeys(names)))  # NodeSet would reinterpret brackets and commas


def _worst_finding(group: GroupResult) -> str:
    """`ID message` of the group's most severe finding, or "-"."""
    if not group.findings:
        return "-"
    f = max(group.findings, key=lambda f: f.status.rank)  # the first of the worst: the producer's order
    return f"{f.id} {f.message}"


def render_groups(groups: list[GroupResult], *, width: int | None = None, colour: bool = False) -> list[str]:
    """The run-level results, worst first: kind, name, members as a hostlist, status, worst finding."""

    ordered = sorted(groups, key=lambda g: (-g.status.rank, g.kind, natural_key(g.name)))
    listed = [g for g in ordered if len(groups) <= LIST_PASSING_UP_TO or g.status.rank > Status.PASS.rank]
    rows = [[g.kind, printable(g.name), printable(fold_members(g.members)), coloured(g.status.value, g.status, colour),
             printable(_worst_finding(g))] for g in listed]
    out = [table(rows, ["GROUP", "NAME", "MEMBERS", "STATUS", "WORST FINDING"], width)] if rows else []
    hidden = len(groups) - len(listed)
    if hidden:
        out.append(f"{hidden} more pair/group/job results passed or were skipped (--format json lists them)")
    return out


# ---------------------------------------------------------------- bandwidth between nodes


class PairCell(NamedTuple):
    """A pair's (or group's) busbw at one size: the best of its tests, and that test's status;
    value None where no test gave one (status ERROR: a test could not run)."""

    value: float | None
    status: Status

    def text(self, marks: int = 0) -> str:
        """The value (or ERR), then its mark padded to `marks` characters, so that values with
        and without marks line up when right-aligned; marks=0: no mark (a STATUS column says)."""
        if self.value is None:
            return NO_RESULT + " " * marks
        return f"{self.value:.1f}" + (_MARK.get(self.status, "").ljust(marks) if marks else "")


def _busbw(group: GroupResult, size: str) -> float | None:
    """The group's best busbw at `size`, or None where it measured none."""
    values = [float(m.value) for m in group.metrics if m.name == BUSBW and m.component == size
              and isinstance(m.value, (int, float)) and not isinstance(m.value, bool)]
    return max(values) if values else None


def pair_sizes(groups: Iterable[GroupResult]) -> list[str]:
    """The message sizes the groups measured busbw at, smallest first ("64M" before "1G")."""

    def key(size: str) -> tuple:
        try:
            return 0, parse_size(size), natural_key(size)
        except ValueError:  # a size hc does not write: after the others, by name
            return 1, 0, natural_key(size)

    return sorted({m.component for g in groups for m in g.metrics if m.name == BUSBW}, key=key)


def pair_unit(groups: Iterable[GroupResult]) -> str:
    units = {m.unit for g in groups for m in g.metrics if m.name == BUSBW and m.unit}
    return printable(units.pop()) if len(units) == 1 else "GB/s" if not units else "mixed units"


def best_cell(tests: Sequence[GroupResult], size: str) -> PairCell | None:
    """The best of one pair's (or group's) tests at `size`: its value and status; ERR where
    no test measured it and one could not run; None where none was tested at that size."""
    measured = [(v, g.status) for g in tests if (v := _busbw(g, size)) is not None]
    if measured:
        value, status = max(measured, key=lambda vs: vs[0])  # the first of the best: the producer's order
        return PairCell(value, status)
    if any(g.status is Status.ERROR for g in tests):
        return PairCell(None, Status.ERROR)
    return None


def _pair_name(a: str, b: str) -> str:
    return f"{printable(a)}-{printable(b)}"


def render_bandwidth(groups: list[GroupResult]) -> list[str]:
    """The bandwidth between nodes, from run-level results: for pairs, a nodes x nodes matrix
    of busbw per message size (the slowest pairs where there are too many nodes); for groups
    (more than two nodes tested together), each one's busbw. [] where there are neither, so
    a report without them renders as it always has. Findings about pairs and groups (slow
    links) are in the findings table already, folded with the nodes' own."""

    out: list[str] = []
    pairs: dict[tuple[str, str], list[GroupResult]] = {}
    for g in groups:
        if g.kind == "pair" and len(set(g.members)) == 2:
            a, b = sort_nodes(g.members)
            pairs.setdefault((a, b), []).append(g)  # "a-b" and "a-b (confirm)": one pair, two tests
    # a pair result with neither a value nor an ERROR test (a finding about a pair never
    # tested as one) has no cell: the GROUP table and the findings table list it
    if pairs:
        out.extend(_pair_bandwidth(pairs))
    tested_groups = [g for g in groups if g.kind == "group" and (pair_sizes([g]) or g.status is Status.ERROR)]
    if tested_groups:
        out.extend(_group_bandwidth(tested_groups))
    return out


def _pair_bandwidth(pairs: dict[tuple[str, str], list[GroupResult]]) -> list[str]:
    """Per size: the matrix of the pairs' busbw, or the slowest pairs past MATRIX_UP_TO nodes."""
    from tabulate import tabulate

    every = [g for tests in pairs.values() for g in tests]
    sizes = pair_sizes(every)
    unit = pair_unit(every)
    nodes = sort_nodes({n for pair in pairs for n in pair})
    possible = len(nodes) * (len(nodes) - 1) // 2
    out: list[str] = []
    if not sizes:
        failed = sum(1 for tests in pairs.values() if any(g.status is Status.ERROR for g in tests))
        if failed:
            out += [f"pair {BUSBW}: no test between nodes gave a result ({failed} of {possible} pairs could not "
                    f"run, listed below)", ""]
        return out
    legend = False
    for size in sizes:
        cells = {pair: cell for pair, tests in pairs.items() if (cell := best_cell(tests, size)) is not None}
        if not cells:
            continue
        no_result = sum(1 for c in cells.values() if c.value is None)
        title = (f"pair {BUSBW} at {printable(size)} ({unit}): {len(cells)} of {possible} pairs tested"
                 + (f", {no_result} without a result" if no_result else ""))
        if len(nodes) <= MATRIX_UP_TO:
            if not legend:
                out.append(f"each cell: the best {BUSBW} of the pair's tests; {_MARK[Status.WARN]} WARN, "
                           f"{_MARK[Status.FAIL]} FAIL, {NO_RESULT} no result, blank not tested")
                legend = True
            out.append(title)
            out.extend(_matrix(nodes, cells))
        else:
            slowest = sorted(((pair, c) for pair, c in cells.items() if c.value is not None),
                             key=lambda pc: (pc[1].value, natural_key(pc[0][0]), natural_key(pc[0][1])))
            shown = slowest[:SLOWEST_PAIRS]
            out.append(f"{title}, among {len(nodes)} nodes (too many for a matrix); the {len(shown)} slowest:")
            out.append(tabulate([[_pair_name(*pair), c.text(), c.status.value] for pair, c in shown],
                                headers=["PAIR", f"{BUSBW.upper()} {printable(size)}", "STATUS"], tablefmt="simple",
                                colalign=("left", "right", "left"), disable_numparse=True))
        out.append("")
    return out


def _matrix(nodes: list[str], cells: dict[tuple[str, str], PairCell]) -> list[str]:
    """Both triangles: a node's row reads its busbw with every partner."""
    marks = max((len(_MARK.get(c.status, "")) for c in cells.values() if c.value is not None), default=0)

    def cell(a: str, b: str) -> str:
        if a == b:
            return "-" + " " * marks
        c = cells.get((a, b)) or cells.get((b, a))
        return c.text(marks) if c is not None else ""

    names = [printable(n) for n in nodes]
    rows = [[name, *(cell(a, b) for b in nodes)] for name, a in zip(names, nodes, strict=True)]
    return _table(rows, ["", *names], right=tuple(range(1, len(names) + 1)))


def _table(rows: list[list[str]], headers: list[str], *, right: tuple[int, ...] = ()) -> list[str]:
    """tabulate's "simple" layout with the cells as given, for the matrix: tabulate strips
    the padding that lines up values with and without a mark, so the columns are laid out here."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _group_bandwidth(groups: list[GroupResult]) -> list[str]:
    """Each group's busbw per size (a group is one test of more than two nodes); past
    LIST_PASSING_UP_TO, the slowest at the largest size (no result first)."""
    from tabulate import tabulate

    sizes = pair_sizes(groups)
    if len(groups) <= LIST_PASSING_UP_TO:
        listed = sorted(groups, key=lambda g: natural_key(g.name))
        title = f"group {BUSBW} ({pair_unit(groups)}):"
    else:
        largest = sizes[-1] if sizes else ""

        def slow(g: GroupResult) -> tuple:
            v = _busbw(g, largest)
            return (v is not None, v or 0.0, natural_key(g.name))

        listed = sorted(groups, key=slow)[:LIST_PASSING_UP_TO]
        title = (f"group {BUSBW} ({pair_unit(groups)}): the {len(listed)} slowest of {len(groups)} groups at "
                 f"{printable(largest)} (--format json lists them all)")
    rows = []
    for g in listed:
        cells = [best_cell([g], size) for size in sizes]
        rows.append([printable(g.name), printable(fold_members(g.members)), g.status.value,
                     *(c.text() if c is not None else "" for c in cells)])
    table = tabulate(rows, headers=["GROUP", "MEMBERS", "STATUS", *(printable(s) for s in sizes)], tablefmt="simple",
                     colalign=("left", "left", "left", *("right" for _ in sizes)), disable_numparse=True)
    return [title, table, ""]
