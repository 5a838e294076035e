"""`hc node`: check this node (--local) or named nodes (over SSH)."""

from __future__ import annotations

import importlib
from pathlib import Path

import click

from healthcheck.cli.app import App, exit_code_for, export_prometheus, prometheus_dir
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.localnode import parse_since, run_local
from healthcheck.cli.options import (
    config_option,
    fail_level_option,
    format_option,
    output_option,
    prometheus_option,
    tier_option,
)
from healthcheck.core.nodes import expand
from healthcheck.core.registry import select

# What `hc node` needs only for some runs, loaded by import path where the run is known (as
# cli.COMMANDS are): a --local check imports neither the machinery of many nodes (SSH,
# Slurm, the pair sweep, the progress bar); its run is cli/localnode.py's.
MANY_NODES = "healthcheck.orchestrate.multirun"
PROGRESS = "healthcheck.cli.progress"
REPAIRS = "healthcheck.actions.repairs"  # `--repaired`, `--gpu-reset`: the history and the audit log


def _put_on_record(app: App, names: list[str], repaired: str | None, gpu_reset: str | None) -> None:
    """--repaired and --gpu-reset: the repair or the GPU resets of the nodes on record, each said on stderr."""
    if repaired is None and gpu_reset is None:
        return
    repairs = importlib.import_module(REPAIRS)
    if gpu_reset is not None:
        repairs.reset_gpus(gpu_reset)  # a usage error before a repair is written
    if repaired is not None:
        for repair in repairs.record_repairs(app.config.main, names, repaired):
            click.echo(f"hc: repair of {repair.node} on record ({repair.at}, by {repair.by}): {repair.text}", err=True)
    if gpu_reset is not None:
        for reset in repairs.record_gpu_resets(app.config.main, names, gpu_reset):
            click.echo(f"hc: reset of {reset.node}'s {reset.gpu or 'GPUs'} on record ({reset.at}, by {reset.by})",
                       err=True)


def since_option(fn):
    return click.option("--since", default="boot", show_default=True,
                        help="Kernel-log window for Xid events: 'boot', an ISO 8601 time or epoch seconds "
                             "(1970 to 9999; a time in the future is read as asked, with a warning).")(fn)


def mode_option(fn):
    return click.option("--mode", type=click.Choice(["auto", "agent", "agentless"]), default="auto", show_default=True,
                        envvar="HC_MODE",
                        help="Remote nodes: run hc on the node (agent), or run the tools over SSH and parse them "
                             "here (agentless); auto uses the agent where hc is installed.")(fn)


@click.command()
@click.argument("nodes", nargs=-1, shell_complete=complete_nodes)
@click.option("--local", "local", is_flag=True, help="Check the machine hc runs on.")
@tier_option()
@click.option("--checks", "only", default="", help="Only these checks or families, comma-separated (e.g. ib,net.mtu).")
@since_option
@mode_option
@click.option("--repaired", "repaired", default=None, metavar="TEXT",
              help="Put a repair of NODES on record first (history and audit log: Xid escalation counts again "
                   "from it), then check them: the run that shows the repair worked.")
@click.option("--gpu-reset", "gpu_reset", default=None, metavar="GPUS",
              help="Put a reset of these GPUs of NODES on record first (nvidia-smi -r; 'all', indexes 3,5 or "
                   "PCI bus ids): the same Xid logged after it counts as a recurrence, as after a reboot "
                   "(hc cannot see a GPU reset by itself), then check them.")
@config_option
@format_option
@output_option
@prometheus_option
@fail_level_option
def node(nodes: tuple[str, ...], local: bool, tier: str, only: str, since: str, mode: str, repaired: str | None,
         gpu_reset: str | None, config_path: Path | None, fmt: str, output: Path | None,
         prometheus_to: Path | None, fail_level: str) -> int:
    """Check nodes: NODES (hostlists, e.g. gpu017 'gpu[001-004]') over SSH, or --local this machine."""
    if not local and not nodes:
        raise click.UsageError("name the nodes to check, or use --local for this machine")
    if local and nodes:
        raise click.UsageError("--local checks this machine; do not name nodes with it")
    if local and repaired is not None:
        raise click.UsageError("--repaired names the nodes repaired: use it with NODES, not --local")
    if local and gpu_reset is not None:
        raise click.UsageError("--gpu-reset puts a reset of NODES' GPUs on record: use it with NODES, not --local")
    app = App(config_path, fmt)
    checks = [s for s in only.split(",") if s]
    if local:
        return run_local(app, tier=tier, only=checks, since=since, output=output, prometheus_to=prometheus_to,
                         fail_level=fail_level)
    prom = prometheus_dir(app, prometheus_to, "node")

    names = expand(nodes)
    if not names:  # '' or "$EMPTY": checking nothing must not read as healthy
        raise click.UsageError(f"no node to check: {' '.join(repr(n) for n in nodes)} names no node")
    select(tier, checks)  # unknown check names are a usage error before anything runs
    _put_on_record(app, names, repaired, gpu_reset)
    many = importlib.import_module(MANY_NODES)
    request = many.RunRequest(names, command="node", via="ssh", mode=mode, tier=tier, only=checks,
                              since=parse_since(since))
    run = many.run_many(app.config, request, on_done=importlib.import_module(PROGRESS).progress_printer(len(names)))
    for warning in run.warnings:
        click.echo(f"hc: warning: {warning}", err=True)
    lost = [e for e in (export_prometheus(app, run.report, prom),) if e is not None]
    shown = app.emit_report(run.report, output=output, lost=lost)
    return int(exit_code_for(shown.status, fail_level))
