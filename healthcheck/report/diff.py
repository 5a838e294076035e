"""What changed between two reports: what broke since last night, what was fixed.

Findings are matched by fingerprint (node, check, subject, ID), so a finding whose
message changed (a counter that grew) is the same finding. Buckets, most urgent first:

- new_failures: FAIL now, and its fingerprint was not FAIL before (new node included);
- still_failing: FAIL in both;
- fixed: FAIL before, not FAIL now, on a node checked now by a check that ran;
- unverified: FAIL before, absent now because it could not be looked at again (the node
  is gone or unreachable, or the check that found it was skipped or could not run) —
  absence of evidence is not a fix;
- new_errors: ERROR now that was not ERROR before (a node that became unreachable);
- new_warnings / cleared_warnings: the same for WARN, lower priority;
- nodes_added / nodes_removed: nodes in only one of the two reports.

Findings of run-level groups (pairs, jobs) go into the same buckets, by fingerprint too;
one counts as looked at again where the newer report has a group of the same kind and
name that ran (PASS, WARN or FAIL). A hc.report/1 report has no groups.

The two reports are compared in the order they ran (`started_at`), whichever order they
were given in: swapped arguments would otherwise call every fix a new failure. A swap,
and two runs made with different configs (config digest), are said in `notes`, on the
rendered diff and, from the CLI, on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from healthcheck.core.model import Finding, GroupResult, NodeResult, Report
from healthcheck.core.nodes import fold, is_valid_node_name
from healthcheck.core.status import Status
from healthcheck.report.build import natural_key, sort_nodes, without_node
from healthcheck.report.jsonio import parse_time
from healthcheck.report.table import printable

_RAN = (Status.PASS, Status.WARN, Status.FAIL)


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One finding's change between the two reports."""

    node: str
    id: str
    check: str
    subject: str
    component: str
    message: str  # the newer message where the finding is in both
    fingerprint: str
    before: Status | None  # None: not in the older report
    after: Status | None  # None: not in the newer report
    group: str = ""  # "pair gpu01-gpu02": the finding is about a run-level group, not one node
    members: list[str] = []  # the nodes a group's finding names


class RunRef(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    command: str
    tier: str
    started_at: str
    status: Status
    nodes: int
    config_digest: str = ""


class ReportDiff(msgspec.Struct, kw_only=True):
    old: RunRef
    new: RunRef
    new_failures: list[Change] = []
    still_failing: list[Change] = []
    fixed: list[Change] = []
    unverified: list[Change] = []
    new_errors: list[Change] = []
    new_warnings: list[Change] = []
    cleared_warnings: list[Change] = []
    nodes_added: list[str] = []
    nodes_removed: list[str] = []
    swapped: bool = False  # the reports were given newest first and compared in time order
    config_changed: bool = False  # the two runs used different configs
    notes: list[str] = []  # what the reader must know to trust the comparison

    def counts(self) -> dict[str, int]:
        """Bucket -> size, in order of urgency."""
        return {name: len(getattr(self, name)) for name in BUCKETS}


BUCKETS = ("new_failures", "still_failing", "fixed", "unverified", "new_errors", "new_warnings",
           "cleared_warnings", "nodes_added", "nodes_removed")


def _ref(report: Report) -> RunRef:
    return RunRef(run_id=report.run_id, command=report.command, tier=report.tier,
                  started_at=report.started_at, status=report.status, nodes=len(report.nodes),
                  config_digest=report.config_digest)


def in_time_order(old: Report, new: Report) -> tuple[Report, Report, bool]:
    """(older, newer, swapped): the reports in the order they ran (by time, whatever offset
    each started_at is written in; a report hc read has a valid one, see jsonio.decode)."""

    before, after = parse_time(old.started_at), parse_time(new.started_at)
    swapped = before is not None and after is not None and before > after
    return (new, old, True) if swapped else (old, new, False)


def _notes(d: ReportDiff, given_first: Report, given_second: Report) -> list[str]:
    notes = []
    if d.swapped:
        notes.append(f"the reports were given newest first: {given_first.run_id} (started {given_first.started_at}) "
                     f"ran after {given_second.run_id} (started {given_second.started_at}); compared in time order, "
                     f"older {d.old.run_id} -> newer {d.new.run_id}")
    if d.config_changed:
        notes.append(f"the two runs used different configs ({d.old.config_digest or '?'} -> "
                     f"{d.new.config_digest or '?'}): a change may come from the config, not the nodes")
    return notes


def _change(f: Finding, before: Status | None, after: Status | None,
            group: GroupResult | None = None) -> Change:
    return Change(node=f.node, id=f.id, check=f.check, subject=f.subject, component=f.component,
                  message=f.message, fingerprint=f.fingerprint, before=before, after=after,
                  group="" if group is None else _group_key(group),
                  members=[] if group is None else list(f.members or group.members))


def _group_key(group: GroupResult) -> str:
    return f"{group.kind} {group.name}"


def _by_fingerprint(nodes: Iterable[NodeResult]) -> dict[str, Finding]:
    """Every finding by fingerprint; a duplicate keeps the worst."""
    return _index((f, None) for node in nodes for f in node.findings)[0]


def _index(found: Iterable[tuple[Finding, GroupResult | None]]
           ) -> tuple[dict[str, Finding], dict[str, GroupResult]]:
    """Findings by fingerprint (a duplicate keeps the worst), and the group each came from."""
    out: dict[str, Finding] = {}
    owners: dict[str, GroupResult] = {}
    for f, group in found:
        key = f.fingerprint or f"{f.node}\x1f{f.check}\x1f{f.subject}\x1f{f.id}"
        if group is not None:  # a group's finding never matches a node's, even unstamped
            key = f"{_group_key(group)}\x1e{key}"
        seen = out.get(key)
        if seen is None or f.status.rank > seen.status.rank:
            out[key] = f
            if group is not None:
                owners[key] = group
    return out, owners


def _bucket(d: ReportDiff, before: dict[str, Finding], after: dict[str, Finding],
            rechecked: Callable[[Finding, str], bool], change: Callable[..., Change]) -> None:
    """Sort each finding's change between the two runs into the diff's buckets."""
    for key, f in after.items():
        prev = before.get(key)
        was = prev.status if prev is not None else None
        if f.status is Status.FAIL:
            (d.still_failing if was is Status.FAIL else d.new_failures).append(change(key, f, was, f.status))
        elif f.status is Status.ERROR and was is not Status.ERROR:
            d.new_errors.append(change(key, f, was, f.status))
        elif f.status is Status.WARN and was not in (Status.WARN, Status.FAIL):
            d.new_warnings.append(change(key, f, was, f.status))
    for key, f in before.items():
        now_f = after.get(key)
        now = now_f.status if now_f is not None else None
        if f.status is Status.FAIL and now is not Status.FAIL:
            if now is not None or rechecked(f, key):
                d.fixed.append(change(key, now_f or f, f.status, now))
            else:
                d.unverified.append(change(key, f, f.status, None))
        elif f.status is Status.WARN and now is None and rechecked(f, key):
            d.cleared_warnings.append(change(key, f, f.status, None))


def _rechecked(f: Finding, node: NodeResult | None) -> bool:
    """Whether the newer run looked again at what found `f`: node reachable and its check ran."""
    if node is None or node.error is not None:
        return False
    if f.check.startswith("fleet."):
        return True  # fleet findings come from the whole report, not a node's check
    ran = {c.name: c.status for c in node.checks}
    return ran.get(f.check) in _RAN


def diff(old: Report, new: Report) -> ReportDiff:
    """The changes from the older of the two reports to the newer, bucketed by urgency.

    The reports are put in the order they ran (started_at) whatever order they come
    in; `swapped` and `notes` say when that changed the order given.
    """
    given = (old, new)
    old, new, swapped = in_time_order(old, new)
    old_nodes = {n.node: n for n in old.nodes}
    new_nodes = {n.node: n for n in new.nodes}
    before = _by_fingerprint(old.nodes)
    after = _by_fingerprint(new.nodes)
    d = ReportDiff(old=_ref(old), new=_ref(new), swapped=swapped,
                   config_changed=old.config_digest != new.config_digest)
    d.notes = _notes(d, *given)
    d.nodes_added = sort_nodes(set(new_nodes) - set(old_nodes))
    d.nodes_removed = sort_nodes(set(old_nodes) - set(new_nodes))
    _bucket(d, before, after, lambda f, _key: _rechecked(f, new_nodes.get(f.node)),
            lambda _key, f, was, now: _change(f, was, now))
    g_before, old_owners = _index((f, g) for g in old.groups for f in g.findings)
    g_after, new_owners = _index((f, g) for g in new.groups for f in g.findings)
    ran = {_group_key(g) for g in new.groups if g.status in _RAN}
    _bucket(d, g_before, g_after, lambda _f, key: _group_key(old_owners[key]) in ran,
            lambda key, f, was, now: _change(f, was, now, new_owners.get(key) or old_owners[key]))
    for name in BUCKETS[:7]:
        getattr(d, name).sort(key=lambda c: (c.id, c.component, c.group, natural_key(c.node)))
    return d


# ------------------------------------------------------------------------ rendering


def _fold(names: list[str]) -> str:
    # a name NodeSet would reinterpret (brackets, commas) is listed as it is
    if all(is_valid_node_name(n) for n in names):
        return fold(names)
    return ",".join(sort_nodes(dict.fromkeys(names)))


_TITLES = {
    "new_failures": "NEW FAIL",
    "still_failing": "STILL FAIL",
    "fixed": "FIXED",
    "unverified": "NOT RECHECKED",
    "new_errors": "NEW ERROR",
    "new_warnings": "NEW WARN",
    "cleared_warnings": "WARN CLEARED",
}


def headline(d: ReportDiff) -> str:
    """'3 new failures, 2 fixed, 10 still failing, ...' — the counts, zero buckets left out."""
    c = d.counts()
    words = [
        ("new_failures", "new failure", "new failures"), ("fixed", "fixed", "fixed"),
        ("still_failing", "still failing", "still failing"), ("unverified", "not rechecked", "not rechecked"),
        ("new_errors", "new error", "new errors"), ("new_warnings", "new warning", "new warnings"),
        ("cleared_warnings", "warning cleared", "warnings cleared"),
        ("nodes_added", "node added", "nodes added"), ("nodes_removed", "node removed", "nodes removed"),
    ]
    parts = [f"{c[k]} {one if c[k] == 1 else many}" for k, one, many in words if c[k] or k in ("new_failures", "fixed")]
    return ", ".join(parts)


def render_diff(d: ReportDiff) -> str:
    """A table of the changes, identical ones folded into hostlists, under a line of counts."""
    from tabulate import tabulate

    out = [
        f"{d.new.command} (tier {d.new.tier}) {d.new.started_at} run {d.new.run_id}, "
        f"since {d.old.started_at} run {d.old.run_id}:",
        headline(d),
        *(f"warning: {printable(note)}" for note in d.notes),
    ]
    rows = []
    for name, title in _TITLES.items():
        # identical changes fold, even where the message names its node (srun: one per node)
        # a group's change is its own row, its members listed (pairs must not merge)
        groups: dict[tuple[str, str, str, str], list[Change]] = {}
        for ch in getattr(d, name):
            groups.setdefault((ch.id, ch.component, ch.group, without_node(ch.message, ch.node)), []).append(ch)
        for (fid, component, _group, template), changes in groups.items():
            said = {ch.message for ch in changes}
            message = next(iter(said)) if len(said) == 1 else template
            nodes = [n for ch in changes for n in (ch.members if ch.group else [ch.node])]
            subject = component or _group or "-"
            rows.append([title, fid, printable(_fold(nodes)), printable(subject), printable(message)])
    if rows:
        out.append("")
        out.append(tabulate(rows, headers=["CHANGE", "ID", "NODES", "SUBJECT", "MESSAGE"], tablefmt="simple"))
    for name, title in (("nodes_added", "nodes only in the newer report"),
                        ("nodes_removed", "nodes only in the older report")):
        names = getattr(d, name)
        if names:
            out.append(f"{title}: {printable(_fold(names))}")
    return "\n".join(out)


def to_json(d: ReportDiff) -> bytes:
    """The diff as JSON, with the counts."""
    doc = msgspec.to_builtins(d)
    doc["counts"] = d.counts()
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"
