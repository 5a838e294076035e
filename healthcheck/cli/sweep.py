"""`hc sweep`: check a set of nodes (hostlist, hostfile or partition) over SSH or through
Slurm, add fleet findings, and optionally drain and resume through the Slurm policy."""

from __future__ import annotations

from pathlib import Path

import click

from healthcheck.cli.app import App, exit_code_for, export_prometheus, prometheus_dir
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.node import mode_option, parse_since, since_option
from healthcheck.cli.options import (
    config_option,
    fail_level_option,
    format_option,
    output_option,
    prometheus_option,
    tier_option,
)
from healthcheck.cli.progress import progress_printer
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.core.inputs import TOOL_OUTPUT_MAX_BYTES, read_bounded
from healthcheck.core.nodes import expand
from healthcheck.core.registry import select
from healthcheck.orchestrate.multirun import RunRequest, partition_nodes, run_many
from healthcheck.parsers.hostfile import parse_hostfile


@click.command()
@click.option("--nodes", "hostlist", shell_complete=complete_nodes, help="Nodes as a hostlist, e.g. 'gpu[001-128]'.")
@click.option("--hostfile", type=click.Path(path_type=Path, dir_okay=False),
              help="A hostfile: one node per line, or MPI 'host slots=N' / 'host:N' lines.")
@click.option("--partition", help="Every node of a Slurm partition that is up and not drained by someone else.")
@click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True, envvar="HC_VIA",
              help="ssh: hc connects to each node (bounded fan-out); slurm: one srun task per node runs hc there.")
@mode_option
@tier_option(default="standard")
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated.")
@since_option
@click.option("--pairs/--no-pairs", default=True, show_default=True,
              help="With --tier deep: also test bandwidth between nodes and name the culprit node or link.")
@click.option("--exhaustive", is_flag=True,
              help="With --pairs: test every pair (circle method, n-1 rounds) however many nodes.")
@click.option("--act", is_flag=True,
              help="Drain FAIL nodes and resume fixed ones (policy and blast-radius guard apply).")
@click.option("--dry-run", is_flag=True, envvar="HC_DRY_RUN", help="With --act: print the scontrol commands only.")
@config_option
@format_option
@output_option
@prometheus_option
@fail_level_option
def sweep(hostlist: str | None, hostfile: Path | None, partition: str | None, via: str, mode: str,
          tier: str, only: str, since: str, pairs: bool, exhaustive: bool, act: bool, dry_run: bool,
          config_path: Path | None, fmt: str, output: Path | None, prometheus_to: Path | None,
          fail_level: str) -> int:
    """Check many nodes at once and merge one report (fleet drift, outliers and flaps included).

    Exit codes as for `hc node`; 5 when --act was refused by the blast-radius guard.
    """

    # "is not None": --nodes '' names an empty set, which is an error of its own (below)
    chosen = [x for x in (hostlist, hostfile, partition) if x is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --nodes, --hostfile, --partition")
    if dry_run and not act:
        raise click.UsageError("--dry-run only applies with --act")
    app = App(config_path, fmt)
    checks = [s for s in only.split(",") if s]
    select(tier, checks)
    if hostlist is not None:
        names = expand([hostlist])
        if not names:
            raise click.UsageError(f"no node to check: --nodes {hostlist!r} names no node")
    elif hostfile is not None:
        # bounded: /dev/zero named as a hostfile is an error, not all of memory
        text = read_bounded(hostfile, TOOL_OUTPUT_MAX_BYTES, what="hostfile", allow_fifo=True).decode(
            "utf-8", errors="replace")
        try:
            names = parse_hostfile(text)
        except HcError as exc:
            raise HcError(f"{hostfile}: {exc}") from None
    else:
        assert partition is not None  # exactly one of the three was given (above)
        names, skipped = partition_nodes(app.config, partition)
        for line in skipped:
            click.echo(f"hc: skipped {line}", err=True)
        if not names:
            raise HcError(f"partition {partition!r}: no node to check (all down or drained by someone else)")
    if not names:  # a hostfile or partition that names none: never a healthy-looking empty run
        raise click.UsageError("no node to check")
    prom = prometheus_dir(app, prometheus_to, "sweep")
    progress = progress_printer(len(names)) if via == "ssh" else None
    request = RunRequest(names, command="sweep", via=via, mode=mode, tier=tier, only=checks, since=parse_since(since),
                         act=act, dry_run=dry_run, pairs=pairs, exhaustive=exhaustive)
    run = run_many(app.config, request, on_done=progress)
    for warning in run.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    for message in run.messages:
        click.echo(message, err=True)
    # per-node series and the fleet's (nodes per status, analyses, pair tests)
    lost = [e for e in (export_prometheus(app, run.report, prom),) if e is not None]
    shown = app.emit_report(run.report, output=output, lost=lost)
    if run.guarded:
        return int(ExitCode.GUARD)
    return int(exit_code_for(shown.status, fail_level))
