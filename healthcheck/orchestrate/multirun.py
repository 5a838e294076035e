"""A run over many nodes (`hc node NODES`, `hc sweep`): check them over SSH or through
Slurm, add the findings no single node can give (the registered analyses of scope
"fleet": drift, outliers, flaps), act in Slurm
if asked (the same policy and guard as the hooks), and record the run in the history."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from healthcheck.actions.apply import act as act_in_slurm
from healthcheck.actions.audit import AuditLog
from healthcheck.actions.outcome import with_outcome
from healthcheck.actions.slurm import SlurmClient
from healthcheck.core import catalogue
from healthcheck.core.analysis import analyse_fleet
from healthcheck.core.config import Config
from healthcheck.core.errors import HcError, UsageError
from healthcheck.core.model import Finding, NodeResult, Report
from healthcheck.core.nodes import fold
from healthcheck.core.status import Status
from healthcheck.orchestrate import remote
from healthcheck.orchestrate.allocations import before_run
from healthcheck.orchestrate.busy import guard_sweep, skipped_result
from healthcheck.orchestrate.escalate import escalate
from healthcheck.orchestrate.over_time import judge_over_time
from healthcheck.orchestrate.pairsweep.sweep import judge_pairs, run_pairs
from healthcheck.orchestrate.srun import check_over_srun
from healthcheck.report import open_history
from healthcheck.report.build import make_report, run_finding, sort_nodes, utc_now, with_groups, with_run_finding

if TYPE_CHECKING:
    from healthcheck.orchestrate.busy import JobWatch
    from healthcheck.orchestrate.pairsweep.sweep import PairRun


@dataclass
class MultiRun:
    report: Report
    guarded: bool = False
    warnings: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # --dry-run commands


@dataclass(frozen=True)
class RunRequest:
    """What a run over many nodes is asked to do: which nodes, through what, which checks, and
    whether to act in Slurm (the options of `hc node NODES` and `hc sweep`)."""

    nodes: Sequence[str]
    command: str  # "node" or "sweep": the history compares runs of the same command only
    via: str = "ssh"
    mode: str = "auto"
    tier: str = "quick"
    only: Sequence[str] = ()
    since: float | None = None
    act: bool = False
    dry_run: bool = False
    env: dict | None = None
    pairs: bool = True
    exhaustive: bool = False


def run_many(config: Config, request: RunRequest,
             on_done: Callable[[str, NodeResult], None] | None = None) -> MultiRun:
    """Check `request.nodes` as asked, add the fleet and pair analyses, act if asked, and record the run."""
    nodes, only = list(request.nodes), list(request.only)
    if not nodes:
        # checking nothing must not look like a healthy run (SKIP, exit 0)
        raise UsageError("no node to check: the node list, hostlist or hostfile names none")

    # the jobs of hc's own that a killed hc left (SIGKILL cannot be handled), cancelled first
    leftovers = before_run(config, nodes, via=request.via, tier=request.tier, pairs=request.pairs,
                           env=request.env)
    started = utc_now()
    checked = _check_nodes(config, request, nodes, only, on_done)
    results, watch, warnings = checked.results, checked.watch, list(checked.notes)
    launch_findings, guard_findings = checked.launch_findings, checked.run_findings
    pair_run = _pair_tests(config, request, results, watch, warnings)
    history = _history(config, warnings)
    statuses = None
    if history is not None:
        try:
            # the same command only: a quick prologue and a deep sweep disagreeing is no flap
            statuses = history.node_statuses(nodes, config.main.fleet.flap_runs, command=request.command)
        except Exception as exc:
            warnings.append(f"history not read: {exc}")
        results = _escalated(results, history, warnings)

    # each node's counters against its recorded runs: rates since the previous run, trends
    over_time = judge_over_time(config, history, results, started, request.tier)
    results = over_time.nodes
    warnings += over_time.notes
    # the registered analyses of scope "fleet" (drift, outliers, flaps); each says whether it applies
    results, analyses = analyse_fleet(results, config.main.fleet, statuses, request.tier)
    analyses = [*over_time.analyses, *analyses]
    groups: list = []
    pair_findings: list = []
    if pair_run is not None:  # scope "pairs": the culprit onto its node, a slow link onto its pair
        results, groups, pair_analyses, pair_findings = judge_pairs(results, pair_run)
        analyses = [*analyses, *pair_analyses]
    # every node skipped (busy with a job): nothing was checked, said as it is, not as "no check selected";
    # where Slurm could not be asked, its act.E003 says why nothing was
    blind = any(f.status is Status.ERROR for f in guard_findings)
    busy_only = _nothing_checked_busy(results, request.tier) if not blind else None
    report = make_report(command=request.command, tier=request.tier, config_digest=config.digest,
                         config_path=str(config.path), started=started, finished=utc_now(), nodes=results,
                         # pair tests that gave a verdict checked something even where every node check skipped
                         require_checks=busy_only is None and not blind and not any(
                             g.status in (Status.PASS, Status.WARN, Status.FAIL) for g in groups))
    report = msgspec.structs.replace(report, analyses=analyses)
    if groups:
        report = with_groups(report, groups)
    for finding in [*leftovers.findings, *launch_findings]:  # the nodes it concerns carry their own status already
        report = with_run_finding(report, finding, raise_status=False)
    # the pair analyses' findings about no node (fabric-wide, undecided): no node carries their status
    for finding in [*pair_findings, *guard_findings, *([busy_only] if busy_only is not None else []),
                    *leftovers.errors]:
        report = with_run_finding(report, finding)
    warnings[:0] = leftovers.notes  # said first: it happened first
    run = MultiRun(report=report, warnings=warnings)
    if request.act:
        _act(config, request, run, history.repair_times_noted(warnings) if history is not None else {})
    if history is not None:
        try:
            history.record(run.report)
            history.prune(config.main.history.keep_runs)
        except Exception as exc:  # history is a convenience: never lose the run over it
            warnings.append(f"history not written: {exc}")
    return run


def _check_nodes(config: Config, request: RunRequest, nodes: list[str], only: list[str],
                 on_done: Callable[[str, NodeResult], None] | None) -> _Swept:
    """Each node's checks through the transport asked for: Slurm (srun), or SSH with the deep
    tier's Slurm check."""
    if request.via != "slurm":
        return _over_ssh(config, nodes, tier=request.tier, only=only, mode=request.mode, since=request.since,
                         on_done=on_done, env=request.env)
    # the node results, the launcher's run findings, and notes for stderr
    launched = check_over_srun(config, nodes, tier=request.tier, only=only, since=request.since,
                               env=request.env, mode=request.mode)
    return _Swept(results=launched.results, notes=list(launched.notes),
                  launch_findings=list(launched.run_findings))


def _pair_tests(config: Config, request: RunRequest, results: list[NodeResult], watch: JobWatch | None,
                warnings: list[str]) -> PairRun | None:
    """The deep tier's tests between nodes (over SSH only), their notes added to `warnings`."""
    if request.tier != "deep" or not request.pairs or len(results) <= 1:
        return None
    if request.via == "slurm":
        warnings.append("bandwidth between nodes runs over SSH only for now: --via slurm tested each node alone")
        return None
    pair_run = run_pairs(config, results, exhaustive=request.exhaustive, watch=watch)
    warnings += pair_run.notes
    return pair_run


def _act(config: Config, request: RunRequest, run: MultiRun, repair_times: dict[str, float]) -> None:
    """Drain or resume in Slurm as the report says (the hooks' policy and guard), into `run`."""
    report = run.report
    settings = config.main.slurm
    audit = AuditLog(Path(settings.audit_log))
    outcome = act_in_slurm(report, settings=settings, client=SlurmClient(settings, env=request.env),
                           audit=audit, resume=True, dry_run=request.dry_run, repair_times=repair_times)
    run.report = with_outcome(report, outcome)
    lost = audit.failure_finding(scope=_scope(report))
    if lost is not None:  # an action nobody can trace later: ERROR in the run, never a quiet 0
        run.report = with_run_finding(run.report, lost)  # (stderr has a line per record already)
    run.guarded = outcome.guarded
    run.messages = outcome.messages


@dataclass
class _Swept:
    """The nodes' results over SSH, with the deep tier's Slurm check (busy.py) where it applies, or
    through Slurm, with its launcher's run findings."""

    results: list[NodeResult]
    notes: list[str] = field(default_factory=list)
    run_findings: list[Finding] = field(default_factory=list)  # the deep tier's Slurm check (ERROR: run blind)
    launch_findings: list[Finding] = field(default_factory=list)  # srun's: the nodes carry their status already
    watch: JobWatch | None = None  # the check again, before each round of tests between nodes


def _over_ssh(config: Config, nodes: list[str], *, tier: str, only: list[str], mode: str, since: float | None,
              on_done: Callable[[str, NodeResult], None] | None, env: dict | None) -> _Swept:

    out = _Swept(results=[])
    to_check, skipped = nodes, []
    if tier == "deep":  # never under a user's job: busy nodes skipped and named (orchestrate/busy.py)
        guard = guard_sweep(config, nodes, env=env)
        out.watch, out.notes, out.run_findings = guard.watch, guard.notes, guard.run_findings
        to_check = guard.allowed
        skipped = [skipped_result(n, config.fabric_of(n), why, "agentless" if mode == "auto" else mode)
                   for n, why in guard.skipped.items()]
        for r in skipped:  # a progress bar counts every node named
            if on_done is not None:
                on_done(r.node, r)
    checked = remote.check_over_ssh(config, to_check, tier=tier, only=only, mode=mode, params={"since": since},
                                    on_done=on_done) if to_check else []
    by_node = {r.node: r for r in [*checked, *skipped]}
    out.results = [by_node[n] for n in nodes if n in by_node]
    return out


def _nothing_checked_busy(results: list[NodeResult], tier: str) -> Finding | None:
    """hc.E007 when every node of a deep run was skipped before any check ran (busy with a job,
    or one the Slurm transport could not place), saying so rather than "no check was selected"."""
    if tier != "deep" or not results or any(r.status is not Status.SKIP or r.checks for r in results):
        return None

    scope = _scope_of(r.node for r in results)
    return run_finding(catalogue.NOTHING_CHECKED, f"nothing was checked: every node was skipped before its checks "
                       f"ran ({scope}; each node's result says why)", scope=scope, value=0)


def _scope_of(names: Iterable[str]) -> str:
    return fold(names) or "run"


def _scope(report: Report) -> str:
    return fold(n.node for n in report.nodes) or "run"


def _escalated(results: list[NodeResult], history, warnings: list[str]) -> list[NodeResult]:
    """The results with Xid recurrences across reboots escalated (orchestrate/escalate.py); as they
    are, and a note saying why, where the history cannot be read."""
    try:
        return escalate(results, history.xid_boots, warnings, history.gpu_resets)
    except HcError as exc:
        warnings.append(f"Xid recurrences not counted: {exc}")
        return results


def _history(config: Config, warnings: list[str]):
    path = config.main.history.path
    if not path:
        return None
    try:
        return open_history(Path(path).expanduser())
    except Exception as exc:
        warnings.append(f"history unavailable ({path}): {exc}")
        return None


def partition_nodes(config: Config, partition: str, env: dict | None = None) -> tuple[list[str], list[str]]:
    """Nodes of a partition worth checking, and the skipped ones with why: down nodes and
    nodes drained for reasons hc did not write are left alone."""

    if not partition or not partition.strip():
        # sinfo without -p lists every node of the cluster: an empty name must not mean "all"
        raise UsageError(f"no node to check: partition {partition!r} names no partition")
    states, error = SlurmClient(config.main.slurm, env=env).nodes(partition=partition)
    if error is not None:
        raise HcError(f"cannot list partition {partition!r}: {error}")
    if not states:
        raise HcError(f"partition {partition!r} has no nodes (or does not exist)")
    keep, skipped = [], []
    for name in sort_nodes(states):
        state = states[name]
        if "down" in state.state or not state.responding:
            skipped.append(f"{name} ({state.state}{'' if state.responding else ', not responding'})")
        elif state.drained and not state.drained_by_hc:
            skipped.append(f"{name} (drained by someone else: {state.reason or 'no reason'})")
        else:
            keep.append(name)
    return keep, skipped
