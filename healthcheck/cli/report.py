"""`hc report`: show a saved report, diff two runs, list the run history."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from healthcheck.cli.app import App, config_option, format_option
from healthcheck.core.errors import ExitCode, HcError

if TYPE_CHECKING:
    from healthcheck.core.model import Report
    from healthcheck.report.history import History

REPORT_FILE = click.Path(path_type=Path, dir_okay=False, allow_dash=True)


@click.group()
def report() -> None:
    """Saved reports: show one, diff two runs, list the run history."""


def _read(path: Path) -> Report:
    """A report from a file, or from stdin for '-'."""
    from healthcheck.report.jsonio import decode, read_report

    if str(path) == "-":
        return decode(sys.stdin.buffer.read(), "stdin")
    return read_report(path)


@report.command("show")
@click.argument("file", type=REPORT_FILE)
@format_option
def show(file: Path, fmt: str) -> int:
    """Show a saved report (a file hc wrote with --output or --format json; '-' reads stdin)."""
    report = _read(file)
    App(fmt=fmt).emit_report(report)
    return 0


def _history(app: App, *, must_exist: bool = True) -> History:
    """The configured run history; an error when none is kept (or none recorded yet)."""
    from healthcheck.report.history import History

    history = History.from_settings(app.config.main.history)
    if history is None:
        raise HcError("no run history is kept (history.path is null in the config)")
    if must_exist and not history.path.exists():
        raise HcError(f"no run history yet at {history.path}")
    return history


@report.command("diff")
@click.argument("old", required=False, type=REPORT_FILE)
@click.argument("new", required=False, type=REPORT_FILE)
@click.option("--command", "command", default=None,
              help="With no files: diff the last two runs of this command (node, health, ...).")
@config_option
@format_option
def diff_cmd(old: Path | None, new: Path | None, command: str | None, config_path: Path | None,
             fmt: str) -> int:
    """What changed between two runs: new failures, fixed, still failing, nodes added or gone.

    \b
    hc report diff OLD NEW   two saved reports (compared in the order they ran;
                             a warning says when OLD is the newer one)
    hc report diff NEW       NEW against the run before it in the history
                             (same command and tier)
    hc report diff           the newest run in the history against the run
                             before it of the same command and tier

    \b
    Exit codes: 0 no new failures; 2 new failures (a FAIL finding that was not
    FAIL in the older run); 4 unreadable input or nothing to compare with.
    """
    from healthcheck.report.diff import diff, render_diff, to_json

    app = App(config_path, fmt)
    if old is not None and new is not None:
        older, newer = _read(old), _read(new)
    else:
        with _history(app) as history:
            if old is not None:  # one file: it is the newer run
                newer = _read(old)
            else:
                runs = history.last(1, command)
                if not runs:
                    what = f"run of {command!r}" if command else "run"
                    raise HcError(f"no {what} recorded in the history at {history.path}")
                newer = runs[0]
            found = history.previous(newer)
            if found is None:
                raise HcError(f"no earlier run of {newer.command!r} (tier {newer.tier}) than {newer.run_id} "
                              f"in the history at {history.path}")
            older = found
    d = diff(older, newer)  # in the order they ran, whatever order they were named in
    for note in d.notes:
        click.echo(f"hc: warning: {note}", err=True)
    if fmt == "json":
        sys.stdout.buffer.write(to_json(d))
        sys.stdout.flush()
    else:
        app.echo(render_diff(d))
    return int(ExitCode.FAIL if d.new_failures else ExitCode.OK)


@report.command("history")
@click.option("--node", default=None, help="This node's recent results instead of the runs.")
@click.option("--command", "command", default=None, help="Only runs of this command.")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=20, show_default=True, help="How many to list.")
@config_option
@format_option
def history_cmd(node: str | None, command: str | None, limit: int, config_path: Path | None, fmt: str) -> int:
    """List the recorded runs (newest first), or one node's recent statuses."""
    from dataclasses import asdict

    from tabulate import tabulate

    from healthcheck.core.nodes import check_node_name

    app = App(config_path, fmt)
    if node is not None:
        check_node_name(node)
    history = _history(app, must_exist=False)
    if not history.path.exists():
        rows_json: list = []
        if fmt == "json":
            app.emit_json(rows_json)
        else:
            app.echo(f"no runs recorded yet in {history.path}")
        return 0
    with history:
        if node is not None:
            items = history.node_runs(node, limit, command)
            if fmt == "json":
                app.emit_json([asdict(i) for i in items])
            else:
                rows: list[list[object]] = [[i.started_at, i.status, i.command, i.tier, i.fabric, i.run_id]
                                            for i in items]
                app.echo(tabulate(rows, headers=["STARTED", "STATUS", "COMMAND", "TIER", "FABRIC", "RUN"],
                                  tablefmt="simple") if rows else f"no runs of {node} recorded")
            return 0
        runs = history.runs(limit, command)
    if fmt == "json":
        app.emit_json([asdict(r) for r in runs])
        return 0
    rows = [[r.started_at, r.status, r.command, r.tier, r.node_count,
             ", ".join(f"{n} {s}" for s, n in r.summary.items() if n) or "-", r.host, r.run_id] for r in runs]
    app.echo(tabulate(rows, headers=["STARTED", "STATUS", "COMMAND", "TIER", "NODES", "COUNTS", "HOST", "RUN"],
                      tablefmt="simple") if rows else "no runs recorded")
    return 0
