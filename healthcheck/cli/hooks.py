"""`hc prologue`, `hc epilogue`, `hc health`: what Slurm's Prolog, Epilog and
HealthCheckProgram call (through the wrappers in slurm/)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Optional

import click

from healthcheck.cli.app import App, config_option


def _run(kind: str, config_path: Optional[Path], fmt: Optional[str], dry_run: bool,
         tier: Optional[str] = None, resume: Optional[bool] = None) -> int:
    from healthcheck.core.errors import HcError

    # A prologue or epilogue must never hold a job up, nor fail it because hc itself is
    # broken: on a bad config it logs and lets the job go.
    lenient = kind in ("prologue", "epilogue")
    app = App(config_path, fmt or "table")
    try:
        config = app.config
    except HcError as exc:
        if not lenient:
            raise
        click.echo(f"hc {kind}: error: {exc} (job not affected)", err=True)
        return 0
    settings = getattr(config.main.slurm, kind)
    if lenient:
        _arm_hard_deadline(kind, settings.deadline_s + 3.0)
    from healthcheck.hooks import run_hook

    result = run_hook(kind, config, dict(os.environ), dry_run=dry_run, tier=tier, resume=resume)
    for message in result.messages:
        click.echo(message)
    if fmt is not None:
        app.emit_report(result.report)
    click.echo(result.summary, err=True)
    if result.abandoned:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(result.exit_code)
    return result.exit_code


def _arm_hard_deadline(kind: str, seconds: float) -> None:
    """Last resort: whatever hangs (config on a dead NFS mount, a stuck import), return
    before Slurm's PrologEpilogTimeout and let the job run."""

    def give_up(signum: int, frame: object) -> None:
        from healthcheck.hooks import verdict

        code = verdict()
        what = "job not affected" if code == 0 else "the node FAILed: keeping the job off it"
        os.write(2, f"hc {kind}: hard deadline of {seconds:g}s exceeded; giving up ({what})\n".encode())
        os._exit(code)

    signal.signal(signal.SIGALRM, give_up)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _format_option(fn):
    return click.option("--format", "fmt", type=click.Choice(["table", "json"]), default=None,
                        help="Also print the report on stdout (default: one summary line on stderr).")(fn)


def _dry_run_option(fn):
    return click.option("--dry-run", is_flag=True, envvar="HC_DRY_RUN",
                        help="Print the exact scontrol commands instead of running them.")(fn)


@click.command()
@config_option
@_format_option
@_dry_run_option
def prologue(config_path: Optional[Path], fmt: Optional[str], dry_run: bool) -> int:
    """Before a job: the quick tier on this node for the job's GPUs, under a hard deadline.

    On FAIL: drain this node (reason "hc: <finding ids>") and exit 2 so Slurm requeues the
    job elsewhere. On ERROR, or when the blast-radius guard refuses: log, exit 0.
    """
    return _run("prologue", config_path, fmt, dry_run)


@click.command()
@config_option
@_format_option
@_dry_run_option
def epilogue(config_path: Optional[Path], fmt: Optional[str], dry_run: bool) -> int:
    """After a job: leftover GPU processes and memory, Xid and ECC since the job started.

    Drains on FAIL; always exits 0 (never changes the job's state).
    """
    return _run("epilogue", config_path, fmt, dry_run)


@click.command()
@config_option
@_format_option
@_dry_run_option
@click.option("--tier", type=click.Choice(["quick", "standard", "deep"]), default=None,
              help="Tier to run [default: slurm.health.tier in the config].")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Resume nodes hc drained once the checks named in their reason pass again.")
def health(config_path: Optional[Path], fmt: Optional[str], dry_run: bool, tier: Optional[str], resume: bool) -> int:
    """For HealthCheckProgram or cron: check this node, drain on FAIL, resume what hc drained once fixed."""
    return _run("health", config_path, fmt, dry_run, tier=tier, resume=resume)
