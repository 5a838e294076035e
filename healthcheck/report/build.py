"""Assemble a run's report from node results (and results about pairs, groups and jobs)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from healthcheck import __version__
from healthcheck.core import catalogue
from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.model import AnalysisRun, Finding, FindingGroup, GroupResult, NodeResult, Report
from healthcheck.core.nodes import fold
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.report.jsonio import parse_time


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(ts: _dt.datetime) -> str:
    return ts.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: _dt.datetime) -> str:
    """Sortable and unique: 20261122T130501Z-3f2a9c."""
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(3).hex()


NODE_PLACEHOLDER = "<node>"


def natural_key(name: str) -> tuple:
    """Sort key that orders gpu2 before gpu10 (digits compare as numbers); the name
    itself breaks ties (gpu01 and gpu1), so the order is total and stable."""
    parts = re.split(r"(\d+)", name)
    # re.split with one group alternates text, digits, text...: positions never mix types
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def sort_nodes(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)


def without_node(message: str, node: str) -> str:
    """`message` with the node's own name replaced by a placeholder, so identical findings
    whose messages name their node ("no report from srun for gpu017") fold together.
    Only whole names: "gpu1" inside "gpu10" or "mgpu1" is left alone."""
    if not node or node not in message:
        return message
    pattern = rf"(?<![A-Za-z0-9_.-]){re.escape(node)}(?![A-Za-z0-9_-])(?!\.[A-Za-z0-9])"
    return re.sub(pattern, NODE_PLACEHOLDER, message)


def group_findings(nodes: Iterable[NodeResult], min_status: Status = Status.WARN, *,
                   groups: Iterable[GroupResult] = ()) -> list[FindingGroup]:
    """Identical findings across nodes, folded: one entry per (status, id, component,
    message with the node's name taken out). A group's message is the finding's own where
    all its members say the same, else the one with the placeholder. Findings of
    run-level `groups` (pairs, jobs) fold the same way, listing the nodes they name."""

    members_of: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    messages: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str, str, str], int] = defaultdict(int)  # findings folded (a node may have two alike)

    def add(f: Finding, names: Iterable[str]) -> None:
        if f.status.rank >= min_status.rank:
            key = (f.status.value, f.id, f.component, without_node(f.message, f.node))
            members_of[key].extend(names)
            messages[key].add(f.message)
            counts[key] += 1

    for node in nodes:
        for f in node.findings:
            add(f, (f.node,))
    for group in groups:
        for f in group.findings:
            add(f, f.members or group.members)
    out: list[FindingGroup] = []
    for key, names in members_of.items():
        status, fid, component, template = key
        members = sort_nodes(dict.fromkeys(names))
        said = messages[key]
        out.append(
            {
                "status": status,
                "id": fid,
                "component": component,
                "message": next(iter(said)) if len(said) == 1 else template,
                "nodes": fold(members) if foldable(members) else ",".join(members),
                "count": counts[key],
            }
        )
    out.sort(key=lambda g: (-Status(g["status"]).rank, g["id"], g["component"], natural_key(g["nodes"])))
    return out


def foldable(names: list[str]) -> bool:
    # NodeSet parses brackets and commas; a hostile name must not be reinterpreted
    return all(n and all(c.isalnum() or c in "-_." for c in n) for n in names)


def run_finding(spec: FindingSpec, message: str, *, scope: str, value: object = None,
                evidence: str | None = None, status: Status = Status.ERROR, check: str = "hc.run") -> Finding:
    """A finding about the run rather than one node (check "hc.run" unless said), stamped as
    the engine would: ERROR unless said, about the run's `scope`."""

    return stamp(spec(status, message, value=value, evidence=evidence), check=check, subject=scope)


def action_finding(spec: FindingSpec, message: str, *, scope: str, value: object = None,
                   evidence: str | None = None, status: Status = Status.ERROR) -> Finding:
    """A run finding about acting on the scheduler (check "hc.actions"): drains, resumes,
    the guard, the audit log."""
    return run_finding(spec, message, scope=scope, value=value, evidence=evidence, status=status,
                       check="hc.actions")


def with_run_finding(report: Report, finding: Finding, *, raise_status: bool = True) -> Report:
    """The report with one more run finding, listed in the table; with `raise_status`,
    the run's status becomes at least the finding's (hc.E007 and hc.E008 are ERROR: the
    run is not a clean result). Findings whose nodes carry their own status (a launcher
    that failed on some nodes) leave it as the nodes made it."""
    status = worst((report.status, finding.status)) if raise_status else report.status
    return msgspec.structs.replace(
        report, run_findings=[*report.run_findings, finding],
        findings_summary=[*report.findings_summary, _run_row(finding)],
        status=status,
    )


def nothing_checked(nodes: list[NodeResult], tier: str) -> Finding | None:
    """hc.E007 when nodes were named but no check produced a verdict on any of them.

    The rule: a run whose every node is SKIP (no check on any node ended PASS, WARN,
    FAIL or ERROR; an unreachable node is ERROR, so it counts as looked at) did not check
    anything, and must not read as healthy. A run with no node at all is refused before
    it starts (a usage error), so it never gets here.
    """
    if not nodes or any(n.status is not Status.SKIP for n in nodes):
        return None
    checks = [(n.node, c) for n in nodes for c in n.checks]
    scope = _scope(n.node for n in nodes)
    if not checks:
        message = f"nothing was checked: no check of tier {tier} was selected (see --checks and --tier)"
    else:
        node, first = checks[0]
        why = f"; {first.name} on {node}: {first.reason}" if first.reason else ""
        message = f"nothing was checked: all {len(checks)} selected checks were skipped{why}"
    return run_finding(catalogue.NOTHING_CHECKED, message, scope=scope, value=len(checks))


def _scope(names: Iterable[str]) -> str:
    members = sort_nodes(names)
    return (fold(members) if foldable(members) else ",".join(members)) or "run"


def make_report(
    *,
    command: str,
    tier: str,
    config_digest: str,
    config_path: str,
    started: _dt.datetime,
    finished: _dt.datetime,
    nodes: list[NodeResult],
    require_checks: bool = True,
    groups: Iterable[GroupResult] = (),
) -> Report:
    """The report of a run; with `require_checks`, a run that checked nothing is ERROR (hc.E007).

    `groups` (pair, group and job results) count towards the run's status like nodes do."""
    summary: dict[str, int] = {s.value: 0 for s in Status}
    for node in nodes:
        summary[node.status.value] += 1
    report = Report(
        run_id=new_run_id(started),
        hc_version=__version__,
        command=command,
        tier=tier,
        config_digest=config_digest,
        config_path=config_path,
        started_at=iso(started),
        finished_at=iso(finished),
        duration_s=round((finished - started).total_seconds(), 3),
        host=os.environ.get("HC_HOST") or os.uname().nodename,
        status=worst((n.status for n in nodes), default=Status.SKIP),
        nodes=sorted(nodes, key=lambda n: natural_key(n.node)),
        summary=summary,
        findings_summary=group_findings(nodes),
    )
    report = with_groups(report, groups)
    empty = nothing_checked(report.nodes, tier) if require_checks else None
    return with_run_finding(report, empty) if empty is not None else report


def with_nodes(report: Report, nodes: list[NodeResult], analyses: Iterable[AnalysisRun] = ()) -> Report:
    """The report with its nodes' results replaced by `nodes` (the same nodes, judged again:
    findings added by analyses run after the checks, an escalation) and those analyses listed:
    status, counts and summary made from them as make_report makes them (never better than it was)."""
    summary: dict[str, int] = {s.value: 0 for s in Status}
    for node in nodes:
        summary[node.status.value] += 1
    rows = [*group_findings(nodes, groups=report.groups), *(_run_row(f) for f in report.run_findings)]
    return msgspec.structs.replace(report, nodes=sorted(nodes, key=lambda n: natural_key(n.node)), summary=summary,
                                   findings_summary=rows, analyses=[*report.analyses, *analyses],
                                   status=worst((report.status, *(n.status for n in nodes))))


def with_groups(report: Report, groups: Iterable[GroupResult]) -> Report:
    """The report with more run-level results (pairs, groups, jobs): listed, their findings
    folded into the summary, and the run's status at least as bad as theirs."""
    groups = list(groups)
    if not groups:
        return report
    every = [*report.groups, *groups]
    # the summary again from every node and group, then the run findings' rows after it
    # (as with_run_finding lists them): a finding a node and a pair share stays one row
    summary = [*group_findings(report.nodes, groups=every), *(_run_row(f) for f in report.run_findings)]
    return msgspec.structs.replace(report, groups=every, findings_summary=summary,
                                   status=worst((report.status, *(g.status for g in groups))))


def _run_row(finding: Finding) -> dict[str, Any]:
    """A run finding's row of the findings summary: its scope stands for the nodes."""
    return {"status": finding.status.value, "id": finding.id, "component": finding.component,
            "message": finding.message, "nodes": finding.subject, "count": 1}


def job_report(group: GroupResult, *, command: str, started_at: str, hc_version: str = __version__,
               host: str = "") -> Report:
    """A report whose one result is about a job (`hc diagnose`'s verdict as a GroupResult of
    kind "job"): no node was checked, so the run's status is the job's and its findings fold
    into the summary as a pair's do. The run ID comes from the job and `started_at` (when it
    was looked at): the same diagnosis read twice is the same run, so the tickets it gives
    have the same keys."""

    when = parse_time(started_at) or utc_now()
    digest = hashlib.sha256(f"{group.name}\x1f{started_at}".encode("utf-8", "surrogateescape")).hexdigest()[:6]
    report = Report(run_id=when.astimezone(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + digest,
                    hc_version=hc_version, command=command, tier="job", config_digest="", config_path="",
                    started_at=iso(when), finished_at=iso(when), duration_s=0.0,
                    host=host or os.environ.get("HC_HOST") or os.uname().nodename, status=Status.SKIP,
                    nodes=[], summary={s.value: 0 for s in Status}, findings_summary=[])
    return with_groups(report, [group])
