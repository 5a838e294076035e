"""`hc report`: show a saved report, diff two runs, list the run history, ticket records, evidence bundles."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from healthcheck.actions.saved_runs import diff_runs, summary_report, write_html, write_report_json
from healthcheck.actions.tickets import WebhookOptions, deliver_tickets, ticket_run
from healthcheck.cli.app import App
from healthcheck.cli.options import config_option, format_option
from healthcheck.cli.params import integer, number
from healthcheck.core.errors import ExitCode
from healthcheck.core.nodes import check_node_name
from healthcheck.report.diff import render_diff, to_json
from healthcheck.report.history import history_json, history_listing, history_table
from healthcheck.report.tickets import render, to_jsonl

REPORT_FILE = click.Path(path_type=Path, dir_okay=False, allow_dash=True)
# `hc report bundle`'s gathering (history, Slurm, diagnosis, live commands), loaded by import path
# there only: `hc report show` imports none of it
BUNDLE = "healthcheck.orchestrate.bundle"


@click.group()
def report() -> None:
    """Saved reports: show one, diff two runs, an HTML page, the run history, ticket records, evidence bundles."""


@report.command("show")
@click.argument("file", type=REPORT_FILE)
@format_option
def show(file: Path, fmt: str) -> int:
    """Show a saved report (a file hc wrote with --output or --format json; '-' reads stdin)."""

    app = App(fmt=fmt)
    if fmt == "json":  # as hc wrote it, one node at a time: a fleet's report is ~1 GB
        write_report_json(file, sys.stdout.buffer)
        sys.stdout.flush()
    else:  # the table of a report of many nodes reads only their names, fabrics and statuses
        app.emit_report(summary_report(file))
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

    write_html(file, output, runs, config_path)
    return 0


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

    app = App(config_path, fmt)
    d = diff_runs(old, new, command, config_path)
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

    if node is not None:
        check_node_name(node)  # a bad name is the error, whatever the config
    app = App(config_path, fmt)
    listing = history_listing(app.config.main.history, node, command, limit)
    if fmt == "json":
        app.emit_json(history_json(listing))
    else:
        app.echo(history_table(listing))
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

    options = WebhookOptions(webhook, no_webhook, token_file, token_header, resend_rejected)
    run = ticket_run(file, config_path, min_status=min_status, lookback=lookback, webhook=options,
                     warn=lambda line: click.echo(line, err=True))
    app = App(config_path)
    if fmt == "jsonl":
        sys.stdout.buffer.write(to_jsonl(run.tickets))
        sys.stdout.flush()
    elif fmt == "json":
        app.emit_json(run.tickets)
    else:
        app.echo(render(run.tickets))
    if run.target is None:
        return 0
    done = deliver_tickets(run)
    for message in done.warnings:
        click.echo(f"hc: warning: {message}", err=True)
    if done.configuration:  # nothing gets through until the URL or token is fixed
        click.echo(f"hc: error: {done.summary}", err=True)
        return int(ExitCode.BAD_INPUT)
    click.echo(f"hc: {done.summary}", err=True)
    return int(ExitCode.OK if done.complete else ExitCode.ERROR)


@report.command("bundle")
@click.argument("node", required=False)
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The .tar.gz to write (atomically: never a partial file at the path).")
@click.option("--job", "job", metavar="ID", default=None,
              help="Also the job's evidence: a saved diagnosis (--diagnosis), Slurm's record, the node's health "
                   "in the job's window.")
@click.option("--diagnosis", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="With --job: the job's hc.diagnosis/2 file (hc diagnose job ID -o FILE), verdict and stacks.")
@click.option("--diagnose", is_flag=True,
              help="With --job of a running job and no --diagnosis: run `hc diagnose job ID` now (ranks' stacks).")
@click.option("--local", is_flag=True, help="NODE is this machine: also collect live (nvidia-smi, ibstat, ...).")
@click.option("--runs", type=integer(1, 10_000), default=20, show_default=True,
              help="The node's newest recorded runs read from the history.")
@click.option("--reports", "latest", type=integer(0, 1000), default=5, show_default=True,
              help="Of them, how many newest whole results of the node are members.")
@click.option("--max-item-mib", type=number(0, 4096, low_open=True), default=5.0, show_default=True,
              help="The cap on one item; a longer one is cut (said in the manifest).")
@click.option("--max-total-mib", type=number(0, 65536, low_open=True), default=50.0, show_default=True,
              help="The cap on all items together; what does not fit is left out (said in the manifest).")
@click.option("--timeout", "timeout_s", type=number(0, 600, low_open=True), default=10.0, show_default=True,
              help="Seconds each live command (and Slurm's answer) may take.")
@config_option
def bundle_cmd(node: str | None, output: Path, job: str | None, diagnosis: Path | None, diagnose: bool, local: bool,
               runs: int,
               latest: int, max_item_mib: float, max_total_mib: float, timeout_s: float,
               config_path: Path | None) -> int:
    """One file a vendor or colleague can act on: what hc knows of NODE (and of a job on it).

    \b
    hc report bundle gpu017 -o gpu017.tar.gz            from what hc stored
    hc report bundle --local -o here.tar.gz             on the node: stored and live
    hc report bundle gpu017 --job 4711 --diagnosis 4711.json -o gpu017-4711.tar.gz
    hc report bundle gpu017 --job 4711 --diagnose -o gpu017-4711.tar.gz

    Holds the node's newest results and its history excerpt (runs, findings,
    repairs, Xid recurrences by boot, IB and GPU counter readings before and
    after), the kernel-log lines its findings cite, DCGM output where it ran,
    the versions its runs read, the hooks' latest reports, the config and the
    node's limits. On the node itself (NODE is this host, or --local) also,
    each under --timeout: nvidia-smi -q, nvidia-smi topo -m, ibstat, uname,
    versions and the kernel log's Xid/NVRM/mlx5/OOM lines. MANIFEST.json and
    README.txt list every item with its source and size, and everything not
    collected with why (not on this host, tool absent, timed out, no history).
    Secrets are replaced by <redacted> (secret-looking names' values, auth
    headers, URL passwords, the config's webhook URL and token), counted per
    item. Members: sorted, relative, mode 0644, owner 0, one mtime (the newest
    evidence's): the same evidence gives the same file. The export is a line
    in the audit log (slurm.audit_log; a warning where it cannot be written).

    \b
    Exit codes: 0 written; 4 a bad node name or job id, a node or job hc
    knows nothing of, a job that did not run on NODE, an unreadable
    --diagnosis, an -o that cannot be written (nothing is left at it).
    """

    if local and node is not None:
        raise click.UsageError("--local bundles this machine; do not name a node with it")
    if node is None and not local:
        raise click.UsageError("name the node to bundle, or use --local for this machine")
    if (diagnosis is not None or diagnose) and job is None:
        raise click.UsageError("--diagnosis and --diagnose are a job's: give --job ID with them")
    module = importlib.import_module(BUNDLE)
    request = module.BundleRequest(node=node, output=output, job=job, diagnosis=diagnosis, diagnose=diagnose,
                                   local=local, runs=runs,
                                   latest=latest, timeout_s=timeout_s,
                                   caps=module.Caps(int(max_item_mib * 2**20), int(max_total_mib * 2**20)))
    done = module.make_bundle(App(config_path).config, request)
    for warning in done.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    manifest = done.built.manifest
    click.echo(f"hc: {done.path}: {len(manifest['items'])} items, {len(manifest['missing'])} not collected, "
               f"{manifest['redacted']} redacted, {len(done.built.data)} bytes (node {done.node})", err=True)
    return 0
