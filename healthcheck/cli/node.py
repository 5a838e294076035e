"""`hc node`: check this node (--local) or named nodes (over SSH)."""

from __future__ import annotations

import datetime as dt
import importlib
import math
import os
import sys
import time
from pathlib import Path

import click

from healthcheck.cli import StdoutError
from healthcheck.cli.app import (
    App,
    config_option,
    exit_code_for,
    export_prometheus,
    fail_level_option,
    format_option,
    output_option,
    prometheus_dir,
    prometheus_option,
    this_node_name,
    tier_option,
)
from healthcheck.cli.completion import complete_nodes
from healthcheck.core.errors import ExitCode, HcError, UsageError
from healthcheck.core.nodes import expand
from healthcheck.core.registry import select
from healthcheck.orchestrate.localrun import check_this_node
from healthcheck.report.build import with_run_finding

# What `hc node` needs only for some runs, loaded by import path where the run is known (as
# cli.COMMANDS are): a quick --local check imports neither the machinery of many nodes
# (SSH, Slurm, the pair sweep, the progress bar) nor the deep tier's Slurm guard.
MANY_NODES = "healthcheck.orchestrate.multirun"
PROGRESS = "healthcheck.cli.progress"
DEEP_GUARD = "healthcheck.orchestrate.busy"


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
        click.echo(f"hc: warning: --since {when_text} is in the future: no kernel-log line can be in that "
                   "window yet", err=True)
    return t


def since_option(fn):
    return click.option("--since", default="boot", show_default=True,
                        help="Kernel-log window for Xid events: 'boot', an ISO 8601 time or epoch seconds "
                             "(1970 to 9999; a time in the future is read as asked, with a warning).")(fn)


def mode_option(fn):
    return click.option("--mode", type=click.Choice(["auto", "agent", "agentless"]), default="auto", show_default=True,
                        envvar="HC_MODE",
                        help="Remote nodes: run hc on the node (agent), or run the tools over SSH and parse them "
                             "here (agentless); auto uses the agent where hc is installed.")(fn)


@click.command()
@click.argument("nodes", nargs=-1, shell_complete=complete_nodes)
@click.option("--local", "local", is_flag=True, help="Check the machine hc runs on.")
@tier_option()
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated (e.g. ib,net.mtu).")
@since_option
@mode_option
@config_option
@format_option
@output_option
@prometheus_option
@fail_level_option
def node(nodes: tuple[str, ...], local: bool, tier: str, only: str, since: str, mode: str,
         config_path: Path | None, fmt: str, output: Path | None, prometheus_to: Path | None,
         fail_level: str) -> int:
    """Check nodes: NODES (hostlists, e.g. gpu017 'gpu[001-004]') over SSH, or --local this machine."""
    if not local and not nodes:
        raise click.UsageError("name the nodes to check, or use --local for this machine")
    if local and nodes:
        raise click.UsageError("--local checks this machine; do not name nodes with it")
    app = App(config_path, fmt)
    checks = [s for s in only.split(",") if s]
    prom = prometheus_dir(app, prometheus_to, "node")
    if local:
        name = this_node_name()
        window = parse_since(since)
        skip_deep, run_findings = None, []
        if tier == "deep":  # never under someone else's job: see orchestrate/busy.py
            select(tier, checks)  # unknown check names are a usage error before Slurm is asked
            guard = importlib.import_module(DEEP_GUARD).guard_this_node(app.config, name, os.environ)
            for note in guard.notes:
                click.echo(f"hc: warning: {note}", err=True)
            skip_deep, run_findings = guard.skip_reason, guard.run_findings
        report, abandoned = check_this_node(app.config, node=name, tier=tier, only=checks,
                                            params={"since": window}, skip_deep=skip_deep)
        if run_findings:
            for finding in run_findings:
                report = with_run_finding(report, finding)
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
            click.echo(f"hc: error: {exc}", err=True)
            code = int(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
        os._exit(code)

    names = expand(nodes)
    if not names:  # '' or "$EMPTY": checking nothing must not read as healthy
        raise click.UsageError(f"no node to check: {' '.join(repr(n) for n in nodes)} names no node")
    select(tier, checks)  # unknown check names are a usage error before anything runs
    many = importlib.import_module(MANY_NODES)
    request = many.RunRequest(names, command="node", via="ssh", mode=mode, tier=tier, only=checks,
                              since=parse_since(since))
    run = many.run_many(app.config, request, on_done=importlib.import_module(PROGRESS).progress_printer(len(names)))
    for warning in run.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    lost = [e for e in (export_prometheus(app, run.report, prom),) if e is not None]
    shown = app.emit_report(run.report, output=output, lost=lost)
    return int(exit_code_for(shown.status, fail_level))
