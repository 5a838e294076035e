"""`hc report`: show a saved report, diff two runs, list the run history, ticket records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from healthcheck.cli.app import App, config_option, format_option
from healthcheck.cli.params import integer
from healthcheck.core.errors import ExitCode, HcError

if TYPE_CHECKING:
    from healthcheck.core.model import Report
    from healthcheck.diagnose.verdict import Verdict
    from healthcheck.report.history import History

REPORT_FILE = click.Path(path_type=Path, dir_okay=False, allow_dash=True)


@click.group()
def report() -> None:
    """Saved reports: show one, diff two runs, an HTML page, the run history, ticket records."""


def _read(path: Path) -> Report:
    """A report from a file, or from stdin for '-': an hc.report, or an hc.diagnosis (a job's
    diagnosis, read as a report whose one result is the job: `diagnosis_report`)."""
    from healthcheck.report.jsonio import decode, read_bytes, read_stdin_bytes, schema_of

    stdin = str(path) == "-"
    data = read_stdin_bytes(sys.stdin.buffer) if stdin else read_bytes(path)
    source = "stdin" if stdin else str(path)
    if schema_of(data).startswith("hc.diagnosis/"):
        from healthcheck.diagnose.verdict import decode as decode_diagnosis

        return diagnosis_report(decode_diagnosis(data, source))
    return decode(data, source)


def diagnosis_report(verdict: Verdict) -> Report:
    """A job's diagnosis as a report: its findings (diag.E0xx) in one result of kind "job",
    which tickets, the HTML page and the Prometheus export read as they read a pair's."""
    from healthcheck.diagnose.verdict import job_result
    from healthcheck.report.build import job_report

    return job_report(job_result(verdict), command="diagnose", started_at=verdict.collected_at,
                      hc_version=verdict.hc_version or "unknown")


@report.command("show")
@click.argument("file", type=REPORT_FILE)
@format_option
def show(file: Path, fmt: str) -> int:
    """Show a saved report (a file hc wrote with --output or --format json; '-' reads stdin)."""
    report = _read(file)
    App(fmt=fmt).emit_report(report)
    return 0


@report.command("html")
@click.argument("file", required=False, type=REPORT_FILE)
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The HTML file to write (atomically; a symbolic link or directory is refused).")
@click.option("--runs", type=integer(2, 50), default=10, show_default=True,
              help="How many recent runs the history section follows the nodes with findings over.")
@config_option
def html_cmd(file: Path | None, output: Path, runs: int, config_path: Path | None) -> int:
    """One self-contained HTML page for a run: summary, findings, node grid, pair heat map, busbw curves, history.

    \b
    hc report html REPORT -o report.html   a saved report ('-' reads stdin)
    hc report html -o report.html          the newest run in the history

    No script and nothing fetched: it opens offline and can be attached to a ticket.
    Floors on the curves are those the run compared with, and the config's fabrics'
    for the other sizes. Exit 0 written; 4 unreadable report or output.
    """
    from healthcheck.core.atomic import write_atomic
    from healthcheck.report.build import iso, utc_now
    from healthcheck.report.history import History
    from healthcheck.report.html import config_floors, followed_nodes, merge_floors, render_html, report_floors
    from healthcheck.report.trend import from_history

    app = App(config_path)
    notes: list[str] = []
    history: History | None
    if file is None:
        history = _history(app)
        report = _newest(history)
    else:
        report = _read(file)
        history = History.from_settings(app.config.main.history)
    fabrics = {n.fabric for n in report.nodes}
    floors, why = config_floors(app.config, fabrics)
    notes += why
    if floors and app.config.digest != report.config_digest:
        notes.append(f"floors the run's findings do not name are from the config at {app.config.path}, which is "
                     "not the one this run used (its digest differs)")
    trend = from_history(history, report, followed_nodes(report), runs)
    page = render_html(report, floors=merge_floors(report_floors(report), floors), trend=trend, notes=notes,
                       generated_at=iso(utc_now()))
    write_atomic(output, page.encode("utf-8"))
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


def _newest(history: History) -> Report:
    """The newest run the history holds (what html and tickets read without a REPORT)."""
    with history:
        newest = history.last(1)
    if not newest:
        raise HcError(f"no run recorded in the history at {history.path}")
    return newest[0]


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
@click.option("--limit", "-n", type=integer(1, 1_000_000), default=20, show_default=True, help="How many to list.")
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


@report.command("tickets")
@click.argument("file", required=False, type=REPORT_FILE)
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl", "json"]), default="table", show_default=True,
              help="table for people; jsonl: one record per line; json: one array.")
@click.option("--min-status", type=click.Choice(["fail", "error", "warn"], case_sensitive=False), default=None,
              help="Findings at or above this status are tickets (FAIL > ERROR > WARN) [default: tickets.min_status].")
@click.option("--lookback", type=integer(1, 100_000), default=None,
              help="Earlier runs of the same nodes to read from the history [default: tickets.lookback_runs].")
@click.option("--webhook", "webhook", metavar="URL", default=None,
              help="POST each record to this http(s) URL [default: tickets.webhook_url].")
@click.option("--no-webhook", is_flag=True, help="Only print the records, even where the config names a webhook.")
@click.option("--token-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A file whose one line is the token header's value (never printed) [default: tickets.token_file].")
@click.option("--token-header", default=None, metavar="NAME",
              help="The header that carries the token [default: tickets.token_header, Authorization].")
@click.option("--resend-rejected", is_flag=True,
              help="First move the records the receiver refused (the spool's rejected/) back into the spool, "
                   "and send them again with the rest.")
@config_option
def tickets_cmd(file: Path | None, fmt: str, min_status: str | None, lookback: int | None, webhook: str | None,
                no_webhook: bool, token_file: Path | None, token_header: str | None, resend_rejected: bool,
                config_path: Path | None) -> int:
    """Ticket records for a run: one per finding to open (new), update (ongoing) or close (fixed).

    \b
    hc report tickets REPORT --format jsonl   a saved report ('-' reads stdin)
    hc report tickets --format jsonl          the newest run in the history
    hc report tickets --webhook URL           ... and POST each record as JSON

    Records are keyed by the finding's fingerprint and read the history for first
    seen, last seen and times seen; `fixed` needs this run to have looked again
    (node reached, the check ran): a node not checked keeps its tickets open. The
    webhook gets Idempotency-Key: <fingerprint>:<state>:<episode>, retries with
    backoff, and what it did not take waits in the spool (tickets.spool_dir, else
    <slurm.state_dir>/tickets), sent first by the next delivery; a record is never
    sent twice. An answer about the URL or token (a redirect, 401, 403, 404, 405,
    407, 410) stops the delivery and keeps every record spooled, in order. A record
    the receiver refuses for good (400, 409, 422, any other 4xx) is set aside in
    the spool's rejected/ so it blocks nothing; it is not delivered, and
    --resend-rejected sends it again once the receiver takes it.

    \b
    Exit codes: 0 records written (and delivered); 3 a delivery stopped (no
    answer, 5xx, 429...: the records left wait in the spool for the next run)
    or the receiver refused records (set aside in rejected/); 4 unreadable
    report or history, a report of another schema, a bad URL, token file or
    spool, or the webhook answered that its URL or token is wrong (the records
    wait in the spool).
    """
    from healthcheck.core.status import Status
    from healthcheck.report.history import History
    from healthcheck.report.tickets import render, tickets_for, to_jsonl

    app = App(config_path)
    settings = app.config.main.tickets
    target = None
    url = webhook if webhook is not None else settings.webhook_url
    if not no_webhook and url is not None:
        # every input of the delivery is checked before anything is read or sent
        from healthcheck.actions.webhook import WebhookTarget, check_header_name, check_url, read_token

        token_path = token_file or (Path(settings.token_file).expanduser() if settings.token_file else None)
        target = WebhookTarget(
            url=check_url(url),
            token=read_token(token_path) if token_path is not None else None,
            token_header=check_header_name(token_header or settings.token_header),
            timeout_s=settings.timeout_s, attempts=settings.attempts, backoff_s=settings.backoff_s,
            max_total_s=settings.max_total_s)
    elif token_file or token_header or resend_rejected:
        raise HcError("--token-file, --token-header and --resend-rejected go with a webhook "
                      "(--webhook URL or tickets.webhook_url)")
    threshold = Status((min_status or settings.min_status).upper())
    history = History.from_settings(app.config.main.history)
    if file is None:
        history = _history(app)
        report = _newest(history)
    else:
        report = _read(file)
        if history is None or not history.path.exists():
            where = "is kept (history.path is null)" if history is None else f"yet at {history.path}"
            click.echo(f"hc: warning: no run history {where}: every finding is new", err=True)
            history = None
    if history is not None:
        with history:
            tickets = tickets_for(report, history, lookback=lookback or settings.lookback_runs, min_status=threshold)
    else:
        tickets = tickets_for(report, None, lookback=0, min_status=threshold)
    if fmt == "jsonl":
        sys.stdout.buffer.write(to_jsonl(tickets))
        sys.stdout.flush()
    elif fmt == "json":
        app.emit_json(tickets)
    else:
        app.echo(render(tickets))
    if target is None:
        return 0
    from healthcheck.actions.audit import AuditLog
    from healthcheck.actions.webhook import Spool, deliver, describe

    slurm = app.config.main.slurm
    spool = Spool(Path(settings.spool_dir or f"{slurm.state_dir}/tickets").expanduser())
    done = deliver(tickets, target, spool, audit=AuditLog(Path(slurm.audit_log).expanduser()),
                   resend_rejected=resend_rejected)
    for message in done.messages:
        click.echo(f"hc: warning: {message}", err=True)
    if done.configuration:  # nothing gets through until the URL or token is fixed
        click.echo(f"hc: error: {describe(done, spool)}", err=True)
        return int(ExitCode.BAD_INPUT)
    click.echo(f"hc: {describe(done, spool)}", err=True)
    return int(ExitCode.OK if done.complete else ExitCode.ERROR)
