"""The click commands `hc prologue`, `hc epilogue` and `hc health`: their options and
help. The run itself is cli/hooks.py's `run`, which the lean entry (cli/lean.py) calls
for the same arguments without importing click."""

from __future__ import annotations

from pathlib import Path

import click

from healthcheck.cli.hooks import run
from healthcheck.cli.options import config_option
from healthcheck.core.tiers import TIERS


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
def prologue(config_path: Path | None, fmt: str | None, dry_run: bool) -> int:
    """Before a job: the quick tier on this node for the job's GPUs, under a hard deadline.

    On FAIL: drain this node (reason "hc: <finding ids>") and exit 2 so Slurm requeues the
    job elsewhere. On ERROR, or when the blast-radius guard refuses: log, exit 0.
    """
    return run("prologue", config_path, fmt, dry_run)


@click.command()
@config_option
@_format_option
@_dry_run_option
def epilogue(config_path: Path | None, fmt: str | None, dry_run: bool) -> int:
    """After a job: leftover GPU processes and memory, Xid and ECC since the job started.

    Drains on FAIL; always exits 0 (never changes the job's state).
    """
    return run("epilogue", config_path, fmt, dry_run)


@click.command()
@config_option
@_format_option
@_dry_run_option
@click.option("--tier", type=click.Choice(list(TIERS)), default=None,
              help="Tier to run [default: slurm.health.tier in the config].")
@click.option("--resume/--no-resume", default=True, show_default=True,
              help="Resume nodes hc drained once the checks named in their reason pass again.")
def health(config_path: Path | None, fmt: str | None, dry_run: bool, tier: str | None, resume: bool) -> int:
    """For HealthCheckProgram or cron: check this node, drain on FAIL, resume what hc drained once fixed."""
    return run("health", config_path, fmt, dry_run, tier=tier, resume=resume)
