"""`hc node`: check this node (--local) or named nodes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import click

from healthcheck.cli.app import (
    App,
    config_option,
    exit_code_for,
    fail_level_option,
    format_option,
    output_option,
    this_node_name,
    tier_option,
)


@click.command()
@click.argument("nodes", nargs=-1)
@click.option("--local", "local", is_flag=True, help="Check the machine hc runs on.")
@tier_option()
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated (e.g. ib,net.mtu).")
@config_option
@format_option
@output_option
@fail_level_option
def node(
    nodes: tuple[str, ...],
    local: bool,
    tier: str,
    only: str,
    config_path: Optional[Path],
    fmt: str,
    output: Optional[Path],
    fail_level: str,
) -> int:
    """Check nodes. With --local, this machine, named as Slurm names it."""
    if not local and not nodes:
        raise click.UsageError("name the nodes to check, or use --local for this machine")
    if local and nodes:
        raise click.UsageError("--local checks this machine; do not name nodes with it")
    app = App(config_path, fmt)
    from healthcheck.core.localrun import check_this_node

    report, abandoned = check_this_node(
        app.config, node=this_node_name(), tier=tier, only=[s for s in only.split(",") if s]
    )
    app.emit_report(report, output=output)
    code = int(exit_code_for(report.status, fail_level))
    if abandoned:
        # a probe thread is stuck in the kernel; do not let interpreter shutdown wait for it
        sys.stdout.flush()
        os._exit(code)
    return code
