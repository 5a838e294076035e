"""What acting in Slurm did (ActionOutcome), and the report with it (with_outcome).

Apart from actions/apply.py, which acts, so a hook run that takes no action (a node that
passes) imports neither the drain policy nor scontrol's client: orchestrate/hooks.py
loads those only when it acts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from healthcheck.core.model import Action, ActionRecord, Finding, Report
from healthcheck.core.nodes import parse_hostlist
from healthcheck.report.build import group_findings

if TYPE_CHECKING:
    from healthcheck.actions.policy import Plan


class ActionOutcome(msgspec.Struct):
    records: list[ActionRecord] = msgspec.field(default_factory=list)
    run_findings: list[Finding] = msgspec.field(default_factory=list)
    plan: Plan | None = None
    guarded: bool = False
    drained: list[str] = msgspec.field(default_factory=list)  # drains that stand (not rolled back)
    messages: list[str] = msgspec.field(default_factory=list)  # what --dry-run prints, one per action


def with_outcome(report: Report, outcome: ActionOutcome) -> Report:
    """The report with the actions taken, the run's findings, and each node's action."""
    plan = outcome.plan
    nodes = []
    for n in report.nodes:
        action: Action | None = None
        if plan is not None:
            reason = next((r for r, ns in plan.drain.items() if n.node in ns), None)
            rec = next((r for r in outcome.records if n.node in _members(r.nodes)), None)
            if reason is not None and rec is not None:
                kind = "rollback" if any(r.action == "rollback" and n.node in _members(r.nodes) and r.ok
                                         for r in outcome.records) else "drain"
                action = Action(kind=kind, reason=reason, dry_run=rec.dry_run, ok=rec.ok, message=rec.message)
            elif n.node in plan.resume and rec is not None:
                action = Action(kind="resume", dry_run=rec.dry_run, ok=rec.ok, message=rec.message)
            elif plan.guard is not None and n.node in plan.guard.would_drain:
                action = Action(kind="guarded", message=plan.guard.message)
            elif n.node in plan.keep:
                action = Action(kind="keep", message=plan.keep[n.node])
        nodes.append(msgspec.structs.replace(n, action=action) if action is not None else n)
    run_findings = list(report.run_findings) + outcome.run_findings
    summary = group_findings(nodes, groups=report.groups) + _groups(run_findings)
    return msgspec.structs.replace(report, nodes=nodes, run_findings=run_findings,
                                   actions=list(report.actions) + outcome.records, findings_summary=summary)


def _members(hostlist: str) -> set[str]:
    return set(parse_hostlist(hostlist).names())


def _groups(findings: list[Finding]) -> list[dict]:
    return [{"status": f.status.value, "id": f.id, "component": f.component, "message": f.message,
             "nodes": f.subject, "count": 1} for f in findings]
