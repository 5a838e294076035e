"""`hc report tickets` as two steps: the ticket records of a run (with the webhook checked
first), then their delivery.

Reads the report (or the history's newest run), the history and the token file; the
delivery POSTs, spools and audits through actions/webhook.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.saved_runs import read_report
from healthcheck.actions.webhook import (
    Spool,
    WebhookTarget,
    check_header_name,
    check_url,
    deliver,
    describe,
    read_token,
)
from healthcheck.core.config import load_config
from healthcheck.core.errors import HcError
from healthcheck.core.status import Status
from healthcheck.report.history import History, configured_history, newest_run
from healthcheck.report.tickets import tickets_for

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.core.config.schema import TicketSettings
    from healthcheck.report.tickets import Ticket


@dataclass(frozen=True)
class WebhookOptions:
    """The command line's say on delivery (None: the config's tickets section decides)."""

    url: str | None = None
    off: bool = False  # --no-webhook: only print the records
    token_file: Path | None = None
    token_header: str | None = None
    resend_rejected: bool = False


@dataclass(frozen=True)
class TicketRun:
    """A run's ticket records, and where they go (None: printed only)."""

    tickets: list[Ticket]
    target: WebhookTarget | None
    config: Config
    resend_rejected: bool = False


@dataclass(frozen=True)
class TicketDelivery:
    """What a delivery did, in the lines the command says on stderr."""

    warnings: list[str]
    summary: str  # one line: delivered, kept, rejected and why any wait
    configuration: bool  # stopped by an answer about the URL or token (exit 4)
    complete: bool  # nothing waits in the spool and nothing was refused


def webhook_target(settings: TicketSettings, options: WebhookOptions) -> WebhookTarget | None:
    """Where records are POSTed, every input checked before anything is read or sent; None
    where no webhook is asked for (and an HcError for token or resend options without one)."""
    url = options.url if options.url is not None else settings.webhook_url
    if not options.off and url is not None:
        token_file = options.token_file
        token_path = token_file or (Path(settings.token_file).expanduser() if settings.token_file else None)
        return WebhookTarget(
            url=check_url(url),
            token=read_token(token_path) if token_path is not None else None,
            token_header=check_header_name(options.token_header or settings.token_header),
            timeout_s=settings.timeout_s, attempts=settings.attempts, backoff_s=settings.backoff_s,
            max_total_s=settings.max_total_s)
    if options.token_file or options.token_header or options.resend_rejected:
        raise HcError("--token-file, --token-header and --resend-rejected go with a webhook "
                      "(--webhook URL or tickets.webhook_url)")
    return None


def ticket_run(file: Path | None, config_path: Path | None, *, min_status: str | None, lookback: int | None,
               webhook: WebhookOptions, warn: Callable[[str], None]) -> TicketRun:
    """The records for the report in `file` ('-': stdin; None: the history's newest run), each
    finding at or above `min_status` against the history; a missing history is one line to
    `warn` (every finding is then new)."""

    config = load_config(config_path)
    settings = config.main.tickets
    target = webhook_target(settings, webhook)
    threshold = Status((min_status or settings.min_status).upper())
    history = History.from_settings(config.main.history)
    if file is None:
        history = configured_history(config.main.history)
        report = newest_run(history)
    else:
        report = read_report(file)
        if history is None or not history.path.exists():
            where = "is kept (history.path is null)" if history is None else f"yet at {history.path}"
            warn(f"hc: warning: no run history {where}: every finding is new")
            history = None
    if history is None:
        tickets = tickets_for(report, None, lookback=0, min_status=threshold)
    else:
        with history:
            tickets = tickets_for(report, history, lookback=lookback or settings.lookback_runs,
                                  min_status=threshold)
    return TicketRun(tickets, target, config, webhook.resend_rejected)


def deliver_tickets(run: TicketRun) -> TicketDelivery:
    """POST the run's records (after what the spool holds) to its target, keeping in the spool
    what is not delivered, each attempt in the audit log."""

    if run.target is None:
        raise ValueError("deliver_tickets needs a run with a webhook target")
    settings, slurm = run.config.main.tickets, run.config.main.slurm
    spool = Spool(Path(settings.spool_dir or f"{slurm.state_dir}/tickets").expanduser())
    done = deliver(run.tickets, run.target, spool, audit=AuditLog(Path(slurm.audit_log).expanduser()),
                   resend_rejected=run.resend_rejected)
    return TicketDelivery(list(done.messages), describe(done, spool), done.configuration, done.complete)
