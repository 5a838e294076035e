"""Decide what to do in Slurm from a report: which nodes to drain or resume, and whether
the blast-radius guard forbids it. Pure: no I/O, so every rule is testable.

Etiquette (LBNL NHC's): reasons start with "hc:" followed by the finding IDs; a node
drained by anyone else is never touched; an hc-drained node is resumed only when the
checks or analyses named in its reason ran again over it and passed (who emits an ID is
the catalogue's to say); only FAIL drains.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from healthcheck.actions.reasons import drain_reason, reason_ids
from healthcheck.actions.slurm import SlurmNode
from healthcheck.core.catalogue import emitters
from healthcheck.core.config.schema import DrainPolicy
from healthcheck.core.model import AnalysisRun, NodeResult
from healthcheck.core.nodes import Hostlist, HostlistError, parse_hostlist
from healthcheck.core.status import Status, worst


@dataclass
class Guard:
    """Why the blast-radius guard refused to drain, and what it would have drained."""

    message: str
    would_drain: list[str]


@dataclass
class Plan:
    drain: dict[str, list[str]] = field(default_factory=dict)  # reason -> nodes
    resume: list[str] = field(default_factory=list)
    keep: dict[str, str] = field(default_factory=dict)  # node -> why it is left alone (its action's text)
    # node -> why hc may not drain it although it FAILed (its state in Slurm), said as a run finding
    not_drained: dict[str, str] = field(default_factory=dict)
    # node -> why a node hc drained is not resumed (resume was asked), said as a run finding
    stays_drained: dict[str, str] = field(default_factory=dict)
    guard: Guard | None = None

    @property
    def to_drain(self) -> list[str]:
        return sorted(n for nodes in self.drain.values() for n in nodes)


def checks_behind(ids: Iterable[str]) -> dict[str, set[str]]:
    """finding ID -> the checks and analyses that can emit it (from the catalogue)."""

    return {i: set(names) for i, names in emitters(ids).items()}


def analysed(result: NodeResult, runs: Iterable[tuple[AnalysisRun, Hostlist]]) -> dict[str, Status]:
    """analysis name -> its verdict on this node, for the analyses that judged it in this run.

    An analysis's findings are on the node (check = its name): none is PASS.
    """
    out: dict[str, Status] = {}
    for run, judged in runs:
        if result.node in judged:
            out[run.name] = worst((f.status for f in result.findings if f.check == run.name), default=Status.PASS)
    return out


def _judging(analyses: Iterable[AnalysisRun]) -> list[tuple[AnalysisRun, Hostlist]]:
    """The analyses that ran and judged nodes, each with its nodes parsed once for the whole run."""

    out = []
    for run in analyses:
        if run.nodes and run.status not in (Status.SKIP, Status.ERROR):
            try:
                out.append((run, parse_hostlist(run.nodes)))
            except HostlistError:
                continue  # judged nodes it cannot name resume nothing
    return out


def can_resume(result: NodeResult, reason: str, *, reboot_only: Iterable[str] = (),
               rebooted_since_drain: bool | None = None, repair_only: Iterable[str] = (),
               repaired_since_drain: bool | None = None,
               analyses: Mapping[str, Status] | None = None) -> tuple[bool, str]:
    """An hc-drained node may be resumed when the checks or analyses named in its reason
    ran over it now and passed, whatever any other check says (an unrelated ERROR, such as
    a loopback test that cannot run there, never keeps a repaired node out).

    analyses: analysis name -> its verdict on this node, for those that judged it (`analysed`).
    Returns (resume?, why not: every named finding ID that did not pass, and what its
    check did instead).
    """
    ids, truncated = reason_ids(reason)
    if not ids:
        return False, "the reason names no finding ID"
    if result.status is Status.FAIL:
        return False, "it FAILs now: " + ", ".join(sorted({f.id for f in result.findings
                                                            if f.status is Status.FAIL}) or ["see its findings"])
    needs_reboot = sorted(ids & set(reboot_only))
    if needs_reboot and not rebooted_since_drain:
        return False, f"{', '.join(needs_reboot)} clears only with a reboot (or an operator's resume)"
    needs_repair = sorted(ids & set(repair_only))
    if needs_repair and not repaired_since_drain:
        return False, (f"{', '.join(needs_repair)} clears only with a repair on record since the drain "
                       "(hc node NODE --repaired TEXT) or an operator's resume")
    if result.error is not None and not result.checks:
        return False, f"it was not checked in this run ({result.error})"
    if any(i.startswith("hc.") for i in ids) or truncated:
        # an ERROR escalation, or a reason cut short: only a clean run of the tier tells
        unclean = _not_clean(result)
        if unclean:
            return False, unclean
    ran = {c.name: c.status for c in result.checks}
    ran.update(analyses or {})
    missing = [why for fid, emitters in sorted(checks_behind(ids).items())
               if not fid.startswith("hc.") and (why := _not_passed(fid, emitters, ran))]
    if missing:
        return False, "; ".join(missing)
    return True, "the checks named in the reason pass again"


def _not_clean(result: NodeResult) -> str:
    """Why this run is not a clean run of the tier ('' when it is): what the reason of an
    ERROR escalation (or one cut short) is resumed on."""
    errored = sorted(c.name for c in result.checks if c.status is Status.ERROR)
    if errored:
        shown = ", ".join(errored[:5]) + (f" and {len(errored) - 5} more" if len(errored) > 5 else "")
        return f"{shown} could not run (ERROR), and the reason asks for a clean run"
    if not any(c.status in (Status.PASS, Status.WARN) for c in result.checks):
        return "no check ran and passed, and the reason asks for a clean run"
    return ""


def _not_passed(fid: str, emitters: set[str], ran: Mapping[str, Status]) -> str:
    """Why finding `fid` is not cleared in this run ('' when one of its emitters passed):
    what each of the checks or analyses that emit it did instead."""
    if not emitters:
        return f"no check or analysis emits {fid} any more"
    if any(ran.get(e) in (Status.PASS, Status.WARN) for e in emitters):
        return ""

    def did(status: Status) -> list[str]:
        return sorted(e for e in emitters if ran.get(e) is status)

    if failed := did(Status.FAIL):
        return f"{fid}: {', '.join(failed)} FAILed again"
    if errored := did(Status.ERROR):
        return f"{fid}: {', '.join(errored)} could not run (ERROR)"
    if skipped := did(Status.SKIP):
        return f"{fid}: {', '.join(skipped)} was skipped"
    return f"{fid}: {', '.join(sorted(emitters))} did not run and pass in this run"


@dataclass
class _Ask:
    """What decide() was asked, shared by every node's decision."""

    policy: DrainPolicy
    resume: bool
    extra_drains: Mapping[str, str]
    boot_times: Mapping[str, float]
    judging: list[tuple[AnalysisRun, Hostlist]]
    repair_times: Mapping[str, float] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)  # nodes hc drains now that it had not drained


def decide(
    results: Iterable[NodeResult],
    states: Mapping[str, SlurmNode],
    policy: DrainPolicy,
    *,
    cluster_size: int,
    resume: bool,
    extra_drains: Mapping[str, str] | None = None,
    boot_times: Mapping[str, float] | None = None,
    analyses: Iterable[AnalysisRun] = (),
    repair_times: Mapping[str, float] | None = None,
) -> Plan:
    """The plan for these results given the nodes' current Slurm states.

    extra_drains: node -> reason for drains the caller decided on other grounds
    (repeated ERROR escalated by policy).
    boot_times: node -> epoch of its last boot, where known (for resume_after_reboot_only).
    repair_times: node -> epoch of its last repair on record, where known (for resume_after_repair_only).
    analyses: the analyses that ran over the results (Report.analyses), for resuming nodes
    drained for their findings.

    Every node hc would act on and does not is in the plan with why: `not_drained` (a
    FAIL hc may not drain), `stays_drained` (a node hc drained, not resumed).
    """
    plan = Plan()
    ask = _Ask(policy, resume, extra_drains or {}, boot_times or {}, _judging(analyses), repair_times or {})
    results = list(results)
    for result in results:
        _plan_node(plan, result, states.get(result.node), ask)
    if not policy.enabled and plan.drain:
        plan.guard = Guard("draining is disabled by config (slurm.drain.enabled: false)", plan.to_drain)
        plan.drain = {}
        return plan
    plan.guard = guard(ask.new, len(results), states, policy, cluster_size)
    if plan.guard is not None:
        plan.drain = {}
    return plan


def _wanted_reason(result: NodeResult, ask: _Ask) -> str | None:
    """The reason hc would drain this node for, or None (only FAIL drains, or an escalation)."""
    fails = sorted({f.id for f in result.findings if f.status is Status.FAIL})
    if fails and result.status is Status.FAIL:
        return drain_reason(fails, ask.policy.reason_max_len)
    return ask.extra_drains.get(result.node)


def _plan_node(plan: Plan, result: NodeResult, state: SlurmNode | None, ask: _Ask) -> None:
    """One node's part of the plan."""
    node = result.node
    reason = _wanted_reason(result, ask)
    if state is None:
        plan.keep[node] = "not known to Slurm"
        if reason is not None:
            plan.not_drained[node] = ("is not among the nodes sinfo lists (no node Slurm knows by that name: "
                                      "name it as Slurm does, or set HC_NODE_NAME)")
        return
    if state.hands_off:
        plan.keep[node] = f"{state.hands_off}{f' ({state.reason})' if state.reason else ''}: not touched"
        if reason is not None:
            plan.not_drained[node] = f"is {_hands_off_words(state)}: hc does not touch such a node"
        elif ask.resume and state.drained_by_hc:
            plan.stays_drained[node] = f"it is {_hands_off_words(state)}: hc does not touch such a node"
        return
    someone_else = f"drained by someone else ({state.reason or 'no reason'}): not touched"
    if reason is not None:
        _plan_drain(plan, node, state, reason, ask, someone_else)
    elif ask.resume and state.drained_by_hc:
        _plan_resume(plan, result, state, ask)
    elif state.drained and not state.drained_by_hc:
        plan.keep[node] = someone_else


def _plan_drain(plan: Plan, node: str, state: SlurmNode, reason: str, ask: _Ask, someone_else: str) -> None:
    if state.drained and not state.drained_by_hc:
        plan.keep[node] = someone_else
        plan.not_drained[node] = (f"is drained by someone else ({state.reason or 'no reason'}): hc does not replace "
                                  "another's reason")
        return
    if state.drained_by_hc and state.reason == reason:
        again = ", ".join(sorted(reason_ids(reason)[0])) or reason
        plan.keep[node] = f"already drained by hc for the same reason: {again} found again"
        if ask.resume:
            plan.stays_drained[node] = f"{again} found again"
        return
    plan.drain.setdefault(reason, []).append(node)
    if not state.drained_by_hc:
        ask.new.append(node)


def _plan_resume(plan: Plan, result: NodeResult, state: SlurmNode, ask: _Ask) -> None:
    node = result.node
    booted = ask.boot_times.get(node)
    drained_at = _epoch(state.reason_time)
    rebooted = booted is not None and drained_at is not None and booted > drained_at
    repaired_at = ask.repair_times.get(node)
    repaired = repaired_at is not None and drained_at is not None and repaired_at > drained_at
    ok, why = can_resume(result, state.reason, reboot_only=ask.policy.resume_after_reboot_only,
                         rebooted_since_drain=rebooted, repair_only=ask.policy.resume_after_repair_only,
                         repaired_since_drain=repaired, analyses=analysed(result, ask.judging))
    if ok:
        plan.resume.append(node)
    else:
        plan.keep[node] = f"stays drained: {why}"
        plan.stays_drained[node] = why


def _hands_off_words(state: SlurmNode) -> str:
    """How a node hc must not touch stands in Slurm, in words: "not responding (idle*)", "down (admin: psu swap)"."""
    shown = f"{state.state}*" if not state.responding else state.state
    what = f"not responding ({shown})" if not state.responding else f"{shown} in Slurm"
    return what + (f", reason {state.reason!r}" if state.reason else "")


def _epoch(slurm_time: str) -> float | None:
    """Slurm's "2026-11-22T07:55:31" (the controller's local time) -> epoch seconds."""

    try:
        return dt.datetime.fromisoformat(slurm_time).timestamp()
    except ValueError:
        return None


def guard(new: list[str], checked: int, states: Mapping[str, SlurmNode], policy: DrainPolicy,
          cluster_size: int) -> Guard | None:
    """None if draining `new` is within the limits, else why not."""
    if not new:
        return None
    n = len(new)
    if n > policy.max_drain_nodes:
        return Guard(f"would drain {n} nodes, more than max_drain_nodes {policy.max_drain_nodes}", sorted(new))
    if checked >= policy.guard_min_nodes and n > math.floor(policy.max_drain_fraction * checked):
        return Guard(
            f"would drain {n} of the {checked} nodes checked ({n / checked:.0%}), more than "
            f"max_drain_fraction {policy.max_drain_fraction:g}", sorted(new))
    already = sorted(s.name for s in states.values() if s.drained_by_hc and s.name not in new)
    allowed = math.floor(policy.max_drain_fraction * max(cluster_size, 1))
    if len(already) + n > allowed:
        return Guard(
            f"would make {len(already) + n} of {cluster_size} nodes drained by hc "
            f"({len(already)} already), more than max_drain_fraction {policy.max_drain_fraction:g} allows "
            f"({allowed})", sorted(new))
    return None


def rollback_needed(node: str, states: Mapping[str, SlurmNode], policy: DrainPolicy, cluster_size: int) -> bool:
    """After draining `node`: did concurrent runs on other nodes drain past the limit too?

    Every hc-drained node is ordered by when its reason was set (then by name); the
    nodes past the allowed count undo their own drain. Each node can decide this alone
    from sinfo, so concurrent prologues cannot together empty a partition.
    """
    drained = sorted((s.reason_time, s.name) for s in states.values() if s.drained_by_hc)
    allowed = math.floor(policy.max_drain_fraction * max(cluster_size, 1))
    order = [name for _, name in drained]
    return node in order and order.index(node) >= allowed
