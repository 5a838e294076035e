"""`hc node --local`: check this machine and print its report. No click here: the click
command (cli/node.py) and the lean entry (cli/lean.py) both call `run_local`."""

from __future__ import annotations

import datetime as dt
import importlib
import math
import os
import sys
import time
from pathlib import Path

from healthcheck.cli import StdoutError
from healthcheck.cli.app import App, exit_code_for, export_prometheus, prometheus_dir, this_node_name
from healthcheck.cli.echo import echo
from healthcheck.core.errors import ExitCode, HcError, UsageError
from healthcheck.core.model import Report
from healthcheck.core.registry import select
from healthcheck.orchestrate.localrun import AGENT_ENV, check_this_node
from healthcheck.report.build import with_run_finding

# the deep tier's Slurm guard, loaded by import path where a deep run asks for it
DEEP_GUARD = "healthcheck.orchestrate.busy"
# the run judged against the node's recorded runs and recorded, where a history is kept
NODE_HISTORY = "healthcheck.orchestrate.node_history"


def parse_since(value: str) -> float | None:
    """'boot' -> None (the whole kernel log of this boot); ISO 8601 or epoch -> epoch seconds.

    A time that is not a real one (nan, inf, 1e400, before 1970, after 9999) is an input
    error (exit 4, one line): read as a window it would hide every Xid. A time in the
    future is accepted with a warning on stderr; the check names the window it read.
    """

    latest = 253402300799.0  # 9999-12-31T23:59:59Z, the last time ISO 8601 can name
    text = value.strip()
    if text == "boot":
        return None
    try:
        t = float(text)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.astimezone()  # a time without zone is the node's local time
            t = when.timestamp()
        except (ValueError, OverflowError, OSError):
            raise UsageError(f"--since {value[:80]!r} is not 'boot', an ISO 8601 time or epoch seconds") from None
    if not math.isfinite(t):
        raise UsageError(f"--since {value[:80]!r} is not a finite time (it would hide every Xid)")
    if not 0.0 <= t <= latest:
        raise UsageError(f"--since {value[:80]!r} is not a time between 1970 and 9999")
    if t > time.time():
        when_text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
        echo(f"hc: warning: --since {when_text} is in the future: no kernel-log line can be in that "
                   "window yet", err=True)
    return t


def _over_history(app: App, report: Report) -> Report:
    """The run judged against this node's recorded runs (Xids across boots and resets escalated,
    counter rates and trends) and recorded, as `hc node NODES` judges and records its nodes;
    warnings on stderr. As it is where no history is kept, or where another hc started this
    run (`AGENT_ENV`): that hc judges and records it."""
    if app.config.main.history.path is None or os.environ.get(AGENT_ENV):
        return report
    node_history = importlib.import_module(NODE_HISTORY)
    history = node_history.open_for(app.config)
    report, notes = node_history.judged(app.config, report, history)
    warning = node_history.recorded(app.config, report, history)
    for note in [*notes, *([warning] if warning else [])]:
        echo(f"hc: warning: {note}", err=True)
    return report


def run_local(app: App, *, tier: str, only: list[str], since: str, output: Path | None,
              prometheus_to: Path | None, fail_level: str) -> int:
    """Check this machine with `tier` (or only the checks named), show and write the report;
    the exit code for its status. `prometheus_to`: --prometheus, else the config decides."""
    checks = only
    prom = prometheus_dir(app, prometheus_to, "node")  # the config is read here, before the node's name
    name = this_node_name()
    window = parse_since(since)
    skip_deep, run_findings = None, []
    if tier == "deep":  # never under someone else's job: see orchestrate/busy.py
        select(tier, checks)  # unknown check names are a usage error before Slurm is asked
        guard = importlib.import_module(DEEP_GUARD).guard_this_node(app.config, name, os.environ)
        for note in guard.notes:
            echo(f"hc: warning: {note}", err=True)
        skip_deep, run_findings = guard.skip_reason, guard.run_findings
    report, abandoned = check_this_node(app.config, node=name, tier=tier, only=checks,
                                        params={"since": window}, skip_deep=skip_deep)
    if run_findings:
        for finding in run_findings:
            report = with_run_finding(report, finding)
    report = _over_history(app, report)
    lost = [e for e in (export_prometheus(app, report, prom),) if e is not None]
    if not abandoned:
        shown = app.emit_report(report, output=output, lost=lost)
        return int(exit_code_for(shown.status, fail_level))
    # a probe thread is stuck in the kernel; do not let interpreter shutdown wait for it
    code = int(exit_code_for(report.status, fail_level))
    try:
        shown = app.emit_report(report, output=output, lost=lost)
        sys.stdout.flush()
        code = int(exit_code_for(shown.status, fail_level))
    except (HcError, StdoutError) as exc:
        echo(f"hc: error: {exc}", err=True)
        code = int(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
    os._exit(code)
    return code  # not reached
