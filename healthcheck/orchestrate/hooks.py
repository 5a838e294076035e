"""Slurm's hooks into hc: `hc prologue`, `hc epilogue`, `hc health`.

Each runs its tier on this node under a deadline, acts in Slurm through the drain
policy (actions/), writes its report, and returns the exit code Slurm should see:

- prologue: non-zero only when the node FAILed and was drained (Slurm then requeues
  the job elsewhere and keeps hc's reason); an ERROR lets the job run; a guard refusal
  lets it run too, because a non-zero exit would make Slurm drain the node anyway.
- epilogue: always 0 (it never changes the job's state); it drains by itself.
- health: the Nagios-style code of the node's status (slurmd only logs it), or 5 when
  the guard refused; it also resumes nodes hc drained once their checks pass again.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.nodestate import LockTimeout, NodeState
from healthcheck.actions.outcome import ActionOutcome, with_outcome
from healthcheck.actions.reasons import drain_reason
from healthcheck.core import catalogue
from healthcheck.core.config import Config
from healthcheck.core.config.schema import PrometheusSettings
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.core.model import Report
from healthcheck.core.nodes import this_node_name
from healthcheck.core.status import Status
from healthcheck.orchestrate.localrun import check_this_node
from healthcheck.probes.sysinfo import boot_time
from healthcheck.report import export_prometheus, record_run
from healthcheck.report.build import action_finding
from healthcheck.report.jsonio import encode, write_atomic

if TYPE_CHECKING:
    from healthcheck.actions.slurm import SlurmClient

# What only a run that acts in Slurm needs (a FAIL, an escalation, a health run that may
# resume), loaded by import path then: the drain policy and scontrol's client are ~6 ms of
# every prologue's start-up, and a node that passes never acts (issue 22).
ACTIONS = "healthcheck.actions.apply"
SLURM = "healthcheck.actions.slurm"
# A health run judged against the node's recorded runs: its Xids across boots (escalation),
# then its counters (rates, trends), and recorded, through one open of the history. A
# prologue or epilogue neither records nor reads it, nor loads this (issue 22's start-up).
NODE_HISTORY = "healthcheck.orchestrate.node_history"


def act(report: Report, **kwargs: Any) -> ActionOutcome:
    """actions.apply.act, loaded when a run acts."""
    return importlib.import_module(ACTIONS).act(report, **kwargs)


def slurm_client(settings: Any, *, env: Mapping[str, str], deadline: float | None) -> SlurmClient:
    """actions.slurm.SlurmClient, loaded when a run talks to Slurm."""
    return importlib.import_module(SLURM).SlurmClient(settings, env=env, deadline=deadline)


def _judged_over_history(kind: str, config: Config, report: Report) -> tuple[Report, list[str], Any]:
    """A health run's report judged against its recorded runs (orchestrate/node_history.py),
    the notes for the operator, and the history it opened (to record the run in, None where
    none is kept); other hooks' reports, and any where no history is kept, as they are."""
    if kind != "health" or config.main.history.path is None:
        return report, [], None
    node_history = importlib.import_module(NODE_HISTORY)
    history = node_history.open_for(config)
    report, notes = node_history.judged(config, report, history)
    return report, notes, history


class HookResult(msgspec.Struct):
    report: Report
    exit_code: int
    summary: str  # one line for the slurmd log
    messages: list[str] = msgspec.field(default_factory=list)  # --dry-run commands, warnings
    abandoned: bool = False
    journal: str = ""  # the one line for syslog/journald (`journalctl -t hc`)


# The exit code the hard-deadline handler uses if it must give up (cli/hooks.py): 0 lets
# the job run; a prologue that found a FAIL sets 2, so Slurm still keeps the job off.
_VERDICT = [0]


def set_verdict(code: int) -> None:
    _VERDICT[0] = code


def verdict() -> int:
    return _VERDICT[0]


def node_name(env: Mapping[str, str]) -> str:
    """This node's name from the hook's environment, validated (UsageError otherwise)."""

    return this_node_name(env)


def run_hook(kind: str, config: Config, env: Mapping[str, str], *, dry_run: bool = False,
             tier: str | None = None, resume: bool | None = None, node: str | None = None,
             hard_deadline: float | None = None) -> HookResult:
    """Check this node with the hook's tier, act in Slurm, write the report.

    hard_deadline: the monotonic time the whole run must end by (cli/hooks.py kills it
    then); Slurm calls stop half a second before it so the report is still written.
    """
    settings = config.main.slurm
    policy = getattr(settings, kind)
    node = node or node_name(env)
    state = NodeState(settings.state_dir, node)
    job = env.get("SLURM_JOB_ID", "")
    started = time.time()
    state_problems: list[str] = []

    since = _window(kind, state, settings, job, env)
    report, abandoned = check_this_node(
        config, node=node, tier=tier or policy.tier, command=kind, deadline_s=policy.deadline_s,
        params={"since": since},
        # the epilogue's checks are all about GPUs: on a CPU node skipping every one is
        # the right answer, not "nothing was checked"
        require_checks=kind != "epilogue",
    )
    report, history_notes, history = _judged_over_history(kind, config, report)
    # hc's own state is bookkeeping: a full or read-only state_dir is reported, and the
    # verdict and the drain still go through
    if kind == "prologue" and job:
        _best_effort(state_problems, "job start mark", state.mark_job_start, job, started)
    if kind in ("prologue", "health", "epilogue"):
        _best_effort(state_problems, "kernel-log cursor", state.set_kernel_log_cursor, started)

    result = report.nodes[0]
    extra: dict[str, str] = {}
    run_notes: list = []
    if kind in ("prologue", "health"):
        error_ids = sorted({f.id for f in result.findings if f.status is Status.ERROR})
        count = _best_effort(state_problems, "ERROR count", state.record_run,
                             result.status is not Status.ERROR, error_ids) or 0
        if count >= settings.error_escalation_runs:
            if settings.error_escalation == "drain":
                extra[node] = drain_reason(error_ids, settings.drain.reason_max_len, prefix=f"ERROR x{count} ")
            else:
                run_notes.append(action_finding(
                    catalogue.ERRORS_REPEATED,
                    f"{node} could not be checked in {count} consecutive runs ({', '.join(error_ids) or 'ERROR'})",
                    scope=node, value=count))

    action_deadline = _action_deadline(kind, hard_deadline)
    audit = AuditLog(Path(settings.audit_log))
    if kind == "prologue" and result.status is Status.FAIL:
        set_verdict(int(ExitCode.FAIL))  # if the deadline hits while acting: keep the job off
    wants_action = result.status is Status.FAIL or extra or (kind == "health" and resume is not False)
    outcome = ActionOutcome()
    if wants_action:
        client = slurm_client(settings, env=_slurm_env(env), deadline=action_deadline)
        acting = functools.partial(act, report, settings=settings, client=client, audit=audit,
                                   resume=(kind == "health" and resume is not False), dry_run=dry_run,
                                   extra_drains=extra, boot_times={node: b} if (b := boot_time()) else None,
                                   repair_times=history.repair_times_noted(history_notes) if history else {})
        try:
            with state.lock(settings.lock_timeout_s):
                outcome = acting()
        except LockTimeout as exc:
            outcome.run_findings.append(action_finding(catalogue.LOCKED, str(exc), scope=node))
        except OSError as exc:
            # no lock file (state_dir unusable): act anyway -- the policy re-reads Slurm's
            # states, and a FAIL must still take the node out
            state_problems.append(f"node lock: {exc.strerror or exc}")
            outcome = acting()
    if state_problems:
        run_notes.append(action_finding(
            catalogue.STATE_FAILED, f"hc's state under {state.dir} could not be kept: " + "; ".join(state_problems),
            scope=node, evidence="; ".join(state_problems)))
    lost = audit.failure_finding(scope=node)  # an action whose audit record was not written
    if lost is not None:
        run_notes.append(lost)
    outcome.run_findings = run_notes + outcome.run_findings
    report = with_outcome(report, outcome)
    messages = [*history_notes, *outcome.messages]
    written, problems = _write_report(report, settings.report_dir, node, kind)
    messages += problems
    prometheus = config.main.prometheus
    if prometheus.textfile_dir is not None and kind in prometheus.commands:
        messages += _export_prometheus(report, prometheus, kind)
    if kind == "health":
        # prologue and epilogue run per job: recording them would flood the history
        warning = record_run(report, config.main.history, history)
        if warning:
            messages.append(warning)

    code = _exit_code(kind, report, outcome)
    return HookResult(report=report, exit_code=code, summary=_summary(kind, node, job, report, outcome, code),
                      messages=messages, abandoned=abandoned,
                      journal=journal_line(kind, node, job, report, outcome, code, written))


# A prologue or epilogue keeps a job waiting while it talks to Slurm: a dead controller
# may cost it this long at most (health runs have until their hard deadline).
JOB_HOOK_ACTION_S = 2.5


def _action_deadline(kind: str, hard_deadline: float | None) -> float | None:
    limits = [hard_deadline - 0.5] if hard_deadline is not None else []
    if kind in ("prologue", "epilogue"):
        limits.append(time.monotonic() + JOB_HOOK_ACTION_S)
    return min(limits) if limits else None


def _best_effort(problems: list[str], what: str, fn, *args):
    try:
        return fn(*args)
    except (OSError, HcError) as exc:
        problems.append(f"{what}: {getattr(exc, 'strerror', None) or exc}")
        return None


def _window(kind: str, state: NodeState, settings, job: str, env: Mapping[str, str]) -> float | None:
    """Since when the kernel log is judged: the job's start in the epilogue, else where
    the hooks left off (else since boot)."""
    if kind == "epilogue":
        start = state.job_start(job, remove=True) if job else None
        if start is None and job:
            # its own client: the hook's is built after the checks, with the actions' deadline
            start = _job_start_from_slurm(slurm_client(settings, env=_slurm_env(env),
                                                       deadline=_action_deadline(kind, None)), job)
        if start is not None:
            return start - 1.0  # slack for clocks that tick between the prologue and the kernel
    return state.kernel_log_cursor()


def _job_start_from_slurm(client: SlurmClient, job: str) -> float | None:
    """The job's start from Slurm (through the client's retries and deadline), or None."""
    start, _ = client.job_start(job)
    return start


def _slurm_env(env: Mapping[str, str]) -> dict[str, str]:
    """What scontrol needs: PATH and SLURM_CONF (HealthCheckProgram gets neither)."""
    out = dict(os.environ)
    out.update({k: v for k, v in env.items() if k in ("PATH", "SLURM_CONF")})
    out.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return out


def _write_report(report: Report, report_dir: str | None, node: str, kind: str) -> tuple[str | None, list[str]]:
    """(the path of the report that stays: this run's own where it is kept, else the
    latest; None when none was written), and what went wrong."""
    if not report_dir:
        return None, []
    data = encode(report)
    base = Path(report_dir) / node
    written = None
    try:
        write_atomic(base / f"{kind}-latest.json", data)
        written = str(base / f"{kind}-latest.json")
        if report.status is not Status.PASS or report.run_findings:
            write_atomic(base / f"{kind}-{report.run_id}.json", data)
            written = str(base / f"{kind}-{report.run_id}.json")
    except Exception as exc:  # a full or read-only log disk must not fail a prologue
        return written, [f"report not written under {base}: {exc}"]
    return written, []


# how long a hook waits for its textfile: a hung file system (a stale NFS mount) must not
# carry the hook to its hard deadline, where the exit code would no longer be the verdict's
PROMETHEUS_EXPORT_S = 2.0


def _export_prometheus(report: Report, settings: PrometheusSettings, kind: str) -> list[str]:
    """The node_exporter textfile, best effort and bounded in time: a missing directory, a
    full disk or a hung write is logged and changes neither the verdict nor the exit code
    Slurm sees."""

    failed: list[str] = []

    def write() -> None:
        try:
            export_prometheus(report, settings.textfile_dir or "", settings, command=kind)
        except Exception as exc:
            failed.append(f"prometheus textfile not written: {exc}")

    # a daemon thread: a write stuck in the kernel is left behind, never waited for
    t = threading.Thread(target=write, name="hc-prometheus", daemon=True)
    t.start()
    t.join(PROMETHEUS_EXPORT_S)
    if t.is_alive():
        return [f"prometheus textfile not written: {settings.textfile_dir} did not answer within "
                f"{PROMETHEUS_EXPORT_S:g} s (a hung file system?)"]
    return failed


def _exit_code(kind: str, report: Report, outcome: ActionOutcome) -> int:
    status = report.nodes[0].status
    if kind == "epilogue":
        return 0
    if kind == "prologue":
        # FAIL keeps the job off this node (Slurm requeues it) whether hc drained it now,
        # it was drained already, or scontrol failed; a guard refusal lets the job run.
        return int(ExitCode.FAIL) if status is Status.FAIL and not outcome.guarded else 0
    if outcome.guarded:
        return int(ExitCode.GUARD)
    return int({Status.FAIL: ExitCode.FAIL, Status.ERROR: ExitCode.ERROR}.get(status, ExitCode.OK))


def _summary(kind: str, node: str, job: str, report: Report, outcome: ActionOutcome, code: int) -> str:
    result = report.nodes[0]
    ids = sorted({f.id for f in result.findings if f.status in (Status.FAIL, Status.ERROR)})
    parts = [f"hc {kind}: {node}", f"job {job}" if job else "", result.status.value]
    if ids:
        parts.append(" ".join(ids))
    for r in outcome.records:
        parts.append(f"{r.action}{'(dry-run)' if r.dry_run else ''}{'' if r.ok else ' FAILED'} {r.nodes}"
                     + (f" ({r.reason})" if r.reason else ""))
    for f in outcome.run_findings:
        parts.append(f"{f.id}: {f.message}")
    parts.append(f"exit {code}")
    return "; ".join(p for p in parts if p)


def journal_line(kind: str, node: str, job: str, report: Report, outcome: ActionOutcome, code: int,
                 report_path: str | None) -> str:
    """The hook run in one syslog line: the hook, the verdict, the action taken in Slurm or
    why none was, where the report is, the exit code. Fields are `key=value` (values
    without blanks first) so `journalctl -t hc | grep verdict=FAIL` works."""
    result = report.nodes[0]
    ids = sorted({f.id for f in result.findings if f.status in (Status.FAIL, Status.ERROR)})
    head = [f"hook={kind}", f"node={node}", f"job={job}" if job else "", f"verdict={result.status.value}",
            f"findings={','.join(ids)}" if ids else "", f"exit={code}", f"report={report_path or 'none'}"]
    return " ".join(p for p in head if p) + f" action={_action_taken(node, result.status, outcome)}"


def _action_taken(node: str, status: Status, outcome: ActionOutcome) -> str:
    """What hc did in Slurm, or why it did nothing."""
    done = [f"{r.action}{' (dry-run)' if r.dry_run else ''}{'' if r.ok else ' FAILED'} {r.nodes}"
            + (f" ({r.reason})" if r.reason else "") for r in outcome.records]
    if done:
        return "; ".join(done)
    plan = outcome.plan
    if outcome.guarded:
        return "none: the blast-radius guard refused (act.E001)"
    for why in (plan.not_drained, plan.stays_drained, plan.keep) if plan is not None else ():
        if node in why:
            return f"none: {why[node]}"
    acting = [f for f in outcome.run_findings if f.id.startswith("act.")]
    if acting:
        return "none: " + "; ".join(f"{f.id} {f.message}" for f in acting)
    if status is Status.FAIL:
        return "none"
    if status is Status.ERROR:
        return "none: ERROR never drains"
    return "none: nothing to drain"
