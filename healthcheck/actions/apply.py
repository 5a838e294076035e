"""Carry out a report's consequences in Slurm: read node states, plan (policy.py), guard,
drain/resume with scontrol, roll back drains that concurrent runs pushed past the
guard, and write every action to the audit log and the report."""

from __future__ import annotations

from collections.abc import Mapping

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.outcome import ActionOutcome, with_outcome  # noqa: F401 -- with_outcome: also apply's name
from healthcheck.actions.policy import Plan, decide, rollback_needed
from healthcheck.actions.slurm import SlurmClient, SlurmNode, SlurmResult, shell_line
from healthcheck.core import catalogue
from healthcheck.core.config.schema import SlurmSettings
from healthcheck.core.model import ActionRecord, Report
from healthcheck.core.nodes import fold
from healthcheck.core.status import Status
from healthcheck.report.build import action_finding, iso, natural_key, sort_nodes, utc_now


def act(
    report: Report,
    *,
    settings: SlurmSettings,
    client: SlurmClient,
    audit: AuditLog,
    resume: bool,
    dry_run: bool = False,
    extra_drains: Mapping[str, str] | None = None,
    boot_times: Mapping[str, float] | None = None,
    repair_times: Mapping[str, float] | None = None,
) -> ActionOutcome:
    out = ActionOutcome()
    scope = fold(n.node for n in report.nodes) or "run"
    states, error = client.nodes()
    if error is not None:
        # nothing is decided on no answer; the nodes hc would have drained are named
        wanted = [n.node for n in report.nodes if n.status is Status.FAIL or n.node in (extra_drains or {})]
        text = f"cannot read node states from Slurm: {error}"
        if wanted:
            text += f"; not drained: {fold(wanted)}"
            out.messages.append(f"hc: not drained: {fold(wanted)}: cannot read node states from Slurm ({error})")
        out.run_findings.append(action_finding(catalogue.SLURM_FAILED, text, scope=scope, evidence=error))
        return out
    plan = decide(report.nodes, states, settings.drain, cluster_size=len(states), resume=resume,
                  extra_drains=extra_drains, boot_times=boot_times, analyses=report.analyses,
                  repair_times=repair_times)
    out.plan = plan
    _say_what_was_not_done(out, plan, states)
    if plan.guard is not None:
        out.guarded = True
        out.run_findings.append(action_finding(
            catalogue.GUARDED, f"{plan.guard.message}; would have drained {fold(plan.guard.would_drain)}",
            scope=scope, value=plan.guard.would_drain))
    for reason, nodes in sorted(plan.drain.items()):
        result = client.drain(fold(nodes), reason, dry_run=dry_run)
        out.records.append(_record("drain", nodes, result, reason, dry_run, audit, report.run_id, out))
        if result.ok:
            out.drained.extend(nodes)
        else:
            out.run_findings.append(action_finding(catalogue.SLURM_FAILED,
                                                f"drain of {fold(nodes)} failed: {result.message}",
                                                scope=scope, evidence=result.message))
    if out.drained and not dry_run:
        _roll_back_past_the_guard(out, settings, client, audit, report.run_id, scope)
    if plan.resume:
        result = client.resume(fold(plan.resume), dry_run=dry_run)
        out.records.append(_record("resume", plan.resume, result, None, dry_run, audit, report.run_id, out))
        if not result.ok:
            out.run_findings.append(action_finding(catalogue.SLURM_FAILED,
                                                f"resume of {fold(plan.resume)} failed: {result.message}",
                                                scope=scope, evidence=result.message))
    return out


def _say_what_was_not_done(out: ActionOutcome, plan: Plan, states: Mapping[str, SlurmNode]) -> None:
    """Every action hc would take and does not is a run finding and a line of output:
    a FAIL it may not drain (act.E007), a node it drained that stays drained (act.E008).
    Nodes with the same why share one finding."""
    for nodes, why in _by_why(plan.not_drained):
        text = f"not drained: {fold(nodes)} {why}"
        out.run_findings.append(action_finding(catalogue.NOT_DRAINED, text, scope=fold(nodes), value=nodes))
        out.messages.append(f"hc: {text}")
    for nodes, why in _by_why(plan.stays_drained):
        reasons = sorted({states[n].reason for n in nodes if n in states})
        text = f"{fold(nodes)} stays drained ({'; '.join(reasons)}): {why}"
        out.run_findings.append(action_finding(catalogue.STAYS_DRAINED, text, scope=fold(nodes), value=nodes,
                                            status=Status.WARN))
        out.messages.append(f"hc: {text}")


def _by_why(whys: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """node -> why, as (nodes, why) with the nodes that share a why together."""

    grouped: dict[str, list[str]] = {}
    for node, why in whys.items():
        grouped.setdefault(why, []).append(node)
    return sorted(((sort_nodes(nodes), why) for why, nodes in grouped.items()),
                  key=lambda nw: natural_key(nw[0][0]))


# Concurrent runs on other nodes (every prologue of a large job failing at once) may
# drain within the same second: look again after this long, so a run that looked too
# early still sees them all and the same order (reason time, then name) decides.
ROLLBACK_RECHECK_S = 1.0


def _roll_back_past_the_guard(out: ActionOutcome, settings: SlurmSettings, client: SlurmClient, audit: AuditLog,
                              run_id: str, scope: str) -> None:
    for attempt in range(2):
        if attempt:
            client.sleep(ROLLBACK_RECHECK_S)
        states, error = client.nodes()
        if error is not None:
            return  # the drains stand; the next run sees them
        for node in list(out.drained):
            if not rollback_needed(node, states, settings.drain, len(states)):
                continue
            result = client.resume(node)
            out.records.append(_record("rollback", [node], result, None, False, audit, run_id, out))
            if result.ok:
                out.drained.remove(node)
                out.guarded = True
                limit = settings.drain.max_drain_fraction
                out.run_findings.append(action_finding(
                    catalogue.GUARDED,
                    f"concurrent hc runs drained more nodes than max_drain_fraction {limit:g} allows; "
                    f"undid the drain of {node}, which came after the allowed ones", scope=scope, value=[node]))
        if not out.drained:
            return


def _record(action: str, nodes: list[str], result: SlurmResult, reason: str | None, dry_run: bool,
            audit: AuditLog, run_id: str, out: ActionOutcome) -> ActionRecord:
    record = ActionRecord(
        time=iso(utc_now()), nodes=fold(nodes), action=action, ok=result.ok, command=shell_line(result.argv),
        reason=reason, dry_run=dry_run, message=result.message or None, attempts=result.attempts,
    )
    out.messages.append(("would run: " if dry_run else "ran: ") + record.command
                        + ("" if result.ok or dry_run else f"  -> failed: {result.message}"))
    for node in nodes:
        entry = {"time": record.time, "node": node, "action": action, "reason": reason, "report_id": run_id,
                 "ok": result.ok, "dry_run": dry_run, "command": record.command, "message": result.message}
        try:
            audit.append(entry)
        except OSError as exc:
            out.messages.append(f"audit log {audit.path} not written: {exc.strerror or exc}")
    return record
