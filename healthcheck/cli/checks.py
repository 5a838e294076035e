"""`hc checks list`: the catalogue of checks, analyses and finding IDs."""

from __future__ import annotations

import click

from healthcheck.cli.app import App
from healthcheck.cli.options import format_option
from healthcheck.core.tiers import ALL
from healthcheck.report.checks_list import catalogue_json, catalogue_table


@click.group()
def checks() -> None:
    """The catalogue of checks and the finding IDs they emit."""


@checks.command("list")
@click.option("--tier", type=click.Choice(list(ALL)), default=None,
              help="Only the checks that run in this tier or context.")
@format_option
def list_checks(tier: str | None, fmt: str) -> int:
    """List every check and analysis (name, scope, tiers, budget, invariant) and every finding ID (meaning, hint)."""

    app = App(fmt=fmt)
    if fmt == "json":
        app.emit_json(catalogue_json(tier))
    else:
        app.echo(catalogue_table(tier))
    return 0
