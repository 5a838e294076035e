"""`hc node`: check this node (--local) or named nodes (over SSH)."""

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


def parse_since(value: str) -> Optional[float]:
    """'boot' -> None (the whole kernel log of this boot); ISO 8601 or epoch -> epoch seconds."""
    import datetime as dt

    if value == "boot":
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not 'boot', an ISO 8601 time or epoch seconds", param_hint="--since") from None
    if when.tzinfo is None:
        when = when.astimezone()  # a time without zone is the node's local time
    return when.timestamp()


def since_option(fn):
    return click.option("--since", default="boot", show_default=True,
                        help="Kernel-log window for Xid events: 'boot', an ISO 8601 time or epoch seconds.")(fn)


def mode_option(fn):
    return click.option("--mode", type=click.Choice(["auto", "agent", "agentless"]), default="auto", show_default=True,
                        envvar="HC_MODE",
                        help="Remote nodes: run hc on the node (agent), or run the tools over SSH and parse them "
                             "here (agentless); auto uses the agent where hc is installed.")(fn)


@click.command()
@click.argument("nodes", nargs=-1)
@click.option("--local", "local", is_flag=True, help="Check the machine hc runs on.")
@tier_option()
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated (e.g. ib,net.mtu).")
@since_option
@mode_option
@config_option
@format_option
@output_option
@fail_level_option
def node(nodes: tuple[str, ...], local: bool, tier: str, only: str, since: str, mode: str,
         config_path: Optional[Path], fmt: str, output: Optional[Path], fail_level: str) -> int:
    """Check nodes: NODES (hostlists, e.g. gpu017 'gpu[001-004]') over SSH, or --local this machine."""
    if not local and not nodes:
        raise click.UsageError("name the nodes to check, or use --local for this machine")
    if local and nodes:
        raise click.UsageError("--local checks this machine; do not name nodes with it")
    app = App(config_path, fmt)
    checks = [s for s in only.split(",") if s]
    if local:
        from healthcheck.core.localrun import check_this_node

        report, abandoned = check_this_node(app.config, node=this_node_name(), tier=tier, only=checks,
                                            params={"since": parse_since(since)})
        app.emit_report(report, output=output)
        code = int(exit_code_for(report.status, fail_level))
        if abandoned:
            # a probe thread is stuck in the kernel; do not let interpreter shutdown wait for it
            sys.stdout.flush()
            os._exit(code)
        return code
    from healthcheck.core.multirun import progress_printer, run_many
    from healthcheck.core.nodes import expand
    from healthcheck.core.registry import select

    names = expand(nodes)
    select(tier, checks)  # unknown check names are a usage error before anything runs
    run = run_many(app.config, names, command="node", via="ssh", mode=mode, tier=tier, only=checks,
                   since=parse_since(since), on_done=progress_printer(len(names)))
    for warning in run.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    app.emit_report(run.report, output=output)
    return int(exit_code_for(run.report.status, fail_level))
