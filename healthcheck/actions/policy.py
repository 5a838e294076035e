"""Decide what to do in Slurm from a report: which nodes to drain or resume, and whether
the blast-radius guard forbids it. Pure: no I/O, so every rule is testable.

Etiquette (LBNL NHC's): reasons start with "hc:" followed by the finding IDs; a node
drained by anyone else is never touched; an hc-drained node is resumed only when the
checks or analyses named in its reason ran again over it and passed (who emits an ID is
the catalogue's to say); only FAIL drains.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from healthcheck.actions.slurm import SlurmNode
from healthcheck.core.config.schema import DrainPolicy
from healthcheck.core.model import AnalysisRun, NodeResult
from healthcheck.core.nodes import Hostlist
from healthcheck.core.status import Status, worst

REASON_PREFIX = "hc:"
_ID = re.compile(r"\b[a-z][a-z0-9]*\.[EW]\d{3}\b")
# Exactly what drain_reason() writes: "hc: ", an optional "ERROR xN ", finding IDs
# separated by commas, an optional " +N" for the IDs that did not fit. An admin's
# "hc:maint - jdoe replacing DIMM" starts like it and is not hc's.
_ID_TEXT = r"[a-z][a-z0-9]*\.[EW]\d{3}"
_HC_REASON = re.compile(rf"hc: (?:ERROR x\d+ )?(?:{_ID_TEXT}(?:,{_ID_TEXT})*(?: \+\d+)?|\+\d+)")


def is_hc_reason(reason: str) -> bool:
    """Whether hc wrote this drain reason (and so may replace or resume it)."""
    return bool(_HC_REASON.fullmatch(reason))


def drain_reason(ids: Iterable[str], max_len: int, prefix: str = "") -> str:
    """"hc: ib.E002,net.E001" — as many IDs as fit in max_len, then "+N"."""
    ids = sorted(set(ids))
    head = f"{REASON_PREFIX} {prefix}"
    for n in range(len(ids), 0, -1):
        more = len(ids) - n
        text = head + ",".join(ids[:n]) + (f" +{more}" if more else "")
        if len(text) <= max_len:
            return text
    return (head + f"+{len(ids)}")[:max_len]


def reason_ids(reason: str) -> tuple[set[str], bool]:
    """Finding IDs named in an hc reason, and whether the list was cut short ("+N")."""
    return set(_ID.findall(reason)), bool(re.search(r"\+\d+\s*$", reason))


@dataclass
class Guard:
    """Why the blast-radius guard refused to drain, and what it would have drained."""

    message: str
    would_drain: list[str]


@dataclass
class Plan:
    drain: dict[str, list[str]] = field(default_factory=dict)  # reason -> nodes
    resume: list[str] = field(default_factory=list)
    keep: dict[str, str] = field(default_factory=dict)  # node -> why it is left alone
    guard: Guard | None = None

    @property
    def to_drain(self) -> list[str]:
        return sorted(n for nodes in self.drain.values() for n in nodes)


def checks_behind(ids: Iterable[str]) -> dict[str, set[str]]:
    """finding ID -> the checks and analyses that can emit it (from the catalogue)."""
    from healthcheck.core.catalogue import emitters

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
    from healthcheck.core.nodes import HostlistError, parse_hostlist

    out = []
    for run in analyses:
        if run.nodes and run.status not in (Status.SKIP, Status.ERROR):
            try:
                out.append((run, parse_hostlist(run.nodes)))
            except HostlistError:
                continue  # judged nodes it cannot name resume nothing
    return out


def can_resume(result: NodeResult, reason: str, *, reboot_only: Iterable[str] = (),
               rebooted_since_drain: bool | None = None,
               analyses: Mapping[str, Status] | None = None) -> tuple[bool, str]:
    """An hc-drained node may be resumed when the checks or analyses named in its reason passed now.

    analyses: analysis name -> its verdict on this node, for those that judged it (`analysed`).
    """
    if result.status not in (Status.PASS, Status.WARN):
        return False, f"status is {result.status.value}"
    ids, truncated = reason_ids(reason)
    if not ids:
        return False, "the reason names no finding ID"
    needs_reboot = sorted(ids & set(reboot_only))
    if needs_reboot and not rebooted_since_drain:
        return False, f"{', '.join(needs_reboot)} clears only with a reboot (or an operator's resume)"
    ran = {c.name: c.status for c in result.checks}
    if any(i.startswith("hc.") for i in ids) or truncated:
        # an ERROR escalation, or a reason cut short: need a clean run of the tier
        if any(s is Status.ERROR for s in ran.values()):
            return False, "a check could not run"
    ran.update(analyses or {})
    for fid, emitters in checks_behind(ids).items():
        if fid.startswith("hc."):
            continue
        if not emitters:
            return False, f"no check or analysis emits {fid} any more"
        passed = [c for c in emitters if ran.get(c) in (Status.PASS, Status.WARN)]
        if not passed:
            missing = ", ".join(sorted(emitters))
            return False, f"{fid}: {missing} did not run and pass in this run"
    return True, "the checks named in the reason pass again"


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
) -> Plan:
    """The plan for these results given the nodes' current Slurm states.

    extra_drains: node -> reason for drains the caller decided on other grounds
    (repeated ERROR escalated by policy).
    boot_times: node -> epoch of its last boot, where known (for resume_after_reboot_only).
    analyses: the analyses that ran over the results (Report.analyses), for resuming nodes
    drained for their findings.
    """
    plan = Plan()
    judging = _judging(analyses)
    results = list(results)
    new: list[str] = []
    for result in results:
        node = result.node
        state = states.get(node)
        if state is None:
            plan.keep[node] = "not known to Slurm"
            continue
        if state.hands_off:
            plan.keep[node] = f"{state.hands_off}{f' ({state.reason})' if state.reason else ''}: not touched"
            continue
        fails = sorted({f.id for f in result.findings if f.status is Status.FAIL})
        reason = None
        if fails and result.status is Status.FAIL:
            reason = drain_reason(fails, policy.reason_max_len)
        elif extra_drains and node in extra_drains:
            reason = extra_drains[node]
        if reason is not None:
            if state.drained and not state.drained_by_hc:
                plan.keep[node] = f"drained by someone else ({state.reason or 'no reason'}): not touched"
                continue
            if state.drained_by_hc and state.reason == reason:
                plan.keep[node] = "already drained by hc for the same reason"
                continue
            plan.drain.setdefault(reason, []).append(node)
            if not state.drained_by_hc:
                new.append(node)
            continue
        if resume and state.drained_by_hc:
            booted = (boot_times or {}).get(node)
            drained_at = _epoch(state.reason_time)
            rebooted = booted is not None and drained_at is not None and booted > drained_at
            ok, why = can_resume(result, state.reason, reboot_only=policy.resume_after_reboot_only,
                                 rebooted_since_drain=rebooted, analyses=analysed(result, judging))
            if ok:
                plan.resume.append(node)
            else:
                plan.keep[node] = f"stays drained: {why}"
        elif state.drained and not state.drained_by_hc:
            plan.keep[node] = f"drained by someone else ({state.reason or 'no reason'}): not touched"
    if not policy.enabled and plan.drain:
        plan.guard = Guard("draining is disabled by config (slurm.drain.enabled: false)", plan.to_drain)
        plan.drain = {}
        return plan
    plan.guard = guard(new, len(results), states, policy, cluster_size)
    if plan.guard is not None:
        plan.drain = {}
    return plan


def _epoch(slurm_time: str) -> float | None:
    """Slurm's "2026-11-22T07:55:31" (the controller's local time) -> epoch seconds."""
    import datetime as dt

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
